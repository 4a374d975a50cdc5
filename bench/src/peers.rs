//! Peer runs through `peers.py`: one child process per peer and case, so the
//! peak RSS read from `wait4` is that peer's alone. peers.py loads the table
//! in the same process before the timed merge, so a peer's peak RSS covers
//! its load as well.
//!
//! The stack limit of the peer process is raised: PyIceberg's upsert on a
//! composite key builds one deeply nested filter expression that overflows
//! Arrow's default thread stack (a segfault) on sources of thousands of rows.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::Result;
use serde_json::Value;

use crate::data::KEYS;
use crate::process;

/// Stack limit of a peer process (also the default thread stack size).
const STACK_BYTES: libc::rlim_t = 1 << 30;

/// One peer's outcome on one case.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct PeerRun {
    pub peer: String,
    /// Merge seconds; None when it failed, timed out or was skipped.
    pub seconds: Option<f64>,
    pub rows_after: Option<u64>,
    /// Peak RSS of the peers.py process (load + merge), bytes.
    pub process_peak_rss: u64,
    pub note: Option<String>,
    pub metrics: Value,
}

/// How the note of a run killed at the harness's timeout starts.
const TIMED_OUT: &str = "timed out after ";

impl PeerRun {
    /// For a run killed at the harness's timeout, that timeout ("300 s").
    pub fn timed_out_after(&self) -> Option<&str> {
        self.note.as_deref()?.strip_prefix(TIMED_OUT)
    }
}

pub struct PeerConfig<'a> {
    pub python: &'a str,
    pub script: &'a Path,
    pub timeout: Duration,
    /// Where the peers' scratch directories go.
    pub work_dir: &'a Path,
}

/// The Spark peer (`bench/spark_peer.py`).
pub struct SparkConfig<'a> {
    /// Python with pyspark 3.5.
    pub python: &'a str,
    pub script: &'a Path,
    /// The Iceberg Spark runtime and relocated Jackson jars.
    pub jars: &'a Path,
}

/// Runs Spark's MERGE (`sql`, icemerge's statement) on a copy-on-write
/// (`peer` "spark") or merge-on-read ("spark_mor") Iceberg table loaded from
/// `target_dir`, with `source` as the view `src`.
pub fn run_spark(
    config: &PeerConfig,
    spark: &SparkConfig,
    peer: &str,
    case: &str,
    sql: &str,
    target_dir: &Path,
    source: &Path,
) -> Result<PeerRun> {
    let scratch = tempfile::Builder::new()
        .prefix("peer-spark-")
        .tempdir_in(config.work_dir)?;
    let mode = if peer == "spark_mor" { "mor" } else { "cow" };
    let mut cmd = Command::new(spark.python);
    cmd.env("TMPDIR", scratch.path());
    cmd.arg(spark.script)
        .arg("--jars")
        .arg(spark.jars)
        .arg("--target")
        .arg(target_dir)
        .arg("--source")
        .arg(source)
        .args(["--mode", mode, "--case", case, "--sql", sql]);
    let done = process::run(cmd, config.timeout)?;
    Ok(parse(peer, config, done))
}

/// Runs `peer` on `case` (a peers.py case name) over `target_dir` / `source`.
pub fn run(
    config: &PeerConfig,
    peer: &str,
    case: &str,
    target_dir: &Path,
    source: &Path,
) -> Result<PeerRun> {
    // peers.py works in a temporary directory; a killed run cannot remove
    // it, so it lives under one that is removed here.
    let scratch = tempfile::Builder::new()
        .prefix("peer-")
        .tempdir_in(config.work_dir)?;
    let mut cmd = Command::new(config.python);
    cmd.env("TMPDIR", scratch.path());
    cmd.arg(config.script)
        .arg("--target")
        .arg(target_dir)
        .arg("--source")
        .arg(source)
        .args(["--keys", &KEYS.join(",")])
        .args(["--case", case, "--peers", peer]);
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between
    // fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: STACK_BYTES,
                rlim_max: libc::RLIM_INFINITY,
            };
            libc::setrlimit(libc::RLIMIT_STACK, &limit);
            Ok(())
        });
    }
    let done = process::run(cmd, config.timeout)?;
    Ok(parse(peer, config, done))
}

/// A peer's outcome from its last JSON line.
fn parse(peer: &str, config: &PeerConfig, done: process::Finished) -> PeerRun {
    let mut out = PeerRun {
        peer: peer.to_string(),
        seconds: None,
        rows_after: None,
        process_peak_rss: done.max_rss,
        note: None,
        metrics: Value::Null,
    };
    if done.timed_out {
        out.note = Some(format!("{TIMED_OUT}{} s", config.timeout.as_secs()));
        return out;
    }
    let line = done.stdout.lines().rev().find(|l| l.starts_with('{'));
    match line.and_then(|l| serde_json::from_str::<Value>(l).ok()) {
        Some(v) if v["merge_seconds"].is_number() => {
            out.seconds = v["merge_seconds"].as_f64();
            out.rows_after = v["rows_after"].as_u64();
            out.metrics = v["metrics"].clone();
        }
        Some(v) if v["skipped"].is_string() => {
            out.note = v["skipped"].as_str().map(str::to_string);
        }
        _ => {
            let tail: String = done
                .stderr
                .lines()
                .rev()
                .take(3)
                .collect::<Vec<_>>()
                .join(" | ");
            out.note = Some(match done.signal {
                // The harness kills a child only at its timeout, handled
                // above: a SIGKILL with nothing on stderr is the kernel's.
                Some(libc::SIGKILL) if tail.is_empty() => format!(
                    "killed (SIGKILL, not by the harness: the kernel's out-of-memory killer, \
                     most likely) at {} MiB peak RSS",
                    done.max_rss >> 20
                ),
                Some(signal) => format!("killed by signal {signal}: {tail}"),
                None => format!("failed: {tail}"),
            });
        }
    }
    out
}
