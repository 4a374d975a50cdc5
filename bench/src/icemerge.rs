//! icemerge runs: every merge in its own child process (this binary,
//! re-invoked with the hidden `merge-child` subcommand), so that each run
//! gets a fresh table and its own peak RSS.
//!
//! The child creates the table and loads it from the generated Parquet
//! files, one INSERT per file (one data file each), with the local engine;
//! then it opens the requested engine, resets its peak-RSS mark and times
//! only the MERGE, then a `SELECT count(*)` of the merged table in the same
//! session. It prints one JSON line: merge seconds, load seconds, the MERGE
//! result row, the merge's own peak RSS and the count's seconds and rows.
//!
//! The table is created in one of icemerge's two write modes: copy-on-write
//! (the default) or merge-on-read (`'write.merge.mode' = 'merge-on-read'`,
//! format version 2), so both modes run on the same data.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args as ClapArgs, ValueEnum};
use icemerge_proto::memory_budget::MemoryBudget;
use icemerge_scheduler::{CatalogOptions, EngineKind, Session, SessionOptions, StatementOutput};
use serde_json::{json, Map, Value};

use crate::data::{ddl_columns, target_file};
use crate::process;

/// Engines as a flag value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Engine {
    Local,
    Cluster,
}

impl Engine {
    pub fn name(self) -> &'static str {
        match self {
            Engine::Local => "local",
            Engine::Cluster => "cluster",
        }
    }
}

/// The write mode of the MERGE's target table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// Copy-on-write: touched data files are rewritten.
    Cow,
    /// Merge-on-read: position delete files beside the data files.
    Mor,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Cow => "cow",
            Mode::Mor => "mor",
        }
    }

    /// The table properties of `CREATE TABLE`.
    fn properties(self) -> &'static str {
        match self {
            Mode::Cow => "",
            Mode::Mor => {
                " TBLPROPERTIES ('format-version' = '2', 'write.merge.mode' = 'merge-on-read')"
            }
        }
    }
}

/// Arguments of the hidden `merge-child` subcommand.
#[derive(ClapArgs, Debug, Clone)]
pub struct ChildArgs {
    /// Fresh warehouse directory for this run.
    #[arg(long)]
    pub warehouse: PathBuf,
    /// Directory of the target Parquet files.
    #[arg(long)]
    pub target_dir: PathBuf,
    /// Number of target files.
    #[arg(long)]
    pub files: u64,
    #[arg(long, value_enum)]
    pub engine: Engine,
    #[arg(long, default_value_t = 2)]
    pub executors: usize,
    #[arg(long, value_enum, default_value_t = Mode::Cow)]
    pub mode: Mode,
    /// The MERGE statement (into `db.t`).
    #[arg(long)]
    pub sql: String,
    /// Run `EXPLAIN ANALYZE` of the MERGE instead and print it to stderr.
    #[arg(long)]
    pub explain_analyze: bool,
    /// The merge's memory budget (default: icemerge's default).
    #[arg(long)]
    pub memory_limit: Option<MemoryBudget>,
}

pub(crate) async fn open(
    warehouse: &Path,
    engine: EngineKind,
    executors: usize,
    memory_limit: Option<MemoryBudget>,
) -> Result<Session> {
    Ok(Session::open(SessionOptions {
        catalog: CatalogOptions {
            warehouse: warehouse.to_path_buf(),
            catalog_uri: None,
            ..Default::default()
        },
        engine,
        executors: Some(executors),
        target_partitions: None,
        memory_limit,
    })
    .await?)
}

/// Loads `db.t` from the generated target files, one INSERT (one data
/// file) each.
pub(crate) async fn load_files(session: &Session, dir: &Path, files: u64) -> Result<()> {
    for f in 0..files {
        session
            .execute_one(&format!(
                "INSERT INTO db.t SELECT * FROM read_parquet('{}')",
                target_file(dir, f).display()
            ))
            .await?;
    }
    Ok(())
}

/// The session of `engine` on `warehouse`: `local` itself, or a cluster
/// opened once `local` is closed.
pub(crate) async fn engine_session(
    local: Session,
    warehouse: &Path,
    engine: Engine,
    executors: usize,
    memory_limit: Option<MemoryBudget>,
) -> Result<Session> {
    Ok(match engine {
        Engine::Local => local,
        Engine::Cluster => {
            drop(local);
            open(warehouse, EngineKind::Cluster, executors, memory_limit).await?
        }
    })
}

/// The first row of a result as a JSON object.
pub(crate) fn first_row(out: &StatementOutput) -> Map<String, Value> {
    let mut row = Map::new();
    if let StatementOutput::Rows { batches, .. } = out {
        if let Some(batch) = batches.first().filter(|b| b.num_rows() > 0) {
            for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
                let text = arrow::util::display::array_value_to_string(column.as_ref(), 0)
                    .unwrap_or_default();
                let value = text
                    .parse::<u64>()
                    .map(Value::from)
                    .unwrap_or(Value::from(text));
                row.insert(field.name().clone(), value);
            }
        }
    }
    row
}

/// The child: load a fresh table, time one MERGE, print one JSON line.
pub async fn child_main(args: ChildArgs) -> Result<()> {
    let load_start = Instant::now();
    let local = open(&args.warehouse, EngineKind::Local, 1, args.memory_limit).await?;
    local
        .execute(&format!(
            "CREATE SCHEMA db; CREATE TABLE db.t ({}){}",
            ddl_columns(),
            args.mode.properties()
        ))
        .await?;
    load_files(&local, &args.target_dir, args.files).await?;
    let load_seconds = load_start.elapsed().as_secs_f64();
    let session = engine_session(
        local,
        &args.warehouse,
        args.engine,
        args.executors,
        args.memory_limit,
    )
    .await?;
    let reset = process::reset_peak_rss();
    let sql = if args.explain_analyze {
        format!("EXPLAIN ANALYZE {}", args.sql)
    } else {
        args.sql.clone()
    };
    let start = Instant::now();
    let out = session.execute_one(&sql).await?;
    let seconds = start.elapsed().as_secs_f64();
    let merge_rss = if reset { process::own_peak_rss() } else { None };
    let mut count_seconds = None;
    let mut count_rows = None;
    if args.explain_analyze {
        if let StatementOutput::Rows { batches, .. } = &out {
            let text = arrow::util::pretty::pretty_format_batches(batches)?;
            eprintln!("{text}");
        }
    } else {
        // A reader of the merged table: in merge-on-read it applies the
        // delete files the MERGE wrote.
        let start = Instant::now();
        let count = session
            .execute_one("SELECT count(*) AS n FROM db.t")
            .await?;
        count_seconds = Some(start.elapsed().as_secs_f64());
        count_rows = first_row(&count).get("n").and_then(Value::as_u64);
    }
    println!(
        "{}",
        json!({
            "seconds": seconds,
            "load_seconds": load_seconds,
            "result": first_row(&out),
            "merge_peak_rss": merge_rss,
            "count_seconds": count_seconds,
            "count_rows": count_rows,
        })
    );
    Ok(())
}

/// One measured icemerge merge.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Run {
    pub seconds: f64,
    pub load_seconds: f64,
    /// Peak RSS of the child process (load + merge), bytes.
    pub process_peak_rss: u64,
    /// Peak RSS during the MERGE alone, bytes.
    pub merge_peak_rss: Option<u64>,
    pub result: Map<String, Value>,
    /// `SELECT count(*)` of the merged table, seconds (same session).
    #[serde(default)]
    pub count_seconds: Option<f64>,
    /// Its result.
    #[serde(default)]
    pub count_rows: Option<u64>,
}

/// Runs one merge in a child process with a fresh warehouse under `work`.
#[allow(clippy::too_many_arguments)]
pub fn run(
    work: &Path,
    target_dir: &Path,
    files: u64,
    engine: Engine,
    mode: Mode,
    executors: usize,
    sql: &str,
    explain_analyze: bool,
    memory_limit: Option<MemoryBudget>,
) -> Result<(Run, String)> {
    let warehouse = tempfile::Builder::new()
        .prefix(&format!("wh-{}-{}-", engine.name(), mode.name()))
        .tempdir_in(work)?;
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.arg("merge-child")
        .arg("--warehouse")
        .arg(warehouse.path())
        .arg("--target-dir")
        .arg(target_dir)
        .args(["--files", &files.to_string()])
        .args(["--engine", engine.name()])
        .args(["--executors", &executors.to_string()])
        .args(["--mode", mode.name()])
        .args(["--sql", sql]);
    if explain_analyze {
        cmd.arg("--explain-analyze");
    }
    if let Some(limit) = memory_limit {
        cmd.args(["--memory-limit", &limit.bytes().to_string()]);
    }
    let done = process::run(cmd, Duration::from_secs(3600))?;
    if !done.success {
        bail!(
            "icemerge {} {} merge failed: {}",
            engine.name(),
            mode.name(),
            done.stderr.trim()
        );
    }
    let line = done
        .stdout
        .lines()
        .last()
        .context("merge child printed nothing")?;
    let v: Value = serde_json::from_str(line).with_context(|| format!("child output: {line}"))?;
    let run = Run {
        seconds: v["seconds"].as_f64().context("seconds")?,
        load_seconds: v["load_seconds"].as_f64().unwrap_or(0.0),
        process_peak_rss: done.max_rss,
        merge_peak_rss: v["merge_peak_rss"].as_u64(),
        result: v["result"].as_object().cloned().unwrap_or_default(),
        count_seconds: v["count_seconds"].as_f64(),
        count_rows: v["count_rows"].as_u64(),
    };
    Ok((run, done.stderr))
}
