//! The `icemerge` command: parses the command line, opens a session on the
//! Iceberg catalog and runs SQL from `-c`, `-f`, piped stdin or the
//! interactive prompt. Errors are one `error: ...` line on stderr and exit
//! status 1.

mod error;
mod output;
mod repl;
mod script;

use std::io::{IsTerminal, Read};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use icemerge_scheduler::{CatalogOptions, EngineKind, S3Options, Session, SessionOptions};

use crate::output::{Format, Printer};
use crate::script::run_script;

const EXAMPLES: &str = "\
Examples:
  icemerge -c \"CREATE TABLE t (id BIGINT, name VARCHAR); INSERT INTO t VALUES (1, 'a'); SELECT * FROM t;\"
  icemerge --warehouse /data/wh -f script.sql --format csv > out.csv
  icemerge --engine cluster --executors 4 -c \"SELECT count(*) FROM t\"
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

    /// Warehouse: table data and metadata. A directory (created if missing;
    /// it also holds the default SQLite catalog, catalog.db) or
    /// s3://BUCKET/PREFIX (needs --catalog-uri; see the --s3-* flags).
    #[arg(
        long,
        value_name = "DIR|s3://BUCKET/PREFIX",
        env = "ICEMERGE_WAREHOUSE",
        default_value = "./warehouse"
    )]
    warehouse: PathBuf,

    /// Catalog database: sqlite://PATH or postgres://USER:PASSWORD@HOST/DB
    /// [default: sqlite://<warehouse>/catalog.db]
    #[arg(long, value_name = "URI", env = "ICEMERGE_CATALOG_URI")]
    catalog_uri: Option<String>,

    /// Endpoint of an S3-compatible store for an s3:// warehouse, e.g.
    /// http://127.0.0.1:9000 [default: AWS S3]
    #[arg(long, value_name = "URL", env = "AWS_ENDPOINT_URL")]
    s3_endpoint: Option<String>,

    /// S3 region of an s3:// warehouse (also read from AWS_DEFAULT_REGION).
    #[arg(long, value_name = "REGION", env = "AWS_REGION")]
    s3_region: Option<String>,

    /// S3 access key id for an s3:// warehouse.
    #[arg(long, value_name = "ID", env = "AWS_ACCESS_KEY_ID")]
    s3_access_key_id: Option<String>,

    /// S3 secret access key for an s3:// warehouse.
    #[arg(
        long,
        value_name = "KEY",
        env = "AWS_SECRET_ACCESS_KEY",
        hide_env_values = true
    )]
    s3_secret_access_key: Option<String>,

    /// S3 session token (temporary credentials) for an s3:// warehouse.
    #[arg(
        long,
        value_name = "TOKEN",
        env = "AWS_SESSION_TOKEN",
        hide_env_values = true
    )]
    s3_session_token: Option<String>,

    /// Path-style S3 requests (http://endpoint/bucket/key) [default: true
    /// with --s3-endpoint, false for AWS S3]
    #[arg(long, value_name = "BOOL")]
    s3_path_style_access: Option<bool>,

    /// Engine that runs queries: DataFusion in this process, or a Ballista
    /// scheduler with in-process executors.
    #[arg(long, value_enum, value_name = "ENGINE", default_value_t = EngineArg::Local)]
    engine: EngineArg,

    /// Number of in-process executors of the cluster engine [default:
    /// available cores]. Ignored by the local engine.
    #[arg(long, value_name = "N", value_parser = parse_positive)]
    executors: Option<usize>,

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
            catalog: CatalogOptions {
                warehouse: self.warehouse.clone(),
                catalog_uri: self.catalog_uri.clone(),
                s3: S3Options {
                    endpoint: self.s3_endpoint.clone(),
                    region: self
                        .s3_region
                        .clone()
                        .or_else(|| std::env::var("AWS_DEFAULT_REGION").ok()),
                    access_key_id: self.s3_access_key_id.clone(),
                    secret_access_key: self.s3_secret_access_key.clone(),
                    session_token: self.s3_session_token.clone(),
                    path_style_access: self.s3_path_style_access,
                },
            },
            engine: match self.engine {
                EngineArg::Local => EngineKind::Local,
                EngineArg::Cluster => EngineKind::Cluster,
            },
            executors: self.executors,
            target_partitions: None,
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
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("ICEMERGE_LOG"))
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
    let session = match Session::open(args.session_options()).await {
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
                    ExitCode::FAILURE
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
        assert!(Args::try_parse_from(["icemerge", "--engine", "spark"]).is_err());
        assert!(Args::try_parse_from(["icemerge", "--format", "xml"]).is_err());
    }
}
