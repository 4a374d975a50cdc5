//! The scheduler's gRPC service as executors see it: Ballista's own, with
//! every task status an executor reports recorded first in the
//! coordinator's [`TaskLedger`] (operator metrics for EXPLAIN ANALYZE and
//! `Session::last_metrics`) and every call counted as a sign of life in
//! [`ExecutorLiveness`]; every finished task is also counted in the
//! [`SchedulerMetrics`]. Registration waits until the executor's gRPC port
//! listens (Ballista registers an executor before its service is up).

use std::net::SocketAddr;

use ballista_core::error::BallistaError;
use ballista_core::serde::protobuf::scheduler_grpc_server::SchedulerGrpc;
use ballista_core::serde::protobuf::{self, task_status, TaskStatus};
use ballista_scheduler::scheduler_server::SchedulerServer;
use datafusion::physical_plan::metrics::MetricsSet;
use datafusion_proto::protobuf::{LogicalPlanNode, PhysicalPlanNode};
use futures::StreamExt;
use tonic::{Request, Response, Status};

use super::metrics::SchedulerMetrics;
use crate::engine::{ExecutorLiveness, TaskLedger, TaskRecord};

/// Ballista's scheduler service with every reported task status recorded
/// in a [`TaskLedger`] first.
#[derive(Clone)]
pub(super) struct LedgerScheduler {
    inner: SchedulerServer<LogicalPlanNode, PhysicalPlanNode>,
    ledger: TaskLedger,
    liveness: ExecutorLiveness,
    metrics: SchedulerMetrics,
}

impl LedgerScheduler {
    pub(super) fn new(
        inner: SchedulerServer<LogicalPlanNode, PhysicalPlanNode>,
        ledger: TaskLedger,
        liveness: ExecutorLiveness,
        metrics: SchedulerMetrics,
    ) -> Self {
        Self {
            inner,
            ledger,
            liveness,
            metrics,
        }
    }

    fn record(&self, executor_id: &str, statuses: &[TaskStatus]) {
        // An empty update is the executor watch asking Ballista to offer
        // tasks again (see `executor_watch`), not a sign of life.
        if !statuses.is_empty() {
            self.liveness.seen(executor_id);
        }
        for status in statuses {
            let Some(task_status::Status::Successful(done)) = &status.status else {
                continue;
            };
            let executor_id = if done.executor_id.is_empty() {
                executor_id.to_string()
            } else {
                done.executor_id.clone()
            };
            let metrics: Vec<MetricsSet> = status
                .metrics
                .iter()
                .filter_map(|m| m.clone().try_into().ok())
                .collect();
            tracing::info!(
                executor = %executor_id,
                job = %status.job_id,
                stage = status.stage_id,
                partition = status.partition_id,
                "task finished"
            );
            let task = TaskRecord {
                executor_id,
                job_id: status.job_id.clone(),
                stage_id: status.stage_id as usize,
                partition: status.partition_id as usize,
                metrics,
            };
            self.metrics.task_finished(&task);
            self.ledger.record(task);
        }
    }
}

#[tonic::async_trait]
impl SchedulerGrpc for LedgerScheduler {
    type ExecuteQueryPushStream = <SchedulerServer<LogicalPlanNode, PhysicalPlanNode> as SchedulerGrpc>::ExecuteQueryPushStream;

    async fn poll_work(
        &self,
        request: Request<protobuf::PollWorkParams>,
    ) -> std::result::Result<Response<protobuf::PollWorkResult>, Status> {
        let params = request.get_ref();
        let executor = params
            .metadata
            .as_ref()
            .map(|m| m.id.clone())
            .unwrap_or_default();
        self.record(&executor, &params.task_status);
        self.inner.poll_work(request).await
    }

    async fn register_executor(
        &self,
        request: Request<protobuf::RegisterExecutorParams>,
    ) -> std::result::Result<Response<protobuf::RegisterExecutorResult>, Status> {
        if let Some(metadata) = &request.get_ref().metadata {
            self.liveness.seen(&metadata.id);
            // In push mode the scheduler connects to the executor's gRPC
            // service as it registers, and Ballista's executor registers
            // right after starting that service: wait until it listens.
            // Its address also lets the executor watch see at once that
            // the process is gone (a refused connection).
            if metadata.grpc_port != 0 {
                let host = metadata
                    .host
                    .clone()
                    .or_else(|| request.remote_addr().map(|a| a.ip().to_string()))
                    .or_else(|| {
                        request
                            .extensions()
                            .get::<axum::extract::ConnectInfo<SocketAddr>>()
                            .map(|c| c.0.ip().to_string())
                    });
                if let Some(host) = host {
                    let port = metadata.grpc_port as u16;
                    wait_until_listening(&host, port).await;
                    self.liveness.registered(&metadata.id, Some((host, port)));
                }
            }
        }
        self.inner.register_executor(request).await
    }

    async fn heart_beat_from_executor(
        &self,
        request: Request<protobuf::HeartBeatParams>,
    ) -> std::result::Result<Response<protobuf::HeartBeatResult>, Status> {
        self.liveness.seen(&request.get_ref().executor_id);
        self.inner.heart_beat_from_executor(request).await
    }

    async fn update_task_status(
        &self,
        mut request: Request<protobuf::UpdateTaskStatusParams>,
    ) -> std::result::Result<Response<protobuf::UpdateTaskStatusResult>, Status> {
        let params = request.get_mut();
        params.task_status.iter_mut().for_each(cancelled_as_killed);
        self.record(&params.executor_id, &params.task_status);
        self.inner.update_task_status(request).await
    }

    async fn create_update_session(
        &self,
        request: Request<protobuf::CreateUpdateSessionParams>,
    ) -> std::result::Result<Response<protobuf::CreateUpdateSessionResult>, Status> {
        self.inner.create_update_session(request).await
    }

    async fn remove_session(
        &self,
        request: Request<protobuf::RemoveSessionParams>,
    ) -> std::result::Result<Response<protobuf::RemoveSessionResult>, Status> {
        self.inner.remove_session(request).await
    }

    async fn execute_query_push(
        &self,
        request: Request<protobuf::ExecuteQueryParams>,
    ) -> std::result::Result<Response<Self::ExecuteQueryPushStream>, Status> {
        let liveness = self.liveness.clone();
        let statuses = self.inner.execute_query_push(request).await?.into_inner();
        let statuses = statuses.map(move |item| {
            item.map(|mut result| {
                one_location_per_output(&mut result, &liveness);
                result
            })
        });
        Ok(Response::new(Box::pin(statuses)))
    }

    async fn execute_query(
        &self,
        request: Request<protobuf::ExecuteQueryParams>,
    ) -> std::result::Result<Response<protobuf::ExecuteQueryResult>, Status> {
        self.inner.execute_query(request).await
    }

    async fn get_job_status(
        &self,
        request: Request<protobuf::GetJobStatusParams>,
    ) -> std::result::Result<Response<protobuf::GetJobStatusResult>, Status> {
        let mut response = self.inner.get_job_status(request).await?;
        one_location_per_output(response.get_mut(), &self.liveness);
        Ok(response)
    }

    async fn get_job_metrics(
        &self,
        request: Request<protobuf::GetJobMetricsParams>,
    ) -> std::result::Result<Response<protobuf::GetJobMetricsResult>, Status> {
        self.inner.get_job_metrics(request).await
    }

    async fn executor_stopped(
        &self,
        request: Request<protobuf::ExecutorStoppedParams>,
    ) -> std::result::Result<Response<protobuf::ExecutorStoppedResult>, Status> {
        self.inner.executor_stopped(request).await
    }

    async fn cancel_job(
        &self,
        request: Request<protobuf::CancelJobParams>,
    ) -> std::result::Result<Response<protobuf::CancelJobResult>, Status> {
        SchedulerGrpc::cancel_job(&self.inner, request).await
    }

    async fn clean_job_data(
        &self,
        request: Request<protobuf::CleanJobDataParams>,
    ) -> std::result::Result<Response<protobuf::CleanJobDataResult>, Status> {
        self.inner.clean_job_data(request).await
    }
}

/// A task Ballista cancelled (its stage rolled back after an executor was
/// lost, or its job cancelled) reports the execution error "Cancelled",
/// which Ballista 53 takes for a failure of the stage when the stage's next
/// attempt has not started yet: the job would fail although every task
/// was going to run again. It is reported as killed instead, which the
/// stage's next attempt ignores (and a stage still running re-queues).
fn cancelled_as_killed(status: &mut TaskStatus) {
    let Some(task_status::Status::Failed(failed)) = &mut status.status else {
        return;
    };
    let cancelled = protobuf::FailedTask::from(BallistaError::Cancelled).error;
    if failed.error == cancelled {
        failed.retryable = true;
        failed.count_to_failures = false;
        failed.failed_reason = Some(protobuf::failed_task::FailedReason::TaskKilled(
            protobuf::TaskKilled {},
        ));
    }
}

/// A finished job's output, each output of each final task listed once.
/// When Ballista 53 re-runs the final stage after an executor was lost, the
/// job keeps the locations its first attempt's tasks reported (the lost
/// executor's among them) beside the new attempt's: fetched as they are, a
/// task's output (a MERGE's fragments) would be read twice, or from a dead
/// executor. One location per (task, output partition) is kept: one on a
/// live executor, the last reported.
fn one_location_per_output(result: &mut protobuf::GetJobStatusResult, liveness: &ExecutorLiveness) {
    let Some(protobuf::job_status::Status::Successful(job)) =
        result.status.as_mut().and_then(|s| s.status.as_mut())
    else {
        return;
    };
    let key = |l: &protobuf::PartitionLocation| {
        (
            l.map_partition_id,
            l.partition_id
                .as_ref()
                .map(|p| (p.stage_id, p.partition_id)),
        )
    };
    let live = |l: &protobuf::PartitionLocation| {
        l.executor_meta
            .as_ref()
            .is_some_and(|e| liveness.known(&e.id))
    };
    let mut kept: Vec<protobuf::PartitionLocation> = vec![];
    for location in std::mem::take(&mut job.partition_location) {
        match kept.iter().position(|k| key(k) == key(&location)) {
            Some(i) if live(&location) || !live(&kept[i]) => kept[i] = location,
            Some(_) => {}
            None => kept.push(location),
        }
    }
    job.partition_location = kept;
}

/// Waits (up to 10 s) until `host:port` accepts TCP connections.
async fn wait_until_listening(host: &str, port: u16) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while tokio::net::TcpStream::connect((host, port)).await.is_err()
        && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
