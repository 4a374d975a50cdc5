//! Opening a delete file (Parquet) through the table's `FileIO` and reading
//! some of its top-level columns, found by Iceberg field id (or, in a file
//! written without field ids, by name).

use arrow::record_batch::RecordBatch;
use datafusion::error::Result;
use futures::{Stream, TryStreamExt};
use iceberg::arrow::ArrowFileReader;
use iceberg::io::{FileIO, FileMetadata};
use parquet::arrow::{ParquetRecordBatchStreamBuilder, ProjectionMask, PARQUET_FIELD_ID_META_KEY};

use crate::iceberg_err;
use icemerge_proto::error::{invalid_input, io_error};

/// A column to read: its field id, and the name to fall back on.
pub(super) struct Wanted<'a> {
    pub field_id: i32,
    pub name: &'a str,
}

/// The batches of `path` holding the `wanted` columns, in that order.
pub(super) async fn read_columns(
    file_io: &FileIO,
    path: &str,
    size: u64,
    wanted: &[Wanted<'_>],
) -> Result<impl Stream<Item = Result<RecordBatch>>> {
    let input = file_io.new_input(path).map_err(iceberg_err)?;
    let reader = ArrowFileReader::new(
        FileMetadata { size },
        input.reader().await.map_err(iceberg_err)?,
    );
    let builder = ParquetRecordBatchStreamBuilder::new(reader)
        .await
        .map_err(|e| io_error(format!("reading delete file {path}: {e}")))?;
    let fields = builder.schema().fields().clone();
    let mut roots = Vec::with_capacity(wanted.len());
    for w in wanted {
        let by_id = fields.iter().position(|f| {
            f.metadata()
                .get(PARQUET_FIELD_ID_META_KEY)
                .is_some_and(|id| id.parse::<i32>().ok() == Some(w.field_id))
        });
        let index = by_id
            .or_else(|| fields.iter().position(|f| f.name() == w.name))
            .ok_or_else(|| {
                invalid_input(format!(
                    "delete file {path} has no column '{}' (field id {})",
                    w.name, w.field_id
                ))
            })?;
        roots.push(index);
    }
    // The projection yields the columns in file order: remember where each
    // wanted one lands.
    let mut sorted = roots.clone();
    sorted.sort_unstable();
    sorted.dedup();
    let order: Vec<usize> = roots
        .iter()
        .map(|r| sorted.binary_search(r).expect("root is projected"))
        .collect();
    let mask = ProjectionMask::roots(builder.parquet_schema(), sorted);
    let path = path.to_string();
    let stream = builder
        .with_projection(mask)
        .build()
        .map_err(|e| io_error(format!("reading delete file {path}: {e}")))?
        .map_err(move |e| io_error(format!("reading delete file {path}: {e}")))
        .and_then(move |batch| {
            let out = batch.project(&order).map_err(Into::into);
            futures::future::ready(out)
        });
    Ok(stream)
}
