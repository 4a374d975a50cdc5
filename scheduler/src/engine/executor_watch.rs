//! Executor loss during a job on a running scheduler: the job goes on on
//! the executors that are left.
//!
//! The coordinator watches the executors that were alive when the job
//! started. One is lost when its gRPC port refuses connections (the process
//! is gone: seen within a tick) or when it has been silent for the executor
//! timeout (a hung process). A lost executor is reported to Ballista as
//! stopped, which removes it and puts its tasks, and the map outputs it
//! held that later stages still need, back to run. Ballista 53 offers
//! re-queued tasks only when some task status arrives, so the watch then
//! asks for an offer round on every tick (an empty status update in the
//! name of a live executor) until the job ends. Re-run tasks are safe: a
//! writer task attempt writes files of its own, rows go to the same writer
//! on every attempt, and the commit keeps one attempt per partition and
//! deletes the others' files. The job fails when no executor is left.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ballista_core::execution_plans::DistributedQueryExec;
use ballista_core::serde::protobuf::scheduler_grpc_client::SchedulerGrpcClient;
use ballista_core::serde::protobuf::{ExecutorStoppedParams, UpdateTaskStatusParams};
use datafusion::error::Result;
use datafusion_proto::protobuf::LogicalPlanNode;

use super::job_control::cancel_job;
use super::SchedulerTarget;
use icemerge_proto::error::io_error;

/// How often the watch looks at the executors.
const TICK: Duration = Duration::from_millis(500);

/// Runs the job (`run`, driving `exec` until its job has ended) while
/// watching the executors that were alive when it started (see the module
/// doc).
pub(super) async fn watch_executors<T>(
    target: &SchedulerTarget,
    scheduler_url: &str,
    exec: Arc<DistributedQueryExec<LogicalPlanNode>>,
    run: impl Future<Output = Result<T>>,
) -> Result<T> {
    let timeout = target.executor_timeout;
    let mut watched = target.liveness.alive(timeout);
    let mut lost_so_far: Vec<String> = vec![];
    // Connected at the first loss (again on the next tick if that
    // failed), then kept for the reports and the offer rounds.
    let mut scheduler: Option<SchedulerClient> = None;
    tokio::pin!(run);
    loop {
        tokio::select! {
            result = &mut run => return result,
            _ = tokio::time::sleep(TICK) => {}
        }
        let alive = target.liveness.alive(timeout);
        let mut lost = vec![];
        for id in &watched {
            if !alive.contains(id) || refuses_connections(target, id).await {
                lost.push(id.clone());
            }
        }
        watched.retain(|id| !lost.contains(id));
        let job_id = exec.job_id().unwrap_or_default();
        if scheduler.is_none() && !(lost.is_empty() && lost_so_far.is_empty()) {
            match connect(scheduler_url).await {
                Ok(client) => scheduler = Some(client),
                Err(e) => tracing::warn!("cannot report the lost executors: {e}"),
            }
        }
        for id in &lost {
            tracing::warn!(
                job = %job_id,
                executor = %id,
                "executor lost during the job: its tasks run again on the executors left"
            );
            target.liveness.forget(id);
            if let Some(client) = scheduler.as_mut() {
                if let Err(e) = report_stopped(client, id).await {
                    tracing::warn!(executor = %id, "cannot report the lost executor: {e}");
                }
            }
        }
        lost_so_far.extend(lost);
        if lost_so_far.is_empty() {
            continue;
        }
        let Some(live) = watched.first() else {
            return no_executor_left(scheduler_url, &job_id, &lost_so_far, &mut run).await;
        };
        let Some(client) = scheduler.as_mut() else {
            continue;
        };
        if let Err(e) = offer_tasks(client, live).await {
            tracing::debug!("asking for a task offer round failed: {e}");
        }
    }
}

/// Whether `executor`'s gRPC service refuses connections: nothing listens
/// there any more. Unknown address or no answer in time: not known to be
/// dead (the heartbeat timeout decides).
async fn refuses_connections(target: &SchedulerTarget, executor: &str) -> bool {
    let Some((host, port)) = target.liveness.address(executor) else {
        return false;
    };
    let connect = tokio::net::TcpStream::connect((host.as_str(), port));
    matches!(
        tokio::time::timeout(TICK, connect).await,
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused
    )
}

type SchedulerClient = SchedulerGrpcClient<tonic::transport::Channel>;

async fn connect(scheduler_url: &str) -> Result<SchedulerClient> {
    SchedulerGrpcClient::connect(scheduler_url.to_string())
        .await
        .map_err(|e| {
            io_error(format!(
                "cannot reach the scheduler at {scheduler_url}: {e}"
            ))
        })
}

/// Tells Ballista that `executor` stopped: it is removed and the stages
/// that need its tasks or outputs run them again.
async fn report_stopped(client: &mut SchedulerClient, executor: &str) -> Result<()> {
    client
        .executor_stopped(ExecutorStoppedParams {
            executor_id: executor.to_string(),
            reason: "lost during a job (icemerge executor watch)".to_string(),
        })
        .await
        .map_err(|e| io_error(format!("executor_stopped: {e}")))?;
    Ok(())
}

/// Makes Ballista offer its waiting tasks to the executors: an empty task
/// status update from a live executor (no task changes state).
async fn offer_tasks(client: &mut SchedulerClient, live_executor: &str) -> Result<()> {
    client
        .update_task_status(UpdateTaskStatusParams {
            executor_id: live_executor.to_string(),
            task_status: vec![],
        })
        .await
        .map_err(|e| io_error(format!("update_task_status: {e}")))?;
    Ok(())
}

/// Every executor of the job is lost: the job is cancelled and the
/// statement fails naming them.
async fn no_executor_left<T>(
    scheduler_url: &str,
    job_id: &str,
    lost: &[String],
    run: &mut (impl Future<Output = Result<T>> + Unpin),
) -> Result<T> {
    tracing::warn!(job = %job_id, lost = ?lost, "no executor left for the job: cancelling it");
    if !job_id.is_empty() {
        cancel_job(scheduler_url, job_id).await?;
        // Let the job end before the statement cleans up after it.
        let _ = tokio::time::timeout(Duration::from_secs(30), run).await;
    }
    Err(io_error(format!(
        "no executor left for job {job_id}: executor {} stopped responding or exited; \
         the job was cancelled and nothing was committed: start executors and run the \
         statement again",
        lost.join(", "),
    )))
}
