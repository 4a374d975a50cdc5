//! The statements the scheduler's clients sent, running and recent, for
//! the live page: SQL text, state, times, the Ballista job and, once a
//! statement ends, the stage graph and figures of the plan it ran. Only
//! the last [`KEPT`] statements are kept.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use icemerge_planner::explain::ExplainDocument;
use serde::Serialize;

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
    /// Records a statement sent by a client; returns its id.
    pub fn submit(&self, sql: &str) -> u64 {
        let mut inner = self.inner.lock().expect("statement log");
        inner.next_id += 1;
        let id = inner.next_id;
        inner.statements.push_back(LoggedStatement {
            id,
            sql: sql.to_string(),
            state: StatementState::Queued,
            submitted_ms: now_ms(),
            started_ms: None,
            ended_ms: None,
            error: None,
            job: None,
            plans_before: 0,
            document: None,
        });
        while inner.statements.len() > KEPT {
            inner.statements.pop_front();
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
    }

    /// The statement ended: with its error, or the plan it ran.
    pub fn finish(
        &self,
        id: u64,
        error: Option<String>,
        document: Option<ExplainDocument>,
        job: Option<String>,
    ) {
        self.update(id, |s| {
            s.state = match error {
                Some(_) => StatementState::Failed,
                None => StatementState::Succeeded,
            };
            s.ended_ms = Some(now_ms());
            s.error = error;
            s.document = document.map(Arc::new);
            s.job = job;
        });
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
        let a = log.submit("SELECT 1");
        let b = log.submit("SELECT 2");
        assert_eq!(log.get(a).unwrap().state, StatementState::Queued);
        log.start(a, 0);
        assert_eq!(log.get(a).unwrap().state, StatementState::Running);
        log.finish(a, None, None, Some("job1".into()));
        log.start(b, 1);
        log.finish(b, Some("boom".into()), None, None);
        let listed: Vec<_> = log.list().iter().map(|s| (s.id, s.state)).collect();
        assert_eq!(
            listed,
            vec![(b, StatementState::Failed), (a, StatementState::Succeeded)]
        );
        assert_eq!(log.get(b).unwrap().error.as_deref(), Some("boom"));
        assert_eq!(log.get(a).unwrap().job.as_deref(), Some("job1"));
        for i in 0..KEPT {
            log.submit(&format!("SELECT {i}"));
        }
        assert_eq!(log.list().len(), KEPT);
        assert!(log.get(a).is_none());
    }
}
