//! icemerge-bench: the Delta merge-benchmark cases on icemerge (local engine
//! and in-process cluster; copy-on-write and merge-on-read tables, each
//! merge followed by a timed `SELECT count(*)` of the result) beside
//! delta-rs, PyIceberg and DuckDB (`shared/bench/peers.py`), Spark + Iceberg
//! (`bench/spark_peer.py`) and the copy-on-write floor, over the same
//! generated `web_returns`-shaped data, in one run.
//!
//! Modules: `data` (generation), `cases` (the case matrix and MERGE SQL),
//! `icemerge` (a merge per child process), `peers` (peers.py per peer),
//! `floor` (plain Parquet rewrite of the touched files), `process` (child
//! processes with peak RSS), `report` (JSON, console and Markdown),
//! `maintenance` (the `maintenance` subcommand: compaction and expiry).

mod cases;
mod data;
mod floor;
mod icemerge;
mod maintenance;
mod peers;
mod plot;
mod process;
mod report;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Result};
use clap::{Parser, Subcommand};
use icemerge_proto::memory_budget::MemoryBudget;
use icemerge_scheduler::{CatalogOptions, EngineKind, Session, SessionOptions};

use crate::cases::Case;
use crate::data::{target_file, Layout, NewKeys};
use crate::icemerge::{Engine, Mode};
use crate::report::{CaseResult, EngineResult, Floor, Report, ScaleResult};

#[derive(Parser, Debug)]
#[command(
    about = "MERGE benchmark: icemerge beside delta-rs, PyIceberg, DuckDB and the copy-on-write floor",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    sub: Option<Sub>,
    #[command(flatten)]
    args: Args,
}

#[derive(Subcommand, Debug)]
enum Sub {
    /// Internal: load a fresh table and time one MERGE (one child process).
    #[command(hide = true)]
    MergeChild(icemerge::ChildArgs),
    /// Table maintenance: compaction of many small files beside the
    /// copy-on-write floor, and the expiry of many snapshots.
    Maintenance(maintenance::MaintenanceArgs),
    /// Internal: build a table and time one maintenance procedure.
    #[command(hide = true)]
    MaintenanceChild(maintenance::ChildArgs),
}

#[derive(clap::Args, Debug)]
struct Args {
    /// Target rows.
    #[arg(long, default_value_t = 1_000_000)]
    rows: u64,
    /// Target data files (key ranges split evenly).
    #[arg(long, default_value_t = 40)]
    files: u64,
    /// Timed merges per icemerge engine and floor runs (medians are reported).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Cases to run, comma separated: exact names, `prefix*`, or `all`.
    #[arg(long, default_value = "all")]
    cases: String,
    /// icemerge engines, comma separated (local, cluster).
    #[arg(long, default_value = "local,cluster", value_delimiter = ',')]
    engines: Vec<Engine>,
    /// icemerge write modes, comma separated: cow (copy-on-write) and mor
    /// (merge-on-read: 'write.merge.mode' = 'merge-on-read', format version
    /// 2), each on a fresh table loaded from the same data.
    #[arg(long, default_value = "cow,mor", value_delimiter = ',')]
    modes: Vec<Mode>,
    /// Executors of the in-process cluster.
    #[arg(long, default_value_t = 2)]
    executors: usize,
    /// icemerge's memory budget in each merge process (e.g. `2GiB`;
    /// default: icemerge's default, half the machine's RAM).
    #[arg(long)]
    memory_limit: Option<MemoryBudget>,
    /// Peers, comma separated (empty or `none` for none): delta, duckdb,
    /// pyiceberg (through peers.py), spark and spark_mor (Spark 3.5 +
    /// Iceberg on a copy-on-write / merge-on-read table, through
    /// bench/spark_peer.py).
    #[arg(long, default_value = "delta,duckdb,pyiceberg", value_parser = peer_list)]
    peers: String,
    /// Cases PyIceberg runs (same syntax as --cases) [default: its upsert
    /// cases fixed_cost_one_row, concentrated_upsert and upsert_0.01_0.1 up
    /// to 1M rows, only concentrated_upsert above: its composite-key upsert
    /// is very slow].
    #[arg(long)]
    pyiceberg_cases: Option<String>,
    /// A peer run taking longer is killed and reported as a timeout.
    #[arg(long, default_value_t = 300)]
    peer_timeout: u64,
    /// Python with deltalake, duckdb, pyiceberg and pyarrow.
    #[arg(long, default_value = "python3")]
    python: String,
    /// peers.py.
    #[arg(long, default_value = "../shared/bench/peers.py")]
    peers_script: PathBuf,
    /// Python with pyspark 3.5, for the spark peers.
    #[arg(long, default_value = "~/.cache/icemerge-spark/venv/bin/python")]
    spark_python: String,
    /// Iceberg Spark runtime and relocated Jackson jars.
    #[arg(long, default_value = "~/.cache/icemerge-spark/jars")]
    spark_jars: String,
    /// spark_peer.py.
    #[arg(long, default_value = "bench/spark_peer.py")]
    spark_script: PathBuf,
    /// Working directory: generated data (kept and reused) and scratch tables.
    #[arg(long, default_value = "/tmp/icemerge-bench")]
    work_dir: PathBuf,
    /// Raw results (scales already in the file are kept unless re-run).
    #[arg(long, default_value = "docs/benchmarks.json")]
    json: PathBuf,
    /// Report whose generated section is rewritten.
    #[arg(long, default_value = "docs/BENCHMARKS.md")]
    markdown: PathBuf,
    /// Plot of merge time and peak RSS against table size (SVG), rewritten
    /// with the report when a case has figures at two sizes or more.
    #[arg(long, default_value = "docs/benchmarks-scaling.svg")]
    plot: PathBuf,
    /// Take peer and floor figures of a case from the JSON (same scale)
    /// instead of running them again; only icemerge runs.
    #[arg(long)]
    reuse_peers: bool,
    /// Only re-render the Markdown from the JSON.
    #[arg(long)]
    report_only: bool,
    /// Profile: run EXPLAIN ANALYZE of this case's MERGE once per engine and
    /// print it; nothing else runs.
    #[arg(long, value_name = "CASE")]
    explain_analyze: Option<String>,
}

fn selected(filter: &str, name: &str) -> bool {
    filter.split(',').map(str::trim).any(|f| {
        f == "all" || f == name || f.strip_suffix('*').is_some_and(|p| name.starts_with(p))
    })
}

/// `~/` expanded to $HOME.
fn home(path: &str) -> String {
    match (path.strip_prefix("~/"), std::env::var("HOME")) {
        (Some(rest), Ok(h)) => format!("{h}/{rest}"),
        _ => path.to_string(),
    }
}

pub(crate) fn command_output(cmd: &str, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new(cmd).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// HEAD's short hash, `-dirty` when files outside docs/ (where the run
/// writes its own results) differ from it.
pub(crate) fn commit() -> String {
    let head = command_output("git", &["rev-parse", "--short", "HEAD"]).unwrap_or_default();
    let dirty = command_output("git", &["status", "--porcelain", "--", ".", ":!docs"])
        .is_some_and(|s| !s.is_empty());
    if dirty {
        format!("{head}-dirty")
    } else {
        head
    }
}

fn machine(python: &str) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    m.insert(
        "cores".into(),
        std::thread::available_parallelism()
            .map(|n| n.get().to_string())
            .unwrap_or_default(),
    );
    if let Ok(info) = std::fs::read_to_string("/proc/meminfo") {
        if let Some(kib) = info
            .lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
        {
            m.insert("RAM".into(), format!("{:.1} GiB", kib as f64 / 1048576.0));
        }
    }
    if let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") {
        if let Some(model) = info
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split(':').nth(1))
        {
            m.insert("CPU".into(), model.trim().to_string());
        }
    }
    if let Some(v) = command_output(
        python,
        &[
            "-c",
            "import deltalake, duckdb, pyiceberg, pyarrow; \
             print(f'deltalake {deltalake.__version__}, duckdb {duckdb.__version__}, \
             pyiceberg {pyiceberg.__version__}, pyarrow {pyarrow.__version__}')",
        ],
    ) {
        m.insert("peers".into(), v);
    }
    m.insert(
        "load".into(),
        "shared with other engineers' builds (figures are noisy)".into(),
    );
    m
}

pub(crate) async fn local_session(warehouse: &Path) -> Result<Session> {
    Ok(Session::open(SessionOptions {
        catalog: CatalogOptions {
            warehouse: warehouse.to_path_buf(),
            catalog_uri: None,
            ..Default::default()
        },
        engine: EngineKind::Local,
        executors: Some(1),
        target_partitions: None,
        ..Default::default()
    })
    .await?)
}

/// Data paths of one case: (target dir, source file).
fn case_paths(work: &Path, case: &Case, layout: Layout) -> (PathBuf, PathBuf) {
    let l = case.layout(layout);
    let data = work.join(format!("data-{}-{}", l.rows, l.files));
    let source = work
        .join(format!("data-{}-{}", layout.rows, layout.files))
        .join("sources")
        .join(match case.source.new_keys {
            NewKeys::AboveTarget => format!("{}.parquet", case.name),
            NewKeys::InsideTarget => format!("{}-keys-inside.parquet", case.name),
        });
    (data.join("target"), source)
}

async fn run_case(
    args: &Args,
    gen: &Session,
    case: &Case,
    layout: Layout,
    pyiceberg: bool,
    previous: Option<&CaseResult>,
) -> Result<CaseResult> {
    let l = case.layout(layout);
    let (target_dir, source) = case_paths(&args.work_dir, case, layout);
    data::write_target(gen, l, &target_dir).await?;
    std::fs::create_dir_all(source.parent().expect("sources dir"))?;
    data::write_source(gen, l.rows, &case.source, &source).await?;
    let source_rows = l.count(&case.source.matched) + l.count(&case.source.new);

    // Files holding matched keys that an action changes.
    let touched: Vec<u64> = if case.source.identical {
        vec![]
    } else {
        l.touched_files(&case.source.matched)
    };
    let mut result = CaseResult {
        name: case.name.clone(),
        peer_case: case.peer_case().into(),
        peer_note: case.peer_note.into(),
        matched_fraction: case.fractions.0,
        not_matched_fraction: case.fractions.1,
        target_rows: l.rows,
        source_rows,
        touched_files: touched.len(),
        local: None,
        cluster: None,
        local_mor: None,
        cluster_mor: None,
        peers: vec![],
        floor: None,
        commit: commit(),
        date: command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]).unwrap_or_default(),
    };

    if let Some(prev) = previous {
        result.floor = prev.floor.clone();
        result.peers = prev.peers.clone();
    } else if !touched.is_empty() {
        let files: Vec<PathBuf> = touched
            .iter()
            .map(|&f| target_file(&target_dir, f))
            .collect();
        let (runs, bytes) = floor::measure_runs(&files, &args.work_dir, args.runs)?;
        eprintln!(
            "  floor: {} files, median {:.3}s",
            files.len(),
            report::median(runs.clone()).unwrap_or(0.0)
        );
        result.floor = Some(Floor {
            files: files.len(),
            runs,
            bytes_written: bytes,
        });
    }

    let sql = case.merge_sql("db.t", &source.display().to_string());
    for &mode in &args.modes {
        for &engine in &args.engines {
            let mut runs = vec![];
            for i in 0..args.runs {
                let (run, _) = icemerge::run(
                    &args.work_dir,
                    &target_dir,
                    l.files,
                    engine,
                    mode,
                    args.executors,
                    &sql,
                    false,
                    args.memory_limit,
                )?;
                eprintln!(
                    "  icemerge {} {} run {i}: {:.3}s (load {:.1}s, count {}) rss {} MiB {:?}",
                    engine.name(),
                    mode.name(),
                    run.seconds,
                    run.load_seconds,
                    run.count_seconds
                        .map(|s| format!("{s:.3}s"))
                        .unwrap_or_default(),
                    run.process_peak_rss / 1048576,
                    run.result
                );
                runs.push(run);
            }
            let e = Some(EngineResult { runs });
            match (engine, mode) {
                (Engine::Local, Mode::Cow) => result.local = e,
                (Engine::Cluster, Mode::Cow) => result.cluster = e,
                (Engine::Local, Mode::Mor) => result.local_mor = e,
                (Engine::Cluster, Mode::Mor) => result.cluster_mor = e,
            }
        }
    }

    let config = peers::PeerConfig {
        python: &args.python,
        script: &args.peers_script,
        timeout: Duration::from_secs(args.peer_timeout),
        work_dir: &args.work_dir,
    };
    let peer_list = if previous.is_some() {
        ""
    } else {
        args.peers.as_str()
    };
    for peer in peer_list
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        if peer == "pyiceberg" && (!case.pyiceberg_supported() || !pyiceberg) {
            continue;
        }
        let p = if peer.starts_with("spark") {
            let (python, jars) = (home(&args.spark_python), home(&args.spark_jars));
            let spark = peers::SparkConfig {
                python: &python,
                script: &args.spark_script,
                jars: Path::new(&jars),
            };
            let sql = case
                .merge_sql("bench.db.t", "SOURCE")
                .replace("read_parquet('SOURCE')", "src");
            peers::run_spark(
                &config,
                &spark,
                peer,
                &case.name,
                &sql,
                &target_dir,
                &source,
            )?
        } else {
            peers::run(&config, peer, case.peer_case(), &target_dir, &source)?
        };
        eprintln!(
            "  {peer}: {:?}s rows_after {:?} rss {} MiB {}",
            p.seconds,
            p.rows_after,
            p.process_peak_rss / 1048576,
            p.note.clone().unwrap_or_default()
        );
        result.peers.push(p);
    }
    Ok(result)
}

async fn run(args: Args) -> Result<()> {
    if args.report_only {
        let report = Report::load(&args.json);
        report::write_markdown(&args.markdown, &report)?;
        plot::write_svg(&args.plot, &report)?;
        for s in &report.scales {
            println!("{} rows\n{}", s.rows, report::console_table(s));
            if let Some(t) = report::console_modes_table(s) {
                println!("write modes\n{t}");
            }
        }
        return Ok(());
    }
    let layout = Layout::checked(args.rows, args.files)?;
    std::fs::create_dir_all(&args.work_dir)?;
    let all = cases::all(layout);
    let gen = local_session(&args.work_dir.join("gen-warehouse")).await?;

    if let Some(name) = &args.explain_analyze {
        let Some(case) = all.iter().find(|c| &c.name == name) else {
            bail!("no case {name}");
        };
        let l = case.layout(layout);
        let (target_dir, source) = case_paths(&args.work_dir, case, layout);
        data::write_target(&gen, l, &target_dir).await?;
        std::fs::create_dir_all(source.parent().expect("sources dir"))?;
        data::write_source(&gen, l.rows, &case.source, &source).await?;
        let sql = case.merge_sql("db.t", &source.display().to_string());
        for &mode in &args.modes {
            for &engine in &args.engines {
                let (run, text) = icemerge::run(
                    &args.work_dir,
                    &target_dir,
                    l.files,
                    engine,
                    mode,
                    args.executors,
                    &sql,
                    true,
                    args.memory_limit,
                )?;
                println!(
                    "== {} {} {}: {:.3}s\n{text}",
                    engine.name(),
                    mode.name(),
                    case.name,
                    run.seconds
                );
            }
        }
        return Ok(());
    }

    let pyiceberg_filter = args.pyiceberg_cases.clone().unwrap_or_else(|| {
        if args.rows <= 1_000_000 {
            "fixed_cost_one_row,concentrated_upsert,upsert_0.01_0.1".into()
        } else {
            "concentrated_upsert".into()
        }
    });
    let mut report = Report::load(&args.json);
    let previous = report
        .scales
        .iter()
        .find(|s| (s.rows, s.files) == (args.rows, args.files))
        .cloned();
    let mut scale = ScaleResult {
        rows: args.rows,
        files: args.files,
        runs: args.runs,
        date: command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]).unwrap_or_default(),
        commit: commit(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        machine: machine(&args.python),
        cases: vec![],
    };
    for case in all.iter().filter(|c| selected(&args.cases, &c.name)) {
        eprintln!("case {}", case.name);
        let c = run_case(
            &args,
            &gen,
            case,
            layout,
            selected(&pyiceberg_filter, &case.name),
            previous
                .as_ref()
                .filter(|_| args.reuse_peers)
                .and_then(|p| p.cases.iter().find(|c| c.name == case.name)),
        )
        .await?;
        scale.cases.push(c);
        // Saved after every case, so an interrupted run keeps its figures.
        report.put(scale.clone());
        report.save(&args.json)?;
        report::write_markdown(&args.markdown, &report)?;
        plot::write_svg(&args.plot, &report)?;
    }
    println!(
        "{} rows in {} files, {} runs\n{}",
        scale.rows,
        scale.files,
        scale.runs,
        report::console_table(&scale)
    );
    if let Some(t) = report::console_modes_table(&scale) {
        println!("write modes (copy-on-write / merge-on-read)\n{t}");
    }
    let mut targets = String::new();
    report::mode_targets(&mut targets, &scale);
    print!("{targets}");
    Ok(())
}

/// `--peers`: known peer names, comma separated; `none` is the empty list.
fn peer_list(list: &str) -> std::result::Result<String, String> {
    const PEERS: [&str; 5] = ["delta", "duckdb", "pyiceberg", "spark", "spark_mor"];
    if list.trim() == "none" {
        return Ok(String::new());
    }
    for peer in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if !PEERS.contains(&peer) {
            return Err(format!(
                "unknown peer '{peer}' (known: {}, or none)",
                PEERS.join(", ")
            ));
        }
    }
    Ok(list.to_string())
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.sub {
        Some(Sub::MergeChild(child)) => icemerge::child_main(child).await,
        Some(Sub::Maintenance(args)) => maintenance::run(args).await,
        Some(Sub::MaintenanceChild(child)) => maintenance::child_main(child).await,
        None => run(cli.args).await,
    }
}
