//! `MERGE INTO` as a statement: resolve the target, plan the five-stage
//! graph (`crate::merge`), explain it or run it, commit ONE snapshot, and
//! delete every file the statement wrote that the commit does not keep.

use datafusion::error::{DataFusionError, Result};
use datafusion::sql::sqlparser::ast::{Merge, TableFactor};
use icemerge_executor::iceberg_err;
use icemerge_planner::explain;
use icemerge_planner::merge::ExplainMerge;

use crate::merge::{
    collect_fragments, commit_merge, discard_failed, discard_uncommitted, plan_merge,
};

use super::explain_analyze::render_analyze;
use super::{Session, StatementOutput};
use icemerge_proto::error::{invalid_input, not_found};

impl Session {
    /// Plans, runs and commits a MERGE (or explains it).
    pub(super) async fn run_merge(
        &self,
        merge: Merge,
        explain: Option<ExplainMerge>,
    ) -> Result<StatementOutput> {
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
        let stages = explain::stages(&planned.plan, true);
        match explain {
            Some(ExplainMerge::Text) => {
                return Ok(StatementOutput::text(
                    "plan",
                    &explain::render_text(&stages),
                ))
            }
            Some(ExplainMerge::Dot) => {
                return Ok(StatementOutput::text("plan", &explain::render_dot(&stages)))
            }
            _ => {}
        }
        let started = std::time::Instant::now();
        let result = async {
            let batches = self.run_plan(planned.plan.clone()).await?;
            let outcome = collect_fragments(&planned.base, &batches)?;
            commit_merge(&self.catalog, &self.catalog.uri, &planned, &outcome).await?;
            Ok::<_, DataFusionError>(outcome)
        }
        .await;
        let outcome = match result {
            Ok(outcome) => outcome,
            Err(e) => {
                discard_failed(&planned, self.engine.scheduler_url().is_some());
                return Err(e);
            }
        };
        let committed: Vec<_> = outcome.added.iter().chain(&outcome.added_deletes).collect();
        discard_uncommitted(&planned, &committed);
        let files_scanned = self.last_metrics().get("files_scanned") as u64;
        if explain == Some(ExplainMerge::Analyze) {
            let tasks = match (self.engine.ledger(), self.last_job_id()) {
                (Some(ledger), Some(job)) => Some(ledger.tasks_of(&job)),
                _ => None,
            };
            let text = render_analyze(
                &stages,
                tasks,
                &outcome,
                &self.last_metrics(),
                planned.files_pruned,
                started.elapsed(),
            );
            return Ok(StatementOutput::text("plan", &text));
        }
        Ok(StatementOutput::merge(&outcome, files_scanned))
    }
}
