//! Running a `MERGE INTO`: plan the five-stage graph, run it on the engine,
//! commit one snapshot.
//!
//! - A: target scan (row-id) — `IcebergScanExec` with `_file` / `_pos`, all
//!   tasks reading the snapshot pinned at plan time; its files are pruned by
//!   ON conjuncts on the target alone and by the source's key values
//!   (`dynamic_pruning`);
//! - B: source scan — whatever DataFusion plans for the USING relation;
//! - C: join / classify — DataFusion's hash join (keys from the ON
//!   equalities, the rest as join filter) and the classification projection
//!   (`icemerge_planner::merge::classify_sql`);
//! - D: writer — merge rows hash-partitioned by data file (inserts spread),
//!   `CopyOnWriteWriterExec` per partition, which also fails the statement on
//!   a duplicate match;
//! - E: commit — here, after the job: `append` when the merge only inserted,
//!   otherwise an `overwrite` snapshot; the pointer swap is a compare-and-swap.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use arrow::array::{Array, AsArray};
use arrow::datatypes::UInt64Type;
use arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::ScalarValue;
use datafusion::datasource::provider_as_source;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{BinaryExpr, Expr, LogicalPlan, Operator};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{ExecutionPlan, Partitioning};
use iceberg::spec::{deserialize_data_file_from_json, DataFile, Operation};
use iceberg::table::Table;
use icemerge_executor::cleanup::{data_location, delete_files_with_prefix_except};
use icemerge_executor::iceberg_err;
use icemerge_executor::merge_writer_exec::CopyOnWriteWriterExec;
use icemerge_executor::scan_exec::IcebergScanExec;
use icemerge_planner::merge::{assignment_probe, bind_merge, classify_sql, BoundMerge};
use icemerge_planner::source_keys::source_key_probe;

use crate::dynamic_pruning::{probe_source_keys, DISTINCT_LIMIT};
use crate::table_provider::IcebergTableProvider;

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
}

/// What a MERGE did.
#[derive(Debug, Default, Clone)]
pub struct MergeOutcome {
    pub stats: BTreeMap<String, u64>,
    pub added: Vec<DataFile>,
    pub removed: Vec<String>,
}

impl MergeOutcome {
    pub fn stat(&self, name: &str) -> u64 {
        self.stats.get(name).copied().unwrap_or(0)
    }
}

/// Plans `merge` against `base` (the target at its current snapshot).
pub async fn plan_merge(
    ctx: &datafusion::prelude::SessionContext,
    merge: datafusion::sql::sqlparser::ast::Merge,
    base: Table,
    table_name: String,
    file_io_props: std::collections::HashMap<String, String>,
    writers: usize,
) -> Result<PlannedMerge> {
    let bound = bind_merge(merge)?;
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
        let sql = classify_sql(&bound, &relation, &columns)?;
        let logical = ctx
            .state()
            .create_logical_plan(&sql)
            .await
            .map_err(|e| explain_bind_error(e, &bound))?;
        check_join_keys(&logical, &bound)?;
        let keys = match source_key_probe(&bound, &columns, DISTINCT_LIMIT)? {
            Some(probe) => {
                probe_source_keys(ctx, join_source(&logical)?, &probe, &target_schema).await?
            }
            None => None,
        };
        let logical = match keys.as_ref().and_then(|k| k.predicate.clone()) {
            Some(predicate) => with_target_provider(
                logical,
                &relation,
                Arc::new(provider.clone().with_pruning(predicate)),
            )?,
            None => logical,
        };
        let routes = insert_routes(&base, keys.map(|k| k.rows), writers)?;
        let logical = logical.with_param_values(vec![ScalarValue::Float64(Some(routes))])?;
        ctx.state().create_physical_plan(&logical).await
    }
    .await;
    ctx.deregister_table(relation.as_str())?;
    let classified = planned?;
    let (file_rows, files_pruned) = target_files(&classified);

    // Stage D's input: every merge row of one data file goes to one writer;
    // inserts (no file) are spread by the route column.
    let route = classified.schema().index_of("__icemerge_route")?;
    let exchange = Arc::new(RepartitionExec::try_new(
        classified,
        Partitioning::Hash(
            vec![Arc::new(Column::new("__icemerge_route", route))],
            writers.max(1),
        ),
    )?);
    let write_id = format!("merge-{}", uuid::Uuid::new_v4().simple());
    let writer = Arc::new(
        CopyOnWriteWriterExec::new(
            table_name.clone(),
            base.metadata_ref(),
            file_io_props,
            write_id.clone(),
            exchange,
        )
        .with_file_rows(Arc::new(file_rows)),
    );
    Ok(PlannedMerge {
        bound,
        base,
        table_name,
        write_id,
        plan: writer,
        files_pruned,
    })
}

/// The source side of the merge's join (the first join of the plan).
fn join_source(plan: &LogicalPlan) -> Result<LogicalPlan> {
    let mut source = None;
    plan.apply(|node| {
        if let LogicalPlan::Join(join) = node {
            source = Some(join.right.as_ref().clone());
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    source.ok_or_else(|| DataFusionError::Internal("MERGE plan without a join".into()))
}

/// `plan` with the scan of `relation` reading through `provider` instead.
fn with_target_provider(
    plan: LogicalPlan,
    relation: &str,
    provider: Arc<IcebergTableProvider>,
) -> Result<LogicalPlan> {
    plan.transform_up(|node| match node {
        LogicalPlan::TableScan(mut scan) if scan.table_name.table() == relation => {
            scan.source = provider_as_source(provider.clone());
            Ok(Transformed::yes(LogicalPlan::TableScan(scan)))
        }
        other => Ok(Transformed::no(other)),
    })
    .map(|t| t.data)
}

/// How many routes inserted rows spread over (the classification's `$1`):
/// as many writers as the source's rows could fill files of the table's
/// target size, at the table's bytes per row; one route per row when the
/// source size is unknown or fills every writer.
fn insert_routes(base: &Table, source_rows: Option<u64>, writers: usize) -> Result<f64> {
    const PER_ROW: f64 = 1e12;
    let Some(rows) = source_rows else {
        return Ok(PER_ROW);
    };
    let metadata = base.metadata();
    let target_size = metadata
        .table_properties()
        .map_err(iceberg_err)?
        .write_target_file_size_bytes as f64;
    let summary = metadata
        .current_snapshot()
        .map(|s| s.summary().additional_properties.clone())
        .unwrap_or_default();
    let total = |key: &str| summary.get(key).and_then(|v| v.parse::<f64>().ok());
    let bytes_per_row = match (total("total-files-size"), total("total-records")) {
        (Some(bytes), Some(records)) if records > 0.0 => bytes / records,
        _ => 100.0,
    };
    let files = (rows as f64 * bytes_per_row / target_size.max(1.0)).ceil();
    Ok(if files >= writers as f64 {
        PER_ROW
    } else {
        files.max(1.0)
    })
}

/// The record count of every data file the plan's row-id scan reads, and
/// how many files it pruned.
fn target_files(plan: &Arc<dyn ExecutionPlan>) -> (HashMap<String, u64>, u64) {
    let mut rows = HashMap::new();
    let mut pruned = 0;
    let _ = plan.apply(|node| {
        if let Some(scan) = node.as_any().downcast_ref::<IcebergScanExec>() {
            if scan.row_ids {
                pruned += scan.files_pruned;
                for task in scan.groups.iter().flatten() {
                    if let Some(n) = task.record_count {
                        rows.insert(task.data_file_path.clone(), n);
                    }
                }
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    (rows, pruned)
}

/// Every value a clause assigns must be castable to its column's type;
/// otherwise a plan-time error names the clause, the column and both types.
async fn check_assignment_types(
    ctx: &datafusion::prelude::SessionContext,
    bound: &BoundMerge,
    relation: &str,
    columns: &[String],
    target: &arrow::datatypes::Schema,
) -> Result<()> {
    let Some(probe) = assignment_probe(bound, relation, columns)? else {
        return Ok(());
    };
    let plan = ctx
        .state()
        .create_logical_plan(&probe.sql)
        .await
        .map_err(|e| explain_bind_error(e, bound))?;
    for ((clause, column), field) in probe.assignments.iter().zip(plan.schema().fields()) {
        let (from, to) = (
            field.data_type(),
            target.field_with_name(column)?.data_type(),
        );
        if from != &arrow::datatypes::DataType::Null && !arrow::compute::can_cast_types(from, to) {
            return Err(DataFusionError::Plan(format!(
                "MERGE {clause}: cannot assign a value of type {from} to column '{column}' of type {to}"
            )));
        }
    }
    Ok(())
}

/// DataFusion's binding errors, said in MERGE's terms.
fn explain_bind_error(e: DataFusionError, bound: &BoundMerge) -> DataFusionError {
    let message = e.to_string();
    if message.contains("__icemerge_target_") {
        let cleaned = message.replace("__icemerge_target_", "target ");
        return DataFusionError::Plan(format!("MERGE INTO {}: {cleaned}", bound.target.join(".")));
    }
    e
}

/// ON must hold at least one equality between a target and a source
/// expression: those are the hash keys. Checked on the bound (unoptimized)
/// plan, so that a source the optimizer can prove empty is still judged by
/// what the statement says.
fn check_join_keys(plan: &LogicalPlan, bound: &BoundMerge) -> Result<()> {
    let mut equi_join = false;
    plan.apply(|node| {
        if let LogicalPlan::Join(join) = node {
            let (left, right) = (join.left.schema(), join.right.schema());
            let sides = |e: &Expr| {
                let cols = e.column_refs();
                let in_left = !cols.is_empty() && cols.iter().all(|c| left.has_column(c));
                let in_right = !cols.is_empty() && cols.iter().all(|c| right.has_column(c));
                (in_left, in_right)
            };
            let is_key = |e: &Expr| match e {
                Expr::BinaryExpr(BinaryExpr {
                    left: l,
                    op: Operator::Eq,
                    right: r,
                }) => {
                    let ((ll, lr), (rl, rr)) = (sides(l), sides(r));
                    (ll && rr) || (lr && rl)
                }
                _ => false,
            };
            equi_join = !join.on.is_empty()
                || join
                    .filter
                    .as_ref()
                    .is_some_and(|f| split_conjunction(f).into_iter().any(is_key));
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    if equi_join {
        Ok(())
    } else {
        Err(DataFusionError::Plan(format!(
            "MERGE: the ON condition ({}) has no equality between a target column and a source \
             expression; one is needed to match rows (e.g. ON t.id = s.id)",
            bound.merge.on
        )))
    }
}

/// Reads the writers' fragments: added files, removed paths, counters.
pub fn collect_fragments(base: &Table, batches: &[RecordBatch]) -> Result<MergeOutcome> {
    let metadata = base.metadata();
    let spec = metadata.default_partition_spec();
    let mut outcome = MergeOutcome::default();
    let mut removed = HashSet::new();
    for batch in batches {
        let kinds = batch.column(0).as_string::<i32>();
        let values = batch.column(1).as_string::<i32>();
        let counts = batch.column(2).as_primitive::<UInt64Type>();
        for i in 0..batch.num_rows() {
            match kinds.value(i) {
                "added" => outcome.added.push(
                    deserialize_data_file_from_json(
                        values.value(i),
                        spec.spec_id(),
                        metadata.default_partition_type(),
                        metadata.current_schema(),
                    )
                    .map_err(iceberg_err)?,
                ),
                "removed" => {
                    let path = values.value(i).to_string();
                    if !removed.insert(path.clone()) {
                        return Err(DataFusionError::Internal(format!(
                            "MERGE: data file {path} was rewritten by two writers"
                        )));
                    }
                    outcome.removed.push(path);
                }
                _ if !counts.is_null(i) => {
                    *outcome
                        .stats
                        .entry(values.value(i).to_string())
                        .or_default() += counts.value(i);
                }
                _ => {}
            }
        }
    }
    outcome
        .stats
        .insert("files_added".into(), outcome.added.len() as u64);
    outcome
        .stats
        .insert("files_removed".into(), outcome.removed.len() as u64);
    Ok(outcome)
}

/// Commits a merge's outcome; returns the new snapshot id (None: no change).
pub async fn commit_merge(
    catalog: &crate::catalog::OpenCatalog,
    catalog_uri: &str,
    planned: &PlannedMerge,
    outcome: &MergeOutcome,
) -> Result<Option<i64>> {
    use crate::commit::{commit_overwrite, CommitOutcome, OverwriteCommit};
    if outcome.added.is_empty() && outcome.removed.is_empty() {
        return Ok(None);
    }
    let mut summary = std::collections::HashMap::new();
    for (k, v) in &outcome.stats {
        summary.insert(format!("icemerge.{k}"), v.to_string());
    }
    let operation = if outcome.removed.is_empty() {
        Operation::Append
    } else {
        Operation::Overwrite
    };
    let commit = OverwriteCommit {
        added: outcome.added.clone(),
        removed: outcome.removed.iter().cloned().collect(),
        summary,
        operation,
    };
    match commit_overwrite(catalog_uri, &catalog.name, &planned.base, commit).await? {
        CommitOutcome::Committed { snapshot_id } => Ok(Some(snapshot_id)),
        CommitOutcome::NothingToCommit => Ok(None),
    }
}

/// Deletes the files of this merge that are not part of the commit: all of
/// them after a failure, those of discarded task attempts after a success.
pub fn discard_uncommitted(planned: &PlannedMerge, keep: &[DataFile]) -> usize {
    let location = data_location(planned.base.metadata());
    let keep: Vec<&str> = keep.iter().map(|f| f.file_path()).collect();
    delete_files_with_prefix_except(&location, &planned.write_id, &keep)
}
