//! The short texts the pictures (DOT, SVG) put on stages and edges.

use super::document::{StageEntry, StageFigures};
use super::text::{human_bytes, human_ms};

/// A stage's figures as a few lines.
pub fn figure_lines(f: &StageFigures) -> Vec<String> {
    let rows_in = f.rows_in.map_or("?".to_string(), |r| r.to_string());
    let mut lines = vec![
        format!("rows: {rows_in} in, {} out", f.rows_out),
        format!(
            "tasks: {} on {} · wall {} · cpu {}{}",
            f.tasks,
            plural(f.executors.len(), "executor"),
            human_ms(f.wall_ms),
            human_ms(f.cpu_ms),
            f.skew
                .map(|s| format!(" · skew {s:.2}"))
                .unwrap_or_default()
        ),
    ];
    let mut io = vec![];
    if f.files_read > 0 || f.bytes_read > 0 {
        io.push(format!(
            "read {} / {}",
            human_bytes(f.bytes_read),
            plural(f.files_read as usize, "file")
        ));
    }
    if f.files_written > 0 || f.bytes_written > 0 {
        io.push(format!(
            "wrote {} / {}",
            human_bytes(f.bytes_written),
            plural(f.files_written as usize, "file")
        ));
    }
    if let Some(bytes) = f.bytes_shuffled {
        io.push(format!("shuffled {}", human_bytes(bytes)));
    }
    if !io.is_empty() {
        lines.push(io.join(" · "));
    }
    if f.spill_count > 0 {
        lines.push(format!(
            "spilled {} ({} rows, {}x)",
            human_bytes(f.spilled_bytes),
            f.spilled_rows,
            f.spill_count
        ));
    }
    lines
}

/// The label of the edge leaving `from`: its partitioning and, after a
/// run, the rows (and shuffled bytes) that crossed it.
pub fn edge_label(from: &StageEntry) -> String {
    let mut label = from.stage.output_partitioning.clone();
    if let Some(f) = &from.figures {
        label.push_str(&format!(" · {} rows", f.rows_out));
        if let Some(bytes) = f.bytes_shuffled {
            label.push_str(&format!(" · {}", human_bytes(bytes)));
        }
    }
    label
}

fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}
