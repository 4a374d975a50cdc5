//! The two engines that run a physical plan: `Local` executes it in this
//! process with DataFusion; `Cluster` ships it to a Ballista scheduler
//! (through `ShippedPlanNode`), which runs its stages as tasks on executors.

use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use ballista_core::execution_plans::DistributedQueryExec;
use ballista_core::extension::SessionConfigExt;
use datafusion::error::Result;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::{collect, ExecutionPlan};
use datafusion::prelude::SessionContext;
use datafusion_proto::protobuf::LogicalPlanNode;

use crate::cluster::InProcessCluster;
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

/// A running engine.
pub enum Engine {
    Local,
    Cluster(Arc<InProcessCluster>),
}

/// What running a plan produced.
pub struct PlanRun {
    pub batches: Vec<RecordBatch>,
    /// The Ballista job id (cluster engine only).
    pub job_id: Option<String>,
}

impl Engine {
    /// Runs `plan` to completion and returns its output.
    pub async fn run(&self, ctx: &SessionContext, plan: Arc<dyn ExecutionPlan>) -> Result<PlanRun> {
        match self {
            Engine::Local => Ok(PlanRun {
                batches: collect(plan, ctx.task_ctx()).await?,
                job_id: None,
            }),
            Engine::Cluster(cluster) => {
                let logical = ShippedPlanNode::new(plan)?.into_logical_plan();
                let config = ctx.copied_config();
                let exec = Arc::new(DistributedQueryExec::<LogicalPlanNode>::with_extension(
                    cluster.scheduler_url(),
                    config.ballista_config(),
                    logical,
                    Arc::new(IcemergeLogicalCodec::default()),
                    ctx.session_id(),
                ));
                let task_ctx = Arc::new(TaskContext::default().with_session_config(config));
                let batches = collect(exec.clone(), task_ctx).await;
                let job_id = exec.job_id();
                if let (Err(_), Some(job)) = (&batches, &job_id) {
                    // A failed job's other tasks may still be writing files:
                    // the caller's cleanup must come after them.
                    if !cluster.running.wait_idle(job, JOB_DRAIN_LIMIT).await {
                        tracing::warn!(
                            "tasks of failed job {job} still run after {JOB_DRAIN_LIMIT:?}"
                        );
                    }
                }
                Ok(PlanRun {
                    batches: batches?,
                    job_id,
                })
            }
        }
    }
}
