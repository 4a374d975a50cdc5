//! The writer of one partition of a MERGE: accepts merge rows (inserts are
//! written at once; deletes and updates are gathered per data file, and a
//! target row acted on twice fails the statement), then at the end rewrites
//! every touched file and returns the partition's commit fragment; on any
//! failure removes what it wrote.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::array::{Array, AsArray, Int64Array, Int8Array, RecordBatch, StringArray};
use arrow::datatypes::{Int64Type, Int8Type, Schema, SchemaRef};
use datafusion::error::Result;
use datafusion::execution::SendableRecordBatchStream;
use futures::StreamExt;
use iceberg::io::FileIO;
use iceberg::spec::{serialize_data_file_to_json, DataFile, TableMetadata};
use icemerge_proto::fragment::{self, Fragment};
use icemerge_proto::merge_rows::{MergeOp, FILE_COLUMN, KEY_COLUMN, OP_COLUMN, POS_COLUMN};

use super::apply::Change;
use super::metrics::WriterMetrics;
use super::rewrite::{FileRewriter, RewriteOutput};
use crate::iceberg_err;
use crate::write_exec::TableFileWriter;
use icemerge_proto::error::{internal, invalid_input};

/// The merge-row contract columns of one batch, and its target columns.
struct MergeRows {
    ops: Int8Array,
    files: Option<StringArray>,
    positions: Option<Int64Array>,
    keys: Option<StringArray>,
    /// The target columns (they come last), in the table's types.
    values: RecordBatch,
}

impl MergeRows {
    /// The row id of row `i`.
    fn row_id(&self, i: usize) -> Result<(&str, i64)> {
        let (Some(files), Some(positions)) = (&self.files, &self.positions) else {
            return Err(internal("merge rows without row ids"));
        };
        Ok((files.value(i), positions.value(i)))
    }

    /// How an error names the target row `i` at `pos`.
    fn describe(&self, i: usize, pos: i64) -> String {
        self.keys
            .as_ref()
            .filter(|k| k.is_valid(i))
            .map(|k| format!("key ({})", k.value(i)))
            .unwrap_or_else(|| format!("row at position {pos}"))
    }
}

/// Per-partition state of the copy-on-write writer.
pub(super) struct PartitionSink {
    metadata: Arc<TableMetadata>,
    writer: TableFileWriter,
    rewriter: FileRewriter,
    /// Number of target columns (they follow the contract columns).
    columns: usize,
    /// The table's Arrow schema with every field nullable.
    values_schema: SchemaRef,
    /// Per touched file: position → change (BTreeMap keeps file order).
    changes: BTreeMap<String, HashMap<i64, Change>>,
    /// Batches holding updated rows (target columns only).
    kept: Vec<RecordBatch>,
    metrics: WriterMetrics,
}

impl PartitionSink {
    /// A sink writing files named with `prefix` (unique per task attempt);
    /// `file_rows` is the record count of each data file the target scan
    /// reads.
    pub async fn try_new(
        metadata: Arc<TableMetadata>,
        file_io: FileIO,
        prefix: String,
        batch_size: usize,
        file_rows: Arc<HashMap<String, u64>>,
        metrics: WriterMetrics,
    ) -> Result<Self> {
        let writer = TableFileWriter::try_new(&metadata, file_io.clone(), prefix).await?;
        let columns = metadata.current_schema().as_struct().fields().len();
        let values_schema = Arc::new(Schema::new(
            writer
                .arrow_schema()
                .fields()
                .iter()
                .map(|f| f.as_ref().clone().with_nullable(true))
                .collect::<Vec<_>>(),
        ));
        let schema = metadata.current_schema().clone();
        Ok(Self {
            rewriter: FileRewriter::new(file_io, schema, batch_size, file_rows),
            metadata,
            writer,
            columns,
            values_schema,
            changes: BTreeMap::new(),
            kept: vec![],
            metrics,
        })
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

    /// The target columns of a merge-row batch (they come last).
    fn values(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let start = batch
            .num_columns()
            .checked_sub(self.columns)
            .ok_or_else(|| internal("merge rows lack the target columns"))?;
        let values = batch.project(&(start..batch.num_columns()).collect::<Vec<_>>())?;
        // Deleted rows carry NULLs, also in required columns: required-ness
        // is checked where rows are written.
        crate::scan_exec::conform(&self.values_schema, values)
    }

    fn merge_rows(&self, batch: &RecordBatch) -> Result<MergeRows> {
        let ops = batch
            .column_by_name(OP_COLUMN)
            .ok_or_else(|| internal("merge rows without operation"))?
            .as_primitive::<Int8Type>()
            .clone();
        let column = |name: &str| batch.column_by_name(name);
        Ok(MergeRows {
            ops,
            files: column(FILE_COLUMN).map(|c| c.as_string::<i32>().clone()),
            positions: column(POS_COLUMN).map(|c| c.as_primitive::<Int64Type>().clone()),
            keys: column(KEY_COLUMN).map(|c| c.as_string::<i32>().clone()),
            values: self.values(batch)?,
        })
    }

    async fn accept(&mut self, batch: RecordBatch) -> Result<()> {
        let rows = self.merge_rows(&batch)?;
        self.write_inserts(&rows).await?;
        self.gather_changes(&rows)
    }

    /// Inserted rows go straight to the file writer.
    async fn write_inserts(&mut self, rows: &MergeRows) -> Result<()> {
        let inserts: Vec<u32> = (0..rows.ops.len())
            .filter(|&i| rows.ops.value(i) == MergeOp::Insert as i8)
            .map(|i| i as u32)
            .collect();
        if inserts.is_empty() {
            return Ok(());
        }
        let idx = arrow::array::UInt32Array::from(inserts);
        let inserted = arrow::compute::take_record_batch(&rows.values, &idx)?;
        self.metrics.inserted.add(inserted.num_rows());
        self.writer.write(inserted).await
    }

    /// Deletes and updates, recorded per data file and position; a position
    /// acted on twice is a duplicate match.
    fn gather_changes(&mut self, rows: &MergeRows) -> Result<()> {
        let mut kept_index = None;
        for i in 0..rows.ops.len() {
            let op = match MergeOp::try_from(rows.ops.value(i)) {
                Ok(op @ (MergeOp::Delete | MergeOp::Update)) => op,
                _ => continue,
            };
            let (file, pos) = rows.row_id(i)?;
            let change = if op == MergeOp::Delete {
                Change::Delete
            } else {
                let batch = *kept_index.get_or_insert_with(|| {
                    self.kept.push(rows.values.clone());
                    self.kept.len() - 1
                });
                Change::Update { batch, row: i }
            };
            let per_file = self.changes.entry(file.to_string()).or_default();
            if per_file.insert(pos, change).is_some() {
                let key = rows.describe(i, pos);
                return Err(invalid_input(format!(
                    "MERGE: target row {key} in data file {file} matched more than one source row; \
                     the table was not changed"
                )));
            }
        }
        Ok(())
    }

    /// Rewrites every touched file (in path order) and returns the fragment:
    /// added files, removed files, counters.
    async fn finish(&mut self) -> Result<Vec<Fragment>> {
        let changes = std::mem::take(&mut self.changes);
        let mut removed = vec![];
        for (file, changes) in &changes {
            let out = RewriteOutput {
                writer: &mut self.writer,
                kept: &self.kept,
                metrics: &self.metrics,
            };
            self.rewriter.rewrite(file, changes, out).await?;
            removed.push(Fragment::RemovedFile { path: file.clone() });
        }
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
