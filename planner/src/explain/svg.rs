//! The stage graph as an SVG picture, with nothing else installed: the
//! layout (ranks, positions, edge routes) comes from the `layout-rs` crate,
//! the drawing is ours. Data flows down: sources at the top, the commit at
//! the bottom. Each stage is a box (`<g class="stage" id="stage-N">`) with
//! its role, tasks, operators and, after a run, its figures;
//! each edge (`<g class="edge">`) is labelled with the partitioning and
//! what crossed it.

use std::fmt::Write;

use layout::core::base::Orientation;
use layout::core::format::{ClipHandle, RenderBackend};
use layout::core::geometry::Point;
use layout::core::style::StyleAttr;
use layout::std_shapes::shapes::{Arrow, Element, LineEndKind, ShapeKind};
use layout::topo::layout::VisualGraph;

use super::document::{ExplainDocument, StageEntry};
use super::labels::{edge_label, figure_lines};
use super::stages::StageKind;

/// Width of one character of the 12px monospace font, with some margin.
const CHAR_WIDTH: f64 = 7.4;
const LINE_HEIGHT: f64 = 15.0;
const PADDING: f64 = 8.0;
/// Operator lines longer than this are cut in the picture.
const MAX_OPERATOR_CHARS: usize = 96;
const EDGE_FONT: usize = 11;

/// The stage graph of `doc` as a standalone SVG document.
pub fn render_svg(doc: &ExplainDocument) -> String {
    let boxes: Vec<StageBox> = doc.stages.iter().map(StageBox::new).collect();
    let mut graph = VisualGraph::new(Orientation::TopToBottom);
    let handles: Vec<_> = boxes
        .iter()
        .map(|b| {
            graph.add_node(Element::create_with_properties(
                ShapeKind::Box(String::new()),
                StyleAttr::simple(),
                Orientation::TopToBottom,
                Point::new(b.width, b.height),
                b.key(),
            ))
        })
        .collect();
    let index_of = |id: usize| doc.stages.iter().position(|s| s.stage.id == id);
    for (to, entry) in doc.stages.iter().enumerate() {
        for input in &entry.stage.inputs {
            let Some(from) = index_of(*input) else {
                continue;
            };
            let mut look = StyleAttr::simple();
            look.font_size = EDGE_FONT;
            look.line_width = 1;
            let label = edge_label(&doc.stages[from]).replacen(" · ", "\n", 1);
            let arrow = Arrow::new(
                LineEndKind::None,
                LineEndKind::Arrow,
                layout::core::style::LineStyleKind::Normal,
                &label,
                &look,
                &None,
                &None,
            );
            graph.add_edge(arrow, handles[from], handles[to]);
        }
    }
    let mut drawing = Drawing::default();
    graph.do_it(false, false, false, &mut drawing);
    drawing.to_svg(&boxes)
}

/// One stage's box: its text lines and size.
struct StageBox {
    id: usize,
    kind: StageKind,
    title: String,
    lines: Vec<(String, &'static str)>,
    width: f64,
    height: f64,
}

impl StageBox {
    fn new(entry: &StageEntry) -> Self {
        let stage = &entry.stage;
        let title = format!("Stage {} · {}", stage.id, stage.role);
        let ballista = stage
            .ballista_stage
            .map(|b| format!(" · ballista stage {b}"))
            .unwrap_or_default();
        let tasks = if stage.tasks == 0 {
            "-".to_string()
        } else {
            stage.tasks.to_string()
        };
        let mut lines = vec![(format!("tasks: {tasks}{ballista}"), "info")];
        for op in &stage.operators {
            lines.push((cut(op, MAX_OPERATOR_CHARS), "operator"));
        }
        if let Some(figures) = &entry.figures {
            lines.extend(figure_lines(figures).into_iter().map(|l| (l, "figure")));
        }
        let chars = lines
            .iter()
            .map(|(l, _)| l.chars().count())
            .chain([title.chars().count()])
            .max()
            .unwrap_or(0);
        Self {
            id: stage.id,
            kind: stage.kind,
            title,
            width: chars as f64 * CHAR_WIDTH + 2.0 * PADDING,
            height: (lines.len() + 1) as f64 * LINE_HEIGHT + 2.0 * PADDING,
            lines,
        }
    }

    /// What ties layout-rs's rectangle back to this box.
    fn key(&self) -> String {
        format!("stage-{}", self.id)
    }

    fn fill(&self) -> &'static str {
        match self.kind {
            StageKind::ScanTarget | StageKind::ScanSource => "#e3f2fd",
            StageKind::TargetFilter | StageKind::Join => "#fff3e0",
            StageKind::MergeWriter | StageKind::Writer => "#e8f5e9",
            StageKind::Commit => "#f3e5f5",
            StageKind::Compute => "#f5f5f5",
        }
    }

    fn write(&self, out: &mut String, at: Point) {
        let _ = writeln!(
            out,
            "<g class=\"stage\" id=\"stage-{id}\" data-stage=\"{id}\" data-kind=\"{kind}\">",
            id = self.id,
            kind = serde_json::to_value(self.kind)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
        );
        let _ = writeln!(
            out,
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" rx=\"4\" fill=\"{}\" stroke=\"#455a64\" stroke-width=\"1.5\"/>",
            at.x, at.y, self.width, self.height, self.fill()
        );
        let x = at.x + PADDING;
        let mut y = at.y + PADDING + LINE_HEIGHT - 3.0;
        let _ = writeln!(
            out,
            "<text x=\"{x:.1}\" y=\"{y:.1}\" class=\"title\">{}</text>",
            escape(&self.title)
        );
        for (line, class) in &self.lines {
            y += LINE_HEIGHT;
            let _ = writeln!(
                out,
                "<text x=\"{x:.1}\" y=\"{y:.1}\" class=\"{class}\" xml:space=\"preserve\">{}</text>",
                escape(line)
            );
        }
        out.push_str("</g>\n");
    }
}

/// What layout-rs asks to draw: where each stage box goes, the edges'
/// routes and their labels.
#[derive(Default)]
struct Drawing {
    rects: Vec<(String, Point)>,
    labels: Vec<(Point, String)>,
    arrows: Vec<Vec<(Point, Point)>>,
}

impl RenderBackend for Drawing {
    fn draw_rect(
        &mut self,
        xy: Point,
        _size: Point,
        _look: &StyleAttr,
        properties: Option<String>,
        _clip: Option<ClipHandle>,
    ) {
        if let Some(key) = properties {
            self.rects.push((key, xy));
        }
    }

    fn draw_line(&mut self, _: Point, _: Point, _: &StyleAttr, _: Option<String>) {}

    fn draw_circle(&mut self, _: Point, _: Point, _: &StyleAttr, _: Option<String>) {}

    fn draw_text(&mut self, xy: Point, text: &str, _look: &StyleAttr) {
        // Stage boxes carry no text of their own: what is left are the
        // edge labels.
        if !text.is_empty() {
            self.labels.push((xy, text.to_string()));
        }
    }

    fn draw_arrow(
        &mut self,
        path: &[(Point, Point)],
        _dashed: bool,
        _head: (bool, bool),
        _look: &StyleAttr,
        _properties: Option<String>,
        _text: &str,
    ) {
        self.arrows.push(path.to_vec());
    }

    fn create_clip(&mut self, _: Point, _: Point, _: usize) -> ClipHandle {
        0
    }
}

impl Drawing {
    fn to_svg(&self, boxes: &[StageBox]) -> String {
        let placed: Vec<(&StageBox, Point)> = boxes
            .iter()
            .filter_map(|b| {
                let key = b.key();
                self.rects
                    .iter()
                    .find(|(k, _)| *k == key)
                    .map(|(_, at)| (b, *at))
            })
            .collect();
        let (min, max) = self.bounds(&placed);
        let (width, height) = (max.x - min.x + 20.0, max.y - min.y + 20.0);
        let mut out = String::new();
        let _ = writeln!(
            out,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" viewBox=\"{:.1} {:.1} {width:.1} {height:.1}\" font-family=\"DejaVu Sans Mono, Menlo, Consolas, monospace\" font-size=\"12\">",
            min.x - 10.0,
            min.y - 10.0
        );
        out.push_str(STYLE);
        for path in &self.arrows {
            let _ = writeln!(
                out,
                "<path class=\"edge\" d=\"{}\" fill=\"none\" stroke=\"#607d8b\" stroke-width=\"1.2\" marker-end=\"url(#arrow)\"/>",
                path_data(path)
            );
        }
        for (center, text) in &self.labels {
            write_label(&mut out, *center, text);
        }
        for (b, at) in placed {
            b.write(&mut out, at);
        }
        out.push_str("</svg>\n");
        out
    }

    /// The smallest and largest corner of everything drawn.
    fn bounds(&self, placed: &[(&StageBox, Point)]) -> (Point, Point) {
        let mut min = Point::new(f64::MAX, f64::MAX);
        let mut max = Point::new(f64::MIN, f64::MIN);
        let mut grow = |a: Point, b: Point| {
            min = Point::new(min.x.min(a.x), min.y.min(a.y));
            max = Point::new(max.x.max(b.x), max.y.max(b.y));
        };
        for (b, at) in placed {
            grow(*at, Point::new(at.x + b.width, at.y + b.height));
        }
        for (center, text) in &self.labels {
            let (w, h) = label_size(text);
            grow(
                Point::new(center.x - w / 2.0, center.y - h / 2.0),
                Point::new(center.x + w / 2.0, center.y + h / 2.0),
            );
        }
        for path in &self.arrows {
            for (a, b) in path {
                grow(*a, *a);
                grow(*b, *b);
            }
        }
        if min.x > max.x {
            return (Point::zero(), Point::zero());
        }
        (min, max)
    }
}

const STYLE: &str = "<defs><marker id=\"arrow\" markerWidth=\"10\" markerHeight=\"7\" refX=\"10\" refY=\"3.5\" orient=\"auto\"><polygon points=\"0 0, 10 3.5, 0 7\" fill=\"#607d8b\"/></marker></defs>
<style>.title{font-weight:bold;font-size:13px}.operator{fill:#37474f}.figure{fill:#0d47a1}.info{fill:#546e7a}.label{fill:#455a64;font-size:11px}</style>
";

fn label_size(text: &str) -> (f64, f64) {
    let chars = text.lines().map(|l| l.chars().count()).max().unwrap_or(0);
    let lines = text.lines().count().max(1);
    (
        chars as f64 * CHAR_WIDTH * 0.92,
        lines as f64 * (EDGE_FONT as f64 + 3.0),
    )
}

fn write_label(out: &mut String, center: Point, text: &str) {
    let (w, h) = label_size(text);
    let _ = writeln!(
        out,
        "<rect class=\"label-bg\" x=\"{:.1}\" y=\"{:.1}\" width=\"{w:.1}\" height=\"{h:.1}\" fill=\"white\" fill-opacity=\"0.85\"/>",
        center.x - w / 2.0,
        center.y - h / 2.0
    );
    let _ = write!(out, "<text class=\"label\" text-anchor=\"middle\">");
    let line_height = EDGE_FONT as f64 + 3.0;
    let mut y = center.y - h / 2.0 + line_height - 3.0;
    for line in text.lines() {
        let _ = write!(
            out,
            "<tspan x=\"{:.1}\" y=\"{y:.1}\">{}</tspan>",
            center.x,
            escape(line)
        );
        y += line_height;
    }
    out.push_str("</text>\n");
}

/// An SVG path through layout-rs's route: an exit vector, then entry
/// vectors (cubic Bézier control points).
fn path_data(path: &[(Point, Point)]) -> String {
    let mut d = String::new();
    if path.len() < 2 {
        return d;
    }
    let _ = write!(
        d,
        "M {:.1} {:.1} C {:.1} {:.1}, {:.1} {:.1}, {:.1} {:.1}",
        path[0].0.x,
        path[0].0.y,
        path[0].1.x,
        path[0].1.y,
        path[1].0.x,
        path[1].0.y,
        path[1].1.x,
        path[1].1.y
    );
    for (control, point) in &path[2..] {
        let _ = write!(
            d,
            " S {:.1} {:.1}, {:.1} {:.1}",
            control.x, control.y, point.x, point.y
        );
    }
    d
}

fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        text.chars().take(max - 1).collect::<String>() + "…"
    }
}

/// Text as XML character data: markup escaped, control characters (not
/// allowed in XML) dropped.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\t' => {}
            c => out.push(c),
        }
    }
    out
}
