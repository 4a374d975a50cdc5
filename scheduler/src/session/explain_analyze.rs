//! EXPLAIN of a MERGE in its four formats, and what EXPLAIN ANALYZE adds to
//! the run's stage graph: the commit stage's figures (it runs on the
//! coordinator, after the job), the merge's result figures and where the
//! statement's time went.

use std::fmt::Write;
use std::time::Duration;

use arrow::array::{Array, UInt64Array};
use icemerge_planner::explain::{
    human_ms, render_dot, render_figures, render_svg, render_text, ExplainDocument, NamedFigures,
    StageFigures, StageKind, Timing,
};
use icemerge_planner::merge::ExplainFormat;

use crate::engine::now_nanos;
use crate::merge::MergeOutcome;

use super::metrics::OperatorMetrics;
use super::StatementOutput;

/// When the commit ran and the CPU time it took.
pub(super) struct CommitRun {
    /// Nanoseconds since the Unix epoch.
    pub started: i64,
    pub ended: i64,
    pub cpu: Duration,
}

/// The run's stage graph and figures (`run`) completed for a MERGE: the
/// commit stage, the result row's figures, and the timing from the
/// statement's start (`times.0`) and the end of planning (`times.1`).
pub(super) fn analyzed_merge(
    mut run: ExplainDocument,
    row: &StatementOutput,
    metrics: &OperatorMetrics,
    files_pruned: u64,
    times: (i64, i64),
    commit: &CommitRun,
) -> ExplainDocument {
    let (started, planned) = times;
    let ms = |nanos: i64| nanos.max(0) as f64 / 1e6;
    let run_ms = run.timing.as_ref().map_or(0.0, |t| t.run_ms);
    let fragments: u64 = run
        .stages
        .iter()
        .filter(|s| s.stage.kind == StageKind::MergeWriter)
        .filter_map(|s| s.figures.as_ref().map(|f| f.rows_out))
        .sum();
    if let Some(entry) = run
        .stages
        .iter_mut()
        .find(|s| s.stage.kind == StageKind::Commit)
    {
        let wall_ms = ms(commit.ended - commit.started);
        entry.figures = Some(StageFigures {
            tasks: 1,
            executors: vec!["coordinator".into()],
            rows_in: Some(fragments),
            start_ms: ms(commit.started - planned),
            wall_ms,
            cpu_ms: commit.cpu.as_secs_f64() * 1e3,
            slowest_task_ms: wall_ms,
            median_task_ms: wall_ms,
            ..Default::default()
        });
    }
    let mut figures = row_figures(row);
    figures.push(("files_pruned".into(), files_pruned));
    figures.push((
        "files_rewritten".into(),
        metrics.get("files_rewritten") as u64,
    ));
    run.merge = Some(NamedFigures(figures));
    run.timing = Some(Timing {
        total_ms: ms(now_nanos() - started),
        plan_ms: ms(planned - started),
        run_ms,
        commit_ms: ms(commit.ended - commit.started),
    });
    run
}

/// The named figures of a one-row output (the MERGE result row).
fn row_figures(row: &StatementOutput) -> Vec<(String, u64)> {
    let StatementOutput::Rows { schema, batches } = row else {
        return vec![];
    };
    let Some(batch) = batches.iter().find(|b| b.num_rows() > 0) else {
        return vec![];
    };
    schema
        .fields()
        .iter()
        .zip(batch.columns())
        .filter_map(|(field, column)| {
            let values = column.as_any().downcast_ref::<UInt64Array>()?;
            (!values.is_null(0)).then(|| (field.name().clone(), values.value(0)))
        })
        .collect()
}

/// The `Merge:` (`Update:`, `Delete:`) line of EXPLAIN ANALYZE's text: the
/// result row's figures and the files pruned and rewritten.
pub(super) fn merge_line(
    outcome: &MergeOutcome,
    metrics: &OperatorMetrics,
    files_pruned: u64,
    document: &ExplainDocument,
) -> String {
    let count =
        outcome.stat("rows_updated") + outcome.stat("rows_deleted") + outcome.stat("rows_inserted");
    let total = document.timing.as_ref().map_or(0.0, |t| t.total_ms);
    let mut statement = document.statement.clone();
    if let Some(first) = statement.get_mut(0..1) {
        first.make_ascii_uppercase();
    }
    format!(
        "{statement}: count={count}, updated={}, deleted={}, inserted={}, copied={}, files_scanned={}, files_pruned={}, row_groups_pruned={}, files_rewritten={}, files_removed={}, files_added={}, delete_files_added={}, bytes_read={}, bytes_written={}, commit_attempts={}, reexecutions={}, wall={}ms",
        outcome.stat("rows_updated"),
        outcome.stat("rows_deleted"),
        outcome.stat("rows_inserted"),
        outcome.stat("rows_copied"),
        metrics.get("files_scanned"),
        files_pruned,
        metrics.get("row_groups_pruned"),
        metrics.get("files_rewritten"),
        outcome.stat("files_removed"),
        outcome.stat("files_added"),
        outcome.stat("delete_files_added"),
        outcome.stat("bytes_read"),
        outcome.stat("bytes_written"),
        outcome.commit_attempts,
        outcome.reexecutions,
        total.round() as u64
    )
}

/// EXPLAIN's output in `format`. Text: the graph and, when analyzed, the
/// per-stage figures, `merge_line` and the timing. JSON and SVG: one row
/// holding the whole document (columns `plan_json`, `plan_svg`).
pub(super) fn render_explain(
    document: &ExplainDocument,
    format: ExplainFormat,
    merge_line: &str,
) -> StatementOutput {
    match format {
        ExplainFormat::Text => {
            let stages: Vec<_> = document.stages.iter().map(|s| s.stage.clone()).collect();
            let mut text = render_text(&stages);
            if document.analyzed {
                text.push('\n');
                text.push_str(&render_figures(document));
                let _ = writeln!(text, "{merge_line}");
                if let Some(t) = &document.timing {
                    let _ = writeln!(
                        text,
                        "Time: total={}, plan={}, run={}, commit={}",
                        human_ms(t.total_ms),
                        human_ms(t.plan_ms),
                        human_ms(t.run_ms),
                        human_ms(t.commit_ms)
                    );
                }
            }
            StatementOutput::text("plan", &text)
        }
        ExplainFormat::Graphviz => StatementOutput::text("plan", &render_dot(document)),
        ExplainFormat::Json => StatementOutput::document("plan_json", &document.to_json()),
        ExplainFormat::Svg => StatementOutput::document("plan_svg", &render_svg(document)),
    }
}
