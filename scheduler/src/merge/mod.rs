//! Running a `MERGE INTO`: plan the five-stage graph, run it on the engine,
//! commit one snapshot. `UPDATE` and `DELETE` run here too, as the MERGE
//! they are bound to (`icemerge_planner::update_delete`): no source scan
//! and no join; their WHERE filters and prunes the target scan, and the
//! classification sits on top of it; their write mode and isolation level
//! are `write.update.*` / `write.delete.*`.
//!
//! Stages, and where their coordinator side lives here:
//!
//! - A: target scan (row-id) — `IcebergScanExec` with `_file` / `_pos`, all
//!   tasks reading the snapshot pinned at plan time; its files are pruned by
//!   ON conjuncts on the target alone and by the source's key values
//!   (`dynamic_pruning`); an insert-only merge's scan reads the ON columns
//!   alone, without row ids, for its anti join; a merge whose source keys
//!   prune every file matches no target row and runs as its NOT MATCHED
//!   clauses alone, an insert-only merge (`BoundMerge::inserts_alone`);
//! - B: source scan — whatever DataFusion plans for the USING relation;
//! - C: join / classify — DataFusion's hash join (keys from the ON
//!   equalities, the rest as join filter); on the local engine, a join
//!   that would build on a large source builds on the target rows the
//!   source matches instead (a semi join first), or, where every target
//!   row is needed, is a sort-merge join when its build side would not fit
//!   a quarter of the memory budget; on a cluster, the target scan tasks
//!   drop the rows no source key matches before the exchange, the
//!   source's ON columns collected into each (`join_strategy`); and the
//!   classification projection (`icemerge_planner::merge::classify_sql`);
//! - D: writer — merge rows hash-partitioned by data file (inserts spread),
//!   over no more writers than the rows have routes (`writers_used`;
//!   none when the join runs in one task and its inserts have one route,
//!   `written_in_its_one_task`),
//!   per partition `CopyOnWriteWriterExec`, or `MergeOnReadWriterExec` when
//!   the table's `write.merge.mode` is `merge-on-read`; either also fails
//!   the statement on a duplicate match; on a cluster, an insert-only
//!   merge into an unpartitioned table writes in the join's tasks, with no
//!   exchange (`writes_where_joined`);
//! - on a cluster, data file paths cross every exchange dictionary-encoded
//!   (`paths_across_exchanges`);
//! - E: commit — here, after the job: `append` when the merge only inserted,
//!   otherwise an `overwrite` snapshot (copy-on-write) or a row delta
//!   (merge-on-read); the pointer swap is a compare-and-swap (`outcome`,
//!   over `crate::commit`).
//!
//! Plan-time checks are in `checks`, the spread of inserted rows over
//! writers in `insert_routes`. A DELETE whose WHERE provably covers whole
//! files skips stages A–D (`metadata_delete`).

mod checks;
mod dynamic_pruning;
mod insert_routes;
mod join_strategy;
mod metadata_delete;
mod outcome;
mod paths_across_exchanges;
mod source_bounds;

use std::sync::Arc;

use arrow::datatypes::Field;
use datafusion::common::ScalarValue;
use datafusion::error::Result;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::projection::ProjectionExpr;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties, Partitioning};
use iceberg::expr::Predicate;
use iceberg::table::Table;
use icemerge_executor::merge_on_read::MergeOnReadWriterExec;
use icemerge_executor::merge_writer::{
    CopyOnWriteWriterExec, FileOrdinals, SortChangesByFileExec, TargetFiles,
};
use icemerge_executor::writer_route::WriterRouteExpr;
use icemerge_planner::merge::{
    bind_merge, classify_sql, BoundMerge, RowLevelKind, RowLevelStatement, TargetPrefilter,
};
use icemerge_planner::source_keys::source_key_probe;
use icemerge_planner::write_mode::{mode_of, WriteMode};
use icemerge_proto::merge_rows::ROUTE_COLUMN;

use crate::catalog::IcebergTableProvider;
use crate::commit::{
    ConflictFilter, IsolationLevel, DELETE_ISOLATION_LEVEL, MERGE_ISOLATION_LEVEL,
    UPDATE_ISOLATION_LEVEL,
};
use checks::{check_assignment_types, check_join_keys, explain_bind_error};
pub(crate) use dynamic_pruning::with_target_provider;
use dynamic_pruning::{
    is_volatile, join_source, probe_source_keys, target_files, ScannedTargets, DISTINCT_LIMIT,
};
use insert_routes::insert_routes;
pub use join_strategy::JoinEngine;
pub use metadata_delete::MetadataDelete;
use metadata_delete::{exact_delete_predicate, metadata_only_delete};

pub use outcome::{
    collect_fragments, commit_merge, discard_failed, discard_uncommitted, MergeOutcome,
};

/// A planned MERGE, ready to run or to explain.
pub struct PlannedMerge {
    pub bound: BoundMerge,
    pub base: Table,
    pub table_name: String,
    pub write_id: String,
    /// The whole physical plan, rooted at the writer.
    pub plan: Arc<dyn ExecutionPlan>,
    /// Data files of the target that the scan does not read (pruned).
    pub files_pruned: u64,
    /// The rows the merge's outcome depends on, for validating its commit
    /// against concurrent snapshots: the predicate that pruned the target
    /// scan, or the whole table.
    pub conflict_filter: ConflictFilter,
    /// The source reads the same rows when run again (no volatile
    /// function), so a conflicting merge may be re-executed.
    pub deterministic_source: bool,
    /// The table's `write.merge.isolation-level`.
    pub isolation: IsolationLevel,
    /// A DELETE that drops whole files without running a job
    /// (`metadata_delete.rs`); None for every other statement.
    pub metadata_delete: Option<MetadataDelete>,
    /// MERGE WITH SCHEMA EVOLUTION that added columns: `base` carries the
    /// evolved schema as current, and this is the id of the schema it
    /// evolved (the commit writes the new one, `commit::with_current_schema`).
    pub schema_evolved_from: Option<i32>,
}

/// Plans `statement` (a MERGE, or an UPDATE or DELETE bound as one)
/// against `base` (the target at its current snapshot), its join planned
/// for `engine` (`join_strategy`).
pub async fn plan_merge(
    ctx: &datafusion::prelude::SessionContext,
    statement: RowLevelStatement,
    base: Table,
    table_name: String,
    file_io_props: std::collections::HashMap<String, String>,
    writers: usize,
    engine: JoinEngine,
) -> Result<PlannedMerge> {
    let bound = bind_merge(statement)?;
    let isolation_property = match bound.kind {
        RowLevelKind::Merge => MERGE_ISOLATION_LEVEL,
        RowLevelKind::Update => UPDATE_ISOLATION_LEVEL,
        RowLevelKind::Delete => DELETE_ISOLATION_LEVEL,
    };
    let isolation = IsolationLevel::of(
        base.metadata().properties(),
        isolation_property,
        &table_name,
    )?;
    let metadata = base.metadata();
    let mode = mode_of(
        &table_name,
        metadata.properties(),
        bound.kind.mode_property(),
        metadata.format_version(),
    )?;
    let provider =
        IcebergTableProvider::try_new(table_name.clone(), base.clone(), file_io_props.clone())?
            .with_row_ids();
    let columns: Vec<String> = provider.schema.fields()[..provider.schema.fields().len() - 2]
        .iter()
        .map(|f| f.name().clone())
        .collect();
    let target_schema = provider.schema.clone();
    let relation = format!("__icemerge_target_{}", uuid::Uuid::new_v4().simple());
    ctx.register_table(relation.as_str(), Arc::new(provider.clone()))?;
    let planned = async {
        check_assignment_types(ctx, &bound, &relation, &columns, &target_schema).await?;
        let logical = classification(ctx, &bound, &relation, &columns).await?;
        let (deterministic_source, keys) = if bound.kind == RowLevelKind::Merge {
            check_join_keys(&logical, &bound)?;
            let deterministic = !is_volatile(&join_source(&logical)?)?;
            let keys = match source_key_probe(&bound, &columns, DISTINCT_LIMIT)? {
                Some(probe) => {
                    probe_source_keys(ctx, join_source(&logical)?, &probe, &target_schema).await?
                }
                None => None,
            };
            (deterministic, keys)
        } else {
            // UPDATE / DELETE join no source: run again, the statement
            // reads the new snapshot as it would have read the old one.
            (true, None)
        };
        let pruning = keys
            .as_ref()
            .and_then(|k| Some((k.predicate.clone()?, k.origin)));
        // When the source's keys prune every file of the target, no target
        // row can match: the merge runs as its NOT MATCHED clauses alone,
        // an insert-only merge, whose join has nothing to build on.
        let inserts_alone = match (&pruning, bound.inserts_alone()) {
            (Some((predicate, _)), Some(alone)) if reads_no_file(&provider, predicate).await? => {
                Some(alone)
            }
            _ => None,
        };
        let (bound, logical) = match inserts_alone {
            Some(alone) => {
                let logical = classification(ctx, &alone, &relation, &columns).await?;
                (alone, logical)
            }
            None => (bound, logical),
        };
        let written_where_joined = writes_where_joined(engine, &bound, &base);
        let routes = if written_where_joined {
            1.0
        } else {
            insert_routes(&base, keys.map(|k| k.rows), writers)?
        };
        // The pruned target and the insert routes, in this plan or in the
        // join strategy's re-planned one.
        let prepare = |logical: LogicalPlan| -> Result<LogicalPlan> {
            let logical = match &pruning {
                Some((predicate, origin)) => with_target_provider(
                    logical,
                    &relation,
                    Arc::new(
                        provider
                            .clone()
                            .with_pruning(predicate.clone())
                            .with_pruning_origin(origin),
                    ),
                )?,
                None => logical,
            };
            logical.with_param_values(vec![ScalarValue::Float64(Some(routes))])
        };
        let logical = prepare(logical)?;
        let delete_predicate = match bound.kind {
            RowLevelKind::Delete => exact_delete_predicate(&logical, &relation),
            _ => None,
        };
        // A deterministic source can be read twice: once for the target
        // rows it matches, once joined to them; unless every target row is
        // needed (NOT MATCHED BY SOURCE). An insert-only merge's join
        // builds on the source's keys anyway: narrowing its target pays on
        // a cluster only, where it saves the exchange.
        let prefilter = bound.kind == RowLevelKind::Merge
            && (!bound.insert_only || engine == JoinEngine::Cluster)
            && deterministic_source
            && !bound.needs_every_target_row();
        let prefiltered_sql =
            || classify_sql(&bound, &relation, &columns, TargetPrefilter::MatchedRows);
        let prefiltered = prefilter.then_some(join_strategy::Prefiltered {
            sql: &prefiltered_sql,
            prepare: &prepare,
            insert_only: bound.insert_only,
        });
        let physical = join_strategy::plan_join(ctx, &logical, engine, prefiltered).await?;
        Ok::<_, datafusion::error::DataFusionError>((
            bound,
            physical,
            deterministic_source,
            delete_predicate,
            written_where_joined,
            routes,
        ))
    }
    .await;
    ctx.deregister_table(relation.as_str())?;
    let (bound, classified, deterministic_source, delete_predicate, written_where_joined, routes) =
        planned?;
    let ScannedTargets {
        files: targets,
        paths: target_paths,
        pruned: files_pruned,
        pruned_by,
    } = target_files(&classified);
    let metadata_delete = match &delete_predicate {
        Some(predicate) => metadata_only_delete(&base, &targets, predicate).await?,
        None => None,
    };
    let conflict_filter = match pruned_by {
        Some(predicate) => ConflictFilter::Rows(predicate),
        None => ConflictFilter::WholeTable,
    };

    let write_id = format!("{}-{}", bound.kind.keyword(), uuid::Uuid::new_v4().simple());
    let inserts = if bound.inserts() { routes } else { 0.0 };
    let exchange = (!written_where_joined
        && !written_in_its_one_task(&bound, &classified, inserts))
    .then(|| writers_used(writers, &target_paths, inserts));
    let writer = writer_stage(
        mode,
        classified,
        exchange,
        !bound.insert_only,
        targets,
        target_paths,
        WriterTable {
            name: &table_name,
            base: &base,
            file_io_props,
            write_id: &write_id,
        },
    )?;
    let writer = match engine {
        JoinEngine::Cluster => {
            paths_across_exchanges::paths_as_dictionaries_across_exchanges(writer)?
        }
        JoinEngine::Local { .. } => writer,
    };
    Ok(PlannedMerge {
        bound,
        base,
        table_name,
        write_id,
        plan: writer,
        files_pruned,
        conflict_filter,
        deterministic_source,
        isolation,
        metadata_delete,
        schema_evolved_from: None,
    })
}

/// The logical plan of `bound`'s classification query over the target's
/// row-id relation (registered as `relation`).
async fn classification(
    ctx: &datafusion::prelude::SessionContext,
    bound: &BoundMerge,
    relation: &str,
    columns: &[String],
) -> Result<LogicalPlan> {
    let sql = classify_sql(bound, relation, columns, TargetPrefilter::None)?;
    ctx.state()
        .create_logical_plan(&sql)
        .await
        .map_err(|e| explain_bind_error(e, bound))
}

/// Whether the tasks of the join write the rows they classify, with no
/// exchange to writers: on a cluster, for an insert-only merge into an
/// unpartitioned table. Its join reads the source where it is, so its rows
/// make no trip through shuffle files, and it writes one file or more per
/// source split, as Spark writes an unpartitioned, unsorted table; its
/// inserted rows need no route.
fn writes_where_joined(engine: JoinEngine, bound: &BoundMerge, base: &Table) -> bool {
    engine == JoinEngine::Cluster
        && bound.kind == RowLevelKind::Merge
        && bound.insert_only
        && base.metadata().default_partition_spec().is_unpartitioned()
}

/// Whether the target's scan pruned by `predicate` (the source's keys)
/// reads no data file.
async fn reads_no_file(provider: &IcebergTableProvider, predicate: &Predicate) -> Result<bool> {
    let scan = provider
        .clone()
        .with_pruning(predicate.clone())
        .plan_scan(None, &[], None, 1)
        .await?;
    Ok(scan.groups.iter().all(|group| group.is_empty()))
}

/// How many of `writers` the writer exchange spreads a merge's rows over:
/// no more than the routes its rows can take, one per data file the target
/// scan reads (`target_paths`) and the `insert_routes` of its inserted rows
/// (0 for a statement that inserts none), and at least one. A writer no
/// route reaches would run as an empty task: a one-row merge into a
/// one-file table ran four writer tasks on a cluster, three of them empty.
fn writers_used(writers: usize, target_paths: &[String], insert_routes: f64) -> usize {
    let files: std::collections::HashSet<&String> = target_paths.iter().collect();
    // A float cast saturates: `PER_ROW` routes are every writer.
    let routes = (files.len() as f64 + insert_routes.max(0.0)) as usize;
    writers.min(routes).max(1)
}

/// Whether a MERGE's join writes the rows it classifies itself, with no
/// exchange to writers: when it runs in one task (a one-file target, or a
/// cluster's join in the one task of its probe side), every row of every
/// data file is in that task already, and its inserts, with at most one
/// route, would go to one writer anyway. A one-row merge then runs one
/// stage before its commit, where it ran two. UPDATE and DELETE keep their
/// writers' stage.
fn written_in_its_one_task(
    bound: &BoundMerge,
    classified: &Arc<dyn ExecutionPlan>,
    insert_routes: f64,
) -> bool {
    bound.kind == RowLevelKind::Merge
        && classified.output_partitioning().partition_count() == 1
        && insert_routes <= 1.0
}

/// The table a merge's writer stage writes into.
struct WriterTable<'a> {
    name: &'a str,
    base: &'a Table,
    file_io_props: std::collections::HashMap<String, String>,
    write_id: &'a str,
}

/// Stage D: the exchange to `exchange` writers that sends every merge row
/// of one data file to one writer (the data files the target scan reads
/// spread evenly by their record counts, `WriterRouteExpr`; inserts, which
/// have no file, by their insert route, one writer per route; the route is
/// dropped once the rows are routed), and the writer of the table's write
/// mode on top; with no exchange (None), each task of the join writes the
/// rows it classifies (an insert-only merge on a cluster, see
/// `plan_merge`). A copy-on-write writer of a merge that changes target
/// rows gets its changes sorted by data file (a sort that spills under the
/// memory budget, keyed by each file's place among the `target_paths` the
/// target scan reads; inserted rows skip it and come first), so it rewrites
/// each file as soon as its changes are complete and holds one file's
/// changes at a time.
fn writer_stage(
    mode: WriteMode,
    classified: Arc<dyn ExecutionPlan>,
    exchange: Option<usize>,
    changes_rows: bool,
    targets: TargetFiles,
    target_paths: Vec<String>,
    table: WriterTable<'_>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let exchange = match exchange {
        Some(writers) => {
            let route = classified.schema().index_of(ROUTE_COLUMN)?;
            let files: Vec<(String, u64)> = target_paths
                .iter()
                .map(|path| (path.clone(), targets.rows.get(path).copied().unwrap_or(1)))
                .collect();
            // The route is computed below the exchange, which hashes a
            // plain column (Ballista ships a shuffle's hash expressions
            // with DataFusion's own codec).
            let route: Arc<dyn PhysicalExpr> = Arc::new(WriterRouteExpr::balanced(
                Arc::new(Column::new(ROUTE_COLUMN, route)),
                &files,
                writers,
            )?);
            let routed = projected(classified, |field, column| {
                Some(match field.name() == ROUTE_COLUMN {
                    true => route.clone(),
                    false => column,
                })
            })?;
            let route = routed.schema().index_of(ROUTE_COLUMN)?;
            without_route(Arc::new(RepartitionExec::try_new(
                routed,
                Partitioning::Hash(
                    vec![Arc::new(Column::new(ROUTE_COLUMN, route))],
                    writers.max(1),
                ),
            )?))?
        }
        None => without_route(classified)?,
    };
    let (name, metadata) = (table.name.to_string(), table.base.metadata_ref());
    let write_id = table.write_id.to_string();
    Ok(match mode {
        WriteMode::CopyOnWrite => {
            let input: Arc<dyn ExecutionPlan> = if changes_rows {
                let files = FileOrdinals::new(target_paths)?;
                Arc::new(SortChangesByFileExec::try_new(exchange, Arc::new(files))?)
            } else {
                exchange
            };
            Arc::new(
                CopyOnWriteWriterExec::new(name, metadata, table.file_io_props, write_id, input)
                    .with_targets(targets),
            )
        }
        WriteMode::MergeOnRead => Arc::new(MergeOnReadWriterExec::new(
            name,
            metadata,
            table.file_io_props,
            write_id,
            exchange,
        )),
    })
}

/// The routed merge rows without their route: the copy-on-write writer's
/// sort by data file would otherwise hold, spill and merge each changed
/// row's path as its route.
fn without_route(routed: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    projected(routed, |field, column| {
        (field.name() != ROUTE_COLUMN).then_some(column)
    })
}

/// A projection of `input` keeping each column's name: `expr` gets each
/// field and its column and returns the expression that replaces it, or
/// `None` to drop it.
fn projected(
    input: Arc<dyn ExecutionPlan>,
    expr: impl Fn(&Field, Arc<dyn PhysicalExpr>) -> Option<Arc<dyn PhysicalExpr>>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let schema = input.schema();
    let exprs: Vec<ProjectionExpr> = schema
        .fields()
        .iter()
        .enumerate()
        .filter_map(|(i, field)| {
            let column: Arc<dyn PhysicalExpr> = Arc::new(Column::new(field.name(), i));
            expr(field, column).map(|e| ProjectionExpr::new(e, field.name().clone()))
        })
        .collect();
    Ok(Arc::new(ProjectionExec::try_new(exprs, input)?))
}

#[cfg(test)]
mod tests {
    use super::writers_used;

    #[test]
    fn writers_used_are_no_more_than_the_routes_of_the_rows() {
        let paths = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        // A one-file target and one insert route: two of four writers.
        assert_eq!(writers_used(4, &paths(&["a"]), 1.0), 2);
        // A file read in two tasks is one route; no inserts.
        assert_eq!(writers_used(4, &paths(&["a", "a"]), 0.0), 1);
        // Nothing to write still has one writer.
        assert_eq!(writers_used(4, &paths(&[]), 0.0), 1);
        // More routes than writers: every writer.
        assert_eq!(writers_used(4, &paths(&["a", "b", "c", "d", "e"]), 0.0), 4);
        assert_eq!(writers_used(4, &paths(&[]), 1e12), 4);
        assert_eq!(writers_used(2, &paths(&["a"]), 3.0), 2);
    }
}
