//! Which tasks of which job run on the in-process cluster's executors.
//!
//! Ballista fails a job as soon as one of its tasks fails, while its other
//! tasks may still be running on executors (pull scheduling cannot cancel
//! them). A writer task that finishes after the statement has removed its
//! files would leave data files nobody references; so after a failed job the
//! engine marks it failed here (its tasks that have not started yet never
//! will) and waits until none of its tasks runs; only then is the
//! statement's cleanup done. Executors run every task through
//! [`TrackingEngine`], which counts it while it runs. (Pushed tasks are also
//! cancelled when a job fails; the wait covers the time a cancel takes.)

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use ballista_core::serde::protobuf::ShuffleWritePartition;
use ballista_executor::execution_engine::{ExecutionEngine, QueryStageExecutor};
use datafusion::error::Result;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::metrics::MetricsSet;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionConfig;
use icemerge_proto::error::cancelled;

/// Running tasks per job, and the jobs that failed (whose tasks must not
/// start any more).
#[derive(Debug, Default, Clone)]
pub struct TaskTracker(Arc<Mutex<Jobs>>);

#[derive(Debug, Default)]
struct Jobs {
    running: HashMap<String, usize>,
    failed: HashSet<String>,
}

impl TaskTracker {
    /// Tasks of `job_id` running now.
    pub fn running(&self, job_id: &str) -> usize {
        self.0
            .lock()
            .expect("tracker lock")
            .running
            .get(job_id)
            .copied()
            .unwrap_or(0)
    }

    /// Marks `job_id` failed, so that none of its tasks starts any more, and
    /// waits until none of them runs (at most `limit`); returns whether that
    /// happened.
    pub async fn fail_and_drain(&self, job_id: &str, limit: Duration) -> bool {
        self.0
            .lock()
            .expect("tracker lock")
            .failed
            .insert(job_id.to_string());
        self.wait_idle(job_id, limit).await
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

    /// Counts a task of `job_id` as running; `None` when the job failed.
    fn enter(&self, job_id: &str) -> Option<RunningGuard> {
        let mut jobs = self.0.lock().expect("tracker lock");
        if jobs.failed.contains(job_id) {
            return None;
        }
        *jobs.running.entry(job_id.to_string()).or_default() += 1;
        Some(RunningGuard {
            tracker: self.clone(),
            job_id: job_id.to_string(),
        })
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
        if let Some(n) = jobs.running.get_mut(&self.job_id) {
            *n -= 1;
            if *n == 0 {
                jobs.running.remove(&self.job_id);
            }
        }
    }
}

/// An execution engine counting every task it runs in a [`TaskTracker`].
pub struct TrackingEngine {
    inner: Arc<dyn ExecutionEngine>,
    tracker: TaskTracker,
}

impl TrackingEngine {
    /// Tasks run by `inner`, counted in `tracker`.
    pub fn new(tracker: TaskTracker, inner: Arc<dyn ExecutionEngine>) -> Self {
        Self { inner, tracker }
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
        let Some(_running) = self.tracker.enter(&self.job_id) else {
            return Err(cancelled(format!(
                "job {} failed; its task is not started",
                self.job_id
            )));
        };
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
        let a = tracker.enter("job").unwrap();
        let b = tracker.enter("job").unwrap();
        let other = tracker.enter("other").unwrap();
        assert_eq!(tracker.running("job"), 2);
        assert!(!tracker.wait_idle("job", Duration::from_millis(30)).await);
        drop(a);
        let waiter = {
            let tracker = tracker.clone();
            tokio::spawn(async move { tracker.fail_and_drain("job", Duration::from_secs(5)).await })
        };
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(
            tracker.enter("job").is_none(),
            "no task of a failed job starts"
        );
        drop(b);
        assert!(waiter.await.unwrap());
        assert_eq!(tracker.running("job"), 0);
        assert_eq!(tracker.running("other"), 1);
        assert!(tracker.enter("other").is_some());
        drop(other);
    }
}
