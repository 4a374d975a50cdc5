//! `MERGE INTO` (and UPDATE and DELETE, bound as MERGEs) as a statement:
//! resolve the target, plan the stage graph (`crate::merge`), explain it or
//! run it, commit ONE snapshot, and delete every file the statement wrote
//! that the commit does not keep.
//!
//! A commit that conflicts with a snapshot another writer committed since
//! the merge read the table (`crate::commit`'s validation) re-executes the
//! whole statement on the new snapshot, up to `icemerge.max_statement_retries`
//! times, when its source is deterministic; otherwise the statement fails
//! with a conflict naming that snapshot.

use datafusion::error::{DataFusionError, Result};
use datafusion::sql::sqlparser::ast::TableFactor;
use iceberg::TableIdent;
use icemerge_executor::iceberg_err;
use icemerge_executor::stage_probe::measure_thread_cpu;
use icemerge_planner::explain::{stage_graph, ExplainDocument, StageGraph};
use icemerge_planner::merge::{ExplainMerge, RowLevelStatement};

use crate::commit::{CommitOutcome, Conflict};
use crate::engine::now_nanos;
use crate::merge::{
    collect_fragments, commit_merge, discard_failed, discard_uncommitted, plan_merge, MergeOutcome,
    PlannedMerge,
};

use super::commit_pause::pause_before_commit;
use super::explain_analyze::{analyzed_merge, merge_line, render_explain, CommitRun};
use super::metadata_delete::{
    check_metadata_delete_format, explain_metadata_delete, MetadataDeleteRun,
};
use super::options::IcemergeOptions;
use super::{Session, StatementOutput};
use icemerge_proto::error::{conflict, invalid_input, not_found};

/// One execution of a merge: committed (with when the commit ran), or
/// refused by validation.
pub(super) enum Execution {
    Committed(MergeOutcome, CommitRun),
    Conflict(Conflict),
}

impl Session {
    /// Plans, runs and commits a MERGE, UPDATE or DELETE (or explains it).
    pub(super) async fn run_merge(
        &self,
        merge: RowLevelStatement,
        explain: Option<ExplainMerge>,
    ) -> Result<StatementOutput> {
        let started = now_nanos();
        let target = self.merge_target(&merge).await?;
        let statement = merge.kind.keyword();
        if let Some(mode) = explain.filter(|e| !e.analyze) {
            let planned = self.plan_merge_on(&target, merge).await?;
            if let Some(dropped) = &planned.metadata_delete {
                return explain_metadata_delete(&planned, dropped, mode.format, None);
            }
            let graph = stage_graph(&planned.plan, true)?;
            let document = ExplainDocument::plan(statement, self.engine_name(), &graph.stages);
            return Ok(render_explain(&document, mode.format, ""));
        }
        let options = self.icemerge_options();
        let mut reexecutions = 0;
        let (planned, planned_at, mut outcome, commit) = loop {
            let planned = self.plan_merge_on(&target, merge.clone()).await?;
            let (execution, planned_at) = match &planned.metadata_delete {
                Some(dropped) => {
                    if let Some(mode) = explain {
                        check_metadata_delete_format(mode.format)?;
                    }
                    let planned_at = now_nanos();
                    (
                        self.commit_metadata_delete(&planned, dropped).await,
                        planned_at,
                    )
                }
                None => {
                    // Cutting the plan into stages is planning: the run starts after.
                    let graph = stage_graph(&planned.plan, true)?;
                    let planned_at = now_nanos();
                    let execution = self
                        .execute_merge(&planned, &graph, &options, statement)
                        .await;
                    (execution, planned_at)
                }
            };
            match execution {
                Ok(Execution::Committed(outcome, commit)) => {
                    break (planned, planned_at, outcome, commit)
                }
                Ok(Execution::Conflict(found)) => {
                    discard_failed(&planned, false); // the job finished: no task lingers
                    if !planned.deterministic_source
                        || reexecutions >= options.max_statement_retries
                    {
                        return Err(give_up(&found, &planned, reexecutions, &options));
                    }
                    reexecutions += 1;
                    tracing::info!("{found}; running the {statement} again ({reexecutions})");
                }
                Err(e) => {
                    discard_failed(&planned, self.engine.scheduler_url().is_some());
                    return Err(e);
                }
            }
        };
        outcome.reexecutions = reexecutions as u64;
        if let Some(dropped) = &planned.metadata_delete {
            let row = StatementOutput::merge(&outcome, 0);
            return match explain {
                Some(mode) => {
                    let figures = MetadataDeleteRun {
                        outcome: &outcome,
                        started,
                        planned_at,
                        commit: &commit,
                    };
                    explain_metadata_delete(&planned, dropped, mode.format, Some(figures))
                }
                None => Ok(row),
            };
        }
        let committed: Vec<_> = outcome.added.iter().chain(&outcome.added_deletes).collect();
        discard_uncommitted(&planned, &committed);
        let files_scanned = self.last_metrics().get("files_scanned") as u64;
        // Pruned when planned, and by the row-id scan as it ran.
        let files_pruned = planned.files_pruned + self.last_metrics().get("files_pruned") as u64;
        let row = StatementOutput::merge(&outcome, files_scanned);
        let document = self.last_run().map(|run| {
            analyzed_merge(
                run,
                &row,
                &self.last_metrics(),
                files_pruned,
                (started, planned_at),
                &commit,
            )
        });
        if let Some(document) = &document {
            *self.last_run.lock().expect("lock") = Some(Box::new(document.clone()));
        }
        match (explain, document) {
            (Some(mode), Some(document)) => {
                let line = merge_line(&outcome, &self.last_metrics(), files_pruned, &document);
                Ok(render_explain(&document, mode.format, &line))
            }
            _ => Ok(row),
        }
    }

    /// The statement's target table, which must exist.
    async fn merge_target(&self, statement: &RowLevelStatement) -> Result<TableIdent> {
        let said = statement.kind.statement();
        let target = match &statement.merge.table {
            TableFactor::Table { name, .. } => self.object_ident(name)?,
            other => {
                return Err(invalid_input(format!(
                    "{said}: the target must be a table, found '{other}'"
                )))
            }
        };
        self.ensure_namespace(target.namespace()).await?;
        let catalog = &self.catalog.catalog;
        if !catalog.table_exists(&target).await.map_err(iceberg_err)? {
            return Err(not_found(format!(
                "{said}: table '{target}' does not exist"
            )));
        }
        Ok(target)
    }

    /// Plans `merge` on the target's current snapshot (with its schema
    /// evolved first for MERGE WITH SCHEMA EVOLUTION).
    async fn plan_merge_on(
        &self,
        target: &TableIdent,
        merge: RowLevelStatement,
    ) -> Result<PlannedMerge> {
        let base = self
            .catalog
            .catalog
            .load_table(target)
            .await
            .map_err(iceberg_err)?;
        let name = format!("{}.{}", target.namespace().to_url_string(), target.name());
        let (base, schema_evolved_from) = self.evolve_merge_target(base, &merge, &name).await?;
        let writers = self.ctx.copied_config().target_partitions();
        let mut planned = plan_merge(
            &self.ctx,
            merge,
            base,
            name,
            self.catalog.file_io_props.clone(),
            writers,
            self.join_engine(),
        )
        .await?;
        planned.schema_evolved_from = schema_evolved_from;
        Ok(planned)
    }

    /// Runs a planned merge's job and commits what it wrote.
    async fn execute_merge(
        &self,
        planned: &PlannedMerge,
        graph: &StageGraph,
        options: &IcemergeOptions,
        statement: &str,
    ) -> Result<Execution> {
        let batches = self.run_plan(graph, statement).await?;
        let mut outcome = collect_fragments(&planned.base, &batches)?;
        if let Some(dir) = &options.test_pause_before_commit {
            pause_before_commit(dir, &|| self.control.is_cancel_requested()).await?;
        }
        // Cancelled after its job ended: nothing is committed.
        self.control.check()?;
        let commit_started = now_nanos();
        let (committed, cpu) =
            measure_thread_cpu(commit_merge(&self.catalog, planned, &outcome)).await;
        let commit = CommitRun {
            started: commit_started,
            ended: now_nanos(),
            cpu,
        };
        match committed? {
            CommitOutcome::Committed { attempts, .. } => {
                outcome.commit_attempts = attempts as u64;
                Ok(Execution::Committed(outcome, commit))
            }
            CommitOutcome::NothingToCommit => Ok(Execution::Committed(outcome, commit)),
            CommitOutcome::Conflict(found) => Ok(Execution::Conflict(found)),
        }
    }

    /// This session's `icemerge.*` settings.
    pub(crate) fn icemerge_options(&self) -> IcemergeOptions {
        self.ctx
            .copied_config()
            .options()
            .extensions
            .get::<IcemergeOptions>()
            .cloned()
            .unwrap_or_default()
    }
}

/// The error of a merge that conflicts and is not run again.
fn give_up(
    found: &Conflict,
    planned: &PlannedMerge,
    reexecutions: usize,
    options: &IcemergeOptions,
) -> DataFusionError {
    let why = if !planned.deterministic_source {
        "the source is not deterministic, so the MERGE was not run again".to_string()
    } else {
        format!(
            "run again {reexecutions} time(s) (icemerge.max_statement_retries = {})",
            options.max_statement_retries
        )
    };
    conflict(format!(
        "{} {}: {found} ({why})",
        planned.bound.kind.statement(),
        planned.table_name
    ))
}
