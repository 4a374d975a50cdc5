//! EXPLAIN for MERGE: the physical plan cut into the stages a cluster runs
//! (at hash exchanges and partition merges, where Ballista cuts it, and at
//! a hash join's inputs, which the local engine pipelines into it), each
//! with its role in the merge, its number of tasks, its output partitioning,
//! its operator tree and the stages feeding it; as text or as DOT.

use std::fmt::Write;
use std::sync::Arc;

use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::joins::HashJoinExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::{
    displayable, ExecutionPlan, ExecutionPlanProperties, Partitioning,
};
use icemerge_executor::merge_on_read::MergeOnReadWriterExec;
use icemerge_executor::merge_writer::CopyOnWriteWriterExec;
use icemerge_executor::scan_exec::IcebergScanExec;
use icemerge_executor::write_exec::IcebergWriteExec;
use icemerge_proto::merge_rows::OP_COLUMN;

/// One stage of the graph.
#[derive(Debug, Clone)]
pub struct Stage {
    pub id: usize,
    pub role: String,
    pub tasks: usize,
    pub output_partitioning: String,
    /// Operator tree, one operator per line, indented; inputs from other
    /// stages appear as `StageInput: stage N`.
    pub operators: Vec<String>,
    /// The operators of this stage (for metrics), top-down.
    pub nodes: Vec<Arc<dyn ExecutionPlan>>,
    pub inputs: Vec<usize>,
}

/// Cuts `plan` into stages; the last stage is the root's. For a MERGE
/// (`merge = true`) a final `commit` stage fed by the root is added.
pub fn stages(plan: &Arc<dyn ExecutionPlan>, merge: bool) -> Vec<Stage> {
    let mut out = vec![];
    let root = build(
        plan,
        &mut out,
        "single partition to the coordinator".to_string(),
    );
    if merge {
        out.push(Stage {
            id: out.len() + 1,
            role: "commit (coordinator): one snapshot, compare-and-swap of the catalog pointer"
                .into(),
            tasks: 0,
            output_partitioning: "-".into(),
            operators: vec![
                "MergeCommit: validate fragments → manifests → snapshot → metadata → CAS".into(),
            ],
            nodes: vec![],
            inputs: vec![root],
        });
    }
    out
}

/// Where a cluster cuts the plan: hash exchanges and partition merges.
fn is_boundary(node: &Arc<dyn ExecutionPlan>) -> bool {
    let any = node.as_any();
    if any.is::<RepartitionExec>() {
        return matches!(node.output_partitioning(), Partitioning::Hash(_, _));
    }
    any.is::<CoalescePartitionsExec>() || any.is::<SortPreservingMergeExec>()
}

/// The classification: a projection computing the merge rows' operation.
fn classifies(node: &Arc<dyn ExecutionPlan>) -> bool {
    node.as_any().is::<ProjectionExec>() && node.schema().column_with_name(OP_COLUMN).is_some()
}

/// The role of the stage made of `nodes` (which has stage `inputs`).
fn role(nodes: &[Arc<dyn ExecutionPlan>], inputs: &[usize]) -> &'static str {
    let has = |test: fn(&Arc<dyn ExecutionPlan>) -> bool| nodes.iter().any(test);
    if has(|n| n.as_any().is::<CopyOnWriteWriterExec>()) {
        "writer: copy-on-write per data file, duplicate-match check"
    } else if has(|n| n.as_any().is::<MergeOnReadWriterExec>()) {
        "writer: merge-on-read, position deletes per data file, duplicate-match check"
    } else if has(|n| n.as_any().is::<HashJoinExec>() || classifies(n)) {
        "join / classify"
    } else if has(|n| {
        n.as_any()
            .downcast_ref::<IcebergScanExec>()
            .is_some_and(|scan| scan.row_ids)
    }) {
        "scan target (row-id)"
    } else if has(|n| n.as_any().is::<IcebergWriteExec>()) {
        "writer"
    } else if inputs.is_empty() {
        "scan source"
    } else {
        "compute"
    }
}

fn partitioning_text(p: &Partitioning) -> String {
    match p {
        Partitioning::Hash(exprs, n) => {
            let e: Vec<String> = exprs.iter().map(|e| e.to_string()).collect();
            format!("hash({}) x{n}", e.join(", "))
        }
        Partitioning::RoundRobinBatch(n) => format!("round robin x{n}"),
        Partitioning::UnknownPartitioning(n) => format!("x{n}"),
    }
}

/// Builds the stage rooted at `node`; returns its id.
fn build(
    node: &Arc<dyn ExecutionPlan>,
    out: &mut Vec<Stage>,
    output_partitioning: String,
) -> usize {
    let mut operators = vec![];
    let mut nodes = vec![];
    let mut inputs = vec![];
    walk(node, 0, out, &mut operators, &mut nodes, &mut inputs);
    let id = out.len() + 1;
    out.push(Stage {
        id,
        role: role(&nodes, &inputs).to_string(),
        tasks: node.output_partitioning().partition_count(),
        output_partitioning,
        operators,
        nodes,
        inputs,
    });
    id
}

/// Makes `child` a stage of its own and puts a `StageInput` line for it in
/// the operator tree at `depth`.
fn stage_input(
    child: &Arc<dyn ExecutionPlan>,
    partitioning: String,
    depth: usize,
    out: &mut Vec<Stage>,
    operators: &mut Vec<String>,
    inputs: &mut Vec<usize>,
) {
    let id = build(child, out, partitioning.clone());
    inputs.push(id);
    operators.push(format!(
        "{}StageInput: stage {id} ({partitioning})",
        "  ".repeat(depth)
    ));
}

fn walk(
    node: &Arc<dyn ExecutionPlan>,
    depth: usize,
    out: &mut Vec<Stage>,
    operators: &mut Vec<String>,
    nodes: &mut Vec<Arc<dyn ExecutionPlan>>,
    inputs: &mut Vec<usize>,
) {
    if is_boundary(node) {
        let partitioning = partitioning_text(node.output_partitioning());
        stage_input(
            &node.children()[0].clone(),
            partitioning,
            depth,
            out,
            operators,
            inputs,
        );
        return;
    }
    let mut line = displayable(node.as_ref())
        .one_line()
        .to_string()
        .trim_end()
        .to_string();
    if line.chars().count() > 180 {
        line = line.chars().take(177).collect::<String>() + "...";
    }
    operators.push(format!("{}{}", "  ".repeat(depth), line));
    nodes.push(node.clone());
    let join = node.as_any().is::<HashJoinExec>();
    for child in node.children() {
        if join && !is_boundary(child) {
            // A join input that is not exchanged (a hash table built in
            // process, or a stream probing it) is still its own stage of the
            // merge; its output is pipelined into the join's task.
            let partitioning = format!(
                "{} pipelined into the join",
                partitioning_text(child.output_partitioning())
            );
            stage_input(child, partitioning, depth + 1, out, operators, inputs);
            continue;
        }
        walk(child, depth + 1, out, operators, nodes, inputs);
    }
}

/// The stage graph as text.
pub fn render_text(stages: &[Stage]) -> String {
    let mut s = String::new();
    for stage in stages.iter().rev() {
        let feeds: Vec<String> = stage.inputs.iter().map(|i| format!("stage {i}")).collect();
        let _ = writeln!(
            s,
            "Stage {} — {}\n  tasks: {}, output: {}, inputs: {}",
            stage.id,
            stage.role,
            if stage.tasks == 0 {
                "-".to_string()
            } else {
                stage.tasks.to_string()
            },
            stage.output_partitioning,
            if feeds.is_empty() {
                "-".to_string()
            } else {
                feeds.join(", ")
            }
        );
        for op in &stage.operators {
            let _ = writeln!(s, "    {op}");
        }
    }
    s
}

/// The stage graph as Graphviz DOT.
pub fn render_dot(stages: &[Stage]) -> String {
    let mut s = String::from(
        "digraph merge {\n  rankdir=BT;\n  node [shape=box, fontname=\"monospace\"];\n",
    );
    for stage in stages {
        let label = format!(
            "Stage {}: {}\\ntasks: {}  output: {}\\l{}\\l",
            stage.id,
            stage.role,
            stage.tasks,
            stage.output_partitioning,
            stage.operators.join("\\l")
        )
        .replace('"', "\\\"");
        let _ = writeln!(s, "  stage{} [label=\"{}\"];", stage.id, label);
        for input in &stage.inputs {
            let _ = writeln!(s, "  stage{input} -> stage{};", stage.id);
        }
    }
    s.push_str("}\n");
    s
}
