//! `SortChangesByFileExec`, the copy-on-write writer's input order: each
//! partition's deletes and updates sorted by data file (`_file`), in
//! DataFusion's sort, which spills under the memory budget; inserted rows
//! (no `_file`) pass through unsorted as they arrive, ahead of every
//! change. The output is therefore ordered by `_file` ascending, NULLs
//! first, as a sort of every row would order it, but the sort holds and
//! spills only the rows that need an order: a merge of 1M updates and 10M
//! inserts sorts 1M rows, not 11M. The sort's rows carry each path as its
//! file's ordinal (`file_ordinals.rs`), turned back into the path as they
//! leave it.
//!
//! Per partition, one task splits the input (inserts to the output,
//! changes to the sort) while a second drives the sort, whose sorted rows
//! follow once its input has ended, i.e. after the last insert.

use std::any::Any;
use std::fmt;
use std::sync::{Arc, Mutex};

use arrow::array::{ArrayRef, AsArray, RecordBatch};
use arrow::compute::{filter_record_batch, is_not_null, is_null, SortOptions};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, UInt32Type};
use datafusion::error::Result;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::{EquivalenceProperties, LexOrdering, PhysicalSortExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{
    Count, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet,
};
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::stream::{
    RecordBatchReceiverStreamBuilder, RecordBatchStreamAdapter,
};
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, PlanProperties,
};
use futures::StreamExt;
use icemerge_proto::error::internal;
use icemerge_proto::merge_rows::FILE_COLUMN;
use tokio::sync::mpsc::Sender;

use super::file_ordinals::FileOrdinals;

/// Batches in flight between the tasks of one partition.
const CHANNEL_BATCHES: usize = 2;

/// The sort's key column, in place of `_file`: the file's ordinal.
const ORDINAL_COLUMN: &str = "__icemerge_file_ordinal";

/// The copy-on-write writer's input: changes sorted by data file, inserts
/// first and unsorted.
pub struct SortChangesByFileExec {
    input: Arc<dyn ExecutionPlan>,
    /// The data files the changes name (those the target scan reads).
    files: Arc<FileOrdinals>,
    /// Where `_file` is in the input (and the ordinal in the sort's rows).
    file_index: usize,
    /// The sort of the changes (by ordinal), over `changes`: built once, so
    /// that its metrics (spills) are this node's.
    sort: Arc<SortExec>,
    /// Per partition, the stream of its changes, taken by the sort's input.
    changes: Arc<Vec<ChangesSlot>>,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

type ChangesSlot = Arc<Mutex<Option<SendableRecordBatchStream>>>;

impl SortChangesByFileExec {
    /// The changes of `input` sorted by data file, every one of them in
    /// `files` (the files the target scan reads).
    pub fn try_new(input: Arc<dyn ExecutionPlan>, files: Arc<FileOrdinals>) -> Result<Self> {
        let schema = input.schema();
        let file_index = schema.index_of(FILE_COLUMN)?;
        let ordering = |name: &str| {
            LexOrdering::new([PhysicalSortExpr::new(
                Arc::new(Column::new(name, file_index)),
                SortOptions {
                    descending: false,
                    nulls_first: true,
                },
            )])
            .ok_or_else(|| internal("SortChangesByFileExec: no ordering"))
        };
        let mut sorted_fields: Vec<Field> =
            schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        sorted_fields[file_index] = Field::new(ORDINAL_COLUMN, DataType::UInt32, false);
        let sorted_schema = Arc::new(Schema::new_with_metadata(
            sorted_fields,
            schema.metadata().clone(),
        ));
        let partitions = input.output_partitioning().partition_count();
        let changes: Vec<ChangesSlot> = (0..partitions).map(|_| Default::default()).collect();
        let streams = changes
            .iter()
            .map(|slot| {
                Arc::new(ChangesOfPartition {
                    schema: sorted_schema.clone(),
                    slot: slot.clone(),
                }) as Arc<dyn PartitionStream>
            })
            .collect();
        let changes_input = StreamingTableExec::try_new(
            sorted_schema,
            streams,
            None,
            Vec::<LexOrdering>::new(),
            false,
            None,
        )?;
        let sort = Arc::new(
            SortExec::new(ordering(ORDINAL_COLUMN)?, Arc::new(changes_input))
                .with_preserve_partitioning(true),
        );
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new_with_orderings(schema, [ordering(FILE_COLUMN)?]),
            input.output_partitioning().clone(),
            EmissionType::Both,
            Boundedness::Bounded,
        ));
        Ok(Self {
            input,
            files,
            file_index,
            sort,
            changes: Arc::new(changes),
            properties,
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }

    /// The data files the changes are sorted by, in order.
    pub fn files(&self) -> impl Iterator<Item = &str> {
        self.files.paths()
    }
}

impl fmt::Debug for SortChangesByFileExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SortChangesByFileExec")
            .field("input", &self.input)
            .finish()
    }
}

impl DisplayAs for SortChangesByFileExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "SortChangesByFileExec: changes sorted by {FILE_COLUMN}, inserts passed through"
        )
    }
}

impl ExecutionPlan for SortChangesByFileExec {
    fn name(&self) -> &str {
        "SortChangesByFileExec"
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![false]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let input = children
            .pop()
            .ok_or_else(|| internal("SortChangesByFileExec needs one child"))?;
        Ok(Arc::new(Self::try_new(input, self.files.clone())?))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let schema = self.schema();
        let input = self.input.execute(partition, context.clone())?;
        let slot = self
            .changes
            .get(partition)
            .ok_or_else(|| internal(format!("SortChangesByFileExec: no partition {partition}")))?;
        let sorted_schema = self.sort.schema();
        let changes = RecordBatchReceiverStreamBuilder::new(sorted_schema.clone(), CHANNEL_BATCHES);
        let changes_tx = changes.tx();
        *slot
            .lock()
            .map_err(|_| internal("SortChangesByFileExec: poisoned"))? = Some(changes.build());
        let mut sorted = self.sort.execute(partition, context)?;

        let passed = MetricBuilder::new(&self.metrics).counter("inserts_unsorted", partition);
        let keys = SortKeys {
            files: self.files.clone(),
            index: self.file_index,
            schema: schema.clone(),
            sorted: sorted_schema,
        };
        let mut output = RecordBatchReceiverStreamBuilder::new(schema, CHANNEL_BATCHES);
        let inserts_tx = output.tx();
        let split_keys = keys.clone();
        output.spawn(async move { split(input, split_keys, inserts_tx, changes_tx, passed).await });
        let sorted_tx = output.tx();
        output.spawn(async move {
            while let Some(batch) = sorted.next().await {
                let batch = batch.and_then(|b| keys.with_paths(b));
                if sorted_tx.send(batch).await.is_err() {
                    break;
                }
            }
            Ok(())
        });
        Ok(output.build())
    }

    fn metrics(&self) -> Option<MetricsSet> {
        let mut metrics = self.metrics.clone_inner();
        for metric in self.sort.metrics().iter().flat_map(|m| m.iter()) {
            metrics.push(metric.clone());
        }
        Some(metrics)
    }
}

/// How a change's `_file` becomes the sort's key and back.
#[derive(Clone)]
struct SortKeys {
    files: Arc<FileOrdinals>,
    /// Where `_file` (or its ordinal) is in a batch.
    index: usize,
    /// The operator's output schema (`_file` in the input's type).
    schema: SchemaRef,
    /// The sort's schema (the ordinal in place of `_file`).
    sorted: SchemaRef,
}

impl SortKeys {
    /// `changes` with its paths replaced by their ordinals.
    fn with_ordinals(&self, changes: RecordBatch) -> Result<RecordBatch> {
        let ordinals = self.files.ordinals_of(changes.column(self.index))?;
        let mut columns = changes.columns().to_vec();
        columns[self.index] = Arc::new(ordinals) as ArrayRef;
        Ok(RecordBatch::try_new(self.sorted.clone(), columns)?)
    }

    /// Sorted `changes` with their ordinals turned back into paths.
    fn with_paths(&self, changes: RecordBatch) -> Result<RecordBatch> {
        let ordinals = changes.column(self.index).as_primitive::<UInt32Type>();
        let paths = self
            .files
            .paths_of(ordinals, self.schema.field(self.index).data_type())?;
        let mut columns = changes.columns().to_vec();
        columns[self.index] = paths;
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }
}

/// Sends `input`'s inserted rows to `inserts`, its changes to `changes`
/// (the sort, with their paths as ordinals), in the order they come;
/// `changes` is dropped at the end, which ends the sort's input.
async fn split(
    mut input: SendableRecordBatchStream,
    keys: SortKeys,
    inserts: Sender<Result<RecordBatch>>,
    changes: Sender<Result<RecordBatch>>,
    passed: Count,
) -> Result<()> {
    while let Some(batch) = input.next().await {
        let batch = match batch {
            Ok(batch) => batch,
            Err(e) => {
                // The consumer reads the error before any sorted row.
                let _ = inserts.send(Err(e)).await;
                return Ok(());
            }
        };
        let file = batch
            .column_by_name(FILE_COLUMN)
            .ok_or_else(|| internal(format!("SortChangesByFileExec: no {FILE_COLUMN} column")))?;
        let (inserted, changed) = match file.null_count() {
            0 => (None, Some(batch)),
            n if n == batch.num_rows() => (Some(batch), None),
            _ => (
                Some(filter_record_batch(&batch, &is_null(file)?)?),
                Some(filter_record_batch(&batch, &is_not_null(file)?)?),
            ),
        };
        if let Some(inserted) = inserted.filter(|b| b.num_rows() > 0) {
            passed.add(inserted.num_rows());
            if inserts.send(Ok(inserted)).await.is_err() {
                return Ok(());
            }
        }
        if let Some(changed) = changed.filter(|b| b.num_rows() > 0) {
            let changed = keys.with_ordinals(changed);
            if changes.send(changed).await.is_err() {
                // The sort stopped: its error reaches the output.
                return Ok(());
            }
        }
    }
    Ok(())
}

/// The sort's input for one partition: the changes stream its `execute`
/// left in the slot.
struct ChangesOfPartition {
    schema: SchemaRef,
    slot: ChangesSlot,
}

impl fmt::Debug for ChangesOfPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ChangesOfPartition")
    }
}

impl PartitionStream for ChangesOfPartition {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let taken = self.slot.lock().ok().and_then(|mut slot| slot.take());
        taken.unwrap_or_else(|| {
            Box::pin(RecordBatchStreamAdapter::new(
                self.schema.clone(),
                futures::stream::once(async {
                    Err(internal(
                        "SortChangesByFileExec: a partition's changes were read twice",
                    ))
                }),
            ))
        })
    }
}
