//! Which join stage C runs: DataFusion's hash join; when it would build on
//! a source estimated at more than a sixteenth of the memory budget, the
//! hash join of the source to the target rows it matches, building on
//! those rows (the target narrowed first by a semi join that builds on the
//! source's ON columns alone: the source is read twice, and neither join
//! holds its rows; a 100M-row upsert's 11M-row source of 24 columns took
//! gigabytes as a build side); else, when the build side would not fit a
//! quarter of the budget, a sort-merge join. A hash
//! join's output is cut to the batch size (`BatchSlicesExec`): it emits its
//! unmatched build rows — a merge's inserted rows, when it builds on the
//! source — as one batch, which the classification above it would
//! otherwise copy whole, column by column.
//!
//! A hash join holds its whole build side in memory and cannot spill, and
//! takes about twice the side's estimated bytes (its batches as read, then
//! its hash table; a 2M-row source estimated at 360 MB took over 600 MB): a
//! merge whose smaller side (usually the source) is estimated at more than
//! a quarter of the budget would fail over budget, or crowd out the
//! writers' sorts. A sort-merge join sorts both sides by the ON keys, in
//! sorts that spill, and spills the rows of a key it buffers: a 10M-row
//! upsert whose 2M-row source a hash join could not hold in 512 MiB
//! completes in it. Both joins give the same rows; the hash join is faster
//! when it fits.
//!
//! This is the local engine's choice: its partitions build their hash
//! tables in its budget (`--memory-limit`) at the same time. A cluster's
//! join keeps the hash join: each task builds one partition's table, in
//! turns, and the table shrinks as partitions or executors are added. Its
//! executors' shared pool does not suit the sort-merge join either: the
//! first side's sort, running alone, takes most of the pool and holds its
//! sorted rows (memory that cannot spill) while the other side's sort
//! starts, which then fails (a 1M-row merge in 96 MiB).

use std::sync::Arc;

use datafusion::common::stats::Precision;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::error::Result;
use datafusion::execution::SessionStateBuilder;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};
use datafusion::prelude::SessionContext;
use icemerge_executor::batch_slices::BatchSlicesExec;
use icemerge_executor::scan_exec::IcebergScanExec;
use icemerge_proto::error::internal;

/// The share of the budget a hash join's build side may be estimated at
/// (1/N).
const BUILD_SHARE_OF_BUDGET: usize = 4;

/// The share of the budget beyond which a source the join would build on
/// is joined to the target rows it matches instead (1/N).
const PREFILTER_SHARE_OF_BUDGET: usize = 16;

/// The classification query with the target prefiltered to the rows the
/// source matches (`TargetPrefilter::MatchedRows`), written only when it is
/// planned, and how its logical plan is prepared as the plain one was
/// (pruned target, insert routes).
pub(super) struct Prefiltered<'a> {
    pub sql: &'a (dyn Fn() -> Result<String> + Send + Sync),
    pub prepare: &'a (dyn Fn(LogicalPlan) -> Result<LogicalPlan> + Send + Sync),
}

/// The physical plan of `logical`: as the session plans it (a hash join),
/// or, when the hash join would build on a source estimated at more than a
/// sixteenth of `budget`, the `prefiltered` plan building on the target
/// rows the source matches, or with a sort-merge join when the build side
/// is estimated at more than a quarter of `budget` (None: the hash join).
pub(super) async fn plan_with_join_in_budget(
    ctx: &SessionContext,
    logical: &LogicalPlan,
    budget: Option<usize>,
    prefiltered: Option<Prefiltered<'_>>,
) -> Result<Arc<dyn ExecutionPlan>> {
    with_hash_join_output_sliced(planned_in_budget(ctx, logical, budget, prefiltered).await?)
}

/// Every hash join of `plan` under a `BatchSlicesExec`.
fn with_hash_join_output_sliced(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        Ok(if node.as_any().is::<HashJoinExec>() {
            Transformed::yes(Arc::new(BatchSlicesExec::new(node)) as Arc<dyn ExecutionPlan>)
        } else {
            Transformed::no(node)
        })
    })
    .map(|t| t.data)
}

async fn planned_in_budget(
    ctx: &SessionContext,
    logical: &LogicalPlan,
    budget: Option<usize>,
    prefiltered: Option<Prefiltered<'_>>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let state = ctx.state();
    let physical = state.create_physical_plan(logical).await?;
    let Some(budget) = budget else {
        return Ok(physical);
    };
    let build_bytes = build_side_bytes(&physical)?;
    tracing::debug!(
        ?build_bytes,
        budget,
        "the hash join's build side, estimated"
    );
    if let (Some(bytes), Some(prefiltered)) = (build_bytes, prefiltered) {
        if bytes > budget / PREFILTER_SHARE_OF_BUDGET && builds_on_the_source(&physical)? {
            tracing::info!(
                build_bytes = bytes,
                budget,
                "the source the hash join would build on exceeds a sixteenth of the memory budget: \
                 the join builds on the target rows it matches"
            );
            let sql = (prefiltered.sql)()?;
            let logical = (prefiltered.prepare)(state.create_logical_plan(&sql).await?)?;
            return built_on_the_target(state.create_physical_plan(&logical).await?);
        }
    }
    match build_bytes {
        Some(bytes) if bytes > budget / BUILD_SHARE_OF_BUDGET => {
            tracing::info!(
                build_bytes = bytes,
                budget,
                "the hash join's build side exceeds a quarter of the memory budget: sort-merge join"
            );
            // DataFusion plans a sort-merge join only over partitioned
            // inputs: with one partition every join builds a hash table.
            let partitions = state.config().target_partitions().max(2);
            let mut config = state.config().clone().with_target_partitions(partitions);
            let optimizer = &mut config.options_mut().optimizer;
            optimizer.prefer_hash_join = false;
            optimizer.repartition_joins = true;
            let state = SessionStateBuilder::new_from_existing(state)
                .with_config(config)
                .build();
            state.create_physical_plan(logical).await
        }
        _ => Ok(physical),
    }
}

/// The estimated bytes of the build side of the plan's hash join (None
/// when the plan has none or its inputs have no size estimate).
fn build_side_bytes(plan: &Arc<dyn ExecutionPlan>) -> Result<Option<usize>> {
    let Some(build) = build_side(plan)? else {
        return Ok(None);
    };
    Ok(match build.partition_statistics(None)?.total_byte_size {
        Precision::Exact(bytes) | Precision::Inexact(bytes) => Some(bytes),
        Precision::Absent => None,
    })
}

/// The build side of the outermost hash join of `plan` (the
/// classification's join), if it has one.
fn build_side(plan: &Arc<dyn ExecutionPlan>) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let mut build = None;
    plan.apply(|node| {
        Ok(match node.as_any().downcast_ref::<HashJoinExec>() {
            Some(join) => {
                build = Some(join.left().clone());
                TreeNodeRecursion::Stop
            }
            None => TreeNodeRecursion::Continue,
        })
    })?;
    Ok(build)
}

/// Whether `plan` reads the merge's target.
fn reads_the_target(plan: &Arc<dyn ExecutionPlan>) -> Result<bool> {
    plan.exists(|node| {
        Ok(node
            .as_any()
            .downcast_ref::<IcebergScanExec>()
            .is_some_and(|scan| scan.merge_target))
    })
}

/// Whether the classification's hash join builds on the source.
fn builds_on_the_source(plan: &Arc<dyn ExecutionPlan>) -> Result<bool> {
    Ok(match build_side(plan)? {
        Some(build) => !reads_the_target(&build)?,
        None => false,
    })
}

/// `plan` (the prefiltered classification) with its join building on the
/// target side — the rows the source matches — and probed by the source:
/// DataFusion estimates a semi join's output at its whole input, and would
/// build on the source again. A join that collects its build side gets it
/// in one partition, and keeps the source's partitions as its probe.
fn built_on_the_target(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    if !builds_on_the_source(&plan)? {
        return Ok(plan);
    }
    plan.transform_down(|node| {
        let Some(join) = node.as_any().downcast_ref::<HashJoinExec>() else {
            return Ok(Transformed::no(node));
        };
        let mode = *join.partition_mode();
        let swapped = if mode == PartitionMode::CollectLeft {
            let source = join.left().clone();
            let source = match source.as_any().downcast_ref::<CoalescePartitionsExec>() {
                Some(coalesce) => coalesce.input().clone(),
                None => source,
            };
            let target = join.right().clone();
            let target: Arc<dyn ExecutionPlan> =
                match target.output_partitioning().partition_count() {
                    1 => target,
                    _ => Arc::new(CoalescePartitionsExec::new(target)),
                };
            let inputs_set = node.clone().with_new_children(vec![source, target])?;
            inputs_set
                .as_any()
                .downcast_ref::<HashJoinExec>()
                .ok_or_else(|| internal("MERGE: the hash join rebuilt as another operator"))?
                .swap_inputs(mode)?
        } else {
            join.swap_inputs(mode)?
        };
        Ok(Transformed::new(swapped, true, TreeNodeRecursion::Jump))
    })
    .map(|t| t.data)
}
