//! A Ballista task's own figures, reported beside its operators' metrics:
//! the shuffle output it wrote (bytes and rows of its files, as Ballista's
//! shuffle writer returns them) and when it started and ended. They travel
//! in the task's first metrics set (its shuffle writer's), marked by the
//! [`TASK`] counter: the list keeps one set per operator of the stage plan,
//! as Ballista expects when it combines a stage's metrics with its plan.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use ballista_core::serde::protobuf::ShuffleWritePartition;
use ballista_executor::execution_engine::QueryStageExecutor;
use datafusion::error::Result;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::metrics::{Count, Metric, MetricValue, MetricsSet, Timestamp};

/// Counter naming the task's own set (value 1).
pub const TASK: &str = "icemerge_task";
/// Bytes of the shuffle files the task wrote.
pub const SHUFFLE_BYTES: &str = "task_shuffle_bytes";
/// Rows of the shuffle files the task wrote.
pub const SHUFFLE_ROWS: &str = "task_shuffle_rows";

/// A task's stage executor, measured.
#[derive(Debug)]
pub struct MeasuredStage {
    inner: Arc<dyn QueryStageExecutor>,
    shuffle_bytes: Count,
    shuffle_rows: Count,
    start: Timestamp,
    end: Timestamp,
}

impl MeasuredStage {
    pub fn new(inner: Arc<dyn QueryStageExecutor>) -> Self {
        Self {
            inner,
            shuffle_bytes: Count::new(),
            shuffle_rows: Count::new(),
            start: Timestamp::new(),
            end: Timestamp::new(),
        }
    }

    fn task_set(&self) -> MetricsSet {
        let mut set = MetricsSet::new();
        let marker = Count::new();
        marker.add(1);
        let values = [
            MetricValue::Count {
                name: TASK.into(),
                count: marker,
            },
            MetricValue::Count {
                name: SHUFFLE_BYTES.into(),
                count: self.shuffle_bytes.clone(),
            },
            MetricValue::Count {
                name: SHUFFLE_ROWS.into(),
                count: self.shuffle_rows.clone(),
            },
            MetricValue::StartTimestamp(self.start.clone()),
            MetricValue::EndTimestamp(self.end.clone()),
        ];
        for value in values {
            set.push(Arc::new(Metric::new(value, None)));
        }
        set
    }
}

impl fmt::Display for MeasuredStage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.inner, f)
    }
}

#[async_trait]
impl QueryStageExecutor for MeasuredStage {
    async fn execute_query_stage(
        &self,
        input_partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<Vec<ShuffleWritePartition>> {
        self.start.record();
        let result = self
            .inner
            .execute_query_stage(input_partition, context)
            .await;
        self.end.record();
        if let Ok(partitions) = &result {
            for p in partitions {
                self.shuffle_bytes.add(p.num_bytes as usize);
                self.shuffle_rows.add(p.num_rows as usize);
            }
        }
        result
    }

    fn collect_plan_metrics(&self) -> Vec<MetricsSet> {
        // Into the stage's top set (its shuffle writer's): Ballista matches
        // a task's sets one to one with the stage plan's operators.
        let mut sets = self.inner.collect_plan_metrics();
        let own = self.task_set();
        match sets.first_mut() {
            Some(top) => own.iter().for_each(|m| top.push(m.clone())),
            None => sets.push(own),
        }
        sets
    }
}
