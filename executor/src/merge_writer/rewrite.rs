//! Rewriting one touched data file: read its live rows once, in order, with
//! their original positions (`crate::live_rows`: rows its delete files
//! removed are left out, as the target scan left them out), and stream every
//! batch through its changes (`apply`) into the partition's file writer. A
//! file without delete files whose every row is deleted, when its record
//! count is known from the target scan, is dropped without being read; one
//! whose every row is updated is written from the updated rows alone.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::RecordBatch;
use datafusion::error::Result;
use futures::stream::BoxStream;
use futures::StreamExt;
use iceberg::io::FileIO;
use iceberg::scan::{FileScanTask, FileScanTaskDeleteFile};
use iceberg::spec::{DataFileFormat, SchemaRef};

use super::apply::{apply, updated_rows, Change};
use super::file_changes::FileChanges;
use super::metrics::WriterMetrics;
use crate::deletes::DeleteLoader;
use crate::iceberg_err;
use crate::live_rows::{read_live_rows, LiveBatch};
use crate::scan_exec::conform;
use crate::write_exec::TableFileWriter;
use icemerge_proto::error::internal;

/// Reads touched data files of one table.
pub(super) struct FileRewriter {
    /// The table, for errors.
    table: String,
    file_io: FileIO,
    /// The table's current schema: every column is read.
    schema: SchemaRef,
    batch_size: usize,
    /// Record count of each data file the target scan reads.
    file_rows: Arc<HashMap<String, u64>>,
    /// The delete files of each data file the target scan reads (files
    /// without any are not listed).
    file_deletes: Arc<HashMap<String, Vec<FileScanTaskDeleteFile>>>,
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
    /// Live rows read from the file.
    rows: usize,
    /// Changes consumed (they are sorted by position).
    next: usize,
    updated: usize,
    deleted: usize,
}

impl FileRewriter {
    pub fn new(
        table: String,
        file_io: FileIO,
        schema: SchemaRef,
        batch_size: usize,
        file_rows: Arc<HashMap<String, u64>>,
        file_deletes: Arc<HashMap<String, Vec<FileScanTaskDeleteFile>>>,
    ) -> Self {
        Self {
            table,
            file_io,
            schema,
            batch_size,
            file_rows,
            file_deletes,
        }
    }

    /// A loader of the delete files of the data files the target scan
    /// reads (any may be rewritten); each delete file is read once, when a
    /// file it applies to is rewritten.
    pub fn delete_loader(&self) -> DeleteLoader {
        DeleteLoader::new(
            &self.table,
            self.file_io.clone(),
            self.schema.clone(),
            self.file_deletes.keys().cloned(),
        )
    }

    /// Streams `file`'s live rows once, applying `changes` by position. A
    /// file without delete files whose every row is deleted is dropped
    /// without reading it; one whose every row is updated is written from
    /// the updated rows without reading it.
    pub async fn rewrite(
        &self,
        file: &str,
        changes: &FileChanges,
        deletes: &DeleteLoader,
        mut out: RewriteOutput<'_>,
    ) -> Result<()> {
        if self.all_deleted(file, changes) {
            out.metrics.deleted.add(changes.len());
            out.metrics.files_removed.add(1);
            return Ok(());
        }
        let sorted = changes.sorted();
        if self.all_updated(file, &sorted) {
            for chunk in sorted.chunks(self.batch_size.max(1)) {
                out.writer.write(updated_rows(chunk, out.kept)?).await?;
            }
            out.metrics.updated.add(sorted.len());
            out.metrics.files_rewritten.add(1);
            return Ok(());
        }
        let batches = self.open(file, deletes, out.metrics).await?;
        let done = stream_through(batches, &sorted, &mut out).await?;
        if done.next != sorted.len() || done.updated + done.deleted != changes.len() {
            return Err(internal(format!(
                "MERGE: data file {file} has {} live rows but changes were planned for positions \
                 that are beyond it or deleted",
                done.rows
            )));
        }
        out.metrics.updated.add(done.updated);
        out.metrics.deleted.add(done.deleted);
        if done.rows == done.deleted {
            out.metrics.files_removed.add(1);
        } else {
            out.metrics.files_rewritten.add(1);
        }
        Ok(())
    }

    /// `changes` changes (one per position) reach every row of `file`, as
    /// its record count tells (a file with delete files has fewer live rows
    /// than its count: it is read).
    fn every_row_changed(&self, file: &str, changes: usize) -> bool {
        !self.file_deletes.contains_key(file)
            && self
                .file_rows
                .get(file)
                .is_some_and(|&rows| rows as usize == changes)
    }

    /// Every row of `file` is deleted.
    fn all_deleted(&self, file: &str, changes: &FileChanges) -> bool {
        self.every_row_changed(file, changes.len())
            && changes.changes().all(|c| matches!(c, Change::Delete))
    }

    /// Every row of `file` is updated: the changes (sorted by position, one
    /// per position, as many as its rows) are updates of positions 0 to its
    /// row count - 1. Its rows are then not read.
    fn all_updated(&self, file: &str, sorted: &[(i64, &Change)]) -> bool {
        self.every_row_changed(file, sorted.len())
            && sorted.first().is_some_and(|(p, _)| *p == 0)
            && sorted
                .last()
                .is_some_and(|(p, _)| *p == sorted.len() as i64 - 1)
            && sorted
                .iter()
                .all(|(_, c)| matches!(c, Change::Update { .. }))
    }

    /// The live rows of `file`, every column, in file order.
    async fn open(
        &self,
        file: &str,
        deletes: &DeleteLoader,
        metrics: &WriterMetrics,
    ) -> Result<BoxStream<'static, Result<LiveBatch>>> {
        let size = self
            .file_io
            .new_input(file)
            .map_err(iceberg_err)?
            .metadata()
            .await
            .map_err(iceberg_err)?
            .size;
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
        let listed = self.file_deletes.get(file).map_or(&[][..], Vec::as_slice);
        let deletes = deletes.for_file(file, listed).await?;
        read_live_rows(
            self.file_io.clone(),
            task,
            deletes,
            self.batch_size,
            metrics.bytes_read.clone(),
        )
    }
}

/// Writes every batch of a file with the run of `sorted` changes that falls
/// within its positions applied.
async fn stream_through(
    mut batches: BoxStream<'static, Result<LiveBatch>>,
    sorted: &[(i64, &Change)],
    out: &mut RewriteOutput<'_>,
) -> Result<Progress> {
    let mut done = Progress::default();
    while let Some(live) = batches.next().await {
        let LiveBatch { batch, positions } = live?;
        let positions = positions.values();
        done.rows += batch.num_rows();
        let last = positions.last().copied().unwrap_or(-1);
        let first = done.next;
        while done.next < sorted.len() && sorted[done.next].0 <= last {
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
        let applied = apply(batch, positions, in_batch, out.kept)?;
        out.metrics.copied.add(applied.copied);
        done.updated += applied.updated;
        done.deleted += applied.deleted;
        if let Some(rows) = applied.batch {
            out.writer.write(rows).await?;
        }
    }
    Ok(done)
}
