//! An in-process Ballista cluster: a scheduler and N executors inside this
//! process, wired with icemerge's codecs and query planner. Used by the
//! `cluster` engine with `--executors N` and by the tests to prove the
//! distributed path on one machine. Every task an executor runs is recorded
//! in the cluster's task ledger (executor, job, stage, partition, metrics)
//! and counted while it runs (`task_tracker`).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

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
use ballista_executor::execution_engine::QueryStageExecutor;
use ballista_executor::executor::Executor;
use ballista_executor::flight_service::BallistaFlightService;
use ballista_executor::metrics::ExecutorMetricsCollector;
use ballista_scheduler::cluster::BallistaCluster;
use ballista_scheduler::config::SchedulerConfig;
use ballista_scheduler::metrics::default_metrics_collector;
use ballista_scheduler::scheduler_server::SchedulerServer;
use ballista_scheduler::SessionBuilder;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::SessionStateBuilder;
use datafusion::physical_plan::metrics::MetricsSet;
use datafusion::prelude::SessionConfig;
use datafusion_proto::protobuf::{LogicalPlanNode, PhysicalPlanNode};
use icemerge_executor::codec::IcemergePhysicalCodec;
use tokio::net::TcpListener;

use crate::shipped_plan::{IcemergeLogicalCodec, ShippedPlanQueryPlanner};
use crate::task_tracker::{TaskTracker, TrackingEngine};

/// One task run by an executor, as recorded after it finished.
#[derive(Debug, Clone)]
pub struct TaskRecord {
    pub executor_id: String,
    pub job_id: String,
    pub stage_id: usize,
    pub partition: usize,
    /// One metrics set per operator of the stage plan, top-down.
    pub metrics: Vec<MetricsSet>,
}

/// Shared list of finished tasks.
#[derive(Debug, Default, Clone)]
pub struct TaskLedger(Arc<Mutex<Vec<TaskRecord>>>);

impl TaskLedger {
    /// Records one finished task.
    pub fn record(&self, task: TaskRecord) {
        self.0.lock().expect("ledger lock").push(task);
    }

    /// Tasks of one job, in completion order.
    pub fn tasks_of(&self, job_id: &str) -> Vec<TaskRecord> {
        self.0
            .lock()
            .expect("ledger lock")
            .iter()
            .filter(|t| t.job_id == job_id)
            .cloned()
            .collect()
    }
}

/// When each executor was last heard from (registration, heartbeat, task
/// status), as seen by the `icemerge-scheduler` process.
#[derive(Debug, Default, Clone)]
pub struct ExecutorLiveness(Arc<Mutex<std::collections::HashMap<String, std::time::Instant>>>);

impl ExecutorLiveness {
    /// Records that `executor_id` was heard from now.
    pub fn seen(&self, executor_id: &str) {
        if executor_id.is_empty() {
            return;
        }
        self.0
            .lock()
            .expect("liveness lock")
            .insert(executor_id.to_string(), std::time::Instant::now());
    }

    /// Executors heard from within `within`.
    pub fn alive(&self, within: std::time::Duration) -> Vec<String> {
        self.0
            .lock()
            .expect("liveness lock")
            .iter()
            .filter(|(_, t)| t.elapsed() <= within)
            .map(|(id, _)| id.clone())
            .collect()
    }
}

struct LedgerCollector {
    executor_id: String,
    ledger: TaskLedger,
}

impl ExecutorMetricsCollector for LedgerCollector {
    fn record_stage(
        &self,
        job_id: &str,
        stage_id: usize,
        partition: usize,
        plan: Arc<dyn QueryStageExecutor>,
    ) {
        self.ledger.record(TaskRecord {
            executor_id: self.executor_id.clone(),
            job_id: job_id.to_string(),
            stage_id,
            partition,
            metrics: plan.collect_plan_metrics(),
        });
    }
}

/// A running in-process cluster.
pub struct InProcessCluster {
    pub scheduler_addr: SocketAddr,
    pub executor_ids: Vec<String>,
    pub ledger: TaskLedger,
    /// Tasks running now on the executors, per job.
    pub running: TaskTracker,
    _work_dirs: Vec<tempfile::TempDir>,
}

fn codec() -> BallistaCodec<LogicalPlanNode, PhysicalPlanNode> {
    BallistaCodec::new(
        Arc::new(IcemergeLogicalCodec::default()),
        Arc::new(IcemergePhysicalCodec::default()),
    )
}

fn ballista_err(e: impl std::fmt::Display) -> DataFusionError {
    DataFusionError::Execution(format!("cluster: {e}"))
}

impl InProcessCluster {
    /// Starts a scheduler and `executors` executors with `slots` task slots each.
    pub async fn start(config: SessionConfig, executors: usize, slots: usize) -> Result<Self> {
        let ledger = TaskLedger::default();
        let running = TaskTracker::default();
        let scheduler_addr = start_scheduler(config.clone()).await?;
        let mut executor_ids = vec![];
        let mut work_dirs = vec![];
        for _ in 0..executors.max(1) {
            let work_dir = tempfile::Builder::new()
                .prefix("icemerge-executor-")
                .tempdir()
                .map_err(|e| DataFusionError::Execution(format!("executor work dir: {e}")))?;
            let id = start_executor(
                scheduler_addr,
                config.clone(),
                slots,
                work_dir.path(),
                ledger.clone(),
                running.clone(),
            )
            .await?;
            executor_ids.push(id);
            work_dirs.push(work_dir);
        }
        Ok(Self {
            scheduler_addr,
            executor_ids,
            ledger,
            running,
            _work_dirs: work_dirs,
        })
    }

    pub fn scheduler_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.scheduler_addr.port())
    }
}

async fn start_scheduler(config: SessionConfig) -> Result<SocketAddr> {
    let session_builder: SessionBuilder = Arc::new(|config: SessionConfig| {
        Ok(SessionStateBuilder::new()
            .with_config(config)
            .with_default_features()
            .with_query_planner(Arc::new(ShippedPlanQueryPlanner))
            .build())
    });
    let producer_config = config.clone();
    let config_producer: ConfigProducer = Arc::new(move || producer_config.clone());
    let cluster = BallistaCluster::new_memory("localhost:0", session_builder, config_producer);
    let mut server: SchedulerServer<LogicalPlanNode, PhysicalPlanNode> = SchedulerServer::new(
        "icemerge-scheduler".to_string(),
        cluster,
        codec(),
        // In-process executors poll for work (pull-staged scheduling).
        Arc::new(
            SchedulerConfig::default().with_scheduler_policy(TaskSchedulingPolicy::PullStaged),
        ),
        default_metrics_collector().map_err(ballista_err)?,
    );
    server.init().await.map_err(ballista_err)?;
    let max_message = 256 * 1024 * 1024;
    let service = SchedulerGrpcServer::new(server)
        .max_decoding_message_size(max_message)
        .max_encoding_message_size(max_message);
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(ballista_err)?;
    let addr = listener.local_addr().map_err(ballista_err)?;
    tokio::spawn(
        create_grpc_server(&GrpcServerConfig::default())
            .add_service(service)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    Ok(addr)
}

async fn start_executor(
    scheduler: SocketAddr,
    config: SessionConfig,
    slots: usize,
    work_dir: &std::path::Path,
    ledger: TaskLedger,
    running: TaskTracker,
) -> Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(ballista_err)?;
    let address = listener.local_addr().map_err(ballista_err)?;
    let id = uuid::Uuid::new_v4().to_string();
    let registration = ExecutorRegistration {
        id: id.clone(),
        host: Some("127.0.0.1".to_string()),
        port: address.port() as u32,
        grpc_port: 0,
        specification: Some(
            ExecutorSpecification::default()
                .with_task_slots(slots as u32)
                .into(),
        ),
        os_info: Some(ExecutorOperatingSystemSpecification::default().into()),
    };
    let state = SessionStateBuilder::new()
        .with_config(config.clone())
        .with_default_features()
        .build();
    let runtime = Arc::new(RuntimeEnv::default());
    let runtime_producer: RuntimeProducer = Arc::new(move |_| Ok(runtime.clone()));
    let config_producer: ConfigProducer = Arc::new(move || config.clone());
    let work_dir = work_dir.to_string_lossy().to_string();
    let executor = Arc::new(Executor::new(
        registration,
        &work_dir,
        runtime_producer,
        config_producer,
        Arc::new((&state).into()),
        Arc::new(LedgerCollector {
            executor_id: id.clone(),
            ledger,
        }),
        slots,
        Arc::new(TrackingEngine::new(running)),
    ));
    let flight = arrow_flight::flight_service_server::FlightServiceServer::new(
        BallistaFlightService::new(work_dir),
    )
    .max_decoding_message_size(256 * 1024 * 1024)
    .max_encoding_message_size(256 * 1024 * 1024);
    tokio::spawn(
        create_grpc_server(&GrpcServerConfig::default())
            .add_service(flight)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let client = SchedulerGrpcClient::connect(format!("http://127.0.0.1:{}", scheduler.port()))
        .await
        .map_err(ballista_err)?
        .max_decoding_message_size(256 * 1024 * 1024)
        .max_encoding_message_size(256 * 1024 * 1024);
    tokio::spawn(ballista_executor::execution_loop::poll_loop(
        client,
        executor,
        codec(),
    ));
    Ok(id)
}
