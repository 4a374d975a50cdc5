//! The stage graph of a physical plan: the plan cut into the stages a
//! cluster runs (at hash exchanges and partition merges, where Ballista cuts
//! it, and at a join's inputs, which the local engine pipelines into the
//! join's tasks), each with its kind and role, its number of tasks, its
//! output partitioning, its operator tree and the stages feeding it.
//!
//! Cutting also returns the plan to run: the same plan with a
//! `StageProbeExec` on top of every stage, which measures it on either
//! engine. Stage ids follow Ballista's numbering order (children first, in
//! plan order), so each stage that is not pipelined knows the number
//! Ballista gives it.

use std::sync::Arc;

use datafusion::common::JoinType;
use datafusion::error::Result;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::joins::{
    CrossJoinExec, HashJoinExec, NestedLoopJoinExec, SortMergeJoinExec, SymmetricHashJoinExec,
};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::{
    displayable, ExecutionPlan, ExecutionPlanProperties, Partitioning,
};
use icemerge_executor::merge_on_read::MergeOnReadWriterExec;
use icemerge_executor::merge_writer::CopyOnWriteWriterExec;
use icemerge_executor::scan_exec::IcebergScanExec;
use icemerge_executor::stage_probe::StageProbeExec;
use icemerge_executor::write_exec::IcebergWriteExec;
use icemerge_proto::merge_rows::OP_COLUMN;
use serde::{Deserialize, Serialize};

/// What a stage does, for tools (the `role` says it for people).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StageKind {
    /// MERGE's target scan with row ids.
    ScanTarget,
    /// Any other stage without input stages.
    ScanSource,
    /// MERGE's semi join of the target to the source's ON columns: the
    /// target rows some source row matches, ahead of the join.
    TargetFilter,
    /// A join (MERGE: the classification of target × source).
    Join,
    /// MERGE's copy-on-write writer.
    MergeWriter,
    /// INSERT's data file writer.
    Writer,
    /// Any other stage.
    Compute,
    /// MERGE's commit on the coordinator (not a task).
    Commit,
}

/// One stage of the graph.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Stage {
    pub id: usize,
    pub kind: StageKind,
    pub role: String,
    /// Tasks (partitions) the stage runs; 0 for the commit.
    pub tasks: usize,
    /// How the stage's output reaches its consumer.
    pub output_partitioning: String,
    /// The output is pipelined into the consumer's tasks (no exchange).
    pub pipelined: bool,
    /// The stage Ballista runs this one in (a pipelined stage runs inside
    /// its consumer's); None for the commit.
    pub ballista_stage: Option<usize>,
    /// Operator tree, one operator per line, indented; inputs from other
    /// stages appear as `StageInput: stage N`.
    pub operators: Vec<String>,
    /// The stages feeding this one.
    pub inputs: Vec<usize>,
}

/// A plan's stage graph and the plan to run, with a probe on every stage.
#[derive(Debug, Clone)]
pub struct StageGraph {
    pub stages: Vec<Stage>,
    pub plan: Arc<dyn ExecutionPlan>,
}

/// Cuts `plan` into stages; the last stage is the root's. For a MERGE
/// (`merge = true`) a final `commit` stage fed by the root is added.
pub fn stage_graph(plan: &Arc<dyn ExecutionPlan>, merge: bool) -> Result<StageGraph> {
    let mut cutter = Cutter::default();
    let (root, probed) = cutter.build(
        plan,
        "single partition to the coordinator".to_string(),
        false,
    )?;
    let mut stages = cutter.stages;
    // A pipelined stage runs in its consumer's Ballista stage (consumers
    // have higher ids).
    for i in (0..stages.len()).rev() {
        let consumer = stages[i].ballista_stage;
        for input in stages[i].inputs.clone() {
            let input = &mut stages[input - 1];
            if input.pipelined {
                input.ballista_stage = consumer;
            }
        }
    }
    if merge {
        stages.push(Stage {
            id: stages.len() + 1,
            kind: StageKind::Commit,
            role: "commit (coordinator): one snapshot, compare-and-swap of the catalog pointer"
                .into(),
            tasks: 0,
            output_partitioning: "-".into(),
            pipelined: false,
            ballista_stage: None,
            operators: vec![
                "MergeCommit: validate fragments → manifests → snapshot → metadata → CAS".into(),
            ],
            inputs: vec![root],
        });
    }
    Ok(StageGraph {
        stages,
        plan: probed,
    })
}

/// Where a cluster cuts the plan: hash exchanges and partition merges.
fn is_boundary(node: &Arc<dyn ExecutionPlan>) -> bool {
    let any = node.as_any();
    if any.is::<RepartitionExec>() {
        return matches!(node.output_partitioning(), Partitioning::Hash(_, _));
    }
    any.is::<CoalescePartitionsExec>() || any.is::<SortPreservingMergeExec>()
}

/// Whether `node` is an exchange, or projects one (a cluster's exchange
/// casts the data file paths it carried back, `paths_across_exchanges` in
/// the scheduler): such a join input is read from the exchange in the
/// join's own tasks.
fn is_exchanged(node: &Arc<dyn ExecutionPlan>) -> bool {
    is_boundary(node)
        || (node.as_any().is::<ProjectionExec>() && node.children().into_iter().all(is_exchanged))
}

fn is_join(node: &Arc<dyn ExecutionPlan>) -> bool {
    let any = node.as_any();
    any.is::<HashJoinExec>()
        || any.is::<SortMergeJoinExec>()
        || any.is::<NestedLoopJoinExec>()
        || any.is::<CrossJoinExec>()
        || any.is::<SymmetricHashJoinExec>()
}

/// A hash join that outputs one side's rows that match the other's.
fn is_semi_join(node: &Arc<dyn ExecutionPlan>) -> bool {
    node.as_any()
        .downcast_ref::<HashJoinExec>()
        .is_some_and(|join| matches!(join.join_type(), JoinType::LeftSemi | JoinType::RightSemi))
}

/// The target's row-id scan.
fn scans_row_ids(node: &Arc<dyn ExecutionPlan>) -> bool {
    node.as_any()
        .downcast_ref::<IcebergScanExec>()
        .is_some_and(|scan| scan.row_ids)
}

/// The target's scan of an insert-only merge: its ON columns, no row ids.
fn scans_target_keys(node: &Arc<dyn ExecutionPlan>) -> bool {
    node.as_any()
        .downcast_ref::<IcebergScanExec>()
        .is_some_and(|scan| scan.merge_target && !scan.row_ids)
}

/// The classification: a projection computing the merge rows' operation.
fn classifies(node: &Arc<dyn ExecutionPlan>) -> bool {
    node.as_any().is::<ProjectionExec>() && node.schema().column_with_name(OP_COLUMN).is_some()
}

/// The kind and role of the stage made of `nodes` (which has stage `inputs`).
fn kind_and_role(nodes: &[Arc<dyn ExecutionPlan>], inputs: &[usize]) -> (StageKind, &'static str) {
    let has = |test: fn(&Arc<dyn ExecutionPlan>) -> bool| nodes.iter().any(test);
    let writes = has(|n| n.as_any().is::<CopyOnWriteWriterExec>())
        || has(|n| n.as_any().is::<MergeOnReadWriterExec>());
    if writes && has(is_join) {
        // No exchange to writers: an insert-only merge on a cluster, or a
        // join in one task whose rows have one route.
        (
            StageKind::MergeWriter,
            if has(|n| n.as_any().is::<CopyOnWriteWriterExec>()) {
                "join / classify / writer: copy-on-write per data file, duplicate-match check, rows written where they are joined"
            } else {
                "join / classify / writer: merge-on-read, position deletes per data file, duplicate-match check, rows written where they are joined"
            },
        )
    } else if has(|n| n.as_any().is::<CopyOnWriteWriterExec>()) {
        (
            StageKind::MergeWriter,
            "writer: copy-on-write per data file, duplicate-match check",
        )
    } else if has(|n| n.as_any().is::<MergeOnReadWriterExec>()) {
        (
            StageKind::MergeWriter,
            "writer: merge-on-read, position deletes per data file, duplicate-match check",
        )
    } else if has(is_semi_join) && !has(classifies) {
        (StageKind::TargetFilter, "filter target by source keys")
    } else if has(is_join) {
        (StageKind::Join, "join / classify")
    } else if has(scans_row_ids) && has(classifies) {
        // UPDATE / DELETE: the rows their WHERE selects, no source.
        (StageKind::ScanTarget, "scan target (row-id) / classify")
    } else if has(classifies) {
        (StageKind::Join, "join / classify")
    } else if has(scans_row_ids) {
        (StageKind::ScanTarget, "scan target (row-id)")
    } else if has(scans_target_keys) {
        (StageKind::ScanTarget, "scan target (ON columns)")
    } else if has(|n| n.as_any().is::<IcebergWriteExec>()) {
        (StageKind::Writer, "writer")
    } else if inputs.is_empty() {
        (StageKind::ScanSource, "scan source")
    } else {
        (StageKind::Compute, "compute")
    }
}

pub(super) fn partitioning_text(p: &Partitioning) -> String {
    match p {
        Partitioning::Hash(exprs, n) => {
            let e: Vec<String> = exprs.iter().map(|e| e.to_string()).collect();
            format!("hash({}) x{n}", e.join(", "))
        }
        Partitioning::RoundRobinBatch(n) => format!("round robin x{n}"),
        Partitioning::UnknownPartitioning(n) => format!("x{n}"),
    }
}

/// What one stage collects while its operators are walked.
#[derive(Default)]
struct StageParts {
    operators: Vec<String>,
    nodes: Vec<Arc<dyn ExecutionPlan>>,
    inputs: Vec<usize>,
}

#[derive(Default)]
struct Cutter {
    stages: Vec<Stage>,
    /// Stages Ballista has numbered so far.
    ballista_stages: usize,
}

impl Cutter {
    /// Builds the stage rooted at `node`; returns its id and the stage's
    /// plan with a probe on top.
    fn build(
        &mut self,
        node: &Arc<dyn ExecutionPlan>,
        output_partitioning: String,
        pipelined: bool,
    ) -> Result<(usize, Arc<dyn ExecutionPlan>)> {
        let mut parts = StageParts::default();
        let rebuilt = self.walk(node, 0, &mut parts)?;
        let id = self.stages.len() + 1;
        let ballista_stage = (!pipelined).then(|| {
            self.ballista_stages += 1;
            self.ballista_stages
        });
        let (kind, role) = kind_and_role(&parts.nodes, &parts.inputs);
        self.stages.push(Stage {
            id,
            kind,
            role: role.to_string(),
            tasks: node.output_partitioning().partition_count(),
            output_partitioning,
            pipelined,
            ballista_stage,
            operators: parts.operators,
            inputs: parts.inputs,
        });
        Ok((id, Arc::new(StageProbeExec::new(id, rebuilt))))
    }

    /// Makes `child` a stage of its own and puts a `StageInput` line for it
    /// in the operator tree at `depth`; returns the child's probed plan.
    fn stage_input(
        &mut self,
        child: &Arc<dyn ExecutionPlan>,
        partitioning: String,
        pipelined: bool,
        depth: usize,
        parts: &mut StageParts,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let (id, probed) = self.build(child, partitioning.clone(), pipelined)?;
        parts.inputs.push(id);
        parts.operators.push(format!(
            "{}StageInput: stage {id} ({partitioning})",
            "  ".repeat(depth)
        ));
        Ok(probed)
    }

    /// Walks the operators of one stage; returns `node` rebuilt with the
    /// probed plans of the stages below it.
    fn walk(
        &mut self,
        node: &Arc<dyn ExecutionPlan>,
        depth: usize,
        parts: &mut StageParts,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if is_boundary(node) {
            let partitioning = partitioning_text(node.output_partitioning());
            let child = node.children()[0].clone();
            let probed = self.stage_input(&child, partitioning, false, depth, parts)?;
            return node.clone().with_new_children(vec![probed]);
        }
        parts.operators.push(format!(
            "{}{}",
            "  ".repeat(depth),
            operator_line(node.as_ref())
        ));
        parts.nodes.push(node.clone());
        let children: Vec<Arc<dyn ExecutionPlan>> = node.children().into_iter().cloned().collect();
        if children.is_empty() {
            return Ok(node.clone());
        }
        let join = is_join(node);
        let mut rebuilt = Vec::with_capacity(children.len());
        for child in &children {
            if join && !is_exchanged(child) {
                // A join input that is not exchanged (a hash table built in
                // process, or a stream probing it) is still its own stage;
                // its output is pipelined into the join's task.
                let partitioning = format!(
                    "{} pipelined into the join",
                    partitioning_text(child.output_partitioning())
                );
                rebuilt.push(self.stage_input(child, partitioning, true, depth + 1, parts)?);
                continue;
            }
            rebuilt.push(self.walk(child, depth + 1, parts)?);
        }
        node.clone().with_new_children(rebuilt)
    }
}

/// One operator as one line, at most 180 characters.
fn operator_line(node: &dyn ExecutionPlan) -> String {
    let line = displayable(node).one_line().to_string();
    let line = line.trim_end();
    if line.chars().count() > 180 {
        line.chars().take(177).collect::<String>() + "..."
    } else {
        line.to_string()
    }
}
