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
//!
//! On a cluster, a join whose probe side is read in one task (a one-file
//! target, a one-split source) and whose build side is small runs in that
//! task, both sides read where they are, as on the local engine: one
//! stage before the writer's where a partitioned join took four.
//!
//! Otherwise, on a cluster, what costs is the shuffle: every target row the scan
//! reads is written to and read from an exchange on its way to the join,
//! though a merge matches few of them (an insert-only merge of new keys,
//! none). So a cluster joins the source to the target rows it matches
//! (`TargetPrefilter::MatchedRows`, for a deterministic source without a
//! NOT MATCHED BY SOURCE clause), and the semi join that finds those rows
//! collects the source's ON columns whole into every target scan task
//! (when they are estimated at no more than `COLLECTED_SOURCE_KEYS`, and
//! the source's rows, once per task and once more, at no more than the
//! target's: each task hashes every source key): each task drops the
//! target rows no source row matches before the exchange, and only the
//! matched rows are shuffled. The semi join outputs the
//! target's rows alone, each once, so a task holding the whole source
//! gives the rows the partitioned join gave.
//!
//! An insert-only merge's join keeps the source rows no target row
//! matches, and reads the matched target rows' ON columns alone: when the
//! target's scan of them is estimated at no more than
//! `COLLECTED_MATCHED_KEYS` (the matched rows are some of its rows), they
//! are collected whole into every source task, which drops its matched
//! rows where it reads them. The source, often millions of wide rows, is
//! then shuffled once, to the writers, where it was shuffled twice; into
//! an unpartitioned table not at all, the join's tasks writing the rows
//! they keep (`writes_where_joined` in the module above).

use std::sync::Arc;

use datafusion::common::stats::Precision;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::JoinType;
use datafusion::error::Result;
use datafusion::execution::SessionState;
use datafusion::execution::SessionStateBuilder;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties, Partitioning};
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

/// The most bytes the source's ON columns may be estimated at for a
/// cluster to send them whole to every target scan task (each builds a
/// hash table of them).
const COLLECTED_SOURCE_KEYS: usize = 128 << 20;

/// The most bytes the target's scan of an insert-only merge (its ON
/// columns) may be estimated at for a cluster to send the target rows the
/// source matches, some of them, whole to every source task.
const COLLECTED_MATCHED_KEYS: usize = 128 << 20;

/// The most bytes a join's build side may be estimated at for a cluster
/// to run the join in the one task of its probe side, the build side read
/// there whole (`with_join_in_one_task`).
const ONE_TASK_BUILD_SIDE: usize = 128 << 20;

/// Where a merge's join runs, which decides how it is planned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinEngine {
    /// The local engine: every partition builds its hash table at once,
    /// in `budget` (None: no limit).
    Local { budget: Option<usize> },
    /// A cluster: each task builds one partition's table; the target rows
    /// cross an exchange to reach the join.
    Cluster,
}

/// The classification query with the target prefiltered to the rows the
/// source matches (`TargetPrefilter::MatchedRows`), written only when it is
/// planned, and how its logical plan is prepared as the plain one was
/// (pruned target, insert routes).
pub(super) struct Prefiltered<'a> {
    pub sql: &'a (dyn Fn() -> Result<String> + Send + Sync),
    pub prepare: &'a (dyn Fn(LogicalPlan) -> Result<LogicalPlan> + Send + Sync),
    /// An insert-only merge: its anti join builds on the filtered target
    /// rows, and its source is then not shuffled at all, which pays
    /// whatever the source's size.
    pub insert_only: bool,
}

impl Prefiltered<'_> {
    /// The physical plan of the prefiltered classification, as `state`
    /// plans it.
    async fn physical_plan(&self, state: &SessionState) -> Result<Arc<dyn ExecutionPlan>> {
        let sql = (self.sql)()?;
        let logical = (self.prepare)(state.create_logical_plan(&sql).await?)?;
        state.create_physical_plan(&logical).await
    }
}

/// The physical plan of `logical`: as the session plans it (a hash join);
/// on the local engine, when the hash join would build on a source
/// estimated at more than a sixteenth of `budget`, the `prefiltered` plan
/// building on the target rows the source matches, or with a sort-merge
/// join when the build side is estimated at more than a quarter of
/// `budget`; on a cluster, the `prefiltered` plan whose target scan tasks
/// drop unmatched rows before the exchange, when the source's ON columns
/// are small enough to send to each.
pub(super) async fn plan_join(
    ctx: &SessionContext,
    logical: &LogicalPlan,
    engine: JoinEngine,
    prefiltered: Option<Prefiltered<'_>>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let plan = match engine {
        JoinEngine::Local { budget } => {
            planned_in_budget(ctx, logical, budget, prefiltered).await?
        }
        JoinEngine::Cluster => planned_on_a_cluster(&ctx.state(), logical, prefiltered).await?,
    };
    with_hash_join_output_sliced(plan)
}

/// The cluster's plan (see the module doc): the prefiltered one with the
/// source's ON columns collected into the target scan tasks, or the plain
/// one when there is no prefiltered plan or those columns are not
/// estimated within `COLLECTED_SOURCE_KEYS`.
async fn planned_on_a_cluster(
    state: &SessionState,
    logical: &LogicalPlan,
    prefiltered: Option<Prefiltered<'_>>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let plain = state.create_physical_plan(logical).await?;
    if let Some(plan) = with_join_in_one_task(plain.clone())? {
        return Ok(plan);
    }
    let Some(prefiltered) = prefiltered else {
        return Ok(plain);
    };
    let Some(plan) = with_source_keys_collected(
        prefiltered.physical_plan(state).await?,
        prefiltered.insert_only,
    )?
    else {
        return Ok(plain);
    };
    // An insert-only merge keeps the source rows its anti join finds no
    // target row for: with the matched target keys collected into each
    // source task, the source is not shuffled at all.
    if let Some(plan) = with_matched_keys_collected(plan.clone())? {
        return Ok(plan);
    }
    // The join builds on the side the plain plan builds on: DataFusion
    // has no byte estimate of a semi join's output, and would compare row
    // counts alone; the matched target rows take no more than the target.
    if builds_on_the_source(&plain)? == builds_on_the_source(&plan)? {
        Ok(plan)
    } else {
        with_outer_join_swapped(plan)
    }
}

/// `plan` with its partitioned join of the target run in one task, as the
/// local engine runs it, when the join's probe side is read in one task
/// (a target or a source of one scan task) and its build side is
/// estimated within `ONE_TASK_BUILD_SIDE`: the task reads both sides where
/// they are and builds its hash table of the whole build side, so neither
/// side crosses an exchange to the join, and the stages before the
/// writer's are one. With one probe task, the join gives every row the
/// partitioned join gives, the build side's unmatched rows (a merge's
/// inserts, an outer join's target rows) once. A build side of one
/// partition is read in the task; of more, collected into it first. None
/// when the plan's join is not such a join: a one-row merge of a one-file
/// table ran four stages before its writer, each a round trip of the
/// scheduler, for a join of one row.
fn with_join_in_one_task(plan: Arc<dyn ExecutionPlan>) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    with_first_target_join_rewritten(plan, |_, join, (left_target, right_target)| {
        if left_target == right_target || *join.partition_mode() != PartitionMode::Partitioned {
            return Ok(JoinRewrite::Stop);
        }
        let build = without_exchange(join.left());
        let within = estimated_bytes(&build)?.is_some_and(|b| b <= ONE_TASK_BUILD_SIDE);
        let probe_tasks = without_exchange(join.right())
            .output_partitioning()
            .partition_count();
        if !within || probe_tasks != 1 {
            return Ok(JoinRewrite::Stop);
        }
        Ok(JoinRewrite::Replace(
            match build.output_partitioning().partition_count() {
                1 => built_whole_in_each_task(join, build)?,
                _ => collected_into_each_task(join, build)?,
            },
        ))
    })
}

/// `plan` (an insert-only merge's classification, its target filtered by
/// the source's keys) with its anti join building on the matched target
/// rows (their ON columns) collected whole into each task, and probed by
/// the source's rows where they are read, with no exchange of them: a
/// `RightAnti` join outputs the probe rows that no build row matches, so
/// each task keeps exactly the rows the partitioned join kept. None when
/// the plan has no such join or the target's scan (an upper bound of the
/// matched rows: they are some of its rows) is not estimated within
/// `COLLECTED_MATCHED_KEYS`.
fn with_matched_keys_collected(
    plan: Arc<dyn ExecutionPlan>,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    with_first_target_join_rewritten(plan, |node, join, (left_target, right_target)| {
        if left_target == right_target {
            return Ok(JoinRewrite::Continue);
        }
        // The anti join keeping the source side, the target on the build
        // side.
        let anti = match join.join_type() {
            JoinType::RightAnti if left_target => node.clone(),
            JoinType::LeftAnti if right_target => join.swap_inputs(PartitionMode::CollectLeft)?,
            _ => return Ok(JoinRewrite::Stop),
        };
        let join = as_hash_join(&anti, "the anti join swapped")?;
        let matched = without_exchange(join.left());
        if target_scan_bytes(&matched)?.is_none_or(|b| b > COLLECTED_MATCHED_KEYS) {
            return Ok(JoinRewrite::Stop);
        }
        Ok(JoinRewrite::Replace(collected_into_each_task(
            join, matched,
        )?))
    })
}

/// `join` with its build side `build` (its left input, the exchange
/// before it removed) collected whole into each task, probed by its right
/// input where that is read, the exchange before it removed too.
fn collected_into_each_task(
    join: &HashJoinExec,
    build: Arc<dyn ExecutionPlan>,
) -> Result<Arc<dyn ExecutionPlan>> {
    built_whole_in_each_task(join, Arc::new(CoalescePartitionsExec::new(build)))
}

/// `join` building on `build` (one partition) whole in each of its tasks,
/// probed by its right input where that is read (the exchange before it
/// removed).
fn built_whole_in_each_task(
    join: &HashJoinExec,
    build: Arc<dyn ExecutionPlan>,
) -> Result<Arc<dyn ExecutionPlan>> {
    join.builder()
        .with_partition_mode(PartitionMode::CollectLeft)
        .with_new_children(vec![build, without_exchange(join.right())])?
        .reset_state()
        .build_exec()
}

/// The bytes the merge target's scan in `plan` is estimated at (None: no
/// scan of the target, or no estimate).
fn target_scan_bytes(plan: &Arc<dyn ExecutionPlan>) -> Result<Option<usize>> {
    match target_scan(plan)? {
        Some(scan) => estimated_bytes(&scan),
        None => Ok(None),
    }
}

/// The merge target's scan in `plan`, the first one found.
fn target_scan(plan: &Arc<dyn ExecutionPlan>) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let mut scan = None;
    plan.apply(|node| {
        let is_target = node
            .as_any()
            .downcast_ref::<IcebergScanExec>()
            .is_some_and(|scan| scan.merge_target);
        Ok(if is_target {
            scan = Some(node.clone());
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    })?;
    Ok(scan)
}

/// `plan` with its semi join of the target to the source's ON columns
/// (a partitioned `RightSemi` join building on the source) collecting
/// those columns whole in each task, which then filters its own target
/// rows, with no exchange of them before the join; the rows it keeps are
/// hash-partitioned as the partitioned join's were. None when the plan
/// has no such join, the collected side is not estimated within
/// `COLLECTED_SOURCE_KEYS`, or (unless `insert_only`) the filter would not
/// pay: each task builds a hash table of every source key, so the
/// source's rows are hashed once per task, to spare the exchange the
/// target rows no source key matches, at least the target's rows less the
/// source's. A source of 10.5M keys matching every row of a 10M-row
/// target was hashed four times over for nothing (5.7 s, where the
/// partitioned join's exchange took under 2 s). It pays when the source's
/// rows, once per task and once more, are no more than the target's.
fn with_source_keys_collected(
    plan: Arc<dyn ExecutionPlan>,
    insert_only: bool,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    with_first_target_join_rewritten(plan, |node, join, (left_target, right_target)| {
        if *join.partition_mode() != PartitionMode::Partitioned {
            return Ok(JoinRewrite::Continue);
        }
        // The semi join with the source's keys on the build side.
        let semi = match join.join_type() {
            JoinType::RightSemi if !left_target && right_target => node.clone(),
            JoinType::LeftSemi if left_target && !right_target => {
                join.swap_inputs(PartitionMode::Partitioned)?
            }
            _ => return Ok(JoinRewrite::Continue),
        };
        let join = as_hash_join(&semi, "the semi join swapped")?;
        let source = without_exchange(join.left());
        let within = estimated_bytes(&source)?.is_some_and(|b| b <= COLLECTED_SOURCE_KEYS);
        let partitioning = node.output_partitioning().clone();
        if !within || !matches!(partitioning, Partitioning::Hash(..)) {
            return Ok(JoinRewrite::Stop);
        }
        let target = without_exchange(join.right());
        let tasks = target.output_partitioning().partition_count();
        let pays = match (estimated_rows(&source)?, estimated_rows(&target)?) {
            (Some(source), Some(target)) => source.saturating_mul(tasks + 1) <= target,
            _ => true,
        };
        if !insert_only && !pays {
            return Ok(JoinRewrite::Stop);
        }
        let filtering = collected_into_each_task(join, source)?;
        Ok(JoinRewrite::Replace(Arc::new(RepartitionExec::try_new(
            filtering,
            partitioning,
        )?)))
    })
}

/// What `with_first_target_join_rewritten` does at a hash join.
enum JoinRewrite {
    /// Leave it; look further down.
    Continue,
    /// Leave it and the rest of the plan as they are.
    Stop,
    /// Put this plan in its place.
    Replace(Arc<dyn ExecutionPlan>),
}

/// `plan` with the first hash join, from the top, that `rewrite` replaces
/// (given the join's node, the join, and whether its left and its right
/// input read the merge target) replaced; None when `rewrite` replaces
/// none.
fn with_first_target_join_rewritten(
    plan: Arc<dyn ExecutionPlan>,
    mut rewrite: impl FnMut(&Arc<dyn ExecutionPlan>, &HashJoinExec, (bool, bool)) -> Result<JoinRewrite>,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let mut rewritten = false;
    let plan = plan
        .transform_down(|node| {
            let Some(join) = node.as_any().downcast_ref::<HashJoinExec>() else {
                return Ok(Transformed::no(node));
            };
            let sides = (
                reads_the_target(join.left())?,
                reads_the_target(join.right())?,
            );
            Ok(match rewrite(&node, join, sides)? {
                JoinRewrite::Continue => Transformed::no(node),
                JoinRewrite::Stop => Transformed::new(node, false, TreeNodeRecursion::Stop),
                JoinRewrite::Replace(replacement) => {
                    rewritten = true;
                    Transformed::new(replacement, true, TreeNodeRecursion::Jump)
                }
            })
        })?
        .data;
    Ok(rewritten.then_some(plan))
}

/// `plan` as the hash join it was built as (`what` names the step, for
/// the internal error when it is another operator).
fn as_hash_join<'a>(plan: &'a Arc<dyn ExecutionPlan>, what: &str) -> Result<&'a HashJoinExec> {
    plan.as_any()
        .downcast_ref::<HashJoinExec>()
        .ok_or_else(|| internal(format!("MERGE: {what} into another operator")))
}

/// `plan` without the exchanges (repartitions) on top of it.
fn without_exchange(plan: &Arc<dyn ExecutionPlan>) -> Arc<dyn ExecutionPlan> {
    let mut plan = plan.clone();
    while let Some(exchange) = plan.as_any().downcast_ref::<RepartitionExec>() {
        plan = exchange.input().clone();
    }
    plan
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
            return built_on_the_target(prefiltered.physical_plan(&state).await?);
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

/// The rows `plan`'s output is estimated at (None: no estimate).
fn estimated_rows(plan: &Arc<dyn ExecutionPlan>) -> Result<Option<usize>> {
    Ok(match plan.partition_statistics(None)?.num_rows {
        Precision::Exact(rows) | Precision::Inexact(rows) => Some(rows),
        Precision::Absent => None,
    })
}

/// The estimated bytes of the build side of the plan's hash join (None
/// when the plan has none or its inputs have no size estimate).
fn build_side_bytes(plan: &Arc<dyn ExecutionPlan>) -> Result<Option<usize>> {
    let Some(build) = build_side(plan)? else {
        return Ok(None);
    };
    estimated_bytes(&build)
}

/// The bytes `plan`'s output is estimated at (None: no estimate).
fn estimated_bytes(plan: &Arc<dyn ExecutionPlan>) -> Result<Option<usize>> {
    Ok(match plan.partition_statistics(None)?.total_byte_size {
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
    Ok(target_scan(plan)?.is_some())
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
/// build on the source again.
fn built_on_the_target(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    if !builds_on_the_source(&plan)? {
        return Ok(plan);
    }
    with_outer_join_swapped(plan)
}

/// `plan` with the inputs of its outermost hash join swapped. A join that
/// collects its build side gets the new one in one partition, and keeps
/// the other's partitions as its probe.
fn with_outer_join_swapped(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_down(|node| {
        let Some(join) = node.as_any().downcast_ref::<HashJoinExec>() else {
            return Ok(Transformed::no(node));
        };
        let mode = *join.partition_mode();
        let swapped = if mode == PartitionMode::CollectLeft {
            let build = join.left().clone();
            let build = match build.as_any().downcast_ref::<CoalescePartitionsExec>() {
                Some(coalesce) => coalesce.input().clone(),
                None => build,
            };
            let probe = join.right().clone();
            let probe: Arc<dyn ExecutionPlan> = match probe.output_partitioning().partition_count()
            {
                1 => probe,
                _ => Arc::new(CoalescePartitionsExec::new(probe)),
            };
            let inputs_set = node.clone().with_new_children(vec![build, probe])?;
            as_hash_join(&inputs_set, "the hash join rebuilt")?.swap_inputs(mode)?
        } else {
            join.swap_inputs(mode)?
        };
        Ok(Transformed::new(swapped, true, TreeNodeRecursion::Jump))
    })
    .map(|t| t.data)
}
