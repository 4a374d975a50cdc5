//! The `icemerge-executor` command: a worker of an icemerge cluster. It
//! registers with an `icemerge-scheduler` and runs the tasks of its jobs.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use icemerge_executor::process::{run, ExecutorOptions};
use icemerge_proto::memory_budget::MemoryBudget;

#[path = "../s3_credential_args.rs"]
mod s3_credential_args;
use s3_credential_args::S3CredentialArgs;

/// Runs an icemerge executor for the scheduler at --scheduler.
///
/// Its ports (Flight for shuffle data, gRPC for task launch) have no auth:
/// only the scheduler and the other executors may reach them.
#[derive(Debug, Parser)]
#[command(name = "icemerge-executor", version)]
struct Args {
    /// The scheduler's Ballista port (not its Flight SQL port).
    #[arg(
        long,
        value_name = "HOST:PORT",
        env = "ICEMERGE_BALLISTA_SCHEDULER",
        default_value = "127.0.0.1:50050"
    )]
    scheduler: String,

    /// Address the executor's ports bind to.
    #[arg(
        long,
        value_name = "ADDR",
        env = "ICEMERGE_BIND_HOST",
        default_value = "127.0.0.1"
    )]
    bind_host: String,

    /// Host the scheduler and other executors reach this executor at
    /// [default: the address the scheduler sees it connect from].
    #[arg(long, value_name = "HOST", env = "ICEMERGE_EXTERNAL_HOST")]
    external_host: Option<String>,

    /// Arrow Flight port (shuffle data and results).
    #[arg(long, value_name = "PORT", default_value_t = 50051)]
    port: u16,

    /// gRPC port the scheduler pushes tasks to.
    #[arg(long, value_name = "PORT", default_value_t = 50052)]
    grpc_port: u16,

    /// Tasks run at once [default: available cores].
    #[arg(long, value_name = "N", default_value_t = 0)]
    task_slots: usize,

    /// Memory for running tasks, shared by the task slots: a size (4GiB, 512MiB, 2G) or a share
    /// of RAM (25%). Sorts, aggregations and repartitions spill to disk
    /// beyond their share of it; a task that cannot fit fails with an
    /// error naming the budget [default: 50% of RAM].
    #[arg(long, value_name = "SIZE", env = "ICEMERGE_MEMORY_LIMIT")]
    memory_limit: Option<MemoryBudget>,

    /// Directory for shuffle files and spill files [default: a temporary directory].
    #[arg(long, value_name = "DIR", env = "ICEMERGE_WORK_DIR")]
    work_dir: Option<PathBuf>,

    /// Poll the scheduler for tasks (the scheduler must run with --pull).
    #[arg(long)]
    pull: bool,

    // This executor's S3 credentials for an s3:// warehouse: plans from the
    // scheduler carry the store's endpoint and region, never credentials.
    #[command(flatten)]
    credentials: S3CredentialArgs,
}

fn split_host_port(address: &str) -> Result<(String, u16), String> {
    let (host, port) = address
        .rsplit_once(':')
        .ok_or_else(|| format!("--scheduler: expected HOST:PORT, got '{address}'"))?;
    let port = port
        .parse()
        .map_err(|_| format!("--scheduler: invalid port in '{address}'"))?;
    Ok((host.trim_matches(['[', ']']).to_string(), port))
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
    let (scheduler_host, scheduler_port) = match split_host_port(&args.scheduler) {
        Ok(hp) => hp,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let credentials = &args.credentials;
    let storage_credentials = icemerge_executor::file_io::s3_credentials(
        credentials.s3_access_key_id.as_deref(),
        credentials.s3_secret_access_key.as_deref(),
        credentials.s3_session_token.as_deref(),
    );
    let options = ExecutorOptions {
        bind_host: args.bind_host,
        external_host: args.external_host,
        port: args.port,
        grpc_port: args.grpc_port,
        scheduler_host,
        scheduler_port,
        task_slots: args.task_slots,
        work_dir: args.work_dir,
        push_scheduling: !args.pull,
        memory_limit: args.memory_limit.unwrap_or_default(),
        storage_credentials,
    };
    match run(options).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
