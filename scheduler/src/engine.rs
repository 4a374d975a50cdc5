//! The engines that run a physical plan: `Local` executes it in this
//! process with DataFusion; `Cluster` ships it to a Ballista scheduler
//! (through `ShippedPlanNode`), which runs its stages as tasks on executors —
//! either the in-process cluster's scheduler or, in the `icemerge-scheduler`
//! process, the scheduler service that process runs (`Scheduler`).

use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use ballista_core::execution_plans::DistributedQueryExec;
use ballista_core::extension::SessionConfigExt;
use datafusion::error::Result;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::{collect, ExecutionPlan};
use datafusion::prelude::SessionContext;
use datafusion_proto::protobuf::LogicalPlanNode;

use crate::cluster::{InProcessCluster, TaskLedger};
use crate::shipped_plan::{IcemergeLogicalCodec, ShippedPlanNode};

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
}

/// A running engine.
pub enum Engine {
    Local,
    Cluster(Arc<InProcessCluster>),
    Scheduler(SchedulerTarget),
}

/// What running a plan produced.
pub struct PlanRun {
    pub batches: Vec<RecordBatch>,
    /// The Ballista job id (cluster engine only).
    pub job_id: Option<String>,
}

impl Engine {
    /// The URL of the Ballista scheduler jobs are submitted to.
    fn scheduler_url(&self) -> Option<String> {
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

    /// Runs `plan` to completion and returns its output.
    pub async fn run(&self, ctx: &SessionContext, plan: Arc<dyn ExecutionPlan>) -> Result<PlanRun> {
        match self.scheduler_url() {
            None => Ok(PlanRun {
                batches: collect(plan, ctx.task_ctx()).await?,
                job_id: None,
            }),
            Some(scheduler_url) => {
                let logical = ShippedPlanNode::new(plan)?.into_logical_plan();
                let config = ctx.copied_config();
                let exec = Arc::new(DistributedQueryExec::<LogicalPlanNode>::with_extension(
                    scheduler_url,
                    config.ballista_config(),
                    logical,
                    Arc::new(IcemergeLogicalCodec::default()),
                    ctx.session_id(),
                ));
                let task_ctx = Arc::new(TaskContext::default().with_session_config(config));
                let batches = collect(exec.clone(), task_ctx).await;
                let job_id = exec.job_id();
                Ok(PlanRun {
                    batches: batches?,
                    job_id,
                })
            }
        }
    }
}
