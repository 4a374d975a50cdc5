//! `icemerge-bench maintenance`: table maintenance figures beside their
//! floor, in one run.
//!
//! - Compaction (at each of `--rows`): the generated `web_returns` rows loaded as many small data
//!   files (one INSERT per file, `--files`, default 400), then
//!   `CALL system.rewrite_data_files` with its defaults (every file is
//!   below the default minimum size, so all are rewritten into files of the
//!   512 MB target), timed in a child process of its own (peak RSS from
//!   `wait4`), then a `SELECT count(*)` checks the rows. Beside it, the
//!   copy-on-write floor of the same bytes: plain Parquet read and rewrite
//!   of the same files on every core (`floor.rs`).
//! - Expiry: a 1,000-row table given `--snapshots` (default 100) UPDATEs
//!   after its INSERT, each replacing its data file, then
//!   `CALL system.expire_snapshots(older_than => far future, retain_last =>
//!   1)` timed: it drops every snapshot but the current one and deletes the
//!   data files, manifests and manifest lists only they reached.
//!
//! Figures (medians of `--runs`) go to the console and to a section of
//! `docs/BENCHMARKS.md` between its own markers.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args as ClapArgs, ValueEnum};
use icemerge_scheduler::EngineKind;
use serde_json::{json, Value};

use crate::data::{self, ddl_columns, target_file, Layout};
use crate::icemerge::{engine_session, first_row, load_files, open, Engine};
use crate::report::median;
use crate::{commit, floor, local_session, process};

/// Arguments of `icemerge-bench maintenance`.
#[derive(ClapArgs, Debug, Clone)]
pub struct MaintenanceArgs {
    /// Rows of the compacted table, comma separated for several scales.
    #[arg(long, default_value = "1000000", value_delimiter = ',')]
    rows: Vec<u64>,
    /// Small data files the compacted table is loaded as.
    #[arg(long, default_value_t = 400)]
    files: u64,
    /// Snapshots expired.
    #[arg(long, default_value_t = 100)]
    snapshots: u64,
    /// Timed runs of each procedure (medians are reported).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// icemerge engines, comma separated (local, cluster).
    #[arg(long, default_value = "local", value_delimiter = ',')]
    engines: Vec<Engine>,
    /// Executors of the in-process cluster.
    #[arg(long, default_value_t = 2)]
    executors: usize,
    /// Working directory: generated data (kept and reused) and scratch tables.
    #[arg(long, default_value = "/tmp/icemerge-bench")]
    work_dir: PathBuf,
    /// Report whose maintenance section is rewritten.
    #[arg(long, default_value = "docs/BENCHMARKS.md")]
    markdown: PathBuf,
}

/// The procedure a child times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Job {
    Compact,
    Expire,
}

/// Arguments of the hidden `maintenance-child` subcommand.
#[derive(ClapArgs, Debug, Clone)]
pub struct ChildArgs {
    #[arg(long)]
    warehouse: PathBuf,
    #[arg(long, value_enum)]
    job: Job,
    /// Directory of the generated Parquet files (compaction).
    #[arg(long)]
    target_dir: PathBuf,
    #[arg(long)]
    files: u64,
    #[arg(long)]
    snapshots: u64,
    #[arg(long, value_enum)]
    engine: Engine,
    #[arg(long, default_value_t = 2)]
    executors: usize,
}

/// The child: build the table, time the procedure, print one JSON line.
pub async fn child_main(args: ChildArgs) -> Result<()> {
    let load_start = Instant::now();
    let local = open(&args.warehouse, EngineKind::Local, 1, None).await?;
    let (table, call) = match args.job {
        Job::Compact => {
            local
                .execute(&format!(
                    "CREATE SCHEMA db; CREATE TABLE db.t ({})",
                    ddl_columns()
                ))
                .await?;
            load_files(&local, &args.target_dir, args.files).await?;
            ("db.t", "CALL system.rewrite_data_files(table => 'db.t')")
        }
        Job::Expire => {
            local
                .execute(
                    "CREATE SCHEMA db; CREATE TABLE db.e (id BIGINT, v BIGINT); \
                     INSERT INTO db.e SELECT value, 0 FROM generate_series(1, 1000)",
                )
                .await?;
            for _ in 0..args.snapshots {
                local.execute_one("UPDATE db.e SET v = v + 1").await?;
            }
            (
                "db.e",
                "CALL system.expire_snapshots(table => 'db.e', \
                 older_than => TIMESTAMP '2999-01-01 00:00:00', retain_last => 1)",
            )
        }
    };
    let load_seconds = load_start.elapsed().as_secs_f64();
    let session = engine_session(local, &args.warehouse, args.engine, args.executors, None).await?;
    let start = Instant::now();
    let out = session.execute_one(call).await?;
    let seconds = start.elapsed().as_secs_f64();
    let count = session
        .execute_one(&format!("SELECT count(*) AS n FROM {table}"))
        .await?;
    let files = session
        .execute_one(&format!(
            "SELECT count(*) AS n FROM {}.\"{}$files\"",
            "db",
            &table[3..]
        ))
        .await?;
    println!(
        "{}",
        json!({
            "seconds": seconds,
            "load_seconds": load_seconds,
            "result": first_row(&out),
            "rows_after": first_row(&count).get("n"),
            "files_after": first_row(&files).get("n"),
        })
    );
    Ok(())
}

/// One timed procedure.
struct Timed {
    seconds: f64,
    peak_rss: u64,
    result: serde_json::Map<String, Value>,
    rows_after: u64,
    files_after: u64,
}

fn run_child(
    args: &MaintenanceArgs,
    job: Job,
    engine: Engine,
    target: &Path,
    files: u64,
) -> Result<Timed> {
    let warehouse = tempfile::Builder::new()
        .prefix("wh-maintenance-")
        .tempdir_in(&args.work_dir)?;
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.arg("maintenance-child")
        .arg("--warehouse")
        .arg(warehouse.path())
        .args([
            "--job",
            if job == Job::Compact {
                "compact"
            } else {
                "expire"
            },
        ])
        .arg("--target-dir")
        .arg(target)
        .args(["--files", &files.to_string()])
        .args(["--snapshots", &args.snapshots.to_string()])
        .args(["--engine", engine.name()])
        .args(["--executors", &args.executors.to_string()]);
    let done = process::run(cmd, Duration::from_secs(3600))?;
    if !done.success {
        bail!("maintenance child failed: {}", done.stderr.trim());
    }
    let line = done
        .stdout
        .lines()
        .last()
        .context("child printed nothing")?;
    let v: Value = serde_json::from_str(line).with_context(|| format!("child output: {line}"))?;
    Ok(Timed {
        seconds: v["seconds"].as_f64().context("seconds")?,
        peak_rss: done.max_rss,
        result: v["result"].as_object().cloned().unwrap_or_default(),
        rows_after: v["rows_after"].as_u64().unwrap_or(0),
        files_after: v["files_after"].as_u64().unwrap_or(0),
    })
}

/// One line of the report: console and Markdown.
struct Line {
    name: &'static str,
    engine: Engine,
    input: String,
    seconds: f64,
    floor: Option<f64>,
    rss: f64,
    result: String,
}

/// Times `job` `args.runs` times on `engine` (the table loaded from the
/// `files` files in `target`, for compaction, whose rows must stay
/// `rows`): the medians.
fn measure(
    args: &MaintenanceArgs,
    job: Job,
    engine: Engine,
    target: &Path,
    files: u64,
    rows: u64,
) -> Result<(f64, f64, String)> {
    let mut runs = vec![];
    for i in 0..args.runs {
        let t = run_child(args, job, engine, target, files)?;
        if job == Job::Compact && t.rows_after != rows {
            bail!(
                "compaction changed the row count: {} rows after, {rows} before",
                t.rows_after
            );
        }
        eprintln!(
            "{job:?} {} run {i}: {:.3}s rss {} MiB {:?}, {} files after",
            engine.name(),
            t.seconds,
            t.peak_rss / 1048576,
            t.result,
            t.files_after
        );
        runs.push(t);
    }
    let seconds = median(runs.iter().map(|r| r.seconds).collect()).unwrap_or(0.0);
    let rss = median(runs.iter().map(|r| r.peak_rss as f64).collect()).unwrap_or(0.0);
    let result = runs[0]
        .result
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ");
    Ok((seconds, rss, result))
}

/// Runs the maintenance benchmarks and writes their report section.
pub async fn run(args: MaintenanceArgs) -> Result<()> {
    std::fs::create_dir_all(&args.work_dir)?;
    let gen = local_session(&args.work_dir.join("gen-warehouse")).await?;
    let mut lines = vec![];
    for &rows in &args.rows {
        let layout = Layout::checked(rows, args.files)?;
        let target = args
            .work_dir
            .join(format!("data-{}-{}", layout.rows, layout.files))
            .join("target");
        data::write_target(&gen, layout, &target).await?;
        let inputs: Vec<PathBuf> = (0..args.files).map(|f| target_file(&target, f)).collect();
        let input_bytes: u64 = inputs
            .iter()
            .map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
            .sum();
        let (floor_runs, _) = floor::measure_runs(&inputs, &args.work_dir, args.runs)?;
        let floor = median(floor_runs).unwrap_or(0.0);
        eprintln!(
            "{rows} rows: floor of {} files, median {floor:.3}s",
            args.files
        );
        for &engine in &args.engines {
            let (seconds, rss, result) =
                measure(&args, Job::Compact, engine, &target, args.files, rows)?;
            lines.push(Line {
                name: "rewrite_data_files",
                engine,
                input: format!(
                    "{rows} rows in {} files, {:.1} MB",
                    args.files,
                    input_bytes as f64 / 1e6
                ),
                seconds,
                floor: Some(floor),
                rss,
                result,
            });
        }
    }
    for &engine in &args.engines {
        let (seconds, rss, result) = measure(&args, Job::Expire, engine, Path::new("."), 0, 0)?;
        lines.push(Line {
            name: "expire_snapshots",
            engine,
            input: format!("{} snapshots of a 1,000-row table", args.snapshots + 1),
            seconds,
            floor: None,
            rss,
            result,
        });
    }

    let rows = args
        .rows
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let mut md = String::new();
    let _ = writeln!(
        md,
        "### Maintenance\n\nCommit {}, {}. Command: `icemerge-bench maintenance --rows {rows} \
         --files {} --snapshots {} --runs {}`; medians of {} runs, each in a child process \
         on a fresh table.\n",
        commit(),
        crate::command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]).unwrap_or_default(),
        args.files,
        args.snapshots,
        args.runs,
        args.runs
    );
    let _ = writeln!(
        md,
        "| procedure | engine | input | s | floor s | s / floor | peak RSS MiB | result |\n\
         |---|---|---|---|---|---|---|---|"
    );
    let mut console = comfy_table::Table::new();
    console.set_header(vec![
        "procedure",
        "engine",
        "input",
        "s",
        "floor s",
        "ratio",
        "RSS MiB",
        "result",
    ]);
    for line in &lines {
        let (floor, ratio) = match line.floor {
            Some(f) => (
                format!("{f:.3}"),
                format!("{:.2}", line.seconds / f.max(1e-9)),
            ),
            None => ("—".to_string(), "—".to_string()),
        };
        let cells = vec![
            line.name.to_string(),
            line.engine.name().to_string(),
            line.input.clone(),
            format!("{:.3}", line.seconds),
            floor,
            ratio,
            format!("{:.0}", line.rss / 1048576.0),
            line.result.clone(),
        ];
        let _ = writeln!(md, "| {} |", cells.join(" | "));
        console.add_row(cells);
    }
    let _ = writeln!(
        md,
        "\nThe floor is a plain Parquet read and rewrite of the same {} files on every core \
         (no deletes to apply, no commit) with the Parquet writer's defaults, whose dictionary \
         pages on every column cost more than icemerge's capped ones on large inputs. \
         Compaction writes one file per 512 MB of input, so small tables get one writer.",
        args.files
    );
    println!("{console}");
    write_section(&args.markdown, &md)
}

const BEGIN: &str =
    "<!-- maintenance:begin (generated by icemerge-bench maintenance; edits here are overwritten) -->";
const END: &str = "<!-- maintenance:end -->";

/// Writes `section` between the maintenance markers of `path`.
fn write_section(path: &Path, section: &str) -> Result<()> {
    let generated = format!("{BEGIN}\n{section}{END}");
    let old = std::fs::read_to_string(path).unwrap_or_default();
    let text = match (old.find(BEGIN), old.find(END)) {
        (Some(b), Some(e)) if e > b => format!("{}{generated}{}", &old[..b], &old[e + END.len()..]),
        _ => format!("{old}\n{generated}\n"),
    };
    std::fs::write(path, text)?;
    Ok(())
}
