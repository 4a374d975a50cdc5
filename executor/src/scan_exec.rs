//! `IcebergScanExec`: the distributed scan of one Iceberg snapshot. Each
//! output partition is one task that reads a group of data files with their
//! position and equality deletes applied: by iceberg's Arrow reader, or, in
//! row-id mode (MERGE's target), by `live_rows`, which keeps every live
//! row's original position. The file list is fixed at plan time, so every
//! task reads the same pinned snapshot.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use datafusion::common::stats::Precision;
use datafusion::common::Statistics;
use datafusion::error::Result;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{
    Count, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use futures::{StreamExt, TryStreamExt};
use iceberg::arrow::{ArrowReaderBuilder, ScanMetrics};
use iceberg::expr::{BoundPredicate, Predicate};
use iceberg::scan::FileScanTask;
use iceberg::Runtime;
use icemerge_proto::merge_rows::{FILE_COLUMN, POS_COLUMN};

use crate::counted_rows::{countable, empty_rows, live_row_count};
use crate::deletes::DeleteLoader;
use crate::file_io::{file_io_from_props, StorageProps};
use crate::iceberg_err;
use crate::live_rows::read_live_rows_in;
use crate::row_groups::{select_row_groups, RowGroupSelection};
use icemerge_proto::error::{internal, invalid_input};

/// Files of one task counted at once, each reading its position delete
/// files (`counted_rows`).
const COUNT_CONCURRENCY: usize = 8;

/// Reads groups of Iceberg data files; one group per output partition.
#[derive(Debug, Clone)]
pub struct IcebergScanExec {
    pub table: String,
    pub schema: SchemaRef,
    pub file_io_props: StorageProps,
    pub groups: Vec<Vec<FileScanTask>>,
    pub files_pruned: u64,
    pub predicate: String,
    /// Predicate derived from a MERGE source's key values that pruned files
    /// (never filters rows), for display.
    pub dynamic_predicate: String,
    pub limit: Option<usize>,
    /// Adds the row id columns `_file` and `_pos` (MERGE's target scan; the
    /// names are `icemerge_proto::merge_rows::{FILE_COLUMN, POS_COLUMN}`).
    pub row_ids: bool,
    /// The scan of a MERGE's (UPDATE's, DELETE's) target: with row ids, or
    /// without when the statement only inserts and reads the ON columns
    /// alone (an anti join).
    pub merge_target: bool,
    /// Every predicate that pruned this scan's files (pushed filters and
    /// dynamic pruning together), as planned on the coordinator; not
    /// shipped to executors, which do not need it. A MERGE's commit
    /// validates concurrent snapshots with it.
    pub pruned_by: Option<Predicate>,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl IcebergScanExec {
    pub fn new(
        table: String,
        schema: SchemaRef,
        file_io_props: impl Into<StorageProps>,
        groups: Vec<Vec<FileScanTask>>,
        files_pruned: u64,
        predicate: String,
        limit: Option<usize>,
    ) -> Self {
        // An empty table still has one (empty) partition.
        let groups = if groups.is_empty() {
            vec![vec![]]
        } else {
            groups
        };
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(groups.len()),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        Self {
            table,
            schema,
            file_io_props: file_io_props.into(),
            groups,
            files_pruned,
            predicate,
            dynamic_predicate: String::new(),
            limit,
            row_ids: false,
            merge_target: false,
            pruned_by: None,
            properties,
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }

    /// The same scan as a MERGE's target scan (`merge_target`); with
    /// `row_ids`, emitting `_file` and `_pos` after the table columns
    /// (`schema` must then end with those two fields).
    pub fn as_merge_target(mut self, row_ids: bool) -> Self {
        self.merge_target = true;
        self.row_ids = row_ids;
        self
    }

    /// The same scan, showing `predicate` as the dynamic pruning it had.
    pub fn with_dynamic_predicate(mut self, predicate: String) -> Self {
        self.dynamic_predicate = predicate;
        self
    }

    /// The same scan, recording the predicate that pruned its files.
    pub fn with_pruned_by(mut self, predicate: Option<Predicate>) -> Self {
        self.pruned_by = predicate;
        self
    }

    /// The same scan reading only the data files `keep` accepts, spread
    /// over as many tasks as before (or fewer, one file each at least).
    pub fn with_files(&self, keep: impl Fn(&str) -> bool) -> Self {
        let tasks: Vec<FileScanTask> = self
            .groups
            .iter()
            .flatten()
            .filter(|task| keep(&task.data_file_path))
            .cloned()
            .collect();
        let dropped = (self.file_count() - tasks.len()) as u64;
        let mut scan = IcebergScanExec::new(
            self.table.clone(),
            self.schema.clone(),
            self.file_io_props.clone(),
            bin_pack(tasks, self.groups.len()),
            self.files_pruned + dropped,
            self.predicate.clone(),
            self.limit,
        )
        .with_dynamic_predicate(self.dynamic_predicate.clone())
        .with_pruned_by(self.pruned_by.clone());
        scan.row_ids = self.row_ids;
        scan.merge_target = self.merge_target;
        scan
    }

    /// Number of data files this scan reads.
    pub fn file_count(&self) -> usize {
        self.groups.iter().map(Vec::len).sum()
    }
}

/// Groups scan tasks into at most `target` groups of similar byte size.
pub fn bin_pack(tasks: Vec<FileScanTask>, target: usize) -> Vec<Vec<FileScanTask>> {
    let target = target.max(1).min(tasks.len().max(1));
    let mut tasks = tasks;
    tasks.sort_by(|a, b| {
        b.length
            .cmp(&a.length)
            .then(a.data_file_path.cmp(&b.data_file_path))
    });
    let mut groups: Vec<(u64, Vec<FileScanTask>)> = (0..target).map(|_| (0, vec![])).collect();
    for task in tasks {
        let smallest = groups
            .iter_mut()
            .min_by_key(|(size, _)| *size)
            .expect("at least one group");
        smallest.0 += task.length.max(1);
        smallest.1.push(task);
    }
    groups
        .into_iter()
        .map(|(_, mut g)| {
            g.sort_by(|a, b| a.data_file_path.cmp(&b.data_file_path));
            g
        })
        .filter(|g| !g.is_empty())
        .collect()
}

impl DisplayAs for IcebergScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "IcebergScanExec: table={}, files={}, files_pruned={}, tasks={}",
            self.table,
            self.file_count(),
            self.files_pruned,
            self.groups.len()
        )?;
        if !self.predicate.is_empty() {
            write!(f, ", predicate={}", self.predicate)?;
        }
        if !self.dynamic_predicate.is_empty() {
            write!(f, ", dynamic_pruning={}", self.dynamic_predicate)?;
        }
        if let Some(limit) = self.limit {
            write!(f, ", limit={limit}")?;
        }
        if self.row_ids {
            write!(f, ", row_ids=[{FILE_COLUMN}, {POS_COLUMN}]")?;
        } else if self.merge_target {
            write!(f, ", merge_target=keys only")?;
        }
        let cols: Vec<_> = self
            .schema
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        write!(f, ", projection=[{}]", cols.join(", "))
    }
}

impl ExecutionPlan for IcebergScanExec {
    fn name(&self) -> &str {
        "IcebergScanExec"
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if children.is_empty() {
            Ok(self)
        } else {
            Err(internal("IcebergScanExec has no children"))
        }
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let tasks = self
            .groups
            .get(partition)
            .cloned()
            .ok_or_else(|| internal(format!("IcebergScanExec has no partition {partition}")))?;
        let files = MetricBuilder::new(&self.metrics).counter("files_scanned", partition);
        // Bytes read from storage (footers, the projected columns' pages),
        // not the files' sizes.
        let bytes = MetricBuilder::new(&self.metrics).counter("bytes_scanned", partition);
        let rows = MetricBuilder::new(&self.metrics).output_rows(partition);
        // A row-id scan counts the files it reads (not those whose every
        // row group its predicate rules out); other scans every file.
        let row_groups_pruned =
            MetricBuilder::new(&self.metrics).counter("row_groups_pruned", partition);
        // Files a row-id scan did not read at all (beside `self.files_pruned`,
        // those pruned at plan time).
        let files_pruned = MetricBuilder::new(&self.metrics).counter("files_pruned", partition);
        if !self.row_ids {
            files.add(tasks.len());
        }
        // Delete files the task's data files read (each once per task).
        let delete_files: std::collections::HashSet<&str> = tasks
            .iter()
            .flat_map(|t| t.deletes.iter().map(|d| d.file_path.as_str()))
            .collect();
        MetricBuilder::new(&self.metrics)
            .counter("delete_files_read", partition)
            .add(delete_files.len());

        let schema = self.schema.clone();
        let file_io = file_io_from_props(&self.file_io_props);
        let batch_size = context.session_config().batch_size();
        let row_ids = self.row_ids;
        let data_schema = if row_ids {
            let n = schema.fields().len() - 2;
            Arc::new(arrow::datatypes::Schema::new(schema.fields()[..n].to_vec()))
        } else {
            schema.clone()
        };
        // Without row ids, one reader streams every file of the task; with row
        // ids, each file is read on its own so that positions can be counted.
        let units: Vec<Vec<FileScanTask>> = if row_ids {
            tasks.into_iter().map(|t| vec![t]).collect()
        } else {
            vec![tasks]
        };
        let out_schema = schema.clone();
        // One loader per task reads each delete file once: in row-id mode,
        // and for files counted rather than read (no column wanted).
        let counts = !row_ids && units.iter().flatten().any(countable);
        let loader = match units.iter().flatten().next() {
            Some(first) if row_ids || counts => Some(Arc::new(DeleteLoader::new(
                &self.table,
                file_io.clone(),
                first.schema.clone(),
                units.iter().flatten().map(|t| t.data_file_path.clone()),
            ))),
            _ => None,
        };
        let context = UnitContext {
            file_io,
            batch_size,
            data_schema,
            out_schema,
            row_ids,
            deletes: loader,
            bytes,
            files,
            row_groups_pruned,
            files_pruned,
        };
        let stream = futures::stream::iter(units)
            .map(move |unit| read_unit(unit, context.clone()))
            .buffered(1)
            .try_flatten();
        let mut remaining = self.limit.unwrap_or(usize::MAX);
        let stream = stream
            .try_take_while(move |_| futures::future::ready(Ok(remaining > 0)))
            .map_ok(move |batch| {
                let batch = if batch.num_rows() > remaining {
                    batch.slice(0, remaining)
                } else {
                    batch
                };
                remaining = remaining.saturating_sub(batch.num_rows());
                rows.add(batch.num_rows());
                batch
            });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    /// Row counts from the manifest entries (an upper bound when delete
    /// files apply) and the bytes those rows take in memory, estimated from
    /// the scan's columns, so that joins build their hash table on the
    /// smaller side: a MERGE's row-id scan of a few key columns is narrower
    /// than a wide source of as many rows.
    fn partition_statistics(&self, partition: Option<usize>) -> Result<Statistics> {
        let tasks: Vec<&FileScanTask> = match partition {
            Some(p) => self.groups.get(p).into_iter().flatten().collect(),
            None => self.groups.iter().flatten().collect(),
        };
        let mut statistics = Statistics::new_unknown(&self.schema);
        if let Some(rows) = tasks.iter().map(|t| t.record_count).sum::<Option<u64>>() {
            let rows = self.limit.map_or(rows as usize, |l| l.min(rows as usize));
            statistics.num_rows = Precision::Inexact(rows);
            statistics.total_byte_size =
                Precision::Inexact(rows.saturating_mul(estimated_row_width(&self.schema)));
        }
        Ok(statistics)
    }
}

/// Bytes a row of `schema` takes in Arrow memory: a fixed-width value its
/// width, a string or binary view 16 bytes (the row-id scan's `_file`
/// views share one copy of the path), any other value an assumed 32 bytes
/// (the manifests hold no in-memory sizes).
fn estimated_row_width(schema: &arrow::datatypes::Schema) -> usize {
    use arrow::datatypes::DataType;
    schema
        .fields()
        .iter()
        .map(|field| match field.data_type() {
            DataType::Boolean => 1,
            DataType::Utf8View | DataType::BinaryView => 16,
            other => other.primitive_width().unwrap_or(32),
        })
        .sum()
}

/// What each unit of one scan task is read with.
#[derive(Clone)]
struct UnitContext {
    file_io: iceberg::io::FileIO,
    batch_size: usize,
    /// The scan's columns without the row ids.
    data_schema: SchemaRef,
    /// The scan's output schema.
    out_schema: SchemaRef,
    /// Adds `_file` / `_pos`: each unit is one file read by `live_rows`.
    row_ids: bool,
    /// The task's delete files, each read once: in row-id mode and when
    /// some file is counted, not read (`counted_rows`).
    deletes: Option<Arc<DeleteLoader>>,
    /// `bytes_scanned`: bytes read from storage.
    bytes: Count,
    /// `files_scanned` (row-id mode: files read).
    files: Count,
    /// `row_groups_pruned` (row-id mode): row groups not read.
    row_groups_pruned: Count,
    /// `files_pruned` (row-id mode): files none of whose row groups is read.
    files_pruned: Count,
}

/// Reads one unit of files: a stream of batches in the scan's schema. In
/// row-id mode the unit is one file, read by `live_rows` (original
/// positions, deleted rows skipped) with `_file` / `_pos` appended;
/// otherwise iceberg's reader streams the unit, applying delete files.
async fn read_unit(
    unit: Vec<FileScanTask>,
    context: UnitContext,
) -> Result<futures::stream::BoxStream<'static, Result<RecordBatch>>> {
    let UnitContext {
        file_io,
        batch_size,
        data_schema,
        out_schema,
        row_ids,
        deletes,
        bytes,
        files,
        row_groups_pruned,
        files_pruned,
    } = context;
    if let (true, Some(loader)) = (row_ids, &deletes) {
        let [task] = <[FileScanTask; 1]>::try_from(unit)
            .map_err(|_| internal("a row-id scan reads one file at a time"))?;
        let counters = RowIdCounters {
            bytes,
            files,
            row_groups_pruned,
            files_pruned,
        };
        return read_with_row_ids(
            task,
            file_io,
            batch_size,
            data_schema,
            out_schema,
            loader,
            counters,
        )
        .await;
    }
    // No column asked for (e.g. `count(*)`): files whose live rows follow
    // from their record count and position deletes are counted, not read.
    let (counted, unit): (Vec<FileScanTask>, Vec<FileScanTask>) =
        unit.into_iter().partition(countable);
    let mut rows = 0;
    if let Some(loader) = &deletes {
        // Several position delete files in flight at once.
        let counts = counted.into_iter().map(|task| {
            let loader = loader.clone();
            async move { live_row_count(&task, &loader).await }
        });
        let mut counts = futures::stream::iter(counts).buffer_unordered(COUNT_CONCURRENCY);
        while let Some(n) = counts.try_next().await? {
            rows += n;
        }
    }
    let counted = empty_rows(rows, batch_size);
    if unit.is_empty() {
        return Ok(counted);
    }
    // The others (equality deletes): iceberg's reader would read every
    // column, so each task reads its cheapest one, dropped again.
    let mut unit = unit;
    let mut placeholder = false;
    for task in &mut unit {
        if task.project_field_ids.is_empty() {
            if let Some(id) = cheapest_column(&task.schema) {
                task.project_field_ids = vec![id];
                placeholder = true;
            }
        }
    }
    let runtime = Runtime::try_current().map_err(iceberg_err)?;
    let reader = ArrowReaderBuilder::new(file_io, runtime)
        .with_batch_size(batch_size)
        .with_data_file_concurrency_limit(1)
        .with_row_group_filtering_enabled(true)
        .with_row_selection_enabled(true)
        .build();
    let task_stream = futures::stream::iter(unit.into_iter().map(Ok)).boxed();
    let result = reader.read(task_stream).map_err(iceberg_err)?;
    let mut io = StorageBytes::new(result.metrics().clone(), bytes);
    let batches = result.stream();
    let read = batches.map(move |batch| {
        io.update();
        let batch = batch.map_err(iceberg_err)?;
        let batch = if placeholder {
            batch.project(&[])?
        } else {
            batch
        };
        conform(&data_schema, batch)
    });
    Ok(counted.chain(read).boxed())
}

/// Adds what an iceberg reader has read from storage to a scan's counter:
/// as batches come ([`StorageBytes::update`]) and, for reads no batch
/// followed (a file whose rows are all deleted), when dropped.
pub(crate) struct StorageBytes {
    io: ScanMetrics,
    counter: Count,
    counted: u64,
}

impl StorageBytes {
    pub(crate) fn new(io: ScanMetrics, counter: Count) -> Self {
        Self {
            io,
            counter,
            counted: 0,
        }
    }

    /// Adds the bytes read since the last update.
    pub(crate) fn update(&mut self) {
        let now = self.io.bytes_read();
        self.counter.add(now.saturating_sub(self.counted) as usize);
        self.counted = now.max(self.counted);
    }
}

impl Drop for StorageBytes {
    fn drop(&mut self) {
        self.update();
    }
}

/// The top-level column of `schema` cheapest to read when only row counts
/// are wanted: the narrowest fixed-width type, else any primitive one.
pub(crate) fn cheapest_column(schema: &iceberg::spec::Schema) -> Option<i32> {
    use iceberg::spec::{PrimitiveType as P, Type};
    let cost = |t: &Type| -> Option<u8> {
        let Type::Primitive(p) = t else {
            return None;
        };
        Some(match p {
            P::Boolean | P::Int | P::Date | P::Float => 0,
            P::Long | P::Double | P::Time | P::Timestamp | P::Timestamptz => 1,
            P::Decimal { .. } | P::TimestampNs | P::TimestamptzNs => 2,
            _ => 3,
        })
    };
    schema
        .as_struct()
        .fields()
        .iter()
        .filter_map(|f| cost(&f.field_type).map(|c| (c, f.id)))
        .min_by_key(|(c, _)| *c)
        .map(|(_, id)| id)
}

/// The counters a row-id read adds to.
struct RowIdCounters {
    bytes: Count,
    files: Count,
    row_groups_pruned: Count,
    files_pruned: Count,
}

/// One file's live rows with `_file` and their original `_pos`.
async fn read_with_row_ids(
    task: FileScanTask,
    file_io: iceberg::io::FileIO,
    batch_size: usize,
    data_schema: SchemaRef,
    out_schema: SchemaRef,
    loader: &DeleteLoader,
    counters: RowIdCounters,
) -> Result<futures::stream::BoxStream<'static, Result<RecordBatch>>> {
    let RowIdCounters {
        bytes,
        files,
        row_groups_pruned,
        files_pruned,
    } = counters;
    let path = task.data_file_path.clone();
    // Row groups whose statistics rule out the scan's predicate are not
    // read (the positions of the others stay those of the whole file).
    let predicates: Vec<&BoundPredicate> = task.predicate.iter().collect();
    let selection = select_row_groups(
        &file_io,
        &path,
        task.file_size_in_bytes,
        &predicates,
        &bytes,
    )
    .await?;
    if let RowGroupSelection::Runs { runs, pruned } = &selection {
        row_groups_pruned.add(*pruned);
        if runs.is_empty() {
            files_pruned.add(1);
            return Ok(futures::stream::empty().boxed());
        }
    }
    files.add(1);
    let deletes = loader.for_file(&path, &task.deletes).await?;
    let batches = read_live_rows_in(file_io, task, deletes, batch_size, bytes, selection)?;
    // One view of one buffer holding exactly the path (a builder's buffer
    // would have a block's capacity, which every batch taking from it, and
    // every concatenation of such batches, would count again).
    let path_view: arrow::array::ArrayRef = Arc::new(arrow::array::StringViewArray::try_new(
        vec![arrow::array::builder::make_view(path.as_bytes(), 0, 0)].into(),
        vec![arrow::buffer::Buffer::from(path.as_bytes())],
        None,
    )?);
    Ok(batches
        .map(move |live| {
            let live = live?;
            let batch = conform(&data_schema, live.batch)?;
            let n = batch.num_rows();
            let mut columns = batch.columns().to_vec();
            // `_file`: n views of one copy of the path (not n copies).
            let first = arrow::array::UInt32Array::from(vec![0; n]);
            columns.push(arrow::compute::take(&path_view, &first, None)?);
            columns.push(Arc::new(live.positions));
            Ok(RecordBatch::try_new(out_schema.clone(), columns)?)
        })
        .boxed())
}

/// Gives a batch read by iceberg (whose fields carry Parquet field ids) the
/// scan's declared schema, casting where the file's type is narrower.
pub fn conform(schema: &SchemaRef, batch: RecordBatch) -> Result<RecordBatch> {
    if batch.num_columns() != schema.fields().len() {
        return Err(internal(format!(
            "scan produced {} columns, expected {}",
            batch.num_columns(),
            schema.fields().len()
        )));
    }
    let columns = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(col, field)| {
            if col.data_type() == field.data_type() {
                Ok(col.clone())
            } else {
                // Never turn a value that does not fit into NULL: fail instead.
                let options = arrow::compute::CastOptions {
                    safe: false,
                    ..Default::default()
                };
                arrow::compute::cast_with_options(col, field.data_type(), &options).map_err(|e| {
                    invalid_input(format!(
                        "column '{}': cannot store {} as {}: {e}",
                        field.name(),
                        col.data_type(),
                        field.data_type()
                    ))
                })
            }
        })
        .collect::<Result<Vec<_>>>()?;
    let options =
        arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    Ok(RecordBatch::try_new_with_options(
        schema.clone(),
        columns,
        &options,
    )?)
}
