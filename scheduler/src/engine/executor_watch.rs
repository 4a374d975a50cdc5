//! Executor loss during a job: Ballista 53 can leave a job stalled after an
//! executor dies, so the coordinator watches the executors that were alive
//! when the job started and cancels the job when one falls silent.

use std::sync::Arc;
use std::time::Duration;

use arrow::record_batch::RecordBatch;
use ballista_core::execution_plans::DistributedQueryExec;
use datafusion::error::Result;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::collect;
use datafusion_proto::protobuf::LogicalPlanNode;

use super::job_control::cancel_job;
use super::SchedulerTarget;
use icemerge_proto::error::io_error;

/// Runs the job while watching the executors that were alive when it
/// started: if one falls silent for longer than the executor timeout, the
/// job is cancelled and the statement fails with an error naming it.
pub(super) async fn watch_executors(
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
    Err(io_error(format!(
        "executor {} stopped responding during job {job_id} (no heartbeat for {}s); \
         the job was cancelled and nothing was committed: run the statement again",
        lost.join(", "),
        timeout.as_secs()
    )))
}
