//! The stage graph as Graphviz DOT: one box per stage (role, tasks,
//! operators and, after a run, its figures), edges labelled with the
//! partitioning and what crossed them.

use std::fmt::Write;

use super::document::ExplainDocument;
use super::labels::{edge_label, figure_lines};

/// The stage graph as DOT.
pub fn render_dot(doc: &ExplainDocument) -> String {
    let mut s = String::from(
        "digraph merge {\n  rankdir=BT;\n  node [shape=box, fontname=\"monospace\"];\n",
    );
    for entry in &doc.stages {
        let stage = &entry.stage;
        let mut lines = vec![
            format!("Stage {}: {}", stage.id, stage.role),
            format!(
                "tasks: {}  output: {}",
                stage.tasks, stage.output_partitioning
            ),
        ];
        lines.extend(stage.operators.iter().cloned());
        if let Some(figures) = &entry.figures {
            lines.extend(figure_lines(figures));
        }
        let label = lines.iter().map(|l| escape(l) + "\\l").collect::<String>();
        let _ = writeln!(s, "  stage{} [label=\"{}\"];", stage.id, label);
        for input in &stage.inputs {
            let label = doc
                .stage(*input)
                .map(|from| escape(&edge_label(from)))
                .unwrap_or_default();
            let _ = writeln!(
                s,
                "  stage{input} -> stage{} [label=\"{label}\"];",
                stage.id
            );
        }
    }
    s.push_str("}\n");
    s
}

fn escape(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"")
}
