//! The stage graph as text (EXPLAIN) and the per-stage figures as an
//! aligned table (EXPLAIN ANALYZE).

use std::fmt::Write;

use super::document::{ExplainDocument, StageFigures};
use super::stages::Stage;

/// The stage graph as text, consumers first.
pub fn render_text(stages: &[Stage]) -> String {
    let mut s = String::new();
    for stage in stages.iter().rev() {
        let feeds: Vec<String> = stage.inputs.iter().map(|i| format!("stage {i}")).collect();
        let ballista = stage
            .ballista_stage
            .map(|b| format!(", ballista stage: {b}"))
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "Stage {} — {}\n  tasks: {}, output: {}, inputs: {}{ballista}",
            stage.id,
            stage.role,
            if stage.tasks == 0 {
                "-".to_string()
            } else {
                stage.tasks.to_string()
            },
            stage.output_partitioning,
            if feeds.is_empty() {
                "-".to_string()
            } else {
                feeds.join(", ")
            }
        );
        for op in &stage.operators {
            let _ = writeln!(s, "    {op}");
        }
    }
    s
}

/// Bytes for people: `812 B`, `345.2 KiB`, `1.2 MiB`, `3.0 GiB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// Milliseconds for people: one decimal below 100 ms.
pub fn human_ms(ms: f64) -> String {
    if ms < 100.0 {
        format!("{ms:.1}ms")
    } else {
        format!("{ms:.0}ms")
    }
}

const COLUMNS: [&str; 12] = [
    "stage",
    "tasks",
    "executors",
    "rows_in",
    "rows_out",
    "read",
    "shuffled",
    "written",
    "wall",
    "cpu",
    "skew",
    "spilled",
];

/// The cells of one stage's row.
fn row(id: usize, f: &StageFigures) -> Vec<String> {
    let files = |bytes: u64, files: u64| {
        if bytes == 0 && files == 0 {
            "-".to_string()
        } else {
            format!("{} / {files} files", human_bytes(bytes))
        }
    };
    vec![
        id.to_string(),
        f.tasks.to_string(),
        f.executors.len().to_string(),
        f.rows_in.map_or("?".into(), |r| r.to_string()),
        f.rows_out.to_string(),
        files(f.bytes_read, f.files_read),
        f.bytes_shuffled.map_or("-".into(), human_bytes),
        files(f.bytes_written, f.files_written),
        human_ms(f.wall_ms),
        human_ms(f.cpu_ms),
        f.skew.map_or("-".into(), |s| format!("{s:.2}")),
        if f.spill_count == 0 {
            "-".into()
        } else {
            format!("{} ({}x)", human_bytes(f.spilled_bytes), f.spill_count)
        },
    ]
}

/// The per-stage figures of an analyzed document as an aligned table, in
/// stage order, followed (on a cluster) by the executors of each stage.
pub fn render_figures(doc: &ExplainDocument) -> String {
    let mut rows = vec![COLUMNS.iter().map(|c| c.to_string()).collect::<Vec<_>>()];
    for entry in &doc.stages {
        if let Some(figures) = &entry.figures {
            rows.push(row(entry.stage.id, figures));
        }
    }
    let widths: Vec<usize> = (0..COLUMNS.len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut s = String::from(
        "Per stage (rows_in: from input stages and the stage's own sources; read / written: \
         data files; shuffled: shuffle files; wall: first task start to last task end; \
         cpu: summed over tasks; skew: slowest task / median task):\n",
    );
    for r in &rows {
        let cells: Vec<String> = r
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(c, (cell, w))| {
                if c == 0 || c >= 5 {
                    format!("{cell:<w$}")
                } else {
                    format!("{cell:>w$}")
                }
            })
            .collect();
        let _ = writeln!(s, "  {}", cells.join("  ").trim_end());
    }
    for entry in doc.stages.iter().filter(|_| doc.engine == "cluster") {
        if let Some(f) = entry.figures.as_ref().filter(|f| !f.executors.is_empty()) {
            let _ = writeln!(
                s,
                "  stage {} ran on: {}",
                entry.stage.id,
                f.executors.join(", ")
            );
        }
    }
    s
}
