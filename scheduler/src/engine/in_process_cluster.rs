//! An in-process Ballista cluster: a scheduler and N executors inside this
//! process, wired with icemerge's codecs and query planner. Used by the
//! `cluster` engine with `--executors N` and by the tests to prove the
//! distributed path on one machine. The scheduler pushes tasks to the
//! executors (push scheduling: no polling delay between stages, and tasks
//! can be cancelled). Every task an executor runs is recorded in the
//! cluster's task ledger (executor, job, stage, partition, metrics) and
//! counted while it runs (`task_tracker`); each task runs on its own copy of
//! the stage plan, so that its metrics are its own.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use ballista_core::config::TaskSchedulingPolicy;
use ballista_core::serde::protobuf::scheduler_grpc_client::SchedulerGrpcClient;
use ballista_core::serde::protobuf::scheduler_grpc_server::SchedulerGrpcServer;
use ballista_core::serde::protobuf::ExecutorRegistration;
use ballista_core::serde::scheduler::{
    ExecutorOperatingSystemSpecification, ExecutorSpecification,
};
use ballista_core::serde::BallistaCodec;
use ballista_core::utils::{create_grpc_server, GrpcServerConfig};
use ballista_core::{ConfigProducer, RuntimeProducer};
use ballista_executor::executor::Executor;
use ballista_executor::executor_process::ExecutorProcessConfig;
use ballista_executor::executor_server;
use ballista_executor::flight_service::BallistaFlightService;
use ballista_executor::shutdown::ShutdownNotifier;
use ballista_scheduler::cluster::BallistaCluster;
use ballista_scheduler::config::SchedulerConfig;
use ballista_scheduler::metrics::default_metrics_collector;
use ballista_scheduler::scheduler_server::SchedulerServer;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::SessionStateBuilder;
use datafusion::prelude::SessionConfig;
use datafusion_proto::protobuf::{LogicalPlanNode, PhysicalPlanNode};
use icemerge_executor::codec::IcemergePhysicalCodec;
use icemerge_executor::process::FreshPlanEngine;
use icemerge_proto::limits::MAX_MESSAGE_BYTES;
use tokio::net::TcpListener;

use super::shipped_plan::{scheduler_session_builder, IcemergeLogicalCodec};
use super::task_ledger::{LedgerCollector, TaskLedger};
use super::task_tracker::{TaskTracker, TrackingEngine};
use super::tcp_incoming::no_delay;
use icemerge_proto::error::io_error;

/// A running in-process cluster.
pub struct InProcessCluster {
    pub scheduler_addr: SocketAddr,
    pub executor_ids: Vec<String>,
    pub ledger: TaskLedger,
    /// Tasks running now on the executors, per job.
    pub running: TaskTracker,
    _executors: Vec<ExecutorHandle>,
    _work_dirs: Vec<tempfile::TempDir>,
}

/// The codec of the cluster's processes; `credentials`: the storage
/// secrets added to the plans it decodes (an executor's own).
fn codec(
    credentials: &HashMap<String, String>,
) -> BallistaCodec<LogicalPlanNode, PhysicalPlanNode> {
    BallistaCodec::new(
        Arc::new(IcemergeLogicalCodec::default()),
        Arc::new(IcemergePhysicalCodec::with_credentials(credentials.clone())),
    )
}

fn ballista_err(e: impl std::fmt::Display) -> DataFusionError {
    io_error(format!("cluster: {e}"))
}

impl InProcessCluster {
    /// Starts a scheduler and `executors` executors with `slots` task slots
    /// each, every task running in `runtime` (the process's memory budget).
    /// Plans travel without storage secrets, as to executor processes; the
    /// executors add `credentials` (the session's own).
    pub async fn start(
        config: SessionConfig,
        executors: usize,
        slots: usize,
        runtime: Arc<RuntimeEnv>,
        credentials: HashMap<String, String>,
    ) -> Result<Self> {
        let ledger = TaskLedger::default();
        let running = TaskTracker::default();
        let scheduler_addr = start_scheduler(config.clone()).await?;
        let mut executor_ids = vec![];
        let mut executors_started = vec![];
        let mut work_dirs = vec![];
        for _ in 0..executors.max(1) {
            let work_dir = tempfile::Builder::new()
                .prefix("icemerge-executor-")
                .tempdir()
                .map_err(|e| io_error(format!("executor work dir: {e}")))?;
            let shared = ExecutorShared {
                ledger: ledger.clone(),
                running: running.clone(),
                runtime: runtime.clone(),
                credentials: &credentials,
            };
            let executor = start_executor(
                scheduler_addr,
                config.clone(),
                slots,
                work_dir.path(),
                shared,
            )
            .await?;
            executor_ids.push(executor.id.clone());
            executors_started.push(executor);
            work_dirs.push(work_dir);
        }
        Ok(Self {
            scheduler_addr,
            executor_ids,
            ledger,
            running,
            _executors: executors_started,
            _work_dirs: work_dirs,
        })
    }

    pub fn scheduler_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.scheduler_addr.port())
    }
}

async fn start_scheduler(config: SessionConfig) -> Result<SocketAddr> {
    let session_builder = scheduler_session_builder();
    let producer_config = config.clone();
    let config_producer: ConfigProducer = Arc::new(move || producer_config.clone());
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(ballista_err)?;
    let addr = listener.local_addr().map_err(ballista_err)?;
    // Executors report task statuses to the scheduler by this name.
    let name = format!("127.0.0.1:{}", addr.port());
    let cluster = BallistaCluster::new_memory(&name, session_builder, config_producer);
    let mut server: SchedulerServer<LogicalPlanNode, PhysicalPlanNode> = SchedulerServer::new(
        name,
        cluster,
        codec(&HashMap::new()),
        // The scheduler pushes tasks to the executors (and cancels them).
        Arc::new(
            SchedulerConfig::default().with_scheduler_policy(TaskSchedulingPolicy::PushStaged),
        ),
        default_metrics_collector().map_err(ballista_err)?,
    );
    server.init().await.map_err(ballista_err)?;
    let max_message = MAX_MESSAGE_BYTES;
    let service = SchedulerGrpcServer::new(server)
        .max_decoding_message_size(max_message)
        .max_encoding_message_size(max_message);
    tokio::spawn(
        create_grpc_server(&GrpcServerConfig::default())
            .add_service(service)
            .serve_with_incoming(no_delay(listener)),
    );
    Ok(addr)
}

/// One in-process executor; its services stop when this is dropped.
struct ExecutorHandle {
    id: String,
    _shutdown: ShutdownNotifier,
    _stop: tokio::sync::mpsc::Receiver<bool>,
}

/// A loopback port free at the time of asking.
fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(ballista_err)?;
    Ok(listener.local_addr().map_err(ballista_err)?.port())
}

/// What the executors of the cluster share: where task statuses and running
/// tasks are recorded, the memory budget, the storage credentials.
struct ExecutorShared<'a> {
    ledger: TaskLedger,
    running: TaskTracker,
    runtime: Arc<RuntimeEnv>,
    credentials: &'a HashMap<String, String>,
}

async fn start_executor(
    scheduler: SocketAddr,
    config: SessionConfig,
    slots: usize,
    work_dir: &std::path::Path,
    shared: ExecutorShared<'_>,
) -> Result<ExecutorHandle> {
    let ExecutorShared {
        ledger,
        running,
        runtime,
        credentials,
    } = shared;
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(ballista_err)?;
    let address = listener.local_addr().map_err(ballista_err)?;
    let id = uuid::Uuid::new_v4().to_string();
    let state = SessionStateBuilder::new()
        .with_config(config.clone())
        .with_default_features()
        .build();
    let runtime_producer: RuntimeProducer = Arc::new(move |_| Ok(runtime.clone()));
    let config_producer: ConfigProducer = Arc::new(move || config.clone());
    let work_dir = work_dir.to_string_lossy().to_string();
    let flight = arrow_flight::flight_service_server::FlightServiceServer::new(
        BallistaFlightService::new(work_dir.clone()),
    )
    .max_decoding_message_size(MAX_MESSAGE_BYTES)
    .max_encoding_message_size(MAX_MESSAGE_BYTES);
    tokio::spawn(
        create_grpc_server(&GrpcServerConfig::default())
            .add_service(flight)
            .serve_with_incoming(no_delay(listener)),
    );
    let client = SchedulerGrpcClient::connect(format!("http://127.0.0.1:{}", scheduler.port()))
        .await
        .map_err(ballista_err)?
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let shutdown = ShutdownNotifier::new();
    let (stop_send, stop) = tokio::sync::mpsc::channel(10);
    // Push scheduling: the scheduler launches (and cancels) tasks through
    // the executor's gRPC service, and task statuses go back at once. The
    // scheduler connects to that service when the executor registers, which
    // Ballista does right after starting it: a refused connection is retried
    // on a fresh port.
    let mut attempt = 0;
    loop {
        let grpc_port = free_port()?;
        let registration = ExecutorRegistration {
            id: id.clone(),
            host: Some("127.0.0.1".to_string()),
            port: address.port() as u32,
            grpc_port: grpc_port as u32,
            specification: Some(
                ExecutorSpecification::default()
                    .with_task_slots(slots as u32)
                    .into(),
            ),
            os_info: Some(ExecutorOperatingSystemSpecification::default().into()),
        };
        let executor = Arc::new(Executor::new(
            registration,
            &work_dir,
            runtime_producer.clone(),
            config_producer.clone(),
            Arc::new((&state).into()),
            Arc::new(LedgerCollector {
                executor_id: id.clone(),
                ledger: ledger.clone(),
            }),
            slots,
            Arc::new(TrackingEngine::new(
                running.clone(),
                Arc::new(FreshPlanEngine::new(
                    IcemergePhysicalCodec::with_credentials(credentials.clone()),
                )),
            )),
        ));
        let process = Arc::new(ExecutorProcessConfig {
            bind_host: "127.0.0.1".to_string(),
            external_host: Some("127.0.0.1".to_string()),
            port: address.port(),
            grpc_port,
            scheduler_host: "127.0.0.1".to_string(),
            scheduler_port: scheduler.port(),
            concurrent_tasks: slots,
            task_scheduling_policy: TaskSchedulingPolicy::PushStaged,
            work_dir: Some(work_dir.clone()),
            grpc_max_decoding_message_size: MAX_MESSAGE_BYTES as u32,
            grpc_max_encoding_message_size: MAX_MESSAGE_BYTES as u32,
            ..Default::default()
        });
        match executor_server::startup(
            client.clone(),
            process,
            executor,
            codec(credentials),
            stop_send.clone(),
            &shutdown,
        )
        .await
        {
            Ok(_) => break,
            Err(e) if attempt < 10 => {
                tracing::debug!("executor registration retried: {e}");
                attempt += 1;
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            Err(e) => return Err(ballista_err(e)),
        }
    }
    Ok(ExecutorHandle {
        id,
        _shutdown: shutdown,
        _stop: stop,
    })
}
