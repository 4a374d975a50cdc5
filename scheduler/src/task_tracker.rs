//! Which tasks of which job run on the in-process cluster's executors.
//!
//! Ballista fails a job as soon as one of its tasks fails, while its other
//! tasks may still be running on executors (pull scheduling cannot cancel
//! them). A writer task that finishes after the statement has removed its
//! files would leave data files nobody references; so after a failed job the
//! engine waits here until none of the job's tasks runs, and only then is the
//! statement's cleanup done. Executors run every task through
//! [`TrackingEngine`], which counts it while it runs.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use ballista_core::serde::protobuf::ShuffleWritePartition;
use ballista_executor::execution_engine::{
    DefaultExecutionEngine, ExecutionEngine, QueryStageExecutor,
};
use datafusion::error::Result;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::metrics::MetricsSet;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionConfig;

/// Running tasks per job.
#[derive(Debug, Default, Clone)]
pub struct TaskTracker(Arc<Mutex<HashMap<String, usize>>>);

impl TaskTracker {
    /// Tasks of `job_id` running now.
    pub fn running(&self, job_id: &str) -> usize {
        self.0
            .lock()
            .expect("tracker lock")
            .get(job_id)
            .copied()
            .unwrap_or(0)
    }

    /// Waits until no task of `job_id` runs (at most `limit`); returns
    /// whether that happened.
    pub async fn wait_idle(&self, job_id: &str, limit: Duration) -> bool {
        let start = Instant::now();
        while self.running(job_id) > 0 {
            if start.elapsed() > limit {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        true
    }

    fn enter(&self, job_id: &str) -> RunningGuard {
        *self
            .0
            .lock()
            .expect("tracker lock")
            .entry(job_id.to_string())
            .or_default() += 1;
        RunningGuard {
            tracker: self.clone(),
            job_id: job_id.to_string(),
        }
    }
}

/// Counts one running task until dropped (also when the task is aborted).
struct RunningGuard {
    tracker: TaskTracker,
    job_id: String,
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        let mut jobs = self.tracker.0.lock().expect("tracker lock");
        if let Some(n) = jobs.get_mut(&self.job_id) {
            *n -= 1;
            if *n == 0 {
                jobs.remove(&self.job_id);
            }
        }
    }
}

/// Ballista's execution engine, counting every task in a [`TaskTracker`].
pub struct TrackingEngine {
    inner: DefaultExecutionEngine,
    tracker: TaskTracker,
}

impl TrackingEngine {
    pub fn new(tracker: TaskTracker) -> Self {
        Self {
            inner: DefaultExecutionEngine::new(),
            tracker,
        }
    }
}

impl ExecutionEngine for TrackingEngine {
    fn create_query_stage_exec(
        &self,
        job_id: String,
        stage_id: usize,
        partition_id: usize,
        plan: Arc<dyn ExecutionPlan>,
        work_dir: &str,
        config: &SessionConfig,
    ) -> Result<Arc<dyn QueryStageExecutor>> {
        let inner = self.inner.create_query_stage_exec(
            job_id.clone(),
            stage_id,
            partition_id,
            plan,
            work_dir,
            config,
        )?;
        Ok(Arc::new(TrackedStage {
            inner,
            job_id,
            tracker: self.tracker.clone(),
        }))
    }
}

/// A stage task that counts itself as running while it executes.
#[derive(Debug)]
struct TrackedStage {
    inner: Arc<dyn QueryStageExecutor>,
    job_id: String,
    tracker: TaskTracker,
}

impl fmt::Display for TrackedStage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

#[async_trait]
impl QueryStageExecutor for TrackedStage {
    async fn execute_query_stage(
        &self,
        input_partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<Vec<ShuffleWritePartition>> {
        let _running = self.tracker.enter(&self.job_id);
        self.inner
            .execute_query_stage(input_partition, context)
            .await
    }

    fn collect_plan_metrics(&self) -> Vec<MetricsSet> {
        self.inner.collect_plan_metrics()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waits_until_every_task_of_the_job_has_ended() {
        let tracker = TaskTracker::default();
        let a = tracker.enter("job");
        let b = tracker.enter("job");
        let other = tracker.enter("other");
        assert_eq!(tracker.running("job"), 2);
        assert!(!tracker.wait_idle("job", Duration::from_millis(30)).await);
        drop(a);
        let waiter = {
            let tracker = tracker.clone();
            tokio::spawn(async move { tracker.wait_idle("job", Duration::from_secs(5)).await })
        };
        tokio::time::sleep(Duration::from_millis(30)).await;
        drop(b);
        assert!(waiter.await.unwrap());
        assert_eq!(tracker.running("job"), 0);
        assert_eq!(tracker.running("other"), 1);
        drop(other);
    }
}
