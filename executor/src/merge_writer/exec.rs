//! `CopyOnWriteWriterExec`, the plan node of a MERGE's writer (stage D): its
//! properties, display, metrics set and wire fields. Each partition runs a
//! `PartitionSink` (`sink.rs`); the output is the partition's commit
//! fragment (`icemerge_proto::fragment`).

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use datafusion::error::Result;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::{Distribution, EquivalenceProperties};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, Partitioning,
    PlanProperties,
};
use iceberg::spec::TableMetadata;
use icemerge_proto::fragment;
use icemerge_proto::merge_rows::FILE_COLUMN;

use super::metrics::WriterMetrics;
use super::sink::PartitionSink;
use super::TargetFiles;
use crate::file_io::{file_io_from_props, StorageProps};
use icemerge_proto::error::internal;

/// Whether `input` comes sorted by the row id's data file.
fn sorted_by_file(input: &Arc<dyn ExecutionPlan>) -> bool {
    input
        .output_ordering()
        .map(|ordering| ordering.first())
        .and_then(|first| first.expr.as_any().downcast_ref::<Column>())
        .is_some_and(|column| column.name() == FILE_COLUMN)
}

/// Per-partition copy-on-write writer of a MERGE.
#[derive(Debug, Clone)]
pub struct CopyOnWriteWriterExec {
    pub table: String,
    pub metadata: Arc<TableMetadata>,
    pub file_io_props: StorageProps,
    pub write_id: String,
    pub input: Arc<dyn ExecutionPlan>,
    /// Record counts and delete files of the data files the target scan reads.
    pub targets: TargetFiles,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl CopyOnWriteWriterExec {
    pub fn new(
        table: String,
        metadata: Arc<TableMetadata>,
        file_io_props: impl Into<StorageProps>,
        write_id: String,
        input: Arc<dyn ExecutionPlan>,
    ) -> Self {
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(fragment::schema()),
            Partitioning::UnknownPartitioning(input.output_partitioning().partition_count()),
            EmissionType::Final,
            Boundedness::Bounded,
        ));
        Self {
            table,
            metadata,
            file_io_props: file_io_props.into(),
            write_id,
            input,
            targets: TargetFiles::default(),
            properties,
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }

    /// The same writer, knowing each data file's record count and delete
    /// files.
    pub fn with_targets(mut self, targets: TargetFiles) -> Self {
        self.targets = targets;
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
        let input = children
            .pop()
            .ok_or_else(|| internal("CopyOnWriteWriterExec needs one child"))?;
        Ok(Arc::new(
            Self::new(
                self.table.clone(),
                self.metadata.clone(),
                self.file_io_props.clone(),
                self.write_id.clone(),
                input,
            )
            .with_targets(self.targets.clone()),
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
        let prefix = crate::cleanup::task_file_prefix(&self.write_id, partition);
        let batch_size = context.session_config().batch_size();
        let m = WriterMetrics::new(&self.metrics, partition);
        let targets = self.targets.clone();
        let table = self.table.clone();
        let sorted = sorted_by_file(&self.input);
        let stream = futures::stream::once(async move {
            PartitionSink::try_new(table, metadata, file_io, prefix, batch_size, targets, m)
                .await?
                .with_input_sorted_by_file(sorted)
                .run(input)
                .await
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            fragment::schema(),
            stream,
        )))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}
