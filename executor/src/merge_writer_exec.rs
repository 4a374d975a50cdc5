//! `CopyOnWriteWriterExec`: stage D of a MERGE. Its input is the merge rows of
//! one writer partition (every row of a touched data file lands in the same
//! partition): an operation, the row id (`_file`, `_pos`) and the new values
//! of the target's columns. Inserted rows stream into new data files. Deletes
//! and updates are collected per data file; at the end each touched file is
//! read once and rewritten without its deleted rows and with its updated rows
//! in place (file order kept). A file whose rows are all deleted gets no
//! replacement and, when its record count is known from the target scan, is
//! not read at all. A target row acted on twice fails the statement (duplicate
//! match). The output is the commit fragment of this partition.

use std::any::Any;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, LazyLock};

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, RecordBatch, StringArray, UInt64Array};
use arrow::compute::interleave;
use arrow::datatypes::{DataType, Field, Int64Type, Int8Type, Schema, SchemaRef};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{Distribution, EquivalenceProperties};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, Partitioning,
    PlanProperties,
};
use futures::StreamExt;
use iceberg::arrow::ArrowReaderBuilder;
use iceberg::io::FileIO;
use iceberg::scan::FileScanTask;
use iceberg::spec::{serialize_data_file_to_json, DataFileFormat, TableMetadata};
use iceberg::Runtime;

use crate::file_io::file_io_from_props;
use crate::iceberg_err;
use crate::write_exec::TableFileWriter;

/// Column names of the merge-row contract (stage C → D).
pub const OP_COLUMN: &str = "__icemerge_op";
pub const FILE_COLUMN: &str = "_file";
pub const POS_COLUMN: &str = "_pos";
pub const KEY_COLUMN: &str = "__icemerge_key";
/// Operation codes (Trino's numbering).
pub const OP_INSERT: i8 = 1;
pub const OP_DELETE: i8 = 2;
pub const OP_UPDATE: i8 = 3;

/// Output: one row per added file, removed file, and one `stats` row.
pub static FRAGMENT_SCHEMA: LazyLock<SchemaRef> = LazyLock::new(|| {
    Arc::new(Schema::new(vec![
        Field::new("kind", DataType::Utf8, false),
        Field::new("value", DataType::Utf8, false),
        Field::new("count", DataType::UInt64, false),
    ]))
});

/// Per-partition copy-on-write writer of a MERGE.
#[derive(Debug, Clone)]
pub struct CopyOnWriteWriterExec {
    pub table: String,
    pub metadata: Arc<TableMetadata>,
    pub file_io_props: HashMap<String, String>,
    pub write_id: String,
    pub input: Arc<dyn ExecutionPlan>,
    /// Record count of each data file the target scan reads.
    pub file_rows: Arc<HashMap<String, u64>>,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl CopyOnWriteWriterExec {
    pub fn new(
        table: String,
        metadata: Arc<TableMetadata>,
        file_io_props: HashMap<String, String>,
        write_id: String,
        input: Arc<dyn ExecutionPlan>,
    ) -> Self {
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(FRAGMENT_SCHEMA.clone()),
            Partitioning::UnknownPartitioning(input.output_partitioning().partition_count()),
            EmissionType::Final,
            Boundedness::Bounded,
        ));
        Self {
            table,
            metadata,
            file_io_props,
            write_id,
            input,
            file_rows: Arc::default(),
            properties,
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }

    /// The same writer, knowing each data file's record count.
    pub fn with_file_rows(mut self, file_rows: Arc<HashMap<String, u64>>) -> Self {
        self.file_rows = file_rows;
        self
    }
}

impl DisplayAs for CopyOnWriteWriterExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "CopyOnWriteWriterExec: table={}, duplicate_match_check=per-file",
            self.table
        )
    }
}

impl ExecutionPlan for CopyOnWriteWriterExec {
    fn name(&self) -> &str {
        "CopyOnWriteWriterExec"
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn required_input_distribution(&self) -> Vec<Distribution> {
        vec![Distribution::UnspecifiedDistribution]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let input = children.pop().ok_or_else(|| {
            DataFusionError::Internal("CopyOnWriteWriterExec needs one child".into())
        })?;
        Ok(Arc::new(
            Self::new(
                self.table.clone(),
                self.metadata.clone(),
                self.file_io_props.clone(),
                self.write_id.clone(),
                input,
            )
            .with_file_rows(self.file_rows.clone()),
        ))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let input = self.input.execute(partition, context.clone())?;
        let metadata = self.metadata.clone();
        let file_io = file_io_from_props(&self.file_io_props);
        let prefix = format!(
            "{}-{partition:05}-{}",
            self.write_id,
            uuid::Uuid::new_v4().simple()
        );
        let batch_size = context.session_config().batch_size();
        let m = WriterMetrics::new(&self.metrics, partition);
        let file_rows = self.file_rows.clone();
        let stream = futures::stream::once(async move {
            let mut state =
                PartitionWriter::try_new(metadata, file_io, prefix, batch_size, file_rows, m)
                    .await?;
            let result = async {
                let mut input = input;
                while let Some(batch) = input.next().await {
                    state.accept(batch?).await?;
                }
                state.finish().await
            }
            .await;
            match result {
                Ok(batch) => Ok(batch),
                Err(e) => {
                    state.abort().await;
                    Err(e)
                }
            }
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            FRAGMENT_SCHEMA.clone(),
            stream,
        )))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

struct WriterMetrics {
    updated: datafusion::physical_plan::metrics::Count,
    deleted: datafusion::physical_plan::metrics::Count,
    inserted: datafusion::physical_plan::metrics::Count,
    copied: datafusion::physical_plan::metrics::Count,
    files_rewritten: datafusion::physical_plan::metrics::Count,
    files_removed: datafusion::physical_plan::metrics::Count,
    files_added: datafusion::physical_plan::metrics::Count,
    bytes_read: datafusion::physical_plan::metrics::Count,
    bytes_written: datafusion::physical_plan::metrics::Count,
}

impl WriterMetrics {
    fn new(set: &ExecutionPlanMetricsSet, partition: usize) -> Self {
        let c = |name: &'static str| MetricBuilder::new(set).counter(name, partition);
        Self {
            updated: c("rows_updated"),
            deleted: c("rows_deleted"),
            inserted: c("rows_inserted"),
            copied: c("rows_copied"),
            files_rewritten: c("files_rewritten"),
            files_removed: c("files_removed"),
            files_added: c("files_added"),
            bytes_read: c("bytes_read"),
            bytes_written: c("bytes_written"),
        }
    }
}

/// What happens to one row of a touched file.
enum Change {
    Delete,
    /// Replace with row `row` of kept batch `batch`.
    Update {
        batch: usize,
        row: usize,
    },
}

struct PartitionWriter {
    metadata: Arc<TableMetadata>,
    file_io: FileIO,
    batch_size: usize,
    writer: TableFileWriter,
    /// Number of target columns (they follow the 4 contract columns).
    columns: usize,
    /// Per touched file: position → change (BTreeMap keeps file order).
    changes: BTreeMap<String, HashMap<i64, Change>>,
    /// Batches holding updated rows (target columns only).
    kept: Vec<RecordBatch>,
    /// Record count of each data file the target scan reads.
    file_rows: Arc<HashMap<String, u64>>,
    metrics: WriterMetrics,
}

impl PartitionWriter {
    async fn try_new(
        metadata: Arc<TableMetadata>,
        file_io: FileIO,
        prefix: String,
        batch_size: usize,
        file_rows: Arc<HashMap<String, u64>>,
        metrics: WriterMetrics,
    ) -> Result<Self> {
        let writer = TableFileWriter::try_new(&metadata, file_io.clone(), prefix).await?;
        let columns = metadata.current_schema().as_struct().fields().len();
        Ok(Self {
            metadata,
            file_io,
            batch_size,
            writer,
            columns,
            changes: BTreeMap::new(),
            kept: vec![],
            file_rows,
            metrics,
        })
    }

    /// The target columns of a merge-row batch (they come last).
    fn values(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let start = batch
            .num_columns()
            .checked_sub(self.columns)
            .ok_or_else(|| {
                DataFusionError::Internal("merge rows lack the target columns".into())
            })?;
        let values = batch.project(&(start..batch.num_columns()).collect::<Vec<_>>())?;
        crate::scan_exec::conform(self.writer.arrow_schema(), values)
    }

    async fn accept(&mut self, batch: RecordBatch) -> Result<()> {
        let ops = batch
            .column_by_name(OP_COLUMN)
            .ok_or_else(|| DataFusionError::Internal("merge rows without operation".into()))?
            .as_primitive::<Int8Type>()
            .clone();
        let files = batch
            .column_by_name(FILE_COLUMN)
            .map(|c| c.as_string::<i32>().clone());
        let positions = batch
            .column_by_name(POS_COLUMN)
            .map(|c| c.as_primitive::<Int64Type>().clone());
        let keys = batch
            .column_by_name(KEY_COLUMN)
            .map(|c| c.as_string::<i32>().clone());
        let values = self.values(&batch)?;

        let inserts: Vec<u32> = (0..batch.num_rows())
            .filter(|&i| ops.value(i) == OP_INSERT)
            .map(|i| i as u32)
            .collect();
        if !inserts.is_empty() {
            let idx = arrow::array::UInt32Array::from(inserts);
            let rows = arrow::compute::take_record_batch(&values, &idx)?;
            self.metrics.inserted.add(rows.num_rows());
            self.writer.write(rows).await?;
        }
        let mut kept_index = None;
        for i in 0..batch.num_rows() {
            let op = ops.value(i);
            if op != OP_DELETE && op != OP_UPDATE {
                continue;
            }
            let (Some(files), Some(positions)) = (&files, &positions) else {
                return Err(DataFusionError::Internal(
                    "merge rows without row ids".into(),
                ));
            };
            let file = files.value(i).to_string();
            let pos = positions.value(i);
            let change = if op == OP_DELETE {
                Change::Delete
            } else {
                let batch_idx = *kept_index.get_or_insert_with(|| {
                    self.kept.push(values.clone());
                    self.kept.len() - 1
                });
                Change::Update {
                    batch: batch_idx,
                    row: i,
                }
            };
            let per_file = self.changes.entry(file.clone()).or_default();
            if per_file.insert(pos, change).is_some() {
                let key = keys
                    .as_ref()
                    .filter(|k| k.is_valid(i))
                    .map(|k| format!("key ({})", k.value(i)))
                    .unwrap_or_else(|| format!("row at position {pos}"));
                return Err(DataFusionError::Execution(format!(
                    "MERGE: target row {key} in data file {file} matched more than one source row; \
                     the table was not changed"
                )));
            }
        }
        Ok(())
    }

    /// Rewrites every touched file and returns the fragment.
    async fn finish(&mut self) -> Result<RecordBatch> {
        let mut removed = vec![];
        let changes = std::mem::take(&mut self.changes);
        for (file, changes) in &changes {
            self.rewrite(file, changes).await?;
            removed.push(file.clone());
        }
        let added = self.writer.close().await?;
        self.metrics.files_added.add(added.len());
        self.metrics
            .bytes_written
            .add(added.iter().map(|f| f.file_size_in_bytes() as usize).sum());
        let partition_type = self.metadata.default_partition_type().clone();
        let mut kinds = vec![];
        let mut values = vec![];
        let mut counts = vec![];
        for file in added {
            let count = file.record_count();
            let json =
                serialize_data_file_to_json(file, &partition_type, self.metadata.format_version())
                    .map_err(iceberg_err)?;
            kinds.push("added");
            values.push(json);
            counts.push(count);
        }
        for path in removed {
            kinds.push("removed");
            values.push(path);
            counts.push(0);
        }
        for (name, count) in [
            ("rows_updated", &self.metrics.updated),
            ("rows_deleted", &self.metrics.deleted),
            ("rows_inserted", &self.metrics.inserted),
            ("rows_copied", &self.metrics.copied),
            ("bytes_read", &self.metrics.bytes_read),
            ("bytes_written", &self.metrics.bytes_written),
        ] {
            kinds.push("stat");
            values.push(name.to_string());
            counts.push(count.value() as u64);
        }
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(kinds)),
            Arc::new(StringArray::from(values)),
            Arc::new(UInt64Array::from(counts)),
        ];
        Ok(RecordBatch::try_new(FRAGMENT_SCHEMA.clone(), columns)?)
    }

    /// Streams `file` once, applying `changes` by position. A file whose
    /// every row is deleted is dropped without reading it.
    async fn rewrite(&mut self, file: &str, changes: &HashMap<i64, Change>) -> Result<()> {
        let all_deleted = self.file_rows.get(file).is_some_and(|&rows| {
            rows as usize == changes.len() && changes.values().all(|c| matches!(c, Change::Delete))
        });
        if all_deleted {
            self.metrics.deleted.add(changes.len());
            self.metrics.files_removed.add(1);
            return Ok(());
        }
        let size = self
            .file_io
            .new_input(file)
            .map_err(iceberg_err)?
            .metadata()
            .await
            .map_err(iceberg_err)?
            .size;
        self.metrics.bytes_read.add(size as usize);
        let schema = self.metadata.current_schema().clone();
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
        let mut batches = reader
            .read(futures::stream::iter([Ok(task)]).boxed())
            .map_err(iceberg_err)?
            .stream();
        // Changes in file order; each batch takes the run of changes that
        // falls within its positions. A batch without changes is written as
        // it is, one with deletes only is filtered, others are interleaved
        // with the updated rows they take.
        let mut sorted: Vec<(i64, &Change)> = changes.iter().map(|(p, c)| (*p, c)).collect();
        sorted.sort_unstable_by_key(|(p, _)| *p);
        let mut next = 0;
        let mut position: i64 = 0;
        let (mut updated, mut deleted) = (0usize, 0usize);
        while let Some(batch) = batches.next().await {
            let batch = batch.map_err(iceberg_err)?;
            let rows = batch.num_rows();
            let end = position + rows as i64;
            let first = next;
            while next < sorted.len() && sorted[next].0 < end {
                next += 1;
            }
            let in_batch = &sorted[first..next];
            let start = position;
            position = end;
            if in_batch.is_empty() {
                self.metrics.copied.add(rows);
                self.writer.write(batch).await?;
                continue;
            }
            let batch = crate::scan_exec::conform(self.writer.arrow_schema(), batch)?;
            if in_batch.iter().all(|(_, c)| matches!(c, Change::Delete)) {
                let mut keep = vec![true; rows];
                for (pos, _) in in_batch {
                    keep[(pos - start) as usize] = false;
                }
                deleted += in_batch.len();
                self.metrics.copied.add(rows - in_batch.len());
                let kept = arrow::compute::filter_record_batch(&batch, &BooleanArray::from(keep))?;
                self.writer.write(kept).await?;
                continue;
            }
            // Source 0 is this batch; 1.. the kept batches this batch takes from.
            let mut sources: Vec<usize> = vec![];
            let mut indices: Vec<(usize, usize)> = Vec::with_capacity(rows);
            let mut changed = in_batch.iter().peekable();
            for row in 0..rows {
                match changed.next_if(|(pos, _)| *pos == start + row as i64) {
                    None => indices.push((0, row)),
                    Some((_, Change::Delete)) => deleted += 1,
                    Some((_, Change::Update { batch, row })) => {
                        updated += 1;
                        let source = match sources.iter().position(|b| b == batch) {
                            Some(i) => i + 1,
                            None => {
                                sources.push(*batch);
                                sources.len()
                            }
                        };
                        indices.push((source, *row));
                    }
                }
            }
            self.metrics
                .copied
                .add(indices.iter().filter(|(b, _)| *b == 0).count());
            if indices.is_empty() {
                continue;
            }
            let mut columns = Vec::with_capacity(batch.num_columns());
            for c in 0..batch.num_columns() {
                let mut arrays: Vec<&dyn Array> = vec![batch.column(c).as_ref()];
                arrays.extend(sources.iter().map(|&k| self.kept[k].column(c).as_ref()));
                columns.push(interleave(&arrays, &indices)?);
            }
            let out = RecordBatch::try_new(batch.schema(), columns)?;
            self.writer.write(out).await?;
        }
        if next != sorted.len() || updated + deleted != changes.len() {
            return Err(DataFusionError::Execution(format!(
                "MERGE: data file {file} has {position} rows but changes were planned for positions beyond it"
            )));
        }
        self.metrics.updated.add(updated);
        self.metrics.deleted.add(deleted);
        if position as usize == deleted {
            self.metrics.files_removed.add(1);
        } else {
            self.metrics.files_rewritten.add(1);
        }
        Ok(())
    }

    async fn abort(&mut self) {
        self.writer.abort().await;
    }
}
