//! EXPLAIN of a statement's stage graph: the physical plan cut into the
//! stages a cluster runs (`stages`), the document that carries the graph
//! and, after a run, its figures (`document`), and its renderings: text and
//! the per-stage figures table (`text`), Graphviz DOT (`dot`), an SVG
//! picture laid out by `layout-rs` (`svg`), and the labels both pictures
//! share (`labels`).

mod document;
mod dot;
mod labels;
mod stages;
mod svg;
mod text;

pub use document::{
    ExplainDocument, NamedFigures, StageEntry, StageFigures, Timing, DOCUMENT_VERSION,
};
pub use dot::render_dot;
pub use stages::{stage_graph, Stage, StageGraph, StageKind};
pub use svg::{escape as xml_escape, render_svg};
pub use text::{human_bytes, human_ms, render_figures, render_text};
