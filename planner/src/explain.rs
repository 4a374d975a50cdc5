//! EXPLAIN for MERGE: the physical plan cut into the stages a cluster runs
//! (at hash exchanges and partition merges, where Ballista cuts it, and at
//! a hash join's inputs, which the local engine pipelines into it), each
//! with its role in the merge, its number of tasks, its output partitioning,
//! its operator tree and the stages feeding it; as text or as DOT.

use std::fmt::Write;
use std::sync::Arc;

use datafusion::physical_plan::{
    displayable, ExecutionPlan, ExecutionPlanProperties, Partitioning,
};

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

fn is_boundary(node: &Arc<dyn ExecutionPlan>) -> bool {
    match node.name() {
        "RepartitionExec" => matches!(node.output_partitioning(), Partitioning::Hash(_, _)),
        "CoalescePartitionsExec" | "SortPreservingMergeExec" => true,
        _ => false,
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
    let text = operators.join("\n");
    let role = if text.contains("CopyOnWriteWriterExec") {
        "writer: copy-on-write per data file, duplicate-match check".to_string()
    } else if text.contains("HashJoinExec") || text.contains("__icemerge_op") {
        "join / classify".to_string()
    } else if text.contains("row_ids=") {
        "scan target (row-id)".to_string()
    } else if text.contains("IcebergWriteExec") {
        "writer".to_string()
    } else if inputs.is_empty() {
        "scan source".to_string()
    } else {
        "compute".to_string()
    };
    let id = out.len() + 1;
    out.push(Stage {
        id,
        role,
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
    let join = node.name() == "HashJoinExec";
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
