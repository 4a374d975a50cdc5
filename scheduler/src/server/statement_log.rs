//! The statements the scheduler's clients sent, running and recent, for
//! the live page, `SHOW STATEMENTS` and `CANCEL STATEMENT`: SQL text, kind,
//! state, times, the Ballista job and, once a statement ends, the stage
//! graph and figures of the plan it ran; a cancellation asked for a live
//! one. Every change is also counted in the [`SchedulerMetrics`]. The
//! last [`KEPT`] ended statements are kept, and every live one.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use icemerge_planner::explain::ExplainDocument;
use icemerge_planner::statement_kind::StatementKind;
use serde::{Serialize, Serializer};
use tokio::sync::Notify;

use super::metrics::{EndFigures, SchedulerMetrics};

/// How many statements the log keeps.
pub const KEPT: usize = 200;

/// Where a statement is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StatementState {
    /// Waiting for the statement before it (one runs at a time).
    Queued,
    Running,
    Succeeded,
    Failed,
}

impl StatementState {
    /// Still queued or running.
    pub fn is_live(self) -> bool {
        matches!(self, Self::Queued | Self::Running)
    }
}

/// One statement of the log.
#[derive(Debug, Clone, Serialize)]
pub struct LoggedStatement {
    pub id: u64,
    pub sql: String,
    /// The client that sent it (`client_sessions::client_of`).
    pub client: String,
    #[serde(serialize_with = "kind_label")]
    pub kind: StatementKind,
    pub state: StatementState,
    /// Milliseconds since the Unix epoch.
    pub submitted_ms: i64,
    pub started_ms: Option<i64>,
    pub ended_ms: Option<i64>,
    /// The error a failed statement ended with.
    pub error: Option<String>,
    /// The Ballista job of its last plan.
    pub job: Option<String>,
    /// `Session::plans_started` when it started: a plan numbered higher
    /// is this statement's.
    #[serde(skip)]
    pub plans_before: u64,
    /// The stage graph and figures of the plan it ran (None: no plan, or
    /// still running).
    #[serde(skip)]
    pub document: Option<Arc<ExplainDocument>>,
    /// `CANCEL STATEMENT` asked for it while it was live.
    pub cancel_requested: bool,
    /// Woken by `CANCEL STATEMENT` (the statement's runner waits on it).
    #[serde(skip)]
    pub cancel: Arc<Notify>,
}

fn kind_label<S: Serializer>(kind: &StatementKind, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(kind.label())
}

/// How a statement ended.
#[derive(Debug, Default)]
pub struct StatementEnd {
    /// The error a failed statement ended with.
    pub error: Option<String>,
    /// The error is of kind cancelled.
    pub cancelled: bool,
    /// The plan it ran last.
    pub document: Option<ExplainDocument>,
    pub job: Option<String>,
    /// `commit_attempts` and `reexecutions` of a MERGE's result row.
    pub commit_attempts: Option<u64>,
    pub reexecutions: Option<u64>,
}

impl LoggedStatement {
    /// Milliseconds from its start (or submission, while queued) to its
    /// end, or to `now_ms` while it runs.
    pub fn elapsed_ms(&self, now_ms: i64) -> i64 {
        let from = self.started_ms.unwrap_or(self.submitted_ms);
        (self.ended_ms.unwrap_or(now_ms) - from).max(0)
    }
}

/// The log, shared by the Flight SQL service (which writes it) and the
/// live page (which reads it).
#[derive(Debug, Clone, Default)]
pub struct StatementLog {
    inner: Arc<Mutex<Inner>>,
    metrics: SchedulerMetrics,
}

#[derive(Debug, Default)]
struct Inner {
    next_id: u64,
    statements: VecDeque<LoggedStatement>,
}

/// Now, in milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl StatementLog {
    /// A log counting into `metrics`.
    pub fn new(metrics: SchedulerMetrics) -> Self {
        Self {
            inner: Default::default(),
            metrics,
        }
    }

    /// The metrics this log counts into.
    pub fn metrics(&self) -> &SchedulerMetrics {
        &self.metrics
    }

    /// Records a statement sent by `client`; returns its id.
    pub fn submit(&self, sql: &str, client: &str) -> u64 {
        let kind = StatementKind::of(sql);
        self.metrics.statement_submitted(kind);
        let mut inner = self.inner.lock().expect("statement log");
        inner.next_id += 1;
        let id = inner.next_id;
        inner.statements.push_back(LoggedStatement {
            id,
            sql: sql.to_string(),
            client: client.to_string(),
            kind,
            state: StatementState::Queued,
            submitted_ms: now_ms(),
            started_ms: None,
            ended_ms: None,
            error: None,
            job: None,
            plans_before: 0,
            document: None,
            cancel_requested: false,
            cancel: Arc::new(Notify::new()),
        });
        // The oldest ended statements go; live ones stay (they can be
        // cancelled, and end later).
        while inner.statements.len() > KEPT {
            match inner.statements.iter().position(|s| !s.state.is_live()) {
                Some(oldest) => inner.statements.remove(oldest),
                None => break,
            };
        }
        id
    }

    /// The statement got its turn on the session.
    pub fn start(&self, id: u64, plans_before: u64) {
        self.update(id, |s| {
            s.state = StatementState::Running;
            s.started_ms = Some(now_ms());
            s.plans_before = plans_before;
        });
        self.metrics.statement_started();
    }

    /// The statement ended: with its error, or the plan it ran.
    pub fn finish(&self, id: u64, end: StatementEnd) {
        let mut ended = None;
        self.update(id, |s| {
            s.state = match end.error {
                Some(_) => StatementState::Failed,
                None => StatementState::Succeeded,
            };
            s.ended_ms = Some(now_ms());
            s.error = end.error.clone();
            s.document = end.document.map(Arc::new);
            s.job = end.job;
            ended = Some(s.clone());
        });
        if let Some(s) = ended {
            let duration = s
                .started_ms
                .zip(s.ended_ms)
                .map(|(from, to)| Duration::from_millis((to - from).max(0) as u64));
            let figures = EndFigures {
                ran: s.started_ms.is_some(),
                duration,
                failed: s.error.is_some(),
                cancelled: end.cancelled,
                document: s.document.as_deref(),
                commit_attempts: end.commit_attempts,
                reexecutions: end.reexecutions,
            };
            self.metrics.statement_ended(s.kind, &figures);
        }
    }

    /// Asks a live statement to stop: a queued one fails when its turn
    /// comes (or at once, its runner being woken), a running one is
    /// cancelled by its runner. Returns the statement's state when asked
    /// (an ended statement is left as it is), None for an id not kept.
    pub fn request_cancel(&self, id: u64) -> Option<StatementState> {
        let mut inner = self.inner.lock().expect("statement log");
        let s = inner.statements.iter_mut().find(|s| s.id == id)?;
        if s.state.is_live() {
            s.cancel_requested = true;
            s.cancel.notify_one();
        }
        Some(s.state)
    }

    /// The signal `request_cancel` wakes for statement `id`.
    pub fn cancel_signal(&self, id: u64) -> Option<Arc<Notify>> {
        self.get(id).map(|s| s.cancel)
    }

    /// Waits up to `limit` for statement `id` to end; its final record, or
    /// None when it is still live (or not kept).
    pub async fn wait_ended(&self, id: u64, limit: Duration) -> Option<LoggedStatement> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let s = self.get(id)?;
            if !s.state.is_live() {
                return Some(s);
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn update(&self, id: u64, change: impl FnOnce(&mut LoggedStatement)) {
        let mut inner = self.inner.lock().expect("statement log");
        if let Some(s) = inner.statements.iter_mut().find(|s| s.id == id) {
            change(s);
        }
    }

    /// The statements kept, newest first.
    pub fn list(&self) -> Vec<LoggedStatement> {
        let inner = self.inner.lock().expect("statement log");
        inner.statements.iter().rev().cloned().collect()
    }

    /// The statement with id `id`, if still kept.
    pub fn get(&self, id: u64) -> Option<LoggedStatement> {
        let inner = self.inner.lock().expect("statement log");
        inner.statements.iter().find(|s| s.id == id).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_states_newest_first_and_keeps_the_last() {
        let log = StatementLog::default();
        let a = log.submit("SELECT 1", "test");
        let b = log.submit("SELECT 2", "test");
        assert_eq!(log.get(a).unwrap().state, StatementState::Queued);
        log.start(a, 0);
        assert_eq!(log.get(a).unwrap().state, StatementState::Running);
        log.finish(
            a,
            StatementEnd {
                job: Some("job1".into()),
                ..Default::default()
            },
        );
        log.start(b, 1);
        log.finish(
            b,
            StatementEnd {
                error: Some("boom".into()),
                ..Default::default()
            },
        );
        let listed: Vec<_> = log.list().iter().map(|s| (s.id, s.state)).collect();
        assert_eq!(
            listed,
            vec![(b, StatementState::Failed), (a, StatementState::Succeeded)]
        );
        assert_eq!(log.get(b).unwrap().error.as_deref(), Some("boom"));
        assert_eq!(log.get(a).unwrap().job.as_deref(), Some("job1"));
        for i in 0..KEPT {
            log.submit(&format!("SELECT {i}"), "test");
        }
        assert_eq!(log.list().len(), KEPT);
        assert!(log.get(a).is_none());
    }

    #[test]
    fn live_statements_stay_and_can_be_asked_to_cancel() {
        let log = StatementLog::default();
        let running = log.submit("MERGE INTO t USING s ON t.id = s.id", "test");
        log.start(running, 0);
        assert_eq!(log.get(running).unwrap().kind, StatementKind::Merge);
        for i in 0..KEPT + 5 {
            let id = log.submit(&format!("SELECT {i}"), "test");
            log.start(id, 0);
            log.finish(id, StatementEnd::default());
        }
        assert_eq!(log.list().len(), KEPT);
        assert_eq!(log.request_cancel(running), Some(StatementState::Running));
        assert!(log.get(running).unwrap().cancel_requested);
        let ended = log.list()[0].id;
        assert_eq!(log.request_cancel(ended), Some(StatementState::Succeeded));
        assert!(!log.get(ended).unwrap().cancel_requested);
        assert_eq!(log.request_cancel(9999), None);
        let text = log.metrics().render();
        assert!(
            text.contains("icemerge_statements_succeeded_total{kind=\"query\"} 205"),
            "{text}"
        );
        assert!(text.contains("icemerge_statements_running 1"), "{text}");
    }
}
