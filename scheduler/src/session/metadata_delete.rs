//! A metadata-only DELETE as a statement (`crate::merge::MetadataDelete`
//! decides when one applies): its commit — the dropped files removed in
//! one `delete` snapshot, validated against concurrent commits like any
//! DELETE — and its EXPLAIN, which has no stage graph to show: the text
//! and JSON formats say which files go and, under ANALYZE, that nothing
//! was read or written.

use std::collections::BTreeMap;

use datafusion::error::Result;
use icemerge_executor::stage_probe::measure_thread_cpu;
use icemerge_planner::explain::human_ms;
use icemerge_planner::merge::ExplainFormat;
use icemerge_proto::error::unsupported;
use serde_json::json;

use crate::commit::CommitOutcome;
use crate::engine::now_nanos;
use crate::merge::{commit_merge, MergeOutcome, MetadataDelete, PlannedMerge};

use super::explain_analyze::CommitRun;
use super::merge::Execution;
use super::{Session, StatementOutput};

/// What EXPLAIN ANALYZE reports of a metadata-only DELETE that ran.
pub(super) struct MetadataDeleteRun<'a> {
    pub outcome: &'a MergeOutcome,
    /// Nanoseconds since the Unix epoch.
    pub started: i64,
    pub planned_at: i64,
    pub commit: &'a CommitRun,
}

impl Session {
    /// Removes `dropped`'s files from the table planned in `planned`.
    pub(super) async fn commit_metadata_delete(
        &self,
        planned: &PlannedMerge,
        dropped: &MetadataDelete,
    ) -> Result<Execution> {
        let mut outcome = MergeOutcome {
            stats: BTreeMap::from([
                ("rows_deleted".to_string(), dropped.rows()),
                ("files_removed".to_string(), dropped.files.len() as u64),
                ("metadata_only".to_string(), 1),
            ]),
            removed: dropped.files.iter().map(|(path, _)| path.clone()).collect(),
            ..Default::default()
        };
        let started = now_nanos();
        let (committed, cpu) =
            measure_thread_cpu(commit_merge(&self.catalog, planned, &outcome)).await;
        let commit = CommitRun {
            started,
            ended: now_nanos(),
            cpu,
        };
        Ok(match committed? {
            CommitOutcome::Committed { attempts, .. } => {
                outcome.commit_attempts = attempts as u64;
                Execution::Committed(outcome, commit)
            }
            CommitOutcome::NothingToCommit => Execution::Committed(outcome, commit),
            CommitOutcome::Conflict(found) => Execution::Conflict(found),
        })
    }
}

/// Graphviz and SVG draw a stage graph, which a metadata-only DELETE does
/// not have: refused before anything is committed.
pub(super) fn check_metadata_delete_format(format: ExplainFormat) -> Result<()> {
    match format {
        ExplainFormat::Text | ExplainFormat::Json => Ok(()),
        ExplainFormat::Graphviz | ExplainFormat::Svg => Err(unsupported(
            "EXPLAIN of a metadata-only DELETE (it drops whole data files and runs no stage): \
             use FORMAT TEXT or FORMAT JSON",
        )),
    }
}

/// EXPLAIN [ANALYZE] of a metadata-only DELETE (`run`: the figures of
/// ANALYZE).
pub(super) fn explain_metadata_delete(
    planned: &PlannedMerge,
    dropped: &MetadataDelete,
    format: ExplainFormat,
    run: Option<MetadataDeleteRun<'_>>,
) -> Result<StatementOutput> {
    check_metadata_delete_format(format)?;
    let table = &planned.table_name;
    let files = dropped.files.len();
    let rows = dropped.rows();
    if format == ExplainFormat::Json {
        let mut document = json!({
            "statement": "DELETE",
            "table": table,
            "metadata_only": true,
            "analyzed": run.is_some(),
            "files_removed": files,
            "rows_deleted": rows,
            "stages": [],
        });
        if let Some(run) = &run {
            document["figures"] = json!({
                "files_scanned": 0,
                "bytes_read": 0,
                "bytes_written": 0,
                "commit_attempts": run.outcome.commit_attempts,
            });
            document["timing"] = json!({
                "total_ms": ms(run.commit.ended - run.started),
                "plan_ms": ms(run.planned_at - run.started),
                "commit_ms": ms(run.commit.ended - run.commit.started),
            });
        }
        return Ok(StatementOutput::document(
            "plan_json",
            &serde_json::to_string_pretty(&document).unwrap_or_default(),
        ));
    }
    let mut text =
        format!(
        "Metadata-only DELETE on {table}: {files} data file(s) holding {rows} row(s) {} whole; \
         their partition values and column statistics prove every row matches the WHERE. No \
         stage runs: no data file is read or written.\n",
        if run.is_some() { "were dropped" } else { "are dropped" }
    );
    if let Some(run) = &run {
        text.push_str(&format!(
            "Delete: rows_deleted={rows}, files_removed={files}, files_scanned=0, bytes_read=0, \
             bytes_written=0, commit_attempts={}\nTime: total={}, plan={}, commit={}\n",
            run.outcome.commit_attempts,
            human_ms(ms(run.commit.ended - run.started)),
            human_ms(ms(run.planned_at - run.started)),
            human_ms(ms(run.commit.ended - run.commit.started)),
        ));
    }
    Ok(StatementOutput::text("plan", &text))
}

fn ms(nanos: i64) -> f64 {
    nanos.max(0) as f64 / 1e6
}
