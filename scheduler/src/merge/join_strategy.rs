//! Which join stage C runs: DataFusion's hash join, unless its build side
//! would not fit the memory budget, and then a sort-merge join. A hash
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
use datafusion::physical_plan::joins::HashJoinExec;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionContext;
use icemerge_executor::batch_slices::BatchSlicesExec;

/// The share of the budget a hash join's build side may be estimated at
/// (1/N).
const BUILD_SHARE_OF_BUDGET: usize = 4;

/// The physical plan of `logical`: as the session plans it (a hash join),
/// or with a sort-merge join when the hash join's build side is estimated
/// at more than a quarter of `budget` (None: the hash join).
pub(super) async fn plan_with_join_in_budget(
    ctx: &SessionContext,
    logical: &LogicalPlan,
    budget: Option<usize>,
) -> Result<Arc<dyn ExecutionPlan>> {
    with_hash_join_output_sliced(planned_in_budget(ctx, logical, budget).await?)
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
    let Some(build) = build else {
        return Ok(None);
    };
    Ok(match build.partition_statistics(None)?.total_byte_size {
        Precision::Exact(bytes) | Precision::Inexact(bytes) => Some(bytes),
        Precision::Absent => None,
    })
}
