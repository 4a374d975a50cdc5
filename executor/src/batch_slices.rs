//! `BatchSlicesExec`: its input's batches, those of more rows than the
//! session's batch size cut into batches of that size, each copied out of
//! the large one as it is pulled (a slice would still count, and carry
//! into the exchange's reservation and its spill, the whole large
//! batch's buffers).
//!
//! A hash join emits the build-side rows that found no match (a MERGE's
//! inserted source rows, when it builds on the source) as ONE batch at its
//! end: 10M inserted rows are one 10M-row batch. Every operator above it
//! would copy it whole (the classification's projections, the exchange,
//! which spills a batch it cannot hold as a whole). Sliced right above the
//! join, each slice is classified, routed and written on its own, and the
//! join's batch is freed as its last slice is consumed.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use arrow::array::UInt64Array;
use arrow::compute::take_record_batch;
use datafusion::error::Result;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use futures::StreamExt;
use icemerge_proto::error::internal;

/// Batches above the batch size, sliced.
#[derive(Debug)]
pub struct BatchSlicesExec {
    input: Arc<dyn ExecutionPlan>,
}

impl BatchSlicesExec {
    pub fn new(input: Arc<dyn ExecutionPlan>) -> Self {
        Self { input }
    }
}

impl DisplayAs for BatchSlicesExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "BatchSlicesExec: batches above batch_size sliced")
    }
}

impl ExecutionPlan for BatchSlicesExec {
    fn name(&self) -> &str {
        "BatchSlicesExec"
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
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
            .ok_or_else(|| internal("BatchSlicesExec needs one child"))?;
        Ok(Arc::new(Self::new(input)))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let size = context.session_config().batch_size().max(1);
        let input = self.input.execute(partition, context)?;
        let schema = input.schema();
        let sliced = input.flat_map(move |batch| match batch {
            Ok(batch) if batch.num_rows() > size => {
                let rows = batch.num_rows();
                futures::stream::iter((0..rows).step_by(size).map(move |offset| {
                    let end = (offset + size).min(rows);
                    let indices = UInt64Array::from_iter_values(offset as u64..end as u64);
                    Ok(take_record_batch(&batch, &indices)?)
                }))
                .left_stream()
            }
            other => futures::stream::once(async { other }).right_stream(),
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, sliced)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, RecordBatch};
    use arrow::datatypes::SchemaRef;
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
    use datafusion::prelude::SessionConfig;

    /// The batches as given (a memory source would cut them itself).
    #[derive(Debug)]
    struct Given(SchemaRef, Vec<RecordBatch>);

    impl PartitionStream for Given {
        fn schema(&self) -> &SchemaRef {
            &self.0
        }

        fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
            let batches = self.1.clone().into_iter().map(Ok);
            Box::pin(RecordBatchStreamAdapter::new(
                self.0.clone(),
                futures::stream::iter(batches),
            ))
        }
    }

    #[tokio::test]
    async fn a_batch_above_the_batch_size_comes_out_in_copies_of_that_size() {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let big = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int64Array::from_iter_values(0..2500))],
        )
        .unwrap();
        let small = big.slice(0, 10);
        let given = Arc::new(Given(schema.clone(), vec![big, small]));
        let input = Arc::new(
            StreamingTableExec::try_new(schema, vec![given], None, vec![], false, None).unwrap(),
        );
        let context = Arc::new(
            TaskContext::default().with_session_config(SessionConfig::new().with_batch_size(1024)),
        );
        let batches: Vec<RecordBatch> = BatchSlicesExec::new(input)
            .execute(0, context)
            .unwrap()
            .map(|b| b.unwrap())
            .collect()
            .await;
        let rows: Vec<usize> = batches.iter().map(|b| b.num_rows()).collect();
        assert_eq!(rows, vec![1024, 1024, 452, 10]);
        let values: Vec<i64> = batches
            .iter()
            .take(3)
            .flat_map(|b| {
                let column = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                column.values().to_vec()
            })
            .collect();
        assert_eq!(values, (0..2500).collect::<Vec<i64>>());
        // Copies, not slices of the 2500-row buffer.
        assert!(
            batches[0].get_array_memory_size() < 2500 * 8,
            "{}",
            batches[0].get_array_memory_size()
        );
    }
}
