//! The statement a session is executing and its Ballista job, so that
//! another task (Ctrl-C, a Flight SQL client going away) can cancel it: a
//! job not yet submitted never starts, a running one is cancelled on the
//! scheduler (push mode: executors abort its tasks).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ballista_core::execution_plans::DistributedQueryExec;
use ballista_core::serde::protobuf::scheduler_grpc_client::SchedulerGrpcClient;
use ballista_core::serde::protobuf::CancelJobParams;
use datafusion::error::Result;
use datafusion_proto::protobuf::LogicalPlanNode;
use icemerge_proto::error::{cancelled, io_error};

/// The Ballista job a session is running, so another task can cancel it.
#[derive(Default)]
pub struct JobControl {
    pub(super) running: Mutex<Option<Arc<DistributedQueryExec<LogicalPlanNode>>>>,
    /// A statement is executing.
    active: AtomicBool,
    /// Cancellation was asked for the executing statement.
    pub(super) cancel_requested: AtomicBool,
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

    /// Whether cancellation was asked for the executing statement.
    pub fn is_cancel_requested(&self) -> bool {
        self.cancel_requested.load(Ordering::SeqCst)
    }

    /// Fails with "statement cancelled" once cancellation was asked for.
    pub fn check(&self) -> Result<()> {
        if self.cancel_requested.load(Ordering::SeqCst) {
            return Err(cancelled(CANCELLED));
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

/// Asks the scheduler at `scheduler_url` to cancel `job_id` (its running
/// tasks are stopped; the job fails with "Cancelled").
pub async fn cancel_job(scheduler_url: &str, job_id: &str) -> Result<()> {
    let mut client = SchedulerGrpcClient::connect(scheduler_url.to_string())
        .await
        .map_err(|e| {
            io_error(format!(
                "cannot reach the scheduler to cancel job {job_id}: {e}"
            ))
        })?;
    client
        .cancel_job(CancelJobParams {
            job_id: job_id.to_string(),
        })
        .await
        .map_err(|e| io_error(format!("cannot cancel job {job_id}: {}", e.message())))?;
    tracing::info!(job = %job_id, "job cancelled");
    Ok(())
}
