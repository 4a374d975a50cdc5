//! `MERGE INTO` as a statement: resolve the target, plan the five-stage
//! graph (`crate::merge`), explain it or run it, commit ONE snapshot, and
//! delete every file the statement wrote that the commit does not keep.

use datafusion::error::{DataFusionError, Result};
use datafusion::sql::sqlparser::ast::{Merge, TableFactor};
use icemerge_executor::iceberg_err;
use icemerge_executor::stage_probe::measure_thread_cpu;
use icemerge_planner::explain::{stage_graph, ExplainDocument};
use icemerge_planner::merge::ExplainMerge;

use crate::engine::now_nanos;
use crate::merge::{
    collect_fragments, commit_merge, discard_failed, discard_uncommitted, plan_merge,
};

use super::explain_analyze::{analyzed_merge, render_explain, CommitRun};
use super::{Session, StatementOutput};
use icemerge_proto::error::{invalid_input, not_found};

impl Session {
    /// Plans, runs and commits a MERGE (or explains it).
    pub(super) async fn run_merge(
        &self,
        merge: Merge,
        explain: Option<ExplainMerge>,
    ) -> Result<StatementOutput> {
        let started = now_nanos();
        let target = match &merge.table {
            TableFactor::Table { name, .. } => self.object_ident(name)?,
            other => {
                return Err(invalid_input(format!(
                    "MERGE INTO: the target must be a table, found '{other}'"
                )))
            }
        };
        self.ensure_namespace(target.namespace()).await?;
        let catalog = &self.catalog.catalog;
        if !catalog.table_exists(&target).await.map_err(iceberg_err)? {
            return Err(not_found(format!(
                "MERGE INTO: table '{target}' does not exist"
            )));
        }
        let base = catalog.load_table(&target).await.map_err(iceberg_err)?;
        let name = format!("{}.{}", target.namespace().to_url_string(), target.name());
        let writers = self.ctx.copied_config().target_partitions();
        let planned = plan_merge(
            &self.ctx,
            merge,
            base,
            name,
            self.catalog.file_io_props.clone(),
            writers,
        )
        .await?;
        let graph = stage_graph(&planned.plan, true)?;
        if let Some(mode) = explain.filter(|e| !e.analyze) {
            let document = ExplainDocument::plan("merge", self.engine_name(), &graph.stages);
            return Ok(render_explain(&document, mode.format, ""));
        }
        let planned_at = now_nanos();
        let result = async {
            let batches = self.run_plan(&graph, "merge").await?;
            let outcome = collect_fragments(&planned.base, &batches)?;
            let commit_started = now_nanos();
            let (committed, cpu) = measure_thread_cpu(commit_merge(
                &self.catalog,
                &self.catalog.uri,
                &planned,
                &outcome,
            ))
            .await;
            committed?;
            let commit = CommitRun {
                started: commit_started,
                ended: now_nanos(),
                cpu,
            };
            Ok::<_, DataFusionError>((outcome, commit))
        }
        .await;
        let (outcome, commit) = match result {
            Ok(done) => done,
            Err(e) => {
                discard_failed(&planned, self.engine.scheduler_url().is_some());
                return Err(e);
            }
        };
        discard_uncommitted(&planned, &outcome.added);
        let files_scanned = self.last_metrics().get("files_scanned") as u64;
        let row = StatementOutput::merge(&outcome, files_scanned);
        let document = self.last_run().map(|run| {
            analyzed_merge(
                run,
                &row,
                &self.last_metrics(),
                planned.files_pruned,
                (started, planned_at),
                &commit,
            )
        });
        if let Some(document) = &document {
            *self.last_run.lock().expect("lock") = Some(Box::new(document.clone()));
        }
        match (explain, document) {
            (Some(mode), Some(document)) => {
                let merge_line = super::explain_analyze::merge_line(
                    &outcome,
                    &self.last_metrics(),
                    planned.files_pruned,
                    &document,
                );
                Ok(render_explain(&document, mode.format, &merge_line))
            }
            _ => Ok(row),
        }
    }
}
