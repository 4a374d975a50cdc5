//! What the coordinator knows of tasks and executors: every finished task
//! with its operator metrics (the `TaskLedger`, read by EXPLAIN ANALYZE and
//! `Session::last_metrics`) and when each executor was last heard from
//! (`ExecutorLiveness`, read by the executor watch).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ballista_executor::execution_engine::QueryStageExecutor;
use ballista_executor::metrics::ExecutorMetricsCollector;
use datafusion::physical_plan::metrics::MetricsSet;

/// One task run by an executor, as recorded after it finished.
#[derive(Debug, Clone)]
pub struct TaskRecord {
    pub executor_id: String,
    pub job_id: String,
    pub stage_id: usize,
    pub partition: usize,
    /// One metrics set per operator of the stage plan, top-down.
    pub metrics: Vec<MetricsSet>,
}

/// Shared list of finished tasks.
#[derive(Debug, Default, Clone)]
pub struct TaskLedger(Arc<Mutex<Vec<TaskRecord>>>);

impl TaskLedger {
    /// Records one finished task.
    pub fn record(&self, task: TaskRecord) {
        self.0.lock().expect("ledger lock").push(task);
    }

    /// Tasks of one job, in completion order.
    pub fn tasks_of(&self, job_id: &str) -> Vec<TaskRecord> {
        self.0
            .lock()
            .expect("ledger lock")
            .iter()
            .filter(|t| t.job_id == job_id)
            .cloned()
            .collect()
    }
}

/// When each executor was last heard from (registration, heartbeat, task
/// status), as seen by the `icemerge-scheduler` process.
#[derive(Debug, Default, Clone)]
pub struct ExecutorLiveness(Arc<Mutex<HashMap<String, Instant>>>);

impl ExecutorLiveness {
    /// Records that `executor_id` was heard from now.
    pub fn seen(&self, executor_id: &str) {
        if executor_id.is_empty() {
            return;
        }
        self.0
            .lock()
            .expect("liveness lock")
            .insert(executor_id.to_string(), Instant::now());
    }

    /// Executors heard from within `within`.
    pub fn alive(&self, within: Duration) -> Vec<String> {
        self.0
            .lock()
            .expect("liveness lock")
            .iter()
            .filter(|(_, t)| t.elapsed() <= within)
            .map(|(id, _)| id.clone())
            .collect()
    }
}

/// Records every task an in-process executor finishes in the ledger.
pub(super) struct LedgerCollector {
    pub(super) executor_id: String,
    pub(super) ledger: TaskLedger,
}

impl ExecutorMetricsCollector for LedgerCollector {
    fn record_stage(
        &self,
        job_id: &str,
        stage_id: usize,
        partition: usize,
        plan: Arc<dyn QueryStageExecutor>,
    ) {
        self.ledger.record(TaskRecord {
            executor_id: self.executor_id.clone(),
            job_id: job_id.to_string(),
            stage_id,
            partition,
            metrics: plan.collect_plan_metrics(),
        });
    }
}
