//! The `icemerge-scheduler` process: a Ballista scheduler service (gRPC for
//! executors and the coordinator's job submission, plus Ballista's REST API
//! on the same port) wired with icemerge's codecs and query planner, and the
//! Flight SQL front door (`flight_sql`) whose session plans statements, runs
//! them as jobs on this scheduler and commits them — the coordinator.
//!
//! Every task status an executor reports to this scheduler is recorded in a
//! [`TaskLedger`] before Ballista handles it, so the coordinator's session
//! sums operator metrics per job exactly as with the in-process cluster.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use ballista_core::config::TaskSchedulingPolicy;
use ballista_core::serde::protobuf::scheduler_grpc_server::{SchedulerGrpc, SchedulerGrpcServer};
use ballista_core::serde::protobuf::{self, task_status, TaskStatus};
use ballista_scheduler::cluster::BallistaCluster;
use ballista_scheduler::config::SchedulerConfig;
use ballista_scheduler::scheduler_process::create_scheduler;
use ballista_scheduler::scheduler_server::SchedulerServer;
use ballista_scheduler::SessionBuilder;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::SessionStateBuilder;
use datafusion::physical_plan::metrics::MetricsSet;
use datafusion::prelude::SessionConfig;
use datafusion_proto::protobuf::{LogicalPlanNode, PhysicalPlanNode};
use icemerge_executor::codec::IcemergePhysicalCodec;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tonic::{Request, Response, Status};

use crate::catalog::CatalogOptions;
use crate::cluster::{ExecutorLiveness, TaskLedger, TaskRecord};
use crate::engine::SchedulerTarget;
use crate::flight_sql::{serve_flight_sql, Auth, StageProgress};
use crate::session::{session_config, Session, SessionOptions};
use crate::shipped_plan::{IcemergeLogicalCodec, ShippedPlanQueryPlanner};

/// Largest gRPC message the scheduler accepts or sends.
const MAX_MESSAGE: u32 = 256 * 1024 * 1024;

/// Everything the scheduler process is started with.
#[derive(Debug, Clone)]
pub struct SchedulerProcessOptions {
    /// Address both services bind to.
    pub bind_host: IpAddr,
    /// Ballista gRPC + REST port (executors and the coordinator; keep private).
    pub ballista_port: u16,
    /// Flight SQL port (clients).
    pub flight_sql_port: u16,
    pub catalog: CatalogOptions,
    /// Bearer token every Flight SQL call must carry; `None`: no auth.
    pub token: Option<String>,
    /// Allow a non-loopback bind without a token.
    pub insecure_no_auth: bool,
    /// Partitions per stage (default: twice the cores, at least 4).
    pub target_partitions: Option<usize>,
    /// Executors run tasks pushed by the scheduler (default) or poll for them.
    pub push_scheduling: bool,
    /// An executor silent for this long is declared lost and its tasks run
    /// elsewhere.
    pub executor_timeout_seconds: u64,
}

/// A running scheduler process.
pub struct RunningScheduler {
    pub ballista_addr: SocketAddr,
    pub flight_sql_addr: SocketAddr,
    pub ledger: TaskLedger,
    ballista: JoinHandle<std::io::Result<()>>,
    flight_sql: JoinHandle<std::result::Result<(), tonic::transport::Error>>,
}

impl RunningScheduler {
    /// Waits until one of the services stops (they only stop on an error).
    pub async fn wait(self) -> Result<()> {
        tokio::select! {
            r = self.ballista => match r {
                Ok(Ok(())) => Err(config_err("the Ballista service stopped")),
                Ok(Err(e)) => Err(config_err(format!("the Ballista service failed: {e}"))),
                Err(e) => Err(config_err(format!("the Ballista service panicked: {e}"))),
            },
            r = self.flight_sql => match r {
                Ok(Ok(())) => Err(config_err("the Flight SQL service stopped")),
                Ok(Err(e)) => Err(config_err(format!("the Flight SQL service failed: {e}"))),
                Err(e) => Err(config_err(format!("the Flight SQL service panicked: {e}"))),
            },
        }
    }
}

fn config_err(message: impl Into<String>) -> DataFusionError {
    DataFusionError::Configuration(message.into())
}

/// Refuses to expose an unauthenticated Flight SQL port beyond this machine.
pub fn check_bind(options: &SchedulerProcessOptions) -> Result<()> {
    if options.token.is_none() && !options.bind_host.is_loopback() && !options.insecure_no_auth {
        return Err(config_err(format!(
            "refusing to bind {} without an auth token: set --token (ICEMERGE_TOKEN), \
             or pass --insecure-no-auth to accept unauthenticated clients from the network",
            options.bind_host
        )));
    }
    Ok(())
}

/// Starts the Ballista scheduler service and the Flight SQL server.
pub async fn start(options: SchedulerProcessOptions) -> Result<RunningScheduler> {
    check_bind(&options)?;
    let target_partitions = options.target_partitions.unwrap_or_else(|| {
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2);
        (2 * cores).max(4)
    });
    let config = session_config(target_partitions);
    let ledger = TaskLedger::default();
    let liveness = ExecutorLiveness::default();

    let ballista_listener = bind(options.bind_host, options.ballista_port, "Ballista").await?;
    let ballista_addr = ballista_listener
        .local_addr()
        .map_err(|e| config_err(e.to_string()))?;
    let scheduler = create_ballista_scheduler(&options, config.clone(), ballista_addr).await?;
    let progress = JobProgress {
        router: ballista_scheduler::api::get_routes(Arc::new(scheduler.clone())),
    };
    let ballista = tokio::spawn(serve_ballista(
        ballista_listener,
        scheduler,
        ledger.clone(),
        liveness.clone(),
    ));

    // The coordinator submits jobs to this process's own scheduler.
    let connect_host = if options.bind_host.is_unspecified() {
        "127.0.0.1".to_string()
    } else {
        options.bind_host.to_string()
    };
    let target = SchedulerTarget {
        url: format!(
            "http://{}:{}",
            host_for_url(&connect_host),
            ballista_addr.port()
        ),
        ledger: ledger.clone(),
        liveness,
        executor_timeout: std::time::Duration::from_secs(options.executor_timeout_seconds.max(1)),
    };
    let session = Session::open_on_scheduler(
        SessionOptions {
            catalog: options.catalog.clone(),
            target_partitions: Some(target_partitions),
            ..Default::default()
        },
        target,
    )
    .await?;

    let flight_listener = bind(options.bind_host, options.flight_sql_port, "Flight SQL").await?;
    let flight_sql_addr = flight_listener
        .local_addr()
        .map_err(|e| config_err(e.to_string()))?;
    let auth = Auth {
        token: options.token.clone(),
    };
    let flight_sql = tokio::spawn(serve_flight_sql(
        flight_listener,
        Arc::new(session),
        auth,
        Some(progress),
    ));
    Ok(RunningScheduler {
        ballista_addr,
        flight_sql_addr,
        ledger,
        ballista,
        flight_sql,
    })
}

fn host_for_url(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    }
}

async fn bind(host: IpAddr, port: u16, what: &str) -> Result<TcpListener> {
    TcpListener::bind(SocketAddr::new(host, port))
        .await
        .map_err(|e| config_err(format!("cannot bind the {what} port {host}:{port}: {e}")))
}

async fn create_ballista_scheduler(
    options: &SchedulerProcessOptions,
    config: SessionConfig,
    addr: SocketAddr,
) -> Result<SchedulerServer<LogicalPlanNode, PhysicalPlanNode>> {
    let session_builder: SessionBuilder = Arc::new(|config: SessionConfig| {
        Ok(SessionStateBuilder::new()
            .with_config(config)
            .with_default_features()
            .with_query_planner(Arc::new(ShippedPlanQueryPlanner))
            .build())
    });
    let producer_config = config.clone();
    let config_producer: ballista_core::ConfigProducer = Arc::new(move || producer_config.clone());
    let policy = if options.push_scheduling {
        TaskSchedulingPolicy::PushStaged
    } else {
        TaskSchedulingPolicy::PullStaged
    };
    let mut scheduler_config = SchedulerConfig::default()
        .with_hostname(addr.ip().to_string())
        .with_port(addr.port())
        .with_scheduler_policy(policy)
        .with_grpc_server_max_decoding_message_size(MAX_MESSAGE)
        .with_grpc_server_max_encoding_message_size(MAX_MESSAGE)
        .with_override_config_producer(config_producer.clone())
        .with_override_session_builder(session_builder.clone());
    scheduler_config.bind_host = addr.ip().to_string();
    scheduler_config.executor_timeout_seconds = options.executor_timeout_seconds.max(1);
    scheduler_config.expire_dead_executor_interval_seconds =
        (options.executor_timeout_seconds / 3).clamp(1, 15);
    scheduler_config.override_logical_codec = Some(Arc::new(IcemergeLogicalCodec::default()));
    scheduler_config.override_physical_codec = Some(Arc::new(IcemergePhysicalCodec::default()));
    let cluster = BallistaCluster::new_memory(addr.to_string(), session_builder, config_producer);
    create_scheduler::<LogicalPlanNode, PhysicalPlanNode>(cluster, Arc::new(scheduler_config))
        .await
        .map_err(|e| config_err(format!("cannot start the Ballista scheduler: {e}")))
}

/// Serves the scheduler's gRPC service (through the ledger) and Ballista's
/// REST API on one port.
async fn serve_ballista(
    listener: TcpListener,
    scheduler: SchedulerServer<LogicalPlanNode, PhysicalPlanNode>,
    ledger: TaskLedger,
    liveness: ExecutorLiveness,
) -> std::io::Result<()> {
    let grpc = SchedulerGrpcServer::new(LedgerScheduler {
        inner: scheduler.clone(),
        ledger,
        liveness,
    })
    .max_decoding_message_size(MAX_MESSAGE as usize)
    .max_encoding_message_size(MAX_MESSAGE as usize);
    let mut routes = tonic::service::RoutesBuilder::default();
    routes.add_service(grpc);
    let router = ballista_scheduler::api::get_routes(Arc::new(scheduler))
        .merge(routes.routes().into_axum_router());
    axum::serve(
        listener,
        router.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await
}

/// Per-stage task progress of a job, read from Ballista's REST API
/// (`/api/job/{id}/stages`) in-process, without a network round trip.
#[derive(Clone)]
pub struct JobProgress {
    router: axum::Router,
}

impl JobProgress {
    /// The job's stages in id order; `total` is None until a stage runs.
    pub async fn stages(&self, job_id: &str) -> std::result::Result<Vec<StageProgress>, String> {
        use tower::ServiceExt;
        let request = axum::http::Request::get(format!("/api/job/{job_id}/stages"))
            .body(axum::body::Body::empty())
            .map_err(|e| e.to_string())?;
        let response = self
            .router
            .clone()
            .oneshot(request)
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 64 * 1024 * 1024)
            .await
            .map_err(|e| e.to_string())?;
        if !status.is_success() {
            return Err(format!(
                "job {job_id}: {status}: {}",
                String::from_utf8_lossy(&body)
            ));
        }
        let json: serde_json::Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
        Ok(parse_stages(&json))
    }
}

/// Reads Ballista's `QueryStagesResponse` JSON.
fn parse_stages(json: &serde_json::Value) -> Vec<StageProgress> {
    let mut stages: Vec<StageProgress> = json["stages"]
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or_default()
        .iter()
        .filter_map(|stage| {
            let id = stage["stage_id"].as_str()?.parse().ok()?;
            let status = stage["stage_status"].as_str().unwrap_or("").to_string();
            let tasks = stage["tasks"]
                .as_array()
                .map(|a| a.as_slice())
                .unwrap_or_default();
            let done = tasks
                .iter()
                .filter(|t| t["status"].as_str() == Some("Successful"))
                .count();
            let total = (!tasks.is_empty()).then_some(tasks.len());
            Some(StageProgress {
                stage: id,
                status,
                done,
                total,
            })
        })
        .collect();
    stages.sort_by_key(|s| s.stage);
    stages
}

/// Ballista's scheduler service with every reported task status recorded
/// in a [`TaskLedger`] first.
#[derive(Clone)]
struct LedgerScheduler {
    inner: SchedulerServer<LogicalPlanNode, PhysicalPlanNode>,
    ledger: TaskLedger,
    liveness: ExecutorLiveness,
}

impl LedgerScheduler {
    fn record(&self, executor_id: &str, statuses: &[TaskStatus]) {
        self.liveness.seen(executor_id);
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
            self.ledger.record(TaskRecord {
                executor_id,
                job_id: status.job_id.clone(),
                stage_id: status.stage_id as usize,
                partition: status.partition_id as usize,
                metrics,
            });
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
        request: Request<protobuf::UpdateTaskStatusParams>,
    ) -> std::result::Result<Response<protobuf::UpdateTaskStatusResult>, Status> {
        let params = request.get_ref();
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
        self.inner.execute_query_push(request).await
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
        self.inner.get_job_status(request).await
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

#[cfg(test)]
mod tests {
    use super::*;

    fn options(host: &str, token: Option<&str>, insecure: bool) -> SchedulerProcessOptions {
        SchedulerProcessOptions {
            bind_host: host.parse().unwrap(),
            ballista_port: 0,
            flight_sql_port: 0,
            catalog: CatalogOptions::default(),
            token: token.map(str::to_string),
            insecure_no_auth: insecure,
            target_partitions: None,
            push_scheduling: true,
            executor_timeout_seconds: 30,
        }
    }

    #[test]
    fn reads_stage_progress() {
        let json = serde_json::json!({"stages": [
            {"stage_id": "2", "stage_status": "Running",
             "tasks": [{"status": "Successful"}, null, {"status": "Running"}]},
            {"stage_id": "1", "stage_status": "Successful",
             "tasks": [{"status": "Successful"}, {"status": "Successful"}]},
            {"stage_id": "3", "stage_status": "Unresolved", "tasks": []}
        ]});
        let stages = parse_stages(&json);
        let figures: Vec<_> = stages.iter().map(|s| (s.stage, s.done, s.total)).collect();
        assert_eq!(
            figures,
            vec![(1, 2, Some(2)), (2, 1, Some(3)), (3, 0, None)]
        );
    }

    #[test]
    fn refuses_a_public_bind_without_a_token() {
        assert!(check_bind(&options("127.0.0.1", None, false)).is_ok());
        assert!(check_bind(&options("::1", None, false)).is_ok());
        let err = check_bind(&options("0.0.0.0", None, false)).unwrap_err();
        assert!(err.to_string().contains("without an auth token"), "{err}");
        assert!(check_bind(&options("0.0.0.0", Some("s3cret"), false)).is_ok());
        assert!(check_bind(&options("0.0.0.0", None, true)).is_ok());
    }
}
