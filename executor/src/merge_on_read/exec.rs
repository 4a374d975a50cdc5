//! `MergeOnReadWriterExec`, the plan node of a MERGE's writer (stage D) on
//! a table whose `write.merge.mode` is `merge-on-read`: its properties,
//! display, metrics set and wire fields. Each partition runs a
//! `PartitionSink` (`sink.rs`); the output is the partition's commit
//! fragment (`icemerge_proto::fragment`).

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use datafusion::error::Result;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
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

use super::sink::PartitionSink;
use crate::file_io::{file_io_from_props, StorageProps};
use crate::merge_writer::metrics::WriterMetrics;
use icemerge_proto::error::internal;

/// Per-partition merge-on-read writer of a MERGE.
#[derive(Debug, Clone)]
pub struct MergeOnReadWriterExec {
    pub table: String,
    pub metadata: Arc<TableMetadata>,
    pub file_io_props: StorageProps,
    pub write_id: String,
    pub input: Arc<dyn ExecutionPlan>,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl MergeOnReadWriterExec {
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
            properties,
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }
}

impl DisplayAs for MergeOnReadWriterExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "MergeOnReadWriterExec: table={}, mode=merge-on-read, \
             position_deletes=per-data-file, duplicate_match_check=per-file",
            self.table
        )
    }
}

impl ExecutionPlan for MergeOnReadWriterExec {
    fn name(&self) -> &str {
        "MergeOnReadWriterExec"
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
            .ok_or_else(|| internal("MergeOnReadWriterExec needs one child"))?;
        Ok(Arc::new(Self::new(
            self.table.clone(),
            self.metadata.clone(),
            self.file_io_props.clone(),
            self.write_id.clone(),
            input,
        )))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let input = self.input.execute(partition, context)?;
        let metadata = self.metadata.clone();
        let file_io = file_io_from_props(&self.file_io_props);
        let prefix = crate::cleanup::task_file_prefix(&self.write_id, partition);
        let m = WriterMetrics::new(&self.metrics, partition);
        let stream = futures::stream::once(async move {
            PartitionSink::try_new(metadata, file_io, prefix, m)
                .await?
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
