//! The `icemerge-scheduler` command: the coordinator of an icemerge cluster.
//! Runs the Ballista scheduler service (executors connect to it) and the
//! Flight SQL server (clients send statements to it); MERGE planning and
//! commits happen here. Prints one line with both addresses (and the live
//! page's URL with --ui-port, the metrics URL with --metrics-port) once
//! listening.

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use icemerge_proto::memory_budget::MemoryBudget;
use icemerge_scheduler::server::{start, SchedulerProcessOptions, TlsFiles};

#[path = "../catalog_args.rs"]
mod catalog_args;
use catalog_args::CatalogArgs;

/// Runs the icemerge scheduler: the Ballista scheduler for executors and a
/// Flight SQL server for clients (`icemerge --scheduler HOST:FLIGHT_SQL_PORT`).
///
/// The Ballista port must only be reachable by executors (it has no auth).
/// Without --token both ports bind to loopback unless --insecure-no-auth.
#[derive(Debug, Parser)]
#[command(name = "icemerge-scheduler", version)]
struct Args {
    /// Address both ports bind to (e.g. 0.0.0.0 for every interface).
    #[arg(
        long,
        value_name = "ADDR",
        env = "ICEMERGE_BIND_HOST",
        default_value = "127.0.0.1"
    )]
    bind_host: IpAddr,

    /// Ballista scheduler port (gRPC for executors + REST API); keep it private.
    #[arg(
        long,
        value_name = "PORT",
        env = "ICEMERGE_SCHEDULER_PORT",
        default_value_t = 50050
    )]
    port: u16,

    /// Flight SQL port for clients.
    #[arg(
        long,
        value_name = "PORT",
        env = "ICEMERGE_FLIGHT_SQL_PORT",
        default_value_t = 50060
    )]
    flight_sql_port: u16,

    #[command(flatten)]
    catalog: CatalogArgs,

    /// Bearer token Flight SQL clients must send (`authorization: Bearer <token>`).
    #[arg(
        long,
        value_name = "TOKEN",
        env = "ICEMERGE_TOKEN",
        hide_env_values = true
    )]
    token: Option<String>,

    /// PEM certificate chain of the Flight SQL port: clients then connect
    /// with TLS (`icemerge --scheduler grpc+tls://HOST:PORT`). Needs
    /// --tls-key. The other ports stay plain: keep them private.
    #[arg(long, value_name = "PEM", env = "ICEMERGE_TLS_CERT")]
    tls_cert: Option<PathBuf>,

    /// PEM private key of --tls-cert.
    #[arg(long, value_name = "PEM", env = "ICEMERGE_TLS_KEY")]
    tls_key: Option<PathBuf>,

    /// Accept a non-loopback --bind-host without --token.
    #[arg(long)]
    insecure_no_auth: bool,

    /// Partitions per stage [default: twice the cores, at least 4].
    #[arg(long, value_name = "N", env = "ICEMERGE_TARGET_PARTITIONS")]
    target_partitions: Option<usize>,

    /// Memory of the coordinator's own work (planning, pruning probes,
    /// results); the executors have theirs: a size (4GiB, 512MiB, 2G) or a share
    /// of RAM (25%). Sorts, aggregations and repartitions spill to disk
    /// beyond their share of it; a statement that cannot fit fails with an
    /// error naming the budget [default: 50% of RAM].
    #[arg(long, value_name = "SIZE", env = "ICEMERGE_MEMORY_LIMIT")]
    memory_limit: Option<MemoryBudget>,

    /// Executors poll for tasks instead of the scheduler pushing them (start
    /// the executors with --pull too). Running tasks cannot be cancelled.
    #[arg(long)]
    pull: bool,

    /// Seconds without a heartbeat after which an executor is declared lost
    /// and its tasks are run on the others (executors beat every 5 s; at
    /// least 10).
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    executor_timeout: u64,

    /// Serve the live page (running and recent statements, their stage
    /// graphs and per-stage progress) on this port of --bind-host; with
    /// --token it needs the token too. Off unless given.
    #[arg(long, value_name = "PORT", env = "ICEMERGE_UI_PORT")]
    ui_port: Option<u16>,

    /// Serve Prometheus metrics at /metrics on this port of --bind-host
    /// (statements by kind and outcome, durations, tasks, bytes, commit
    /// attempts); with --token it needs the token too. Off unless given.
    #[arg(long, value_name = "PORT", env = "ICEMERGE_METRICS_PORT")]
    metrics_port: Option<u16>,
}

#[path = "../log_filter.rs"]
mod log_filter;

#[tokio::main(flavor = "multi_thread")]
async fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(log_filter::log_filter("info"))
        .with_writer(std::io::stderr)
        .init();
    let tls = match TlsFiles::from_args(args.tls_cert, args.tls_key) {
        Ok(tls) => tls,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let options = SchedulerProcessOptions {
        bind_host: args.bind_host,
        ballista_port: args.port,
        flight_sql_port: args.flight_sql_port,
        catalog: args.catalog.options(),
        token: args.token.filter(|t| !t.is_empty()),
        insecure_no_auth: args.insecure_no_auth,
        target_partitions: args.target_partitions,
        push_scheduling: !args.pull,
        executor_timeout_seconds: args.executor_timeout,
        memory_limit: args.memory_limit,
        ui_port: args.ui_port,
        metrics_port: args.metrics_port,
        tls,
    };
    let running = match start(options).await {
        Ok(running) => running,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut line = format!(
        "icemerge-scheduler: ballista {} flight-sql {}",
        running.ballista_addr, running.flight_sql_addr
    );
    if let Some(ui) = running.ui_addr {
        line.push_str(&format!(" ui http://{ui}/"));
    }
    if let Some(metrics) = running.metrics_addr {
        line.push_str(&format!(" metrics http://{metrics}/metrics"));
    }
    println!("{line}");
    tokio::select! {
        result = running.wait() => {
            if let Err(e) = result {
                eprintln!("error: {e}");
            }
            ExitCode::FAILURE
        }
        _ = tokio::signal::ctrl_c() => ExitCode::SUCCESS,
    }
}
