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
/// status), and where its gRPC service listens, as seen by the
/// `icemerge-scheduler` process.
#[derive(Debug, Default, Clone)]
pub struct ExecutorLiveness(Arc<Mutex<HashMap<String, Heard>>>);

#[derive(Debug, Clone)]
struct Heard {
    at: Instant,
    /// Host and port of the executor's gRPC service, once it registered.
    address: Option<(String, u16)>,
}

impl ExecutorLiveness {
    /// Records that `executor_id` was heard from now.
    pub fn seen(&self, executor_id: &str) {
        if executor_id.is_empty() {
            return;
        }
        let mut heard = self.0.lock().expect("liveness lock");
        heard
            .entry(executor_id.to_string())
            .and_modify(|h| h.at = Instant::now())
            .or_insert(Heard {
                at: Instant::now(),
                address: None,
            });
    }

    /// Records that `executor_id` registered, its gRPC service at `address`.
    pub fn registered(&self, executor_id: &str, address: Option<(String, u16)>) {
        if executor_id.is_empty() {
            return;
        }
        self.0.lock().expect("liveness lock").insert(
            executor_id.to_string(),
            Heard {
                at: Instant::now(),
                address,
            },
        );
    }

    /// Forgets `executor_id` (it was found dead): it is no longer alive
    /// until it registers again.
    pub fn forget(&self, executor_id: &str) {
        self.0.lock().expect("liveness lock").remove(executor_id);
    }

    /// Whether `executor_id` registered and was not found dead since.
    pub fn known(&self, executor_id: &str) -> bool {
        self.0
            .lock()
            .expect("liveness lock")
            .contains_key(executor_id)
    }

    /// Where `executor_id`'s gRPC service listens, if known.
    pub fn address(&self, executor_id: &str) -> Option<(String, u16)> {
        self.0
            .lock()
            .expect("liveness lock")
            .get(executor_id)
            .and_then(|h| h.address.clone())
    }

    /// Executors heard from within `within`.
    pub fn alive(&self, within: Duration) -> Vec<String> {
        self.0
            .lock()
            .expect("liveness lock")
            .iter()
            .filter(|(_, h)| h.at.elapsed() <= within)
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
