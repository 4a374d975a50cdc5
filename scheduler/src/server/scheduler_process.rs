//! The `icemerge-scheduler` process: a Ballista scheduler service (gRPC for
//! executors and the coordinator's job submission, plus Ballista's REST API
//! on the same port) wired with icemerge's codecs and query planner, and the
//! Flight SQL front door (`flight_sql`) whose session plans statements, runs
//! them as jobs on this scheduler and commits them — the coordinator; with
//! `ui_port`, the live page (`live_page`) on a port of its own; with
//! `metrics_port`, Prometheus metrics (`metrics`) on another.
//!
//! Every task status an executor reports to this scheduler is recorded in a
//! [`TaskLedger`] before Ballista handles it, so the coordinator's session
//! sums operator metrics per job exactly as with the in-process cluster.

use icemerge_proto::memory_budget::MemoryBudget;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use ballista_core::config::TaskSchedulingPolicy;
use ballista_core::serde::protobuf::scheduler_grpc_server::SchedulerGrpcServer;
use ballista_scheduler::cluster::BallistaCluster;
use ballista_scheduler::config::SchedulerConfig;
use ballista_scheduler::scheduler_process::create_scheduler;
use ballista_scheduler::scheduler_server::SchedulerServer;
use datafusion::error::{DataFusionError, Result};
use datafusion::prelude::SessionConfig;
use datafusion_proto::protobuf::{LogicalPlanNode, PhysicalPlanNode};
use icemerge_executor::codec::IcemergePhysicalCodec;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use icemerge_proto::limits::{
    EXECUTOR_HEARTBEAT_SECONDS, MAX_MESSAGE_BYTES, MIN_EXECUTOR_TIMEOUT_SECONDS,
};

use super::auth::Auth;
use super::client_sessions::ClientSessions;
use super::flight_sql::serve_flight_sql;
use super::ledger_service::LedgerScheduler;
use super::live_page::{serve_live_page, LivePage};
use super::metrics::{serve_metrics, MetricsEndpoint, SchedulerMetrics};
use super::progress::JobProgress;
use super::statement_log::StatementLog;
use super::tls::TlsFiles;
use crate::catalog::CatalogOptions;
use crate::engine::{
    scheduler_session_builder, ExecutorLiveness, IcemergeLogicalCodec, SchedulerTarget, TaskLedger,
    RESULT_RETENTION,
};
use crate::session::{session_config, Session, SessionOptions};
use icemerge_proto::error::invalid_input;

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
    /// Memory of the coordinator's sessions (default: half the RAM).
    pub memory_limit: Option<MemoryBudget>,
    /// Port of the live page (`live_page`); None: no page.
    pub ui_port: Option<u16>,
    /// Port of the Prometheus `/metrics` endpoint (`metrics`); None: none.
    pub metrics_port: Option<u16>,
    /// The Flight SQL port's TLS certificate and key; None: plain TCP.
    pub tls: Option<TlsFiles>,
}

/// A running scheduler process.
pub struct RunningScheduler {
    pub ballista_addr: SocketAddr,
    pub flight_sql_addr: SocketAddr,
    /// The live page's address, when enabled.
    pub ui_addr: Option<SocketAddr>,
    /// The metrics endpoint's address, when enabled.
    pub metrics_addr: Option<SocketAddr>,
    pub ledger: TaskLedger,
    ballista: JoinHandle<std::io::Result<()>>,
    flight_sql: JoinHandle<std::result::Result<(), tonic::transport::Error>>,
    ui: Option<JoinHandle<std::io::Result<()>>>,
    metrics: Option<JoinHandle<std::io::Result<()>>>,
}

impl RunningScheduler {
    /// Waits until one of the services stops (they only stop on an error).
    pub async fn wait(self) -> Result<()> {
        let ui = async {
            match self.ui {
                Some(ui) => ui.await,
                None => std::future::pending().await,
            }
        };
        let metrics = async {
            match self.metrics {
                Some(metrics) => metrics.await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = metrics => match r {
                Ok(Ok(())) => Err(config_err("the metrics endpoint stopped")),
                Ok(Err(e)) => Err(config_err(format!("the metrics endpoint failed: {e}"))),
                Err(e) => Err(config_err(format!("the metrics endpoint panicked: {e}"))),
            },
            r = ui => match r {
                Ok(Ok(())) => Err(config_err("the live page stopped")),
                Ok(Err(e)) => Err(config_err(format!("the live page failed: {e}"))),
                Err(e) => Err(config_err(format!("the live page panicked: {e}"))),
            },
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
    invalid_input(message.into())
}

/// Refuses an executor timeout so close to the executors' heartbeat
/// interval that one late beat of a busy executor would fail the job.
pub fn check_executor_timeout(options: &SchedulerProcessOptions) -> Result<()> {
    if options.executor_timeout_seconds < MIN_EXECUTOR_TIMEOUT_SECONDS {
        return Err(config_err(format!(
            "--executor-timeout {} is too short: executors send a heartbeat every {}s, \
             so use at least {}",
            options.executor_timeout_seconds,
            EXECUTOR_HEARTBEAT_SECONDS,
            MIN_EXECUTOR_TIMEOUT_SECONDS
        )));
    }
    Ok(())
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
    check_executor_timeout(&options)?;
    let tls = options
        .tls
        .as_ref()
        .map(TlsFiles::server_config)
        .transpose()?;
    let target_partitions = options.target_partitions.unwrap_or_else(|| {
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2);
        (2 * cores).max(4)
    });
    let config = session_config(target_partitions);
    let ledger = TaskLedger::default();
    let liveness = ExecutorLiveness::default();
    let metrics = SchedulerMetrics::new();

    let (ballista_listener, ballista_addr) =
        bind(options.bind_host, options.ballista_port, "Ballista").await?;
    let scheduler = create_ballista_scheduler(&options, config.clone(), ballista_addr).await?;
    let progress = JobProgress::new(ballista_scheduler::api::get_routes(Arc::new(
        scheduler.clone(),
    )));
    let ballista = tokio::spawn(serve_ballista(
        ballista_listener,
        scheduler,
        ledger.clone(),
        liveness.clone(),
        metrics.clone(),
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
        liveness: liveness.clone(),
        executor_timeout: std::time::Duration::from_secs(options.executor_timeout_seconds.max(1)),
    };
    let session = Session::open_on_scheduler(
        SessionOptions {
            catalog: options.catalog.clone(),
            target_partitions: Some(target_partitions),
            memory_limit: options.memory_limit,
            ..Default::default()
        },
        target,
    )
    .await?;

    let (flight_listener, flight_sql_addr) =
        bind(options.bind_host, options.flight_sql_port, "Flight SQL").await?;
    let auth = Auth {
        token: options.token.clone(),
    };
    let sessions = Arc::new(ClientSessions::new(Arc::new(session)));
    let log = StatementLog::new(metrics.clone());
    let (metrics, metrics_addr) = match options.metrics_port {
        Some(port) => {
            let (listener, addr) = bind(options.bind_host, port, "metrics").await?;
            let endpoint = MetricsEndpoint {
                metrics,
                liveness,
                executor_timeout: std::time::Duration::from_secs(options.executor_timeout_seconds),
                auth: auth.clone(),
            };
            (
                Some(tokio::spawn(serve_metrics(listener, endpoint))),
                Some(addr),
            )
        }
        None => (None, None),
    };
    let (ui, ui_addr) = match options.ui_port {
        Some(port) => {
            let (listener, addr) = bind(options.bind_host, port, "live page").await?;
            let page = LivePage {
                log: log.clone(),
                sessions: sessions.clone(),
                progress: progress.clone(),
                ledger: ledger.clone(),
                auth: auth.clone(),
            };
            (
                Some(tokio::spawn(serve_live_page(listener, page))),
                Some(addr),
            )
        }
        None => (None, None),
    };
    let flight_sql = tokio::spawn(serve_flight_sql(
        flight_listener,
        sessions,
        auth,
        Some(progress),
        log,
        tls,
    ));
    Ok(RunningScheduler {
        ballista_addr,
        flight_sql_addr,
        ui_addr,
        metrics_addr,
        ledger,
        ballista,
        flight_sql,
        ui,
        metrics,
    })
}

fn host_for_url(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    }
}

/// A listener on `host:port` (port 0: any free port) and the address it got.
async fn bind(host: IpAddr, port: u16, what: &str) -> Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(SocketAddr::new(host, port))
        .await
        .map_err(|e| config_err(format!("cannot bind the {what} port {host}:{port}: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| config_err(format!("the {what} port {host}:{port}: {e}")))?;
    Ok((listener, addr))
}

async fn create_ballista_scheduler(
    options: &SchedulerProcessOptions,
    config: SessionConfig,
    addr: SocketAddr,
) -> Result<SchedulerServer<LogicalPlanNode, PhysicalPlanNode>> {
    let session_builder = scheduler_session_builder();
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
        .with_grpc_server_max_decoding_message_size(MAX_MESSAGE_BYTES as u32)
        .with_grpc_server_max_encoding_message_size(MAX_MESSAGE_BYTES as u32)
        .with_override_config_producer(config_producer.clone())
        .with_override_session_builder(session_builder.clone());
    scheduler_config.bind_host = addr.ip().to_string();
    scheduler_config.executor_timeout_seconds = options.executor_timeout_seconds.max(1);
    scheduler_config.expire_dead_executor_interval_seconds =
        (options.executor_timeout_seconds / 3).clamp(1, 15);
    // A query's rows stream to its Flight SQL client from the executors.
    scheduler_config.finished_job_data_clean_up_interval_seconds = RESULT_RETENTION.as_secs();
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
    metrics: SchedulerMetrics,
) -> std::io::Result<()> {
    let grpc = SchedulerGrpcServer::new(LedgerScheduler::new(
        scheduler.clone(),
        ledger,
        liveness,
        metrics,
    ))
    .max_decoding_message_size(MAX_MESSAGE_BYTES)
    .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let mut routes = tonic::service::RoutesBuilder::default();
    routes.add_service(grpc);
    let router = ballista_scheduler::api::get_routes(Arc::new(scheduler))
        .merge(routes.routes().into_axum_router());
    // Task status reports and job polls are small request/response pairs:
    // Nagle off, as on every icemerge gRPC port (see `tcp_incoming`).
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!("TCP_NODELAY not set on a scheduler connection: {e}");
        }
    });
    axum::serve(
        listener,
        router.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await
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
            memory_limit: None,
            ui_port: None,
            metrics_port: None,
            tls: None,
        }
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

    #[test]
    fn refuses_an_executor_timeout_near_the_heartbeat() {
        let mut o = options("127.0.0.1", None, false);
        assert!(check_executor_timeout(&o).is_ok());
        o.executor_timeout_seconds = MIN_EXECUTOR_TIMEOUT_SECONDS;
        assert!(check_executor_timeout(&o).is_ok());
        o.executor_timeout_seconds = EXECUTOR_HEARTBEAT_SECONDS;
        let err = check_executor_timeout(&o).unwrap_err();
        assert!(
            err.to_string()
                .contains("--executor-timeout 5 is too short"),
            "{err}"
        );
    }
}
