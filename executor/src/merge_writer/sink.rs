//! The writer of one partition of a MERGE: accepts merge rows (inserts are
//! written at once; deletes and updates are gathered per data file, and a
//! target row acted on twice fails the statement), rewrites the touched
//! files and returns the partition's commit fragment; on any failure
//! removes what it wrote.
//!
//! When its input comes sorted by data file (the plan sorts the exchange's
//! output by `_file`, spilling under the memory budget), a file's changes
//! are complete once a row of a later file arrives: the file is rewritten
//! then, and its changes and the updated rows only it took are dropped, so
//! the sink holds one file's changes at a time. Unsorted, every file is
//! rewritten at the end.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::RecordBatch;
use datafusion::error::Result;
use datafusion::execution::SendableRecordBatchStream;
use futures::StreamExt;
use iceberg::io::FileIO;
use iceberg::spec::{serialize_data_file_to_json, DataFile, TableMetadata};
use icemerge_proto::fragment::{self, Fragment};
use icemerge_proto::merge_rows::MergeOp;

use super::apply::Change;
use super::file_changes::FileChanges;
use super::merge_rows::{MergeRowReader, MergeRows};
use super::metrics::WriterMetrics;
use super::rewrite::{FileRewriter, RewriteOutput};
use super::TargetFiles;
use crate::deletes::DeleteLoader;
use crate::iceberg_err;
use crate::write_exec::TableFileWriter;
use icemerge_proto::error::internal;

/// Per-partition state of the copy-on-write writer.
pub(super) struct PartitionSink {
    metadata: Arc<TableMetadata>,
    writer: TableFileWriter,
    rewriter: FileRewriter,
    reader: MergeRowReader,
    /// Per touched file, its changes (BTreeMap keeps file order).
    changes: BTreeMap<String, FileChanges>,
    /// Batches holding updated rows (target columns only), by the index
    /// changes name; those no change needs any more are emptied.
    kept: Vec<RecordBatch>,
    /// Batches before this index are emptied.
    kept_freed: usize,
    /// The input comes sorted by data file.
    sorted_by_file: bool,
    /// The last file rewritten before the end (sorted input only).
    last_rewritten: Option<String>,
    /// Delete files of the files rewritten, each read once (made at the
    /// first rewrite).
    deletes: Option<DeleteLoader>,
    removed: Vec<Fragment>,
    metrics: WriterMetrics,
}

impl PartitionSink {
    /// A sink of `table` writing files named with `prefix` (unique per task
    /// attempt);
    /// `targets` tells the record count and delete files of each data file
    /// the target scan reads.
    pub async fn try_new(
        table: String,
        metadata: Arc<TableMetadata>,
        file_io: FileIO,
        prefix: String,
        batch_size: usize,
        targets: TargetFiles,
        metrics: WriterMetrics,
    ) -> Result<Self> {
        let writer = TableFileWriter::try_new(&metadata, file_io.clone(), prefix).await?;
        let reader = MergeRowReader::new(writer.arrow_schema());
        let schema = metadata.current_schema().clone();
        Ok(Self {
            rewriter: FileRewriter::new(
                table,
                file_io,
                schema,
                batch_size,
                targets.rows,
                targets.deletes,
            ),
            metadata,
            writer,
            reader,
            changes: BTreeMap::new(),
            kept: vec![],
            kept_freed: 0,
            sorted_by_file: false,
            last_rewritten: None,
            deletes: None,
            removed: vec![],
            metrics,
        })
    }

    /// The same sink, told whether its input comes sorted by data file.
    pub fn with_input_sorted_by_file(mut self, sorted: bool) -> Self {
        self.sorted_by_file = sorted;
        self
    }

    /// Consumes `input` and returns the encoded commit fragment; on failure,
    /// removes the files this sink wrote.
    pub async fn run(mut self, mut input: SendableRecordBatchStream) -> Result<RecordBatch> {
        let result = self.drain(&mut input).await;
        if result.is_err() {
            self.writer.abort().await;
        }
        result.map(|fragments| fragment::encode(&fragments))
    }

    async fn drain(&mut self, input: &mut SendableRecordBatchStream) -> Result<Vec<Fragment>> {
        while let Some(batch) = input.next().await {
            self.accept(batch?).await?;
        }
        self.finish().await
    }

    async fn accept(&mut self, batch: RecordBatch) -> Result<()> {
        let rows = self.reader.read(&batch)?;
        self.write_inserts(&rows).await?;
        let last_file = self.gather_changes(&rows)?;
        match last_file {
            // Every file before the batch's last one is complete.
            Some(last) if self.sorted_by_file => self.rewrite_before(&last).await,
            _ => Ok(()),
        }
    }

    /// Inserted rows go straight to the file writer.
    async fn write_inserts(&mut self, rows: &MergeRows) -> Result<()> {
        let Some(inserted) = rows.values_of(MergeOp::Insert)? else {
            return Ok(());
        };
        self.metrics.inserted.add(inserted.num_rows());
        self.writer.write(inserted).await
    }

    /// Deletes and updates, recorded per data file and position; a position
    /// acted on twice is a duplicate match. Returns the data file of the
    /// batch's last change. Rows of one file come in runs (the input is
    /// sorted by file): the file's changes are looked up once per run.
    fn gather_changes(&mut self, rows: &MergeRows) -> Result<Option<String>> {
        let mut kept_index = None;
        let mut last_file = None;
        let change_op = |i: usize| {
            rows.op(i)
                .filter(|op| matches!(op, MergeOp::Delete | MergeOp::Update))
        };
        let n = rows.ops.len();
        let mut i = 0;
        while i < n {
            if change_op(i).is_none() {
                i += 1;
                continue;
            }
            let (file, _) = rows.row_id(i)?;
            if self
                .last_rewritten
                .as_deref()
                .is_some_and(|done| file <= done)
            {
                return Err(internal(format!(
                    "MERGE: a change to data file {file} arrived after the file was rewritten \
                     (the writer's input is not sorted by data file)"
                )));
            }
            last_file = Some(i);
            if !self.changes.contains_key(file) {
                self.changes
                    .insert(file.to_string(), FileChanges::default());
            }
            let per_file = self.changes.get_mut(file).expect("inserted above");
            // The run of rows of this file (other operations skipped).
            let first = i;
            while i < n && (change_op(i).is_none() || rows.same_file(first, i)) {
                let Some(op) = change_op(i) else {
                    i += 1;
                    continue;
                };
                let (_, pos) = rows.row_id(i)?;
                let change = if op == MergeOp::Delete {
                    Change::Delete
                } else {
                    let batch = *kept_index.get_or_insert_with(|| {
                        self.kept.push(rows.values.clone());
                        self.kept.len() - 1
                    });
                    Change::Update { batch, row: i }
                };
                if !per_file.insert(pos, change)? {
                    return Err(rows.duplicate_match(i, file, pos));
                }
                i += 1;
            }
        }
        last_file
            .map(|i| rows.row_id(i).map(|(file, _)| file.to_string()))
            .transpose()
    }

    /// Rewrites the touched files whose paths sort before `file` (their
    /// changes are complete when the input is sorted by file), then empties
    /// the kept batches no remaining change takes rows from.
    async fn rewrite_before(&mut self, file: &str) -> Result<()> {
        let rest = self.changes.split_off(file);
        let done = std::mem::replace(&mut self.changes, rest);
        if done.is_empty() {
            return Ok(());
        }
        for (path, changes) in &done {
            self.rewrite_file(path, changes).await?;
        }
        self.last_rewritten = done.keys().next_back().cloned();
        drop(done);
        let needed = self
            .changes
            .values()
            .flat_map(FileChanges::changes)
            .filter_map(|c| match c {
                Change::Update { batch, .. } => Some(*batch),
                Change::Delete => None,
            })
            .min()
            .unwrap_or(self.kept.len());
        for batch in &mut self.kept[self.kept_freed..needed] {
            *batch = RecordBatch::new_empty(batch.schema());
        }
        self.kept_freed = self.kept_freed.max(needed);
        Ok(())
    }

    /// Rewrites one touched file with its changes.
    async fn rewrite_file(&mut self, file: &str, changes: &FileChanges) -> Result<()> {
        let deletes = self
            .deletes
            .get_or_insert_with(|| self.rewriter.delete_loader());
        let out = RewriteOutput {
            writer: &mut self.writer,
            kept: &self.kept,
            metrics: &self.metrics,
        };
        self.rewriter.rewrite(file, changes, deletes, out).await?;
        self.removed.push(Fragment::RemovedFile {
            path: file.to_string(),
        });
        Ok(())
    }

    /// Rewrites every touched file not rewritten yet (in path order) and
    /// returns the fragment: added files, removed files, counters.
    async fn finish(&mut self) -> Result<Vec<Fragment>> {
        let changes = std::mem::take(&mut self.changes);
        for (file, changes) in &changes {
            self.rewrite_file(file, changes).await?;
        }
        let removed = std::mem::take(&mut self.removed);
        let added = self.writer.close().await?;
        self.metrics.files_added.add(added.len());
        self.metrics
            .bytes_written
            .add(added.iter().map(|f| f.file_size_in_bytes() as usize).sum());
        let mut fragments = self.added(added)?;
        fragments.extend(removed);
        fragments.extend(self.metrics.stats());
        Ok(fragments)
    }

    /// The fragment entries of the files this sink wrote.
    fn added(&self, files: Vec<DataFile>) -> Result<Vec<Fragment>> {
        let partition_type = self.metadata.default_partition_type().clone();
        files
            .into_iter()
            .map(|file| {
                let record_count = file.record_count();
                let data_file_json = serialize_data_file_to_json(
                    file,
                    &partition_type,
                    self.metadata.format_version(),
                )
                .map_err(iceberg_err)?;
                Ok(Fragment::AddedFile {
                    data_file_json,
                    record_count,
                })
            })
            .collect()
    }
}
