//! icemerge-bench: times a MERGE on icemerge (local engine and an in-process
//! cluster) and on peer systems (delta-rs, PyIceberg, DuckDB via
//! `shared/bench/peers.py`) over the same generated data, in one run, and
//! prints medians and ratios.
//!
//! Data: a target of `--rows` rows (id, amt, qty, note) in `--files` Parquet
//! files with ids sorted across files, and a source of `--matched` existing
//! ids spread over the whole id range plus `--inserted` new ids. The MERGE is
//! an upsert keyed on id (peers.py's `upsert` case). Each icemerge run loads
//! a fresh table (one data file per target file) and times only the MERGE.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Parser;
use icemerge_scheduler::{CatalogOptions, EngineKind, Session, SessionOptions};

#[derive(Parser, Debug)]
#[command(about = "Times an upsert MERGE on icemerge and on peers over the same data")]
struct Args {
    /// Target rows.
    #[arg(long, default_value_t = 1_000_000)]
    rows: u64,
    /// Target data files.
    #[arg(long, default_value_t = 8)]
    files: u64,
    /// Source rows that match target rows.
    #[arg(long, default_value_t = 10_000)]
    matched: u64,
    /// Source rows that are new.
    #[arg(long, default_value_t = 1_000)]
    inserted: u64,
    /// Timed merges per icemerge engine (the median is reported).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Executors of the in-process cluster.
    #[arg(long, default_value_t = 2)]
    executors: usize,
    /// Peers to run through peers.py (comma separated; empty for none).
    #[arg(long, default_value = "delta,pyiceberg,duckdb")]
    peers: String,
    /// Python with the peers installed (pip install -r shared/bench/requirements.txt).
    #[arg(long, default_value = "python3")]
    python: String,
    /// peers.py.
    #[arg(long, default_value = "../shared/bench/peers.py")]
    peers_script: PathBuf,
    /// Working directory for data (default: a temporary directory).
    #[arg(long)]
    work_dir: Option<PathBuf>,
}

async fn session(warehouse: &Path, engine: EngineKind, executors: usize) -> Result<Session> {
    Ok(Session::open(SessionOptions {
        catalog: CatalogOptions {
            warehouse: warehouse.to_path_buf(),
            catalog_uri: None,
            ..Default::default()
        },
        engine,
        executors: Some(executors),
        target_partitions: None,
    })
    .await?)
}

/// Writes the target files and the source file with DataFusion's COPY.
async fn generate(args: &Args, dir: &Path) -> Result<()> {
    let s = session(&dir.join("gen-warehouse"), EngineKind::Local, 1).await?;
    std::fs::create_dir_all(dir.join("target"))?;
    let per_file = args.rows.div_ceil(args.files);
    for f in 0..args.files {
        let (lo, hi) = (f * per_file, ((f + 1) * per_file).min(args.rows) - 1);
        let path = dir.join("target").join(format!("part-{f:03}.parquet"));
        s.execute_one(&format!(
            "COPY (SELECT value AS id, CAST(value AS DOUBLE) * 0.5 AS amt, value % 100 AS qty, \
             concat('note-', CAST(value % 1000 AS VARCHAR)) AS note FROM generate_series({lo}, {hi})) \
             TO '{}' STORED AS PARQUET",
            path.display()
        ))
        .await?;
    }
    let stride = (args.rows / args.matched.max(1)).max(1);
    s.execute_one(&format!(
        "COPY (SELECT value * {stride} AS id, CAST(value AS DOUBLE) + 0.25 AS amt, 7 AS qty, nullif('updated', '') AS note \
         FROM generate_series(0, {}) \
         UNION ALL SELECT {} + value AS id, 1.0 AS amt, 1 AS qty, nullif('new', '') AS note FROM generate_series(0, {})) \
         TO '{}' STORED AS PARQUET",
        args.matched - 1,
        args.rows,
        args.inserted - 1,
        dir.join("source.parquet").display()
    ))
    .await?;
    Ok(())
}

const UPSERT: &str = "MERGE INTO db.t USING read_parquet('{source}') AS s ON t.id = s.id \
    WHEN MATCHED THEN UPDATE SET amt = s.amt, qty = s.qty, note = s.note \
    WHEN NOT MATCHED THEN INSERT *";

/// One fresh table, one timed merge; returns seconds and the result row.
async fn icemerge_run(
    args: &Args,
    dir: &Path,
    engine: EngineKind,
    run: usize,
) -> Result<(f64, String)> {
    let warehouse = dir.join(format!("wh-{engine:?}-{run}"));
    let s = session(&warehouse, engine, args.executors).await?;
    s.execute(
        "CREATE SCHEMA db; CREATE TABLE db.t (id BIGINT, amt DOUBLE, qty BIGINT, note STRING)",
    )
    .await?;
    for f in 0..args.files {
        let path = dir.join("target").join(format!("part-{f:03}.parquet"));
        s.execute_one(&format!(
            "INSERT INTO db.t SELECT * FROM read_parquet('{}')",
            path.display()
        ))
        .await?;
    }
    let sql = UPSERT.replace(
        "{source}",
        &dir.join("source.parquet").display().to_string(),
    );
    let start = Instant::now();
    let out = s.execute_one(&sql).await?;
    let secs = start.elapsed().as_secs_f64();
    let summary = match out {
        icemerge_scheduler::StatementOutput::Rows { batches, .. } => {
            arrow_row(&batches).unwrap_or_default()
        }
        _ => String::new(),
    };
    drop(s);
    let _ = std::fs::remove_dir_all(&warehouse);
    Ok((secs, summary))
}

fn arrow_row(batches: &[arrow::record_batch::RecordBatch]) -> Option<String> {
    let batch = batches.first()?;
    let names: Vec<String> = batch
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    let values: Vec<String> = batch
        .columns()
        .iter()
        .map(|c| arrow::util::display::array_value_to_string(c.as_ref(), 0).unwrap_or_default())
        .collect();
    Some(
        names
            .iter()
            .zip(values)
            .map(|(n, v)| format!("{n}={v}"))
            .collect::<Vec<_>>()
            .join(" "),
    )
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
    v[v.len() / 2]
}

fn run_peers(args: &Args, dir: &Path) -> Result<Vec<(String, f64)>> {
    if args.peers.is_empty() {
        return Ok(vec![]);
    }
    let out = std::process::Command::new(&args.python)
        .arg(&args.peers_script)
        .args(["--target", &dir.join("target").display().to_string()])
        .args([
            "--source",
            &dir.join("source.parquet").display().to_string(),
        ])
        .args(["--keys", "id", "--case", "upsert", "--peers", &args.peers])
        .output()
        .context("running peers.py")?;
    if !out.status.success() {
        bail!("peers.py failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let mut results = vec![];
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).with_context(|| format!("peers.py: {line}"))?;
        if let (Some(peer), Some(secs)) = (v["peer"].as_str(), v["merge_seconds"].as_f64()) {
            eprintln!("  {peer}: {secs:.3}s, rows after {}", v["rows_after"]);
            results.push((peer.to_string(), secs));
        }
    }
    Ok(results)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<()> {
    let args = Args::parse();
    let tmp;
    let dir = match &args.work_dir {
        Some(d) => d.clone(),
        None => {
            tmp = tempfile::tempdir()?;
            tmp.path().to_path_buf()
        }
    };
    eprintln!(
        "generating {} rows in {} files, source {} matched + {} new ...",
        args.rows, args.files, args.matched, args.inserted
    );
    generate(&args, &dir).await?;

    let mut rows: Vec<(String, f64)> = vec![];
    for (name, engine) in [
        ("icemerge local", EngineKind::Local),
        ("icemerge cluster", EngineKind::Cluster),
    ] {
        let mut times = vec![];
        for run in 0..args.runs {
            let (secs, summary) = icemerge_run(&args, &dir, engine, run).await?;
            eprintln!("  {name} run {run}: {secs:.3}s  {summary}");
            times.push(secs);
        }
        rows.push((name.to_string(), median(times)));
    }
    let peers = run_peers(&args, &dir)?;

    let mut table = comfy_table::Table::new();
    let mut header = vec!["system".to_string(), "merge seconds (median)".to_string()];
    header.extend(peers.iter().map(|(p, _)| format!("icemerge / {p}")));
    table.set_header(header);
    for (name, secs) in rows.iter().chain(peers.iter()) {
        let mut row = vec![name.clone(), format!("{secs:.3}")];
        if name.starts_with("icemerge") {
            row.extend(peers.iter().map(|(_, p)| format!("{:.2}", secs / p)));
        }
        table.add_row(row);
    }
    println!(
        "upsert: {} target rows in {} files, {} matched + {} new source rows, {} runs per icemerge engine",
        args.rows, args.files, args.matched, args.inserted, args.runs
    );
    println!("{table}");
    Ok(())
}
