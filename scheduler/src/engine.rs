//! The engines that run a physical plan: `Local` executes it in this
//! process with DataFusion; `Cluster` ships it to a Ballista scheduler
//! (through `ShippedPlanNode`), which runs its stages as tasks on executors —
//! either the in-process cluster's scheduler or, in the `icemerge-scheduler`
//! process, the scheduler service that process runs (`Scheduler`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow::record_batch::RecordBatch;
use ballista_core::execution_plans::DistributedQueryExec;
use ballista_core::extension::SessionConfigExt;
use ballista_core::serde::protobuf::scheduler_grpc_client::SchedulerGrpcClient;
use ballista_core::serde::protobuf::CancelJobParams;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::{collect, ExecutionPlan};
use datafusion::prelude::SessionContext;
use datafusion_proto::protobuf::LogicalPlanNode;

use crate::cluster::{ExecutorLiveness, InProcessCluster, TaskLedger};
use crate::shipped_plan::{IcemergeLogicalCodec, ShippedPlanNode};

/// How long a failed job's remaining tasks are waited for.
const JOB_DRAIN_LIMIT: std::time::Duration = std::time::Duration::from_secs(600);

/// Which engine runs statements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EngineKind {
    /// DataFusion in this process (the default).
    #[default]
    Local,
    /// Ballista: an in-process scheduler and executors.
    Cluster,
}

/// A Ballista scheduler that is already running (not started by the
/// session), with the ledger its task status updates are recorded in.
#[derive(Debug, Clone)]
pub struct SchedulerTarget {
    /// `http://HOST:PORT` of the scheduler's gRPC service.
    pub url: String,
    /// Finished tasks as reported to that scheduler by its executors.
    pub ledger: TaskLedger,
    /// When each executor was last heard from.
    pub liveness: ExecutorLiveness,
    /// An executor silent this long during a job is taken as lost: the job
    /// is cancelled and the statement fails (Ballista 53 can stall a job
    /// whose executor died instead of re-running its tasks).
    pub executor_timeout: Duration,
}

/// A running engine.
pub enum Engine {
    Local,
    Cluster(Arc<InProcessCluster>),
    Scheduler(SchedulerTarget),
}

/// The Ballista job a session is running, so another task can cancel it.
#[derive(Default)]
pub struct JobControl {
    running: Mutex<Option<Arc<DistributedQueryExec<LogicalPlanNode>>>>,
    /// A statement is executing.
    active: AtomicBool,
    /// Cancellation was asked for the executing statement.
    cancel_requested: AtomicBool,
}

/// Marks a statement as executing until dropped.
pub struct ActiveStatement<'a>(&'a JobControl);

impl Drop for ActiveStatement<'_> {
    fn drop(&mut self) {
        self.0.active.store(false, Ordering::SeqCst);
    }
}

/// The message of a statement stopped by [`JobControl::cancel`].
pub const CANCELLED: &str = "statement cancelled";

impl JobControl {
    /// Marks the start of a statement (clearing any earlier cancellation).
    pub fn begin(&self) -> ActiveStatement<'_> {
        self.cancel_requested.store(false, Ordering::SeqCst);
        self.active.store(true, Ordering::SeqCst);
        ActiveStatement(self)
    }

    /// The Ballista job id of the job running now, once submitted.
    pub fn running_job_id(&self) -> Option<String> {
        self.running
            .lock()
            .expect("job lock")
            .as_ref()
            .and_then(|exec| exec.job_id())
    }

    fn check(&self) -> Result<()> {
        if self.cancel_requested.load(Ordering::SeqCst) {
            return Err(DataFusionError::Execution(CANCELLED.into()));
        }
        Ok(())
    }

    /// Cancels the executing statement: a job not yet submitted will not
    /// start, a running job is cancelled on the scheduler (its running
    /// tasks are stopped; the statement then fails and discards what it
    /// wrote). Waits up to `wait` for the job to be submitted. Returns the
    /// cancelled job's id, or None when no job was cancelled (no statement,
    /// or its job had already finished).
    pub async fn cancel(&self, scheduler_url: &str, wait: Duration) -> Result<Option<String>> {
        self.cancel_requested.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + wait;
        loop {
            if !self.active.load(Ordering::SeqCst) {
                return Ok(None);
            }
            let job = self
                .running
                .lock()
                .expect("job lock")
                .as_ref()
                .and_then(|exec| exec.job_id());
            if let Some(job_id) = job {
                cancel_job(scheduler_url, &job_id).await?;
                return Ok(Some(job_id));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// What running a plan produced.
pub struct PlanRun {
    pub batches: Vec<RecordBatch>,
    /// The Ballista job id (cluster engine only).
    pub job_id: Option<String>,
}

impl Engine {
    /// The URL of the Ballista scheduler jobs are submitted to.
    pub fn scheduler_url(&self) -> Option<String> {
        match self {
            Engine::Local => None,
            Engine::Cluster(cluster) => Some(cluster.scheduler_url()),
            Engine::Scheduler(target) => Some(target.url.clone()),
        }
    }

    /// The ledger of finished tasks (Ballista engines only).
    pub fn ledger(&self) -> Option<&TaskLedger> {
        match self {
            Engine::Local => None,
            Engine::Cluster(cluster) => Some(&cluster.ledger),
            Engine::Scheduler(target) => Some(&target.ledger),
        }
    }

    /// Runs `plan` to completion and returns its output; a Ballista job is
    /// registered in `control` while it runs.
    pub async fn run(
        &self,
        ctx: &SessionContext,
        plan: Arc<dyn ExecutionPlan>,
        control: &JobControl,
    ) -> Result<PlanRun> {
        control.check()?;
        match self.scheduler_url() {
            None => Ok(PlanRun {
                batches: collect(plan, ctx.task_ctx()).await?,
                job_id: None,
            }),
            Some(scheduler_url) => {
                let logical = ShippedPlanNode::new(plan)?.into_logical_plan();
                let config = ctx.copied_config();
                let exec = Arc::new(DistributedQueryExec::<LogicalPlanNode>::with_extension(
                    scheduler_url.clone(),
                    config.ballista_config(),
                    logical,
                    Arc::new(IcemergeLogicalCodec::default()),
                    ctx.session_id(),
                ));
                let task_ctx = Arc::new(TaskContext::default().with_session_config(config));
                *control.running.lock().expect("job lock") = Some(exec.clone());
                let batches = match self {
                    Engine::Scheduler(target) => {
                        watch_executors(target, &scheduler_url, exec.clone(), task_ctx).await
                    }
                    _ => collect(exec.clone(), task_ctx).await,
                };
                *control.running.lock().expect("job lock") = None;
                let job_id = exec.job_id();
                if let (Engine::Cluster(cluster), Err(_), Some(job)) = (self, &batches, &job_id) {
                    // A failed job's other tasks may still be writing files:
                    // the caller's cleanup must come after them.
                    if !cluster.running.wait_idle(job, JOB_DRAIN_LIMIT).await {
                        tracing::warn!(
                            "tasks of failed job {job} still run after {JOB_DRAIN_LIMIT:?}"
                        );
                    }
                }
                if control.cancel_requested.load(Ordering::SeqCst) && batches.is_err() {
                    return Err(DataFusionError::Execution(format!(
                        "{CANCELLED} (job {})",
                        job_id.unwrap_or_default()
                    )));
                }
                Ok(PlanRun {
                    batches: batches?,
                    job_id,
                })
            }
        }
    }
}

/// Asks the scheduler at `scheduler_url` to cancel `job_id` (its running
/// tasks are stopped; the job fails with "Cancelled").
pub async fn cancel_job(scheduler_url: &str, job_id: &str) -> Result<()> {
    let mut client = SchedulerGrpcClient::connect(scheduler_url.to_string())
        .await
        .map_err(|e| {
            DataFusionError::Execution(format!(
                "cannot reach the scheduler to cancel job {job_id}: {e}"
            ))
        })?;
    client
        .cancel_job(CancelJobParams {
            job_id: job_id.to_string(),
        })
        .await
        .map_err(|e| {
            DataFusionError::Execution(format!("cannot cancel job {job_id}: {}", e.message()))
        })?;
    tracing::info!(job = %job_id, "job cancelled");
    Ok(())
}

/// Runs the job while watching the executors that were alive when it
/// started: if one falls silent for longer than the executor timeout, the
/// job is cancelled and the statement fails with an error naming it.
async fn watch_executors(
    target: &SchedulerTarget,
    scheduler_url: &str,
    exec: Arc<DistributedQueryExec<LogicalPlanNode>>,
    task_ctx: Arc<TaskContext>,
) -> Result<Vec<RecordBatch>> {
    let timeout = target.executor_timeout;
    let watched = target.liveness.alive(timeout);
    let run = collect(exec.clone(), task_ctx);
    tokio::pin!(run);
    let lost = loop {
        tokio::select! {
            result = &mut run => return result,
            _ = tokio::time::sleep(Duration::from_millis(500)) => {
                let alive = target.liveness.alive(timeout);
                let lost: Vec<String> = watched
                    .iter()
                    .filter(|id| !alive.contains(id))
                    .cloned()
                    .collect();
                if !lost.is_empty() {
                    break lost;
                }
            }
        }
    };
    let job_id = exec.job_id().unwrap_or_default();
    tracing::warn!(job = %job_id, lost = ?lost, "executor lost during the job: cancelling it");
    if !job_id.is_empty() {
        cancel_job(scheduler_url, &job_id).await?;
        // Let the job end before the statement cleans up after it.
        let _ = tokio::time::timeout(Duration::from_secs(30), &mut run).await;
    }
    Err(DataFusionError::Execution(format!(
        "executor {} stopped responding during job {job_id} (no heartbeat for {}s); \
         the job was cancelled and nothing was committed: run the statement again",
        lost.join(", "),
        timeout.as_secs()
    )))
}
