//! Rows of data files that a scan needs no column of (`count(*)`, `SELECT
//! 1 FROM t`): counted, not read. A data file's live rows are its manifest
//! entry's record count (exact, per the Iceberg spec) minus the distinct
//! positions below it that its position delete files delete; the data
//! file itself is never opened, only its (small) position delete files.
//!
//! A file with equality deletes, with a residual predicate, or without a
//! record count is not counted here: its rows must be read to be judged.

use std::sync::Arc;

use arrow::datatypes::{Schema, SchemaRef};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::error::Result;
use futures::stream::BoxStream;
use futures::StreamExt;
use iceberg::scan::FileScanTask;
use iceberg::spec::DataContentType;

use crate::deletes::DeleteLoader;

/// Whether `task` can be counted without reading its data file.
pub fn countable(task: &FileScanTask) -> bool {
    task.project_field_ids.is_empty()
        && task.predicate.is_none()
        && task.record_count.is_some()
        && task
            .deletes
            .iter()
            .all(|d| d.file_type == DataContentType::PositionDeletes)
}

/// The live rows of `task` (which must be [`countable`]).
pub async fn live_row_count(task: &FileScanTask, loader: &DeleteLoader) -> Result<u64> {
    let records = task.record_count.unwrap_or_default();
    if task.deletes.is_empty() {
        return Ok(records);
    }
    let deletes = loader.for_file(&task.data_file_path, &task.deletes).await?;
    Ok(records - deletes.positions_below(records as i64) as u64)
}

/// `rows` rows of no columns, in batches of at most `batch_size`.
pub fn empty_rows(rows: u64, batch_size: usize) -> BoxStream<'static, Result<RecordBatch>> {
    let schema: SchemaRef = Arc::new(Schema::empty());
    let batch_size = batch_size.max(1) as u64;
    let batches = (0..rows.div_ceil(batch_size)).map(move |i| {
        let n = batch_size.min(rows - i * batch_size) as usize;
        let options = RecordBatchOptions::new().with_row_count(Some(n));
        Ok(RecordBatch::try_new_with_options(
            schema.clone(),
            vec![],
            &options,
        )?)
    });
    futures::stream::iter(batches).boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::TryStreamExt;

    #[tokio::test]
    async fn empty_rows_come_in_batches_that_add_up() {
        let batches: Vec<RecordBatch> = empty_rows(10, 4).try_collect().await.unwrap();
        let sizes: Vec<usize> = batches.iter().map(|b| b.num_rows()).collect();
        assert_eq!(sizes, vec![4, 4, 2]);
        assert!(empty_rows(0, 4)
            .try_collect::<Vec<_>>()
            .await
            .unwrap()
            .is_empty());
    }
}
