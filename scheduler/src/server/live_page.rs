//! The live page of the `icemerge-scheduler` process (`--ui-port`): an
//! HTML page served by axum, the HTTP stack the scheduler already runs.
//!
//! - `/` lists the running and recent statements (SQL text, state,
//!   elapsed time), newest first; `/statements.json` is the same list.
//! - `/statements/<id>` shows a statement's stage graph (the SVG of
//!   `EXPLAIN (FORMAT SVG)`) and a per-stage table: Ballista's tasks done /
//!   total and, from the tasks finished so far, rows, bytes and time;
//!   `statement.js` polls `/statements/<id>.json` while the statement runs
//!   and redraws both, then shows the final figures.
//!
//! Everything is served by the binary (`live_page/`: the stylesheet and the
//! script, no framework, nothing fetched from elsewhere). With a token
//! configured every path, assets included, needs it: `authorization:
//! Bearer <token>` or `?token=<token>` (which the pages carry on in their
//! links and polls); anything else is answered 401 (`auth::require_token`).

use std::sync::Arc;

use axum::extract::{Path, Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use icemerge_planner::explain::{human_bytes, human_ms, render_svg, ExplainDocument, StageKind};
use icemerge_proto::progress::StageProgress;
use serde::Serialize;
use serde_json::json;

use super::auth::{query_token, require_token, Auth};
use super::client_sessions::ClientSessions;
use super::progress::JobProgress;
use super::statement_log::{now_ms, LoggedStatement, StatementLog};
use crate::engine::{FigureCollector, TaskLedger};

const STYLE: &str = include_str!("live_page/live.css");
const SCRIPT: &str = include_str!("live_page/statement.js");

/// What the live page reads.
#[derive(Clone)]
pub struct LivePage {
    pub log: StatementLog,
    pub sessions: Arc<ClientSessions>,
    pub progress: JobProgress,
    pub ledger: TaskLedger,
    pub auth: Auth,
}

impl LivePage {
    /// The page's routes, every one behind the token check.
    pub fn router(self) -> Router {
        let auth = self.auth.clone();
        Router::new()
            .route("/", get(list_page))
            .route("/statements.json", get(list_json))
            .route("/statements/{id}", get(statement))
            .route(
                "/assets/live.css",
                get(|| async { asset(STYLE, "text/css") }),
            )
            .route(
                "/assets/statement.js",
                get(|| async { asset(SCRIPT, "text/javascript") }),
            )
            .with_state(self)
            .layer(axum::middleware::from_fn(move |request, next| {
                require_token(auth.clone(), request, next)
            }))
    }
}

/// Serves the live page on `listener` until an error.
pub async fn serve_live_page(
    listener: tokio::net::TcpListener,
    page: LivePage,
) -> std::io::Result<()> {
    axum::serve(listener, page.router()).await
}

fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            b => format!("%{b:02X}"),
        })
        .collect()
}

/// `?token=...` to carry on in links when the request came with one.
fn token_suffix(request: &Request) -> String {
    match query_token(request.uri().query()) {
        Some(token) => format!("?token={}", percent_encode(&token)),
        None => String::new(),
    }
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

fn html_response(body: String) -> Response {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], body).into_response()
}

fn json_response(value: &impl Serialize) -> Response {
    let body = serde_json::to_string(value).expect("the page's JSON serializes");
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// HTML text: `&`, `<`, `>`, quotes escaped; line breaks kept.
fn html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A whole page; `head` goes into its `<head>`.
fn html_page(title: &str, token: &str, head: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">{head}\
         <title>{}</title><link rel=\"stylesheet\" href=\"/assets/live.css{token}\"></head>\
         <body>{body}</body></html>\n",
        html(title)
    )
}

/// One statement as the list shows it.
#[derive(Serialize)]
struct ListedStatement {
    id: u64,
    sql: String,
    state: super::statement_log::StatementState,
    elapsed_ms: i64,
    submitted_ms: i64,
    started_ms: Option<i64>,
    ended_ms: Option<i64>,
    /// The client that sent it.
    client: String,
    error: Option<String>,
}

fn listed(s: &LoggedStatement, now: i64) -> ListedStatement {
    ListedStatement {
        id: s.id,
        sql: s.sql.clone(),
        state: s.state,
        elapsed_ms: s.elapsed_ms(now),
        submitted_ms: s.submitted_ms,
        started_ms: s.started_ms,
        ended_ms: s.ended_ms,
        client: s.client.clone(),
        error: s.error.clone(),
    }
}

async fn list_json(State(page): State<LivePage>) -> Response {
    let now = now_ms();
    let statements: Vec<_> = page.log.list().iter().map(|s| listed(s, now)).collect();
    json_response(&json!({ "statements": statements }))
}

async fn list_page(State(page): State<LivePage>, request: Request) -> Response {
    let token = token_suffix(&request);
    let now = now_ms();
    let statements = page.log.list();
    let live = statements.iter().any(|s| s.state.is_live());
    let mut rows = String::new();
    for s in &statements {
        let state = s.state_word();
        rows.push_str(&format!(
            "<tr class=\"statement\" data-statement=\"{id}\"><td><a href=\"/statements/{id}{token}\">{id}</a></td>\
             <td class=\"state {state}\">{state}</td><td class=\"elapsed\">{elapsed}</td><td><pre class=\"sql\">{sql}</pre>{error}</td></tr>\n",
            id = s.id,
            elapsed = human_ms(s.elapsed_ms(now) as f64),
            sql = html(&s.sql),
            error = s
                .error
                .as_ref()
                .map(|e| format!("<div class=\"error\">{}</div>", html(e)))
                .unwrap_or_default(),
        ));
    }
    if statements.is_empty() {
        rows.push_str("<tr><td colspan=\"4\">no statement yet</td></tr>");
    }
    // While a statement runs the list reloads itself.
    let refresh = if live {
        "<meta http-equiv=\"refresh\" content=\"2\">"
    } else {
        ""
    };
    let body = format!(
        "<h1>icemerge scheduler</h1><p class=\"info\">Statements sent to this scheduler, newest first (the last {kept}).</p>\
         <table class=\"statements\"><thead><tr><th>id</th><th>state</th><th>elapsed</th><th>statement</th></tr></thead>\
         <tbody>{rows}</tbody></table>",
        kept = super::statement_log::KEPT,
    );
    html_response(html_page("icemerge — statements", &token, refresh, &body))
}

impl LoggedStatement {
    fn state_word(&self) -> &'static str {
        use super::statement_log::StatementState::*;
        match self.state {
            Queued => "queued",
            Running => "running",
            Succeeded => "succeeded",
            Failed => "failed",
        }
    }
}

/// A statement's stage graph now: its final document once it ended, else
/// the running plan with the figures of the tasks finished so far, and
/// Ballista's task progress per stage while it runs.
async fn statement_view(
    page: &LivePage,
    s: &LoggedStatement,
) -> (Option<ExplainDocument>, Vec<StageProgress>) {
    if !s.state.is_live() {
        return (s.document.as_deref().cloned(), vec![]);
    }
    let Some(session) = page.sessions.get(&s.client).map(|c| c.session.clone()) else {
        return (None, vec![]);
    };
    let Some(run) = session
        .current_run()
        .filter(|run| s.started_ms.is_some() && run.number > s.plans_before)
    else {
        return (None, vec![]);
    };
    let mut document = run.document.clone();
    let mut progress = vec![];
    if let Some(job) = run.job.clone().or_else(|| session.running_job_id()) {
        let stages: Vec<_> = document.stages.iter().map(|e| e.stage.clone()).collect();
        let tasks = page.ledger.tasks_of(&job);
        let figures = FigureCollector::from_tasks(&tasks).figures(&stages, run.started);
        for (entry, figures) in document.stages.iter_mut().zip(figures) {
            entry.figures = figures;
        }
        // A job just submitted may not be visible yet: no stages then.
        progress = page.progress.stages(&job).await.unwrap_or_default();
    }
    (Some(document), progress)
}

/// One stage's row of the statement page.
#[derive(Serialize)]
struct StageRow {
    id: usize,
    kind: StageKind,
    role: String,
    ballista_stage: Option<usize>,
    /// `waiting`, Ballista's state while running, `done` / `not run` after.
    status: String,
    tasks_done: usize,
    tasks_total: Option<usize>,
    rows_in: Option<u64>,
    rows_out: Option<u64>,
    bytes_read: Option<u64>,
    bytes_shuffled: Option<u64>,
    bytes_written: Option<u64>,
    wall_ms: Option<f64>,
    cpu_ms: Option<f64>,
    /// The row's cells as the table shows them.
    cells: Vec<String>,
}

fn stage_rows(document: &ExplainDocument, progress: &[StageProgress], live: bool) -> Vec<StageRow> {
    document
        .stages
        .iter()
        .map(|entry| {
            let stage = &entry.stage;
            let f = entry.figures.as_ref();
            let ballista = stage
                .ballista_stage
                .and_then(|b| progress.iter().find(|p| p.stage == b));
            let (status, done, total) = match (live, ballista, f) {
                (true, Some(p), _) => (p.status.to_lowercase(), p.done, p.total),
                (true, None, Some(f)) => ("done".to_string(), f.tasks, Some(f.tasks)),
                (true, None, None) => ("waiting".to_string(), 0, None),
                (false, _, Some(f)) => ("done".to_string(), f.tasks, Some(f.tasks)),
                (false, _, None) => ("not run".to_string(), 0, None),
            };
            let dash = || "-".to_string();
            let tasks = match total {
                Some(total) => format!("{done} / {total}"),
                None => format!("{done} / ?"),
            };
            let files = |bytes: u64, files: u64| match (bytes, files) {
                (0, 0) => dash(),
                (b, n) => format!("{} / {n} files", human_bytes(b)),
            };
            let cells = vec![
                stage.id.to_string(),
                stage.role.clone(),
                status.clone(),
                tasks,
                f.map(|f| f.rows_in.map_or("?".into(), |r| r.to_string()))
                    .unwrap_or_else(dash),
                f.map(|f| f.rows_out.to_string()).unwrap_or_else(dash),
                f.map(|f| files(f.bytes_read, f.files_read))
                    .unwrap_or_else(dash),
                f.and_then(|f| f.bytes_shuffled)
                    .map(human_bytes)
                    .unwrap_or_else(dash),
                f.map(|f| files(f.bytes_written, f.files_written))
                    .unwrap_or_else(dash),
                f.map(|f| human_ms(f.wall_ms)).unwrap_or_else(dash),
                f.map(|f| human_ms(f.cpu_ms)).unwrap_or_else(dash),
            ];
            StageRow {
                id: stage.id,
                kind: stage.kind,
                role: stage.role.clone(),
                ballista_stage: stage.ballista_stage,
                status,
                tasks_done: done,
                tasks_total: total,
                rows_in: f.and_then(|f| f.rows_in),
                rows_out: f.map(|f| f.rows_out),
                bytes_read: f.map(|f| f.bytes_read),
                bytes_shuffled: f.and_then(|f| f.bytes_shuffled),
                bytes_written: f.map(|f| f.bytes_written),
                wall_ms: f.map(|f| f.wall_ms),
                cpu_ms: f.map(|f| f.cpu_ms),
                cells,
            }
        })
        .collect()
}

const COLUMNS: [&str; 11] = [
    "stage", "role", "status", "tasks", "rows in", "rows out", "read", "shuffled", "written",
    "wall", "cpu",
];

/// `/statements/<id>` (the page) and `/statements/<id>.json`.
async fn statement(
    State(page): State<LivePage>,
    Path(id): Path<String>,
    request: Request,
) -> Response {
    let (number, json) = match id.strip_suffix(".json") {
        Some(number) => (number, true),
        None => (id.as_str(), false),
    };
    let Some(s) = number.parse().ok().and_then(|id| page.log.get(id)) else {
        return (
            StatusCode::NOT_FOUND,
            format!(
                "no statement {number} (the scheduler keeps the last {})\n",
                super::statement_log::KEPT
            ),
        )
            .into_response();
    };
    let (document, progress) = statement_view(&page, &s).await;
    let live = s.state.is_live();
    let rows = document
        .as_ref()
        .map(|d| stage_rows(d, &progress, live))
        .unwrap_or_default();
    let svg = document.as_ref().map(render_svg);
    let now = now_ms();
    if json {
        return json_response(&json!({
            "id": s.id,
            "sql": s.sql,
            "state": s.state,
            "elapsed_ms": s.elapsed_ms(now),
            "elapsed": human_ms(s.elapsed_ms(now) as f64),
            "error": s.error,
            "job": s.job.clone().or_else(|| {
                live.then(|| page.sessions.get(&s.client)?.session.running_job_id())
                    .flatten()
            }),
            "columns": COLUMNS,
            "stages": rows,
            "merge": document.as_ref().and_then(|d| d.merge.clone()),
            "timing": document.as_ref().and_then(|d| d.timing.clone()),
            "svg": svg,
        }));
    }
    let token = token_suffix(&request);
    let head: String = COLUMNS.iter().map(|c| format!("<th>{c}</th>")).collect();
    let body_rows: String = rows
        .iter()
        .map(|r| {
            let cells: String = r
                .cells
                .iter()
                .map(|c| format!("<td>{}</td>", html(c)))
                .collect();
            format!("<tr class=\"stage\" data-stage=\"{}\">{cells}</tr>", r.id)
        })
        .collect();
    let summary = document.as_ref().map(summary_line).unwrap_or_default();
    let body = format!(
        "<p><a href=\"/{token}\">all statements</a></p>\
         <h1>statement {id}</h1><pre class=\"sql\">{sql}</pre>\
         <p>state: <span id=\"state\" class=\"{state}\">{state}</span>, elapsed: <span id=\"elapsed\">{elapsed}</span></p>\
         <div id=\"error\" class=\"error\">{error}</div>\
         <table id=\"stages\" class=\"stages\"><thead><tr>{head}</tr></thead><tbody>{body_rows}</tbody></table>\
         <p id=\"summary\" class=\"info\">{summary}</p>\
         <div id=\"graph\">{svg}</div>\
         <script src=\"/assets/statement.js{token}\" data-poll=\"/statements/{id}.json{token}\" data-live=\"{live}\"></script>",
        id = s.id,
        sql = html(&s.sql),
        state = s.state_word(),
        elapsed = human_ms(s.elapsed_ms(now) as f64),
        error = s.error.as_deref().map(html).unwrap_or_default(),
        svg = svg.unwrap_or_else(|| "<p class=\"info\">no stage graph (yet)</p>".into()),
    );
    html_response(html_page(
        &format!("icemerge — statement {}", s.id),
        &token,
        "",
        &body,
    ))
}

/// The merge's figures and where its time went, in one line.
fn summary_line(document: &ExplainDocument) -> String {
    let mut parts = vec![];
    if let Some(merge) = &document.merge {
        parts.push(
            merge
                .0
                .iter()
                .map(|(n, v)| format!("{n}={v}"))
                .collect::<Vec<_>>()
                .join(", "),
        );
    }
    if let Some(t) = &document.timing {
        parts.push(format!(
            "time: total={}, plan={}, run={}, commit={}",
            human_ms(t.total_ms),
            human_ms(t.plan_ms),
            human_ms(t.run_ms),
            human_ms(t.commit_ms)
        ));
    }
    html(&parts.join("; "))
}

#[cfg(test)]
mod tests {
    use super::super::auth::percent_decode;
    use super::*;

    #[test]
    fn reads_the_token_of_a_query_string() {
        assert_eq!(query_token(Some("token=s3cret")), Some("s3cret".into()));
        assert_eq!(
            query_token(Some("a=1&token=a%2Fb%3D+c")),
            Some("a/b= c".into())
        );
        assert_eq!(query_token(Some("tokens=x")), None);
        assert_eq!(query_token(None), None);
        assert_eq!(percent_decode(&percent_encode("é/?&= x")), "é/?&= x");
        assert_eq!(percent_decode("50%"), "50%");
    }

    #[test]
    fn escapes_html() {
        assert_eq!(html("a<b & 'c'\n"), "a&lt;b &amp; &#39;c&#39;\n");
    }
}
