//! `EXPLAIN ANALYZE MERGE`: the stage graph followed by the figures of the
//! run just made — per Ballista stage from the task ledger on a cluster,
//! per plan stage from the operators' metrics on the local engine — and the
//! merge's own figures.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::time::Duration;

use icemerge_planner::explain::{self, Stage};

use crate::engine::TaskRecord;
use crate::merge::MergeOutcome;

use super::metrics::OperatorMetrics;

/// The text of EXPLAIN ANALYZE. `tasks` are the job's finished tasks on a
/// cluster (None on the local engine, where the plan's own metrics are read).
pub(super) fn render_analyze(
    stages: &[Stage],
    tasks: Option<Vec<TaskRecord>>,
    outcome: &MergeOutcome,
    metrics: &OperatorMetrics,
    files_pruned: u64,
    elapsed: Duration,
) -> String {
    let mut text = explain::render_text(stages);
    let _ = writeln!(
        text,
        "\nPer stage (rows out of the stage's top operator, tasks, time):"
    );
    match tasks {
        Some(tasks) => write_ballista_stages(&mut text, tasks),
        None => write_plan_stages(&mut text, stages),
    }
    let _ = writeln!(
        text,
        "Merge: updated={}, deleted={}, inserted={}, copied={}, files_scanned={}, files_pruned={}, files_rewritten={}, files_removed={}, files_added={}, delete_files_added={}, bytes_read={}, bytes_written={}, commit_attempts={}, reexecutions={}, wall={}ms",
        outcome.stat("rows_updated"),
        outcome.stat("rows_deleted"),
        outcome.stat("rows_inserted"),
        outcome.stat("rows_copied"),
        metrics.get("files_scanned"),
        files_pruned,
        metrics.get("files_rewritten"),
        outcome.stat("files_removed"),
        outcome.stat("files_added"),
        outcome.stat("delete_files_added"),
        outcome.stat("bytes_read"),
        outcome.stat("bytes_written"),
        outcome.commit_attempts,
        outcome.reexecutions,
        elapsed.as_millis()
    );
    text
}

/// One line per Ballista stage of the job, summed over its tasks.
fn write_ballista_stages(text: &mut String, tasks: Vec<TaskRecord>) {
    let mut by_stage: BTreeMap<usize, Vec<TaskRecord>> = BTreeMap::new();
    for task in tasks {
        by_stage.entry(task.stage_id).or_default().push(task);
    }
    for (id, tasks) in by_stage {
        let executors: BTreeSet<_> = tasks.iter().map(|t| t.executor_id.clone()).collect();
        let sum = |name: &str| -> usize {
            tasks
                .iter()
                .flat_map(|t| t.metrics.first())
                .map(|m| m.sum_by_name(name).map(|v| v.as_usize()).unwrap_or(0))
                .sum()
        };
        let _ = writeln!(
            text,
            "  ballista stage {id}: tasks={}, executors={}, rows_in={}, rows_out={}, bytes_shuffled={}, time={}ms",
            tasks.len(),
            executors.len(),
            sum("input_rows"),
            sum("output_rows"),
            sum("write_bytes").max(sum("output_bytes")),
            sum("write_time").max(sum("elapsed_compute")) / 1_000_000,
        );
    }
}

/// One line per stage of the plan, from its operators' metrics.
fn write_plan_stages(text: &mut String, stages: &[Stage]) {
    for stage in stages.iter().filter(|s| !s.nodes.is_empty()) {
        let metrics = stage.nodes[0].metrics();
        let rows_out = metrics.as_ref().and_then(|m| m.output_rows()).unwrap_or(0);
        let time = metrics
            .as_ref()
            .and_then(|m| m.elapsed_compute())
            .unwrap_or(0);
        let rows_in: usize = stage
            .nodes
            .last()
            .and_then(|n| n.metrics())
            .and_then(|m| m.output_rows())
            .unwrap_or(0);
        let _ = writeln!(
            text,
            "  stage {}: tasks={}, rows_in={rows_in}, rows_out={rows_out}, compute={}ms",
            stage.id,
            stage.tasks,
            time / 1_000_000
        );
    }
}
