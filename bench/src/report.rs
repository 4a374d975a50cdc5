//! Results: the raw JSON (one entry per scale, merged into an existing file
//! so scales can be run separately), a comfy-table on stdout and the
//! generated part of docs/BENCHMARKS.md (between two marker comments; the
//! text around them is kept).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::icemerge::Run;
use crate::peers::PeerRun;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EngineResult {
    pub runs: Vec<Run>,
}

impl EngineResult {
    pub fn median_seconds(&self) -> Option<f64> {
        median(self.runs.iter().map(|r| r.seconds).collect())
    }
    pub fn median_merge_rss(&self) -> Option<f64> {
        median(
            self.runs
                .iter()
                .filter_map(|r| r.merge_peak_rss.map(|b| b as f64))
                .collect(),
        )
    }
    pub fn median_process_rss(&self) -> Option<f64> {
        median(
            self.runs
                .iter()
                .map(|r| r.process_peak_rss as f64)
                .collect(),
        )
    }
    /// A counter of the MERGE result row (the same in every run).
    pub fn stat(&self, name: &str) -> Option<u64> {
        self.runs.first()?.result.get(name)?.as_u64()
    }
    /// Median seconds of the `SELECT count(*)` after the merge.
    pub fn median_count_seconds(&self) -> Option<f64> {
        median(self.runs.iter().filter_map(|r| r.count_seconds).collect())
    }
    /// Rows counted after the merge (the same in every run).
    pub fn count_rows(&self) -> Option<u64> {
        self.runs.first()?.count_rows
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Floor {
    pub files: usize,
    pub runs: Vec<f64>,
    pub bytes_written: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CaseResult {
    pub name: String,
    pub peer_case: String,
    pub peer_note: String,
    pub matched_fraction: f64,
    pub not_matched_fraction: f64,
    pub target_rows: u64,
    pub source_rows: u64,
    /// Files holding matched keys.
    pub touched_files: usize,
    /// Copy-on-write table (the default mode), per engine.
    pub local: Option<EngineResult>,
    pub cluster: Option<EngineResult>,
    /// Merge-on-read table, per engine.
    #[serde(default)]
    pub local_mor: Option<EngineResult>,
    #[serde(default)]
    pub cluster_mor: Option<EngineResult>,
    pub peers: Vec<PeerRun>,
    pub floor: Option<Floor>,
    /// Commit and time icemerge ran this case at.
    #[serde(default)]
    pub commit: String,
    #[serde(default)]
    pub date: String,
}

impl CaseResult {
    pub fn peer_seconds(&self, peer: &str) -> Option<f64> {
        self.peers.iter().find(|p| p.peer == peer)?.seconds
    }
    pub fn peer_rss(&self, peer: &str) -> Option<f64> {
        let p = self.peers.iter().find(|p| p.peer == peer)?;
        p.seconds.map(|_| p.process_peak_rss as f64)
    }
    pub fn floor_seconds(&self) -> Option<f64> {
        median(self.floor.as_ref()?.runs.clone())
    }
    /// A peer's `SELECT count(*)` after its merge (the Spark peers).
    pub fn peer_count_seconds(&self, peer: &str) -> Option<f64> {
        let p = self.peers.iter().find(|p| p.peer == peer)?;
        p.seconds?;
        p.metrics.get("count_seconds")?.as_f64()
    }
    /// Whether either engine ran a merge-on-read table.
    pub fn has_mor(&self) -> bool {
        self.local_mor.is_some() || self.cluster_mor.is_some()
    }
}

fn med(e: &Option<EngineResult>) -> Option<f64> {
    e.as_ref()?.median_seconds()
}

fn count_med(e: &Option<EngineResult>) -> Option<f64> {
    e.as_ref()?.median_count_seconds()
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScaleResult {
    pub rows: u64,
    pub files: u64,
    pub runs: usize,
    pub date: String,
    pub commit: String,
    pub command: String,
    pub machine: BTreeMap<String, String>,
    pub cases: Vec<CaseResult>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Report {
    pub scales: Vec<ScaleResult>,
}

impl Report {
    pub fn load(path: &Path) -> Report {
        std::fs::read_to_string(path)
            .ok()
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or_default()
    }

    /// Merges `scale` into the scale with the same rows and files: its
    /// cases replace those of the same name, the others are kept.
    pub fn put(&mut self, mut scale: ScaleResult) {
        if let Some(pos) = self
            .scales
            .iter()
            .position(|s| (s.rows, s.files) == (scale.rows, scale.files))
        {
            let old = self.scales.remove(pos);
            let mut cases = old.cases;
            for c in scale.cases {
                match cases.iter().position(|o| o.name == c.name) {
                    Some(i) => cases[i] = c,
                    None => cases.push(c),
                }
            }
            scale.cases = cases;
        }
        self.scales.push(scale);
        self.scales.sort_by_key(|s| (s.rows, s.files));
    }

    pub fn save(&self, path: &Path) -> Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, serde_json::to_string_pretty(self)? + "\n")?;
        Ok(())
    }
}

pub fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

fn secs(v: Option<f64>) -> String {
    v.map(|s| format!("{s:.3}")).unwrap_or_else(|| "—".into())
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
        _ => "—".into(),
    }
}

fn mib(v: Option<f64>) -> String {
    v.map(|b| format!("{:.0}", b / 1048576.0))
        .unwrap_or_else(|| "—".into())
}

fn count(v: Option<u64>) -> String {
    v.map(|n| n.to_string()).unwrap_or_else(|| "—".into())
}

fn peer_cell(c: &CaseResult, peer: &str) -> String {
    match c.peers.iter().find(|p| p.peer == peer) {
        Some(p) => match (p.seconds, p.timed_out_after()) {
            (Some(s), _) => format!("{s:.3}"),
            (None, Some(timeout)) => format!("> {timeout}"),
            _ => "—".into(),
        },
        None => "—".into(),
    }
}

/// A peer's peak RSS in MiB; for a run killed at the harness's timeout,
/// its peak until then, a lower bound ("≥").
fn peer_rss_cell(c: &CaseResult, peer: &str) -> String {
    match c.peers.iter().find(|p| p.peer == peer) {
        Some(p) if p.seconds.is_some() => mib(Some(p.process_peak_rss as f64)),
        Some(p) if p.process_peak_rss > 0 && p.timed_out_after().is_some() => {
            format!("≥{}", mib(Some(p.process_peak_rss as f64)))
        }
        _ => "—".into(),
    }
}

const HEADER: [&str; 19] = [
    "case",
    "source rows",
    "local s",
    "cluster s",
    "delta-rs s",
    "DuckDB s",
    "PyIceberg s",
    "floor s",
    "local/delta",
    "cluster/delta",
    "local/DuckDB",
    "local/PyIceberg",
    "local/floor",
    "RSS merge MiB",
    "RSS proc MiB",
    "delta RSS MiB",
    "files rewritten",
    "MB written",
    "touched",
];

fn row(c: &CaseResult) -> Vec<String> {
    let local = c.local.as_ref().and_then(|e| e.median_seconds());
    let cluster = c.cluster.as_ref().and_then(|e| e.median_seconds());
    let delta = c.peer_seconds("delta");
    let name = if c.peer_note.is_empty() {
        c.name.clone()
    } else {
        format!("{} *", c.name)
    };
    vec![
        name,
        c.source_rows.to_string(),
        secs(local),
        secs(cluster),
        peer_cell(c, "delta"),
        peer_cell(c, "duckdb"),
        peer_cell(c, "pyiceberg"),
        secs(c.floor_seconds()),
        ratio(local, delta),
        ratio(cluster, delta),
        ratio(local, c.peer_seconds("duckdb")),
        ratio(local, c.peer_seconds("pyiceberg")),
        ratio(local, c.floor_seconds()),
        mib(c.local.as_ref().and_then(|e| e.median_merge_rss())),
        mib(c.local.as_ref().and_then(|e| e.median_process_rss())),
        peer_rss_cell(c, "delta"),
        count(c.local.as_ref().and_then(|e| e.stat("files_removed"))),
        c.local
            .as_ref()
            .and_then(|e| e.stat("bytes_written"))
            .map(|b| format!("{:.1}", b as f64 / 1e6))
            .unwrap_or_else(|| "—".into()),
        c.touched_files.to_string(),
    ]
}

/// The comfy-table of one scale.
pub fn console_table(scale: &ScaleResult) -> comfy_table::Table {
    let mut t = comfy_table::Table::new();
    t.set_header(HEADER.to_vec());
    for c in &scale.cases {
        t.add_row(row(c));
    }
    t
}

fn md_table(out: &mut String, scale: &ScaleResult) {
    let _ = writeln!(out, "| {} |", HEADER.join(" | "));
    let _ = writeln!(out, "|{}", "---|".repeat(HEADER.len()));
    for c in &scale.cases {
        let _ = writeln!(out, "| {} |", row(c).join(" | "));
    }
}

const MODES_HEADER: [&str; 18] = [
    "case",
    "CoW local s",
    "MoR local s",
    "MoR/CoW local",
    "CoW cluster s",
    "MoR cluster s",
    "MoR/CoW cluster",
    "DuckDB s",
    "delta-rs s",
    "MoR local/DuckDB",
    "MoR local/delta",
    "count CoW local s",
    "count MoR local s",
    "count MoR/CoW local",
    "count CoW / MoR cluster s",
    "Spark CoW / MoR s",
    "Spark count CoW / MoR s",
    "files removed / added CoW; MoR",
];

fn modes_row(c: &CaseResult) -> Vec<String> {
    let (cow, mor) = (med(&c.local), med(&c.local_mor));
    let (cow_c, mor_c) = (med(&c.cluster), med(&c.cluster_mor));
    let (count_cow, count_mor) = (count_med(&c.local), count_med(&c.local_mor));
    let stat = |e: Option<&EngineResult>, n: &str| count(e.and_then(|e| e.stat(n)));
    let cow_e = c.local.as_ref().or(c.cluster.as_ref());
    let mor_e = c.local_mor.as_ref().or(c.cluster_mor.as_ref());
    vec![
        c.name.clone(),
        secs(cow),
        secs(mor),
        ratio(mor, cow),
        secs(cow_c),
        secs(mor_c),
        ratio(mor_c, cow_c),
        peer_cell(c, "duckdb"),
        peer_cell(c, "delta"),
        ratio(mor, c.peer_seconds("duckdb")),
        ratio(mor, c.peer_seconds("delta")),
        secs(count_cow),
        secs(count_mor),
        ratio(count_mor, count_cow),
        format!(
            "{} / {}",
            secs(count_med(&c.cluster)),
            secs(count_med(&c.cluster_mor))
        ),
        format!("{} / {}", peer_cell(c, "spark"), peer_cell(c, "spark_mor")),
        format!(
            "{} / {}",
            secs(c.peer_count_seconds("spark")),
            secs(c.peer_count_seconds("spark_mor"))
        ),
        format!(
            "{} / {}; {} / {}",
            stat(cow_e, "files_removed"),
            stat(cow_e, "files_added"),
            stat(mor_e, "files_removed"),
            stat(mor_e, "files_added")
        ),
    ]
}

/// The comfy-table of both write modes (cases with a merge-on-read run).
pub fn console_modes_table(scale: &ScaleResult) -> Option<comfy_table::Table> {
    let mut t = comfy_table::Table::new();
    t.set_header(MODES_HEADER.to_vec());
    let mut any = false;
    for c in scale.cases.iter().filter(|c| c.has_mor()) {
        t.add_row(modes_row(c));
        any = true;
    }
    any.then_some(t)
}

fn md_modes_table(out: &mut String, scale: &ScaleResult) {
    if !scale.cases.iter().any(|c| c.has_mor()) {
        return;
    }
    let _ = writeln!(
        out,
        "\nWrite modes, same data, same run: copy-on-write (CoW, the table above) \
         and merge-on-read (MoR, `'write.merge.mode' = 'merge-on-read'`, format \
         version 2), each merge followed by a timed `SELECT count(*)` of the \
         merged table in the same session (medians):\n"
    );
    let _ = writeln!(out, "| {} |", MODES_HEADER.join(" | "));
    let _ = writeln!(out, "|{}", "---|".repeat(MODES_HEADER.len()));
    for c in scale.cases.iter().filter(|c| c.has_mor()) {
        let _ = writeln!(out, "| {} |", modes_row(c).join(" | "));
    }
}

/// "met" or "missed" for `value` against an upper bound.
fn verdict(value: Option<f64>, bound: f64) -> &'static str {
    match value {
        Some(v) if v <= bound => "met",
        Some(_) => "missed",
        None => "not measured",
    }
}

fn quotient(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

/// The write-mode targets of one scale, local engine (cluster in brackets).
pub fn mode_targets(out: &mut String, scale: &ScaleResult) {
    if !scale.cases.iter().any(|c| c.has_mor()) {
        return;
    }
    if let Some(c) = find(scale, "delete_only_0.05").filter(|c| c.has_mor()) {
        let (mor, mor_c) = (med(&c.local_mor), med(&c.cluster_mor));
        let (duck, delta) = (c.peer_seconds("duckdb"), c.peer_seconds("delta"));
        let r = quotient(mor, duck);
        let _ = writeln!(
            out,
            "- merge-on-read delete_only_0.05 within 3× of DuckDB: {} — {}× (local {} s, DuckDB {} s; cluster {}×)",
            verdict(r, 3.0),
            ratio(mor, duck),
            secs(mor),
            secs(duck),
            ratio(mor_c, duck)
        );
        let r = quotient(mor, delta);
        let _ = writeln!(
            out,
            "- merge-on-read delete_only_0.05 ≤ 0.1× delta-rs: {} — {}× (local {} s, delta-rs {} s; cluster {}×)",
            verdict(r, 0.1),
            ratio(mor, delta),
            secs(mor),
            secs(delta),
            ratio(mor_c, delta)
        );
    }
    if let Some(c) = find(scale, "upsert_0.01_0.1").filter(|c| c.has_mor()) {
        let (cow, mor) = (med(&c.local), med(&c.local_mor));
        let _ = writeln!(
            out,
            "- merge-on-read upsert_0.01_0.1 ≤ 0.3× copy-on-write: {} — {}× (local MoR {} s, CoW {} s; cluster {}×)",
            verdict(quotient(mor, cow), 0.3),
            ratio(mor, cow),
            secs(mor),
            secs(cow),
            ratio(med(&c.cluster_mor), med(&c.cluster))
        );
    }
    let counts: Vec<String> = scale
        .cases
        .iter()
        .filter(|c| c.has_mor())
        .map(|c| {
            let (cow, mor) = (count_med(&c.local), count_med(&c.local_mor));
            let rows = |e: &Option<EngineResult>| count(e.as_ref().and_then(|e| e.count_rows()));
            format!(
                "{} {} — {}× ({} s vs {} s, {} vs {} rows; cluster {}×)",
                c.name,
                verdict(quotient(mor, cow), 1.5),
                ratio(mor, cow),
                secs(mor),
                secs(cow),
                rows(&c.local_mor),
                rows(&c.local),
                ratio(count_med(&c.cluster_mor), count_med(&c.cluster))
            )
        })
        .collect();
    let _ = writeln!(
        out,
        "- `SELECT count(*)` after merge-on-read within 1.5× of after copy-on-write: {}",
        counts.join("; ")
    );
}

fn find<'a>(scale: &'a ScaleResult, name: &str) -> Option<&'a CaseResult> {
    scale.cases.iter().find(|c| c.name == name)
}

/// Where each target of the large-table work stands, per scale: local
/// ≤ 0.5× delta-rs (with the copy-on-write floor's own ratio where a miss
/// has one), peak RSS ≤ delta-rs, the cluster ≤ 1.3× the local engine, and
/// at 100M rows a peak RSS ≤ 2 GiB.
fn targets(out: &mut String, report: &Report) {
    let _ = writeln!(out, "### Targets, as measured\n");
    for scale in report.scales.iter().rev() {
        let _ = writeln!(out, "At {} rows:\n", scale.rows);
        ratio_target(
            out,
            scale,
            "icemerge local ≤ 0.5× delta-rs",
            0.5,
            |c| Some(c.local.as_ref()?.median_seconds()? / c.peer_seconds("delta")?),
            |c, r| match (c.floor_seconds(), c.peer_seconds("delta")) {
                (Some(f), Some(d)) => format!("{} ({r:.2}; the floor alone {:.2})", c.name, f / d),
                _ => format!("{} ({r:.2})", c.name),
            },
        );
        ratio_target(
            out,
            scale,
            "icemerge cluster ≤ 1.3× local",
            1.3,
            |c| {
                let local = c.local.as_ref()?.median_seconds()?;
                Some(c.cluster.as_ref()?.median_seconds()? / local)
            },
            |c, r| format!("{} ({r:.2})", c.name),
        );
        if scale.rows >= 100_000_000 {
            let rss: Vec<String> = scale
                .cases
                .iter()
                .filter_map(|c| {
                    let r = c.local.as_ref()?.median_process_rss()?;
                    Some(format!(
                        "{} {:.2} GiB{}",
                        c.name,
                        r / GIB,
                        if r <= 2.0 * GIB { "" } else { " (missed)" }
                    ))
                })
                .collect();
            let _ = writeln!(
                out,
                "- peak RSS ≤ 2 GiB at the default memory limit (whole process, load included): {}",
                rss.join(", ")
            );
        }
        let py: Vec<String> = scale
            .cases
            .iter()
            .filter_map(|c| {
                let l = c.local.as_ref()?.median_seconds()?;
                let p = c.peer_seconds("pyiceberg")?;
                Some(format!("{} {:.1}×", c.name, p / l))
            })
            .collect();
        if !py.is_empty() {
            let _ = writeln!(
                out,
                "- speed-up over PyIceberg upsert (target ≥ 10×): {}",
                py.join(", ")
            );
        }
        if let Some(c) = find(scale, "concentrated_upsert") {
            let l = c.local.as_ref().and_then(|e| e.median_seconds());
            let _ = writeln!(
                out,
                "- concentrated upsert / copy-on-write floor (target ≤ 1.5): {} (local {} s, floor {} s)",
                ratio(l, c.floor_seconds()),
                secs(l),
                secs(c.floor_seconds())
            );
        }
        let mut rss_ok = 0;
        let mut rss_all = 0;
        for c in &scale.cases {
            if let (Some(r), Some(d)) = (
                c.local.as_ref().and_then(|e| e.median_process_rss()),
                c.peer_rss("delta"),
            ) {
                rss_all += 1;
                if r <= d {
                    rss_ok += 1;
                }
            }
        }
        let _ = writeln!(
            out,
            "- peak RSS ≤ delta-rs (whole process, load included on both sides): {rss_ok} of {rss_all} cases"
        );
        mode_targets(out, scale);
        if let Some(c) = find(scale, "fixed_cost_one_row") {
            let _ = writeln!(
                out,
                "- fixed cost, one-row merge into a {}-row one-file table (target ≤ 0.150 s on the cluster): cluster {} s, local {} s",
                c.target_rows,
                secs(c.cluster.as_ref().and_then(|e| e.median_seconds())),
                secs(c.local.as_ref().and_then(|e| e.median_seconds()))
            );
        }
        let _ = writeln!(out);
    }
    // The issue-5 figure: the same concentrated source at two scales.
    let conc: Vec<(u64, f64)> = report
        .scales
        .iter()
        .filter_map(|s| {
            Some((
                s.rows,
                find(s, "concentrated_upsert")?
                    .local
                    .as_ref()?
                    .median_seconds()?,
            ))
        })
        .collect();
    if conc.len() >= 2 {
        let (r0, s0) = conc[0];
        let (r1, s1) = conc[conc.len() - 1];
        let _ = writeln!(
            out,
            "Issue-5 figure — concentrated upsert, same source (10,000 matched + 1,000 new rows), local engine: {r0} rows {s0:.3} s, {r1} rows {s1:.3} s, ratio {:.2}× for {}× the table.\n",
            s1 / s0,
            r1 / r0
        );
    }
}

const BEGIN: &str =
    "<!-- results:begin (generated by icemerge-bench; edits here are overwritten) -->";
const END: &str = "<!-- results:end -->";

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// The line of a target on a ratio, "- `what`: met on N of M cases; missed
/// on a (1.40), ...", over the cases of `scale` that have the ratio
/// (`ratio`; nothing when none has); a ratio above `limit` is a miss,
/// named by `miss`.
fn ratio_target(
    out: &mut String,
    scale: &ScaleResult,
    what: &str,
    limit: f64,
    ratio: impl Fn(&CaseResult) -> Option<f64>,
    miss: impl Fn(&CaseResult, f64) -> String,
) {
    let ratios: Vec<(&CaseResult, f64)> = scale
        .cases
        .iter()
        .filter_map(|c| Some((c, ratio(c)?)))
        .collect();
    if ratios.is_empty() {
        return;
    }
    let missed: Vec<String> = ratios
        .iter()
        .filter(|(_, r)| *r > limit)
        .map(|(c, r)| miss(c, *r))
        .collect();
    let _ = writeln!(
        out,
        "- {what}: met on {} of {} cases{}",
        ratios.len() - missed.len(),
        ratios.len(),
        if missed.is_empty() {
            String::new()
        } else {
            format!("; missed on {}", missed.join(", "))
        }
    );
}

/// The generated Markdown.
pub fn markdown(report: &Report) -> String {
    let mut out = String::new();
    for scale in &report.scales {
        let _ = writeln!(
            out,
            "### {} rows in {} files ({} icemerge runs per engine)\n",
            scale.rows, scale.files, scale.runs
        );
        let _ = writeln!(
            out,
            "Measured {} at commit `{}` on {}.\n\n`{}`\n",
            scale.date,
            scale.commit,
            scale
                .machine
                .iter()
                .map(|(k, v)| format!("{k}: {v}"))
                .collect::<Vec<_>>()
                .join(", "),
            scale.command
        );
        let commits: std::collections::BTreeSet<&str> =
            scale.cases.iter().map(|c| c.commit.as_str()).collect();
        if commits.len() > 1 {
            let _ = writeln!(
                out,
                "Cases were measured in more than one run: {}.\n",
                scale
                    .cases
                    .iter()
                    .map(|c| format!("{} at `{}` {}", c.name, c.commit, c.date))
                    .collect::<Vec<_>>()
                    .join("; ")
            );
        }
        md_table(&mut out, scale);
        let mut notes: Vec<String> = vec![];
        for c in scale.cases.iter().filter(|c| !c.peer_note.is_empty()) {
            let same = scale
                .cases
                .iter()
                .filter(|o| o.peer_note == c.peer_note)
                .map(|o| o.name.as_str())
                .collect::<Vec<_>>()
                .join(", ");
            let note = format!("{same}: {}", c.peer_note);
            if !notes.contains(&note) {
                notes.push(note);
            }
        }
        if !notes.is_empty() {
            let _ = writeln!(out, "\n\\* {}", notes.join("; "));
        }
        let failures: Vec<String> = scale
            .cases
            .iter()
            .flat_map(|c| {
                c.peers.iter().filter_map(move |p| {
                    let n = p.note.as_ref()?;
                    (n != "case not supported").then(|| format!("{} / {}: {n}", c.name, p.peer))
                })
            })
            .collect();
        if !failures.is_empty() {
            let _ = writeln!(out, "\nPeer notes: {}", failures.join("; "));
        }
        md_modes_table(&mut out, scale);
        let _ = writeln!(out);
    }
    targets(&mut out, report);
    out
}

/// Writes the generated part into `path`, keeping the text around the markers.
pub fn write_markdown(path: &Path, report: &Report) -> Result<()> {
    let generated = format!("{BEGIN}\n{}{END}", markdown(report));
    let text = match std::fs::read_to_string(path) {
        Ok(old) => match (old.find(BEGIN), old.find(END)) {
            (Some(b), Some(e)) if e > b => {
                format!("{}{generated}{}", &old[..b], &old[e + END.len()..])
            }
            _ => format!("{old}\n{generated}\n"),
        },
        Err(_) => format!("# icemerge benchmarks\n\n{generated}\n"),
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, text)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn with_delta(run: Option<Value>) -> CaseResult {
        serde_json::from_value(json!({
            "name": "c", "peer_case": "c", "peer_note": "", "matched_fraction": 0.0,
            "not_matched_fraction": 0.0, "target_rows": 1, "source_rows": 1,
            "touched_files": 0, "local": null, "cluster": null, "floor": null,
            "peers": run.into_iter().collect::<Vec<_>>(),
        }))
        .unwrap()
    }

    fn delta_run(seconds: Option<f64>, note: Option<&str>) -> Option<Value> {
        Some(json!({
            "peer": "delta", "seconds": seconds, "rows_after": null,
            "process_peak_rss": 3u64 << 30, "note": note, "metrics": null,
        }))
    }

    #[test]
    fn a_peer_killed_at_the_timeout_shows_its_peak_rss_until_then_as_a_lower_bound() {
        let cell = |run| peer_rss_cell(&with_delta(run), "delta");
        assert_eq!(cell(delta_run(Some(1.5), None)), "3072");
        assert_eq!(
            cell(delta_run(None, Some("timed out after 300 s"))),
            "≥3072"
        );
        assert_eq!(cell(delta_run(None, Some("failed: no such file"))), "—");
        assert_eq!(cell(None), "—");
    }
}
