//! The scheduler's Prometheus metrics (`--metrics-port`): the counters,
//! gauges and histograms, and the `GET /metrics` endpoint serving them in
//! Prometheus's text format (the `prometheus` crate's encoder) behind the
//! same token as the other ports.
//!
//! Nothing here follows statements itself: the [`StatementLog`] calls
//! [`SchedulerMetrics::statement_submitted`] / `_started` / `_ended` as it
//! records each statement, and the ledger wrapper of the scheduler's gRPC
//! service calls [`SchedulerMetrics::task_finished`] for every task an
//! executor reports done. Families:
//!
//! | name | type | from |
//! |---|---|---|
//! | `icemerge_statements_submitted_total{kind}` | counter | log: submitted |
//! | `icemerge_statements_succeeded_total{kind}` | counter | log: ended without error |
//! | `icemerge_statements_failed_total{kind}` | counter | log: ended with an error (cancelled ones too) |
//! | `icemerge_statements_cancelled_total{kind}` | counter | log: ended with an error of kind cancelled |
//! | `icemerge_statements_queued`, `icemerge_statements_running` | gauge | log |
//! | `icemerge_statement_duration_seconds{kind}` | histogram | log: start to end of statements that ran |
//! | `icemerge_stages_completed_total` | counter | log: Ballista stages with figures in the plan a statement ran last |
//! | `icemerge_commit_attempts_total{kind}`, `icemerge_statement_reexecutions_total{kind}` | counter | log: a MERGE / UPDATE / DELETE's result row |
//! | `icemerge_tasks_completed_total` | counter | ledger: tasks reported successful |
//! | `icemerge_task_duration_seconds` | histogram | ledger: the task's own start and end |
//! | `icemerge_bytes_read_total`, `icemerge_bytes_written_total` | counter | ledger: data files read and written by tasks (stage probes) |
//! | `icemerge_bytes_shuffled_total` | counter | ledger: shuffle files tasks wrote |
//! | `icemerge_executors_alive` | gauge | executors heard from within `--executor-timeout`, at scrape time |
//!
//! `kind` is `query`, `insert`, `merge`, `update`, `delete`, `ddl` or
//! `other` (`icemerge_planner::statement_kind`); every kind is present from
//! the start, at zero.
//!
//! [`StatementLog`]: super::statement_log::StatementLog

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use icemerge_planner::explain::{ExplainDocument, StageKind};
use icemerge_planner::statement_kind::StatementKind;
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts,
    Registry, TextEncoder,
};

use super::auth::{require_token, Auth};
use crate::engine::{task_totals, ExecutorLiveness, TaskRecord};

/// Buckets of statement durations, seconds.
const STATEMENT_BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
];
/// Buckets of task durations, seconds.
const TASK_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

/// How a statement ended, as the metrics count it.
#[derive(Debug, Clone, Default)]
pub struct EndFigures<'a> {
    /// It got its turn and ran (a statement cancelled while queued did not).
    pub ran: bool,
    /// Start to end, when it ran.
    pub duration: Option<Duration>,
    pub failed: bool,
    pub cancelled: bool,
    /// The plan it ran last, with its figures.
    pub document: Option<&'a ExplainDocument>,
    /// `commit_attempts` and `reexecutions` of a MERGE's result row.
    pub commit_attempts: Option<u64>,
    pub reexecutions: Option<u64>,
}

/// The scheduler's metric families, shared by the statement log, the
/// ledger wrapper and the `/metrics` endpoint.
#[derive(Clone)]
pub struct SchedulerMetrics {
    inner: Arc<Families>,
}

struct Families {
    registry: Registry,
    submitted: IntCounterVec,
    succeeded: IntCounterVec,
    failed: IntCounterVec,
    cancelled: IntCounterVec,
    queued: IntGauge,
    running: IntGauge,
    duration: HistogramVec,
    stages: IntCounter,
    commit_attempts: IntCounterVec,
    reexecutions: IntCounterVec,
    tasks: IntCounter,
    task_duration: Histogram,
    bytes_read: IntCounter,
    bytes_written: IntCounter,
    bytes_shuffled: IntCounter,
    executors_alive: IntGauge,
}

impl std::fmt::Debug for SchedulerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SchedulerMetrics")
    }
}

impl Default for SchedulerMetrics {
    fn default() -> Self {
        Self::new()
    }
}

fn registered<T: prometheus::core::Collector + Clone + 'static>(registry: &Registry, c: T) -> T {
    registry
        .register(Box::new(c.clone()))
        .expect("metric names are unique and valid");
    c
}

impl SchedulerMetrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let by_kind = |name: &str, help: &str| {
            let c = IntCounterVec::new(Opts::new(name, help), &["kind"]).expect("valid metric");
            for kind in StatementKind::ALL {
                c.with_label_values(&[kind.label()]);
            }
            registered(&registry, c)
        };
        let counter = |name: &str, help: &str| {
            registered(
                &registry,
                IntCounter::new(name, help).expect("valid metric"),
            )
        };
        let gauge = |name: &str, help: &str| {
            registered(&registry, IntGauge::new(name, help).expect("valid metric"))
        };
        let duration = HistogramVec::new(
            HistogramOpts::new(
                "icemerge_statement_duration_seconds",
                "Time from a statement's start to its end (statements that ran)",
            )
            .buckets(STATEMENT_BUCKETS.to_vec()),
            &["kind"],
        )
        .expect("valid metric");
        for kind in StatementKind::ALL {
            duration.with_label_values(&[kind.label()]);
        }
        let task_duration = Histogram::with_opts(
            HistogramOpts::new(
                "icemerge_task_duration_seconds",
                "Wall time of finished Ballista tasks",
            )
            .buckets(TASK_BUCKETS.to_vec()),
        )
        .expect("valid metric");
        let families = Families {
            submitted: by_kind(
                "icemerge_statements_submitted_total",
                "Statements clients sent",
            ),
            succeeded: by_kind(
                "icemerge_statements_succeeded_total",
                "Statements that ended without an error",
            ),
            failed: by_kind(
                "icemerge_statements_failed_total",
                "Statements that ended with an error (cancelled ones included)",
            ),
            cancelled: by_kind(
                "icemerge_statements_cancelled_total",
                "Statements cancelled (by CANCEL STATEMENT or the client going away)",
            ),
            queued: gauge(
                "icemerge_statements_queued",
                "Statements waiting for their turn",
            ),
            running: gauge("icemerge_statements_running", "Statements running now"),
            duration: registered(&registry, duration),
            stages: counter(
                "icemerge_stages_completed_total",
                "Ballista stages that ran in the plans statements ran last",
            ),
            commit_attempts: by_kind(
                "icemerge_commit_attempts_total",
                "Commit attempts of MERGE, UPDATE and DELETE (from their result rows)",
            ),
            reexecutions: by_kind(
                "icemerge_statement_reexecutions_total",
                "MERGE, UPDATE and DELETE runs repeated after a commit conflict",
            ),
            tasks: counter(
                "icemerge_tasks_completed_total",
                "Ballista tasks executors reported successful",
            ),
            task_duration: registered(&registry, task_duration),
            bytes_read: counter(
                "icemerge_bytes_read_total",
                "Bytes of data files tasks read",
            ),
            bytes_written: counter(
                "icemerge_bytes_written_total",
                "Bytes of data files tasks wrote",
            ),
            bytes_shuffled: counter(
                "icemerge_bytes_shuffled_total",
                "Bytes of shuffle files tasks wrote",
            ),
            executors_alive: gauge(
                "icemerge_executors_alive",
                "Executors heard from within --executor-timeout",
            ),
            registry,
        };
        Self {
            inner: Arc::new(families),
        }
    }

    /// A statement was sent: it waits for its turn.
    pub fn statement_submitted(&self, kind: StatementKind) {
        let m = &self.inner;
        m.submitted.with_label_values(&[kind.label()]).inc();
        m.queued.inc();
    }

    /// A statement got its turn.
    pub fn statement_started(&self) {
        self.inner.queued.dec();
        self.inner.running.inc();
    }

    /// A statement ended.
    pub fn statement_ended(&self, kind: StatementKind, end: &EndFigures<'_>) {
        let m = &self.inner;
        let label = [kind.label()];
        if end.ran {
            m.running.dec();
        } else {
            m.queued.dec();
        }
        if end.failed {
            m.failed.with_label_values(&label).inc();
        } else {
            m.succeeded.with_label_values(&label).inc();
        }
        if end.cancelled {
            m.cancelled.with_label_values(&label).inc();
        }
        if let Some(duration) = end.duration {
            m.duration
                .with_label_values(&label)
                .observe(duration.as_secs_f64());
        }
        if let Some(document) = end.document {
            m.stages.inc_by(stages_completed(document));
        }
        if let Some(n) = end.commit_attempts {
            m.commit_attempts.with_label_values(&label).inc_by(n);
        }
        if let Some(n) = end.reexecutions {
            m.reexecutions.with_label_values(&label).inc_by(n);
        }
    }

    /// An executor reported a task done.
    pub fn task_finished(&self, task: &TaskRecord) {
        let m = &self.inner;
        let totals = task_totals(task);
        m.tasks.inc();
        if let Some(nanos) = totals.wall_nanos {
            m.task_duration.observe(nanos as f64 / 1e9);
        }
        m.bytes_read.inc_by(totals.bytes_read);
        m.bytes_written.inc_by(totals.bytes_written);
        m.bytes_shuffled.inc_by(totals.bytes_shuffled);
    }

    /// Every family in Prometheus's text exposition format.
    pub fn render(&self) -> String {
        let mut out = vec![];
        TextEncoder::new()
            .encode(&self.inner.registry.gather(), &mut out)
            .expect("the text encoder writes to memory");
        String::from_utf8(out).expect("the text format is UTF-8")
    }
}

/// The Ballista stages a run's document shows figures for (a pipelined
/// stage runs inside its consumer's Ballista stage; the commit is none).
fn stages_completed(document: &ExplainDocument) -> u64 {
    let ran: BTreeSet<usize> = document
        .stages
        .iter()
        .filter(|s| s.figures.is_some() && s.stage.kind != StageKind::Commit)
        .filter_map(|s| s.stage.ballista_stage)
        .collect();
    ran.len() as u64
}

/// What the `/metrics` endpoint reads.
#[derive(Clone)]
pub struct MetricsEndpoint {
    pub metrics: SchedulerMetrics,
    /// Executors' last signs of life, for `icemerge_executors_alive`.
    pub liveness: ExecutorLiveness,
    pub executor_timeout: Duration,
    pub auth: Auth,
}

impl MetricsEndpoint {
    /// `GET /metrics`, behind the token check.
    pub fn router(self) -> Router {
        let auth = self.auth.clone();
        Router::new()
            .route("/metrics", get(scrape))
            .with_state(self)
            .layer(axum::middleware::from_fn(move |request, next| {
                require_token(auth.clone(), request, next)
            }))
    }
}

async fn scrape(State(endpoint): State<MetricsEndpoint>) -> Response {
    let alive = endpoint.liveness.alive(endpoint.executor_timeout).len();
    endpoint.metrics.inner.executors_alive.set(alive as i64);
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, prometheus::TEXT_FORMAT)],
        endpoint.metrics.render(),
    )
        .into_response()
}

/// Serves `/metrics` on `listener` until an error.
pub async fn serve_metrics(
    listener: tokio::net::TcpListener,
    endpoint: MetricsEndpoint,
) -> std::io::Result<()> {
    axum::serve(listener, endpoint.router()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(text: &str, series: &str) -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no {series} in\n{text}"))
            .parse()
            .unwrap()
    }

    #[test]
    fn statements_counted_by_kind_and_outcome() {
        let m = SchedulerMetrics::new();
        let text = m.render();
        assert_eq!(
            value(
                &text,
                "icemerge_statements_submitted_total{kind=\"delete\"}"
            ),
            0.0
        );
        m.statement_submitted(StatementKind::Merge);
        m.statement_submitted(StatementKind::Merge);
        m.statement_started();
        let text = m.render();
        assert_eq!(value(&text, "icemerge_statements_running"), 1.0);
        assert_eq!(value(&text, "icemerge_statements_queued"), 1.0);
        m.statement_ended(
            StatementKind::Merge,
            &EndFigures {
                ran: true,
                duration: Some(Duration::from_millis(300)),
                commit_attempts: Some(2),
                reexecutions: Some(0),
                ..Default::default()
            },
        );
        m.statement_ended(
            StatementKind::Merge,
            &EndFigures {
                failed: true,
                cancelled: true,
                ..Default::default()
            },
        );
        let text = m.render();
        let merge = |name: &str| value(&text, &format!("{name}{{kind=\"merge\"}}"));
        assert_eq!(merge("icemerge_statements_submitted_total"), 2.0);
        assert_eq!(merge("icemerge_statements_succeeded_total"), 1.0);
        assert_eq!(merge("icemerge_statements_failed_total"), 1.0);
        assert_eq!(merge("icemerge_statements_cancelled_total"), 1.0);
        assert_eq!(merge("icemerge_commit_attempts_total"), 2.0);
        assert_eq!(merge("icemerge_statement_duration_seconds_count"), 1.0);
        assert_eq!(
            value(
                &text,
                "icemerge_statement_duration_seconds_bucket{kind=\"merge\",le=\"0.25\"}"
            ),
            0.0
        );
        assert_eq!(
            value(
                &text,
                "icemerge_statement_duration_seconds_bucket{kind=\"merge\",le=\"0.5\"}"
            ),
            1.0
        );
        assert_eq!(value(&text, "icemerge_statements_running"), 0.0);
        assert_eq!(value(&text, "icemerge_statements_queued"), 0.0);
    }
}
