//! Rewriting one touched data file: read it once, in order, and stream every
//! batch through its changes (`apply`) into the partition's file writer. A
//! file whose every row is deleted, when its record count is known from the
//! target scan, is dropped without being read.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::RecordBatch;
use datafusion::error::Result;
use futures::StreamExt;
use iceberg::arrow::ArrowReaderBuilder;
use iceberg::io::FileIO;
use iceberg::scan::{ArrowRecordBatchStream, FileScanTask};
use iceberg::spec::{DataFileFormat, SchemaRef};
use iceberg::Runtime;

use super::apply::{apply, Change};
use super::metrics::WriterMetrics;
use crate::iceberg_err;
use crate::scan_exec::conform;
use crate::write_exec::TableFileWriter;
use icemerge_proto::error::internal;

/// Reads touched data files of one table.
pub(super) struct FileRewriter {
    file_io: FileIO,
    /// The table's current schema: every column is read.
    schema: SchemaRef,
    batch_size: usize,
    /// Record count of each data file the target scan reads.
    file_rows: Arc<HashMap<String, u64>>,
}

/// Where a rewrite's rows go, and what it counts.
pub(super) struct RewriteOutput<'a> {
    pub writer: &'a mut TableFileWriter,
    /// The batches of merge rows holding updated rows (target columns only).
    pub kept: &'a [RecordBatch],
    pub metrics: &'a WriterMetrics,
}

/// How far a rewrite got through a file and its changes.
#[derive(Default)]
struct Progress {
    /// Rows read from the file.
    position: i64,
    /// Changes consumed (they are sorted by position).
    next: usize,
    updated: usize,
    deleted: usize,
}

impl FileRewriter {
    pub fn new(
        file_io: FileIO,
        schema: SchemaRef,
        batch_size: usize,
        file_rows: Arc<HashMap<String, u64>>,
    ) -> Self {
        Self {
            file_io,
            schema,
            batch_size,
            file_rows,
        }
    }

    /// Streams `file` once, applying `changes` by position. A file whose
    /// every row is deleted is dropped without reading it.
    pub async fn rewrite(
        &self,
        file: &str,
        changes: &HashMap<i64, Change>,
        mut out: RewriteOutput<'_>,
    ) -> Result<()> {
        if self.all_deleted(file, changes) {
            out.metrics.deleted.add(changes.len());
            out.metrics.files_removed.add(1);
            return Ok(());
        }
        let batches = self.open(file, out.metrics).await?;
        let mut sorted: Vec<(i64, &Change)> = changes.iter().map(|(p, c)| (*p, c)).collect();
        sorted.sort_unstable_by_key(|(p, _)| *p);
        let done = stream_through(batches, &sorted, &mut out).await?;
        if done.next != sorted.len() || done.updated + done.deleted != changes.len() {
            return Err(internal(format!(
                "MERGE: data file {file} has {} rows but changes were planned for positions beyond it",
                done.position
            )));
        }
        out.metrics.updated.add(done.updated);
        out.metrics.deleted.add(done.deleted);
        if done.position as usize == done.deleted {
            out.metrics.files_removed.add(1);
        } else {
            out.metrics.files_rewritten.add(1);
        }
        Ok(())
    }

    /// Every row of `file` is deleted, as its record count tells.
    fn all_deleted(&self, file: &str, changes: &HashMap<i64, Change>) -> bool {
        self.file_rows.get(file).is_some_and(|&rows| {
            rows as usize == changes.len() && changes.values().all(|c| matches!(c, Change::Delete))
        })
    }

    /// The batches of `file`, every column, in file order.
    async fn open(&self, file: &str, metrics: &WriterMetrics) -> Result<ArrowRecordBatchStream> {
        let size = self
            .file_io
            .new_input(file)
            .map_err(iceberg_err)?
            .metadata()
            .await
            .map_err(iceberg_err)?
            .size;
        metrics.bytes_read.add(size as usize);
        metrics.files_read.add(1);
        let schema = self.schema.clone();
        let task = FileScanTask {
            file_size_in_bytes: size,
            start: 0,
            length: size,
            record_count: None,
            data_file_path: file.to_string(),
            data_file_format: DataFileFormat::Parquet,
            project_field_ids: schema.as_struct().fields().iter().map(|f| f.id).collect(),
            schema,
            predicate: None,
            deletes: vec![],
            partition: None,
            partition_spec: None,
            name_mapping: None,
            case_sensitive: true,
        };
        let reader = ArrowReaderBuilder::new(
            self.file_io.clone(),
            Runtime::try_current().map_err(iceberg_err)?,
        )
        .with_batch_size(self.batch_size)
        .with_data_file_concurrency_limit(1)
        .with_row_group_filtering_enabled(false)
        .with_row_selection_enabled(false)
        .build();
        Ok(reader
            .read(futures::stream::iter([Ok(task)]).boxed())
            .map_err(iceberg_err)?
            .stream())
    }
}

/// Writes every batch of a file with the run of `sorted` changes that falls
/// within its positions applied.
async fn stream_through(
    mut batches: ArrowRecordBatchStream,
    sorted: &[(i64, &Change)],
    out: &mut RewriteOutput<'_>,
) -> Result<Progress> {
    let mut done = Progress::default();
    while let Some(batch) = batches.next().await {
        let batch = batch.map_err(iceberg_err)?;
        let start = done.position;
        done.position += batch.num_rows() as i64;
        let first = done.next;
        while done.next < sorted.len() && sorted[done.next].0 < done.position {
            done.next += 1;
        }
        let in_batch = &sorted[first..done.next];
        // A batch without changes is written as read (the writer conforms
        // it); one with changes takes the table's types first, which the
        // kept rows have.
        let batch = if in_batch.is_empty() {
            batch
        } else {
            conform(out.writer.arrow_schema(), batch)?
        };
        let applied = apply(batch, start, in_batch, out.kept)?;
        out.metrics.copied.add(applied.copied);
        done.updated += applied.updated;
        done.deleted += applied.deleted;
        if let Some(rows) = applied.batch {
            out.writer.write(rows).await?;
        }
    }
    Ok(done)
}
