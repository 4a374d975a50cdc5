//! The engines that run a physical plan: `Local` executes it in this
//! process with DataFusion; `Cluster` ships it to a Ballista scheduler
//! (through `ShippedPlanNode`), which runs its stages as tasks on executors —
//! either the in-process cluster's scheduler or, in the `icemerge-scheduler`
//! process, the scheduler service that process runs (`Scheduler`).
//!
//! - `shipped_plan`: how a physical plan travels to Ballista;
//! - `in_process_cluster`: a scheduler and executors in this process;
//! - `job_control`: the running job, and cancelling it;
//! - `task_ledger`: finished tasks and executor liveness;
//! - `stage_figures`: per-stage figures of a run, from the stage probes;
//! - `task_tracker`: tasks running now (a failed job is drained before
//!   cleanup);
//! - `executor_watch`: a lost executor's tasks run again on the executors
//!   left.

mod executor_watch;
mod in_process_cluster;
mod job_control;
mod series_scans;
mod shipped_plan;
mod stage_figures;
mod task_ledger;
mod task_tracker;
pub(crate) mod tcp_incoming;

use ballista_core::config::BALLISTA_JOB_NAME;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use arrow::record_batch::RecordBatch;
use ballista_core::execution_plans::DistributedQueryExec;
use ballista_core::extension::SessionConfigExt;
use datafusion::error::Result;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::streaming::StreamingTableExec;
use datafusion::physical_plan::{collect, ExecutionPlan};
use datafusion::prelude::SessionContext;
use datafusion_proto::protobuf::LogicalPlanNode;
use futures::TryStreamExt;

use executor_watch::watch_executors;
use icemerge_proto::error::cancelled;
use shipped_plan::ShippedPlanNode;

pub use in_process_cluster::InProcessCluster;
pub use job_control::{cancel_job, ActiveStatement, JobControl, CANCELLED};
pub use shipped_plan::{scheduler_session_builder, IcemergeLogicalCodec, ShippedPlanQueryPlanner};
pub use stage_figures::{now_nanos, task_totals, FigureCollector, TaskTotals};
pub use task_ledger::{ExecutorLiveness, TaskLedger, TaskRecord};
pub use task_tracker::{TaskTracker, TrackingEngine};

/// How long executors keep a finished job's output (Ballista's finished
/// job data clean-up, set by the scheduler process): the rows of a query
/// run with `Rows::Stream` can be read for this long after its job ended.
pub const RESULT_RETENTION: Duration = Duration::from_secs(900);

/// How long a failed job's remaining tasks are waited for.
const JOB_DRAIN_LIMIT: Duration = Duration::from_secs(600);

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
    /// An executor silent this long during a job is taken as lost (one
    /// whose port refuses connections at once): its tasks run again on the
    /// executors left (`executor_watch`).
    pub executor_timeout: Duration,
}

/// Whether `plan` reads the session's own state (`information_schema`,
/// `SHOW`: streams DataFusion builds in memory from the session), which
/// only the coordinator has and no plan can carry: such a plan runs there,
/// never as a job.
fn reads_session_state(plan: &Arc<dyn ExecutionPlan>) -> bool {
    plan.as_any().is::<StreamingTableExec>() || plan.children().into_iter().any(reads_session_state)
}

/// The name of the Ballista jobs of the session `session_id`.
pub fn job_name(session_id: &str) -> String {
    format!("icemerge session {session_id}")
}

/// A running engine.
#[derive(Clone)]
pub enum Engine {
    Local,
    Cluster(Arc<InProcessCluster>),
    Scheduler(SchedulerTarget),
}

/// How a run hands back a plan's rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rows {
    /// All of them, gathered here.
    Gather,
    /// On a Ballista engine, only the first batch once the job has ended;
    /// the others stay on the executors until `PlanRun::rest` is read (a
    /// Flight SQL client's `DoGet`). The local engine gathers.
    Stream,
}

/// What running a plan produced.
pub struct PlanRun {
    /// The rows gathered: all of them, or the first batch when `rest`
    /// follows.
    pub batches: Vec<RecordBatch>,
    /// The rows after `batches`, fetched from the executors as it is read
    /// (`Rows::Stream` only; the job has ended by then).
    pub rest: Option<SendableRecordBatchStream>,
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
        rows: Rows,
    ) -> Result<PlanRun> {
        control.check()?;
        let scheduler_url = self.scheduler_url().filter(|_| !reads_session_state(&plan));
        match scheduler_url {
            None => Ok(PlanRun {
                batches: collect(plan, ctx.task_ctx()).await?,
                rest: None,
                job_id: None,
            }),
            Some(scheduler_url) => {
                let logical = ShippedPlanNode::new(plan)?.into_logical_plan();
                // The job carries its session's name, so a session finds
                // its job on the scheduler before it learns the job's id.
                let config = ctx
                    .copied_config()
                    .set_str(BALLISTA_JOB_NAME, &job_name(&ctx.session_id()));
                let exec = Arc::new(DistributedQueryExec::<LogicalPlanNode>::with_extension(
                    scheduler_url.clone(),
                    config.ballista_config(),
                    logical,
                    Arc::new(IcemergeLogicalCodec::default()),
                    ctx.session_id(),
                ));
                let task_ctx = Arc::new(TaskContext::default().with_session_config(config));
                *control.running.lock().expect("job lock") = Some(exec.clone());
                // The job runs to its end before the first batch comes.
                let run = async {
                    match rows {
                        Rows::Gather => Ok((collect(exec.clone(), task_ctx).await?, None)),
                        Rows::Stream => {
                            let mut stream = exec.execute(0, task_ctx)?;
                            Ok(match stream.try_next().await? {
                                Some(first) => (vec![first], Some(stream)),
                                None => (vec![], None),
                            })
                        }
                    }
                };
                let batches = match self {
                    Engine::Scheduler(target) => {
                        watch_executors(target, &scheduler_url, exec.clone(), run).await
                    }
                    _ => run.await,
                };
                *control.running.lock().expect("job lock") = None;
                let job_id = exec.job_id();
                if let (Engine::Cluster(cluster), Err(_), Some(job)) = (self, &batches, &job_id) {
                    // A failed job's other tasks may still be writing files:
                    // the caller's cleanup must come after them.
                    if !cluster.running.fail_and_drain(job, JOB_DRAIN_LIMIT).await {
                        tracing::warn!(
                            "tasks of failed job {job} still run after {JOB_DRAIN_LIMIT:?}"
                        );
                    }
                }
                if control.cancel_requested.load(Ordering::SeqCst) && batches.is_err() {
                    return Err(cancelled(format!(
                        "{CANCELLED} (job {})",
                        job_id.unwrap_or_default()
                    )));
                }
                let (batches, rest) = batches?;
                Ok(PlanRun {
                    batches,
                    rest,
                    job_id,
                })
            }
        }
    }
}
