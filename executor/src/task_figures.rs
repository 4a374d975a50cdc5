//! A Ballista task's own figures, reported beside its operators' metrics:
//! the shuffle output it wrote (the rows Ballista's shuffle writer returns,
//! and the bytes of the files it wrote, measured on disk: the sort-based
//! writer returns the in-memory size of its batches before their LZ4
//! compression instead) and when it started and ended. They travel
//! in the task's first metrics set (its shuffle writer's), marked by the
//! [`TASK`] counter: the list keeps one set per operator of the stage plan,
//! as Ballista expects when it combines a stage's metrics with its plan.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use ballista_core::execution_plans::create_shuffle_path;
use ballista_core::serde::protobuf::ShuffleWritePartition;
use ballista_executor::execution_engine::QueryStageExecutor;
use datafusion::error::Result;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::metrics::{Count, Metric, MetricValue, MetricsSet, Timestamp};

/// Counter naming the task's own set (value 1).
pub const TASK: &str = "icemerge_task";
/// Bytes of the shuffle files the task wrote, on disk.
pub const SHUFFLE_BYTES: &str = "task_shuffle_bytes";
/// Rows of the shuffle files the task wrote.
pub const SHUFFLE_ROWS: &str = "task_shuffle_rows";

/// A task's stage executor, measured.
#[derive(Debug)]
pub struct MeasuredStage {
    inner: Arc<dyn QueryStageExecutor>,
    /// Where the task's shuffle files are: the executor's work dir, the
    /// job and the stage.
    work_dir: String,
    job_id: String,
    stage_id: usize,
    shuffle_bytes: Count,
    shuffle_rows: Count,
    start: Timestamp,
    end: Timestamp,
}

impl MeasuredStage {
    pub fn new(
        inner: Arc<dyn QueryStageExecutor>,
        work_dir: &str,
        job_id: String,
        stage_id: usize,
    ) -> Self {
        Self {
            inner,
            work_dir: work_dir.to_string(),
            job_id,
            stage_id,
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

impl MeasuredStage {
    /// The bytes of the shuffle files behind `partitions`, each file once
    /// (the sort-based writer puts every partition of a task in one file);
    /// Ballista's own figure for a partition whose file cannot be read.
    fn bytes_on_disk(&self, partitions: &[ShuffleWritePartition]) -> u64 {
        let mut files = HashSet::new();
        partitions
            .iter()
            .map(|p| {
                let path = create_shuffle_path(
                    &self.work_dir,
                    &self.job_id,
                    self.stage_id,
                    p.partition_id as usize,
                    p.file_id,
                    p.is_sort_shuffle,
                );
                match path {
                    Ok(path) if !files.insert(path.clone()) => 0,
                    Ok(path) => std::fs::metadata(&path).map_or(p.num_bytes, |m| m.len()),
                    Err(_) => p.num_bytes,
                }
            })
            .sum()
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
            self.shuffle_bytes
                .add(self.bytes_on_disk(partitions) as usize);
            for p in partitions {
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
