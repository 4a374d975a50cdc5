//! The `icemerge` command: parses the command line, opens a session on the
//! Iceberg catalog (or connects to a running `icemerge-scheduler` with
//! `--scheduler`) and runs SQL from `-c`, `-f`, piped stdin or the
//! interactive prompt. Errors are one `error: ...` line on stderr and exit
//! status 1.

mod backend;
mod catalog_args;
mod error;
mod flight_client;
mod log_filter;
mod output;
mod progress;
mod remote;
mod repl;
mod script;

use std::io::{IsTerminal, Read};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use icemerge_proto::memory_budget::MemoryBudget;
use icemerge_scheduler::{EngineKind, Session, SessionOptions};

use crate::catalog_args::CatalogArgs;

use crate::backend::Backend;
use crate::output::{Format, Printer};
use crate::remote::RemoteSession;
use crate::script::run_script;

const EXAMPLES: &str = "\
Examples:
  icemerge -c \"CREATE TABLE t (id BIGINT, name VARCHAR); INSERT INTO t VALUES (1, 'a'); SELECT * FROM t;\"
  icemerge --warehouse /data/wh -f script.sql --format csv > out.csv
  icemerge --engine cluster --executors 4 -c \"SELECT count(*) FROM t\"
  icemerge --scheduler 10.0.0.5:50060 --token \"$TOKEN\" -f merge.sql
  icemerge --scheduler grpc+tls://sched.example:50060 --tls-ca ca.pem --token \"$TOKEN\" -f merge.sql
  echo \"SELECT 1;\" | icemerge
  icemerge                      (interactive prompt; end statements with ';', \\q to quit)";

/// Runs SQL on Apache Iceberg tables.
///
/// Without -c or -f, statements are read from an interactive prompt (or, if
/// stdin is not a terminal, from stdin as a script). Statements run in order
/// and each prints its output when it completes; the first error stops the
/// run with exit status 1.
#[derive(Debug, Parser)]
#[command(name = "icemerge", version, after_help = EXAMPLES)]
struct Args {
    /// SQL to run: one or more statements separated by ';'.
    #[arg(
        short = 'c',
        long = "command",
        value_name = "SQL",
        conflicts_with = "file"
    )]
    command: Option<String>,

    /// A SQL script to run ('-' reads stdin).
    #[arg(short = 'f', long = "file", value_name = "PATH")]
    file: Option<PathBuf>,

    #[command(flatten)]
    catalog: CatalogArgs,

    /// Engine that runs queries: DataFusion in this process, or a Ballista
    /// scheduler with in-process executors.
    #[arg(long, value_enum, value_name = "ENGINE", default_value_t = EngineArg::Local)]
    engine: EngineArg,

    /// Number of in-process executors of the cluster engine [default:
    /// available cores]. Ignored by the local engine.
    #[arg(long, value_name = "N", value_parser = parse_positive)]
    executors: Option<usize>,

    /// Memory for running statements: a size (4GiB, 512MiB, 2G) or a share
    /// of RAM (25%). Sorts, aggregations and repartitions spill to disk
    /// beyond their share of it; a statement that cannot fit fails with an
    /// error naming the budget. The in-process
    /// cluster's executors share it [default: 50% of RAM].
    #[arg(long, value_name = "SIZE", env = "ICEMERGE_MEMORY_LIMIT")]
    memory_limit: Option<MemoryBudget>,

    /// Run statements on a running icemerge-scheduler (its Flight SQL port)
    /// instead of an embedded engine: HOST:PORT, or grpc+tls://HOST:PORT when
    /// the port has a TLS certificate; --warehouse, --catalog-uri, --engine,
    /// --executors and --memory-limit are then the scheduler's business.
    #[arg(
        long,
        value_name = "HOST:PORT",
        env = "ICEMERGE_SCHEDULER",
        conflicts_with_all = ["engine", "executors", "memory_limit"]
    )]
    scheduler: Option<String>,

    /// Bearer token for --scheduler (when the scheduler requires one).
    #[arg(
        long,
        value_name = "TOKEN",
        env = "ICEMERGE_TOKEN",
        hide_env_values = true
    )]
    token: Option<String>,

    /// Run in the scheduler's session of this name, shared by every client
    /// that names it (its SET settings; its statements run in order).
    /// Without it, each `icemerge --scheduler` run has a session of its own.
    #[arg(
        long,
        value_name = "NAME",
        env = "ICEMERGE_SESSION",
        requires = "scheduler"
    )]
    session: Option<String>,

    /// PEM certificate of the CA that signed the scheduler's TLS
    /// certificate (trusted instead of the system's roots); implies TLS
    /// for a bare HOST:PORT. Without it, a grpc+tls:// --scheduler uses the
    /// system's roots.
    #[arg(
        long,
        value_name = "PEM",
        env = "ICEMERGE_TLS_CA",
        requires = "scheduler"
    )]
    tls_ca: Option<std::path::PathBuf>,

    /// Output format of query results.
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = Format::Table)]
    format: Format,

    /// No status lines: no row-count footers or DDL messages.
    #[arg(short, long)]
    quiet: bool,
}

/// `--engine` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum EngineArg {
    /// DataFusion in this process.
    Local,
    /// Ballista: an in-process scheduler and executors.
    Cluster,
}

fn parse_positive(value: &str) -> Result<usize, String> {
    match value.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("expected a positive integer, got '{value}'")),
    }
}

impl Args {
    fn session_options(&self) -> SessionOptions {
        SessionOptions {
            catalog: self.catalog.options(),
            engine: match self.engine {
                EngineArg::Local => EngineKind::Local,
                EngineArg::Cluster => EngineKind::Cluster,
            },
            executors: self.executors,
            target_partitions: None,
            memory_limit: self.memory_limit,
        }
    }
}

/// Where statements come from.
enum Input {
    Script(String),
    Interactive,
}

fn read_input(args: &Args) -> anyhow::Result<Input> {
    if let Some(sql) = &args.command {
        return Ok(Input::Script(sql.clone()));
    }
    match &args.file {
        Some(path) if path.as_os_str() == "-" => read_stdin().map(Input::Script),
        Some(path) => std::fs::read_to_string(path)
            .map(Input::Script)
            .map_err(|e| anyhow::anyhow!("cannot read '{}': {e}", path.display())),
        None if std::io::stdin().is_terminal() => Ok(Input::Interactive),
        None => read_stdin().map(Input::Script),
    }
}

fn read_stdin() -> anyhow::Result<String> {
    let mut sql = String::new();
    std::io::stdin()
        .read_to_string(&mut sql)
        .map_err(|e| anyhow::anyhow!("cannot read stdin: {e}"))?;
    Ok(sql)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> ExitCode {
    // Diagnostics go to stderr, off unless ICEMERGE_LOG is set (e.g. "info").
    tracing_subscriber::fmt()
        // Errors only by default; the embedded cluster's executors may need
        // a second try to register, which Ballista logs as errors.
        .with_env_filter(log_filter::log_filter(
            "error,ballista_scheduler::scheduler_server::grpc=off,\
             ballista_executor::executor_server=off",
        ))
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let printer = Printer {
        format: args.format,
        quiet: args.quiet,
    };
    let input = match read_input(&args) {
        Ok(input) => input,
        Err(e) => {
            error::report(&format!("{e:#}"));
            return ExitCode::FAILURE;
        }
    };
    let opened = match &args.scheduler {
        Some(address) => {
            let token = args.token.as_deref().filter(|t| !t.is_empty());
            let session = args.session.as_deref().filter(|s| !s.is_empty());
            RemoteSession::connect(address, token, args.tls_ca.as_deref(), session)
                .await
                .map(|mut remote| {
                    // Progress bars go to stderr, for someone watching a terminal.
                    remote.progress = std::io::stdout().is_terminal() && !args.quiet;
                    Backend::Remote(remote)
                })
        }
        None => Session::open(args.session_options())
            .await
            .map(Backend::Embedded),
    };
    let session = match opened {
        Ok(session) => session,
        Err(e) => {
            error::report(&e);
            return ExitCode::FAILURE;
        }
    };
    match input {
        Input::Script(sql) => {
            let mut stdout = std::io::stdout().lock();
            match run_script(&session, &sql, &printer, &mut stdout).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) if e.is_broken_pipe() => ExitCode::SUCCESS,
                Err(e) => {
                    drop(stdout);
                    error::report(&e);
                    if e.is_cancelled() {
                        // 128 + SIGINT, as a shell reports an interrupted command.
                        ExitCode::from(130)
                    } else {
                        ExitCode::FAILURE
                    }
                }
            }
        }
        Input::Interactive => match repl::run(&session, &printer).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                error::report(&format!("{e:#}"));
                ExitCode::FAILURE
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn command_line_is_consistent() {
        Args::command().debug_assert();
    }

    #[test]
    fn parses_flags() {
        let args = Args::try_parse_from([
            "icemerge",
            "-c",
            "SELECT 1",
            "--warehouse",
            "/tmp/wh",
            "--engine",
            "cluster",
            "--executors",
            "3",
            "--format",
            "csv",
            "--catalog-name",
            "lake",
            "-q",
        ])
        .unwrap();
        assert_eq!(args.command.as_deref(), Some("SELECT 1"));
        assert_eq!(args.engine, EngineArg::Cluster);
        assert_eq!(args.format, Format::Csv);
        assert!(args.quiet);
        let options = args.session_options();
        assert_eq!(options.engine, EngineKind::Cluster);
        assert_eq!(options.executors, Some(3));
        assert_eq!(options.catalog.warehouse, PathBuf::from("/tmp/wh"));
        assert_eq!(options.catalog.catalog_name, "lake");
    }

    #[test]
    fn parses_s3_flags() {
        let args = Args::try_parse_from([
            "icemerge",
            "--warehouse",
            "s3://bucket/wh",
            "--catalog-uri",
            "postgres://u:p@127.0.0.1:5432/cat",
            "--s3-endpoint",
            "http://127.0.0.1:9000",
            "--s3-region",
            "eu-west-1",
            "--s3-access-key-id",
            "AKID",
            "--s3-secret-access-key",
            "SECRET",
            "--s3-path-style-access",
            "false",
        ])
        .unwrap();
        let s3 = args.session_options().catalog.s3;
        assert_eq!(s3.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        assert_eq!(s3.region.as_deref(), Some("eu-west-1"));
        assert_eq!(s3.access_key_id.as_deref(), Some("AKID"));
        assert_eq!(s3.secret_access_key.as_deref(), Some("SECRET"));
        assert_eq!(s3.path_style_access, Some(false));
        let props = s3.file_io_props();
        assert_eq!(props["s3.path-style-access"], "false");
        assert_eq!(props["s3.secret-access-key"], "SECRET");
    }

    #[test]
    fn rejects_bad_flags() {
        assert!(Args::try_parse_from(["icemerge", "-c", "x", "-f", "y"]).is_err());
        assert!(Args::try_parse_from(["icemerge", "--executors", "0"]).is_err());
        let small = Args::try_parse_from(["icemerge", "--memory-limit", "1KiB"]).unwrap_err();
        assert!(small.to_string().contains("too small"), "{small}");
        assert!(Args::try_parse_from(["icemerge", "--memory-limit", "lots"]).is_err());
        assert!(
            Args::try_parse_from(["icemerge", "--scheduler", "h:1", "--memory-limit", "1G"])
                .is_err()
        );
        let budget = Args::try_parse_from(["icemerge", "--memory-limit", "64MiB"]).unwrap();
        assert_eq!(
            budget.session_options().memory_limit.map(|b| b.bytes()),
            Some(64 << 20)
        );
        assert!(Args::try_parse_from(["icemerge", "--engine", "spark"]).is_err());
        assert!(Args::try_parse_from(["icemerge", "--format", "xml"]).is_err());
        assert!(
            Args::try_parse_from(["icemerge", "--scheduler", "h:1", "--engine", "cluster"])
                .is_err()
        );
        let remote =
            Args::try_parse_from(["icemerge", "--scheduler", "h:1", "--token", "t"]).unwrap();
        assert_eq!(remote.scheduler.as_deref(), Some("h:1"));
        assert_eq!(remote.token.as_deref(), Some("t"));
    }
}
