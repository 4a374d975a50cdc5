//! `StageProbeExec`: the top of one stage of a statement's stage graph. It
//! passes its input through unchanged and measures, per partition (task):
//! the rows leaving the stage, the thread CPU time spent in the stage's own
//! operators, and when the task's first and last batch were asked for. Its
//! metrics also carry, summed over the stage's operators (its subtree down
//! to the next probe or exchange), the counters EXPLAIN ANALYZE reports:
//! bytes and files read from storage and written, rows entering from the
//! stage's sources, spill.
//!
//! The figures travel with the probe's metrics set, so they reach the
//! coordinator the same way from the local engine (read from the executed
//! plan) and from Ballista executors (inside each task's status); the set
//! names its stage with the [`STAGE`] counter.
//!
//! CPU time is exclusive: a probe polled inside another probe's poll (a
//! stage pipelined into its consumer's task) subtracts its time from the
//! outer one, through a per-thread account of nested probe time.

use std::any::Any;
use std::cell::Cell;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use arrow::record_batch::RecordBatch;
use ballista_core::execution_plans::ShuffleReaderExec;
use datafusion::error::Result;
use datafusion::execution::{RecordBatchStream, SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::metrics::{
    Count, ExecutionPlanMetricsSet, Metric, MetricBuilder, MetricValue, MetricsSet, Time, Timestamp,
};
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use futures::{Stream, StreamExt};
use icemerge_proto::error::internal;

/// Counter naming the probe's stage (its value is the stage id per task).
pub const STAGE: &str = "icemerge_stage";
/// Thread CPU time of the stage's operators, nested probes excluded.
pub const CPU_TIME: &str = "stage_cpu_time";
/// Rows produced by the stage's source operators (scans, VALUES, ...).
pub const SOURCE_ROWS: &str = "stage_source_rows";
/// 1 when a source operator of the stage does not count its rows.
pub const SOURCE_ROWS_UNKNOWN: &str = "stage_source_rows_unknown";
/// Bytes read from storage (data files scanned or re-read for a rewrite).
pub const BYTES_READ: &str = "stage_bytes_read";
/// Data files read.
pub const FILES_READ: &str = "stage_files_read";
/// Bytes of data files written.
pub const BYTES_WRITTEN: &str = "stage_bytes_written";
/// Data files written.
pub const FILES_WRITTEN: &str = "stage_files_written";
/// Spills, spilled bytes and rows of the stage's operators.
pub const SPILL_COUNT: &str = "stage_spill_count";
pub const SPILLED_BYTES: &str = "stage_spilled_bytes";
pub const SPILLED_ROWS: &str = "stage_spilled_rows";

/// Pass-through operator at the top of a stage.
#[derive(Debug)]
pub struct StageProbeExec {
    /// The stage's id in the statement's stage graph.
    pub stage: usize,
    pub input: Arc<dyn ExecutionPlan>,
    metrics: ExecutionPlanMetricsSet,
}

impl StageProbeExec {
    pub fn new(stage: usize, input: Arc<dyn ExecutionPlan>) -> Self {
        Self {
            stage,
            input,
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }

    /// The counters of the stage's operators: this probe's subtree down to
    /// the next probe (another stage) or a shuffle reader (an exchange).
    fn operator_totals(&self) -> Vec<(&'static str, usize)> {
        let mut totals = OperatorTotals::default();
        let mut stack = vec![self.input.clone()];
        while let Some(node) = stack.pop() {
            if node.as_any().is::<StageProbeExec>() || node.as_any().is::<ShuffleReaderExec>() {
                continue;
            }
            let metrics = node.metrics();
            if let Some(set) = &metrics {
                totals.add(set);
            }
            if node.children().is_empty() {
                // `output_rows` is None when the operator does not count them.
                match metrics.as_ref().and_then(|m| m.output_rows()) {
                    Some(rows) => totals.source_rows += rows,
                    None => totals.source_rows_unknown = 1,
                }
            }
            stack.extend(node.children().into_iter().cloned());
        }
        totals.named()
    }
}

/// Counters summed over a stage's operators.
#[derive(Default)]
struct OperatorTotals {
    source_rows: usize,
    source_rows_unknown: usize,
    bytes_read: usize,
    files_read: usize,
    bytes_written: usize,
    files_written: usize,
    spill_count: usize,
    spilled_bytes: usize,
    spilled_rows: usize,
}

impl OperatorTotals {
    fn add(&mut self, set: &MetricsSet) {
        for metric in set.iter() {
            match metric.value() {
                MetricValue::Count { name, count } => {
                    let value = count.value();
                    match name.as_ref() {
                        // IcebergScanExec and DataFusion's Parquet scan; the
                        // MERGE writer re-reading files it rewrites.
                        "bytes_scanned" | "bytes_read" => self.bytes_read += value,
                        "files_scanned" | "files_read" => self.files_read += value,
                        "bytes_written" => self.bytes_written += value,
                        // IcebergWriteExec; the MERGE writer.
                        "files_written" | "files_added" => self.files_written += value,
                        _ => {}
                    }
                }
                MetricValue::SpillCount(c) => self.spill_count += c.value(),
                MetricValue::SpilledBytes(c) => self.spilled_bytes += c.value(),
                MetricValue::SpilledRows(c) => self.spilled_rows += c.value(),
                _ => {}
            }
        }
    }

    fn named(&self) -> Vec<(&'static str, usize)> {
        vec![
            (SOURCE_ROWS, self.source_rows),
            (SOURCE_ROWS_UNKNOWN, self.source_rows_unknown),
            (BYTES_READ, self.bytes_read),
            (FILES_READ, self.files_read),
            (BYTES_WRITTEN, self.bytes_written),
            (FILES_WRITTEN, self.files_written),
            (SPILL_COUNT, self.spill_count),
            (SPILLED_BYTES, self.spilled_bytes),
            (SPILLED_ROWS, self.spilled_rows),
        ]
    }
}

impl DisplayAs for StageProbeExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "StageProbeExec: stage={}", self.stage)
    }
}

impl ExecutionPlan for StageProbeExec {
    fn name(&self) -> &str {
        "StageProbeExec"
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let input = children
            .pop()
            .ok_or_else(|| internal("StageProbeExec needs one child"))?;
        Ok(Arc::new(Self::new(self.stage, input)))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let input = self.input.execute(partition, context)?;
        let stage = MetricBuilder::new(&self.metrics).counter(STAGE, partition);
        stage.add(self.stage);
        Ok(Box::pin(ProbeStream {
            input,
            rows: MetricBuilder::new(&self.metrics).output_rows(partition),
            cpu: MetricBuilder::new(&self.metrics).subset_time(CPU_TIME, partition),
            first: MetricBuilder::new(&self.metrics).start_timestamp(partition),
            last: MetricBuilder::new(&self.metrics).end_timestamp(partition),
            started: false,
        }))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        let mut set = self.metrics.clone_inner();
        for (name, value) in self.operator_totals() {
            let count = Count::new();
            count.add(value);
            set.push(Arc::new(Metric::new(
                MetricValue::Count {
                    name: name.into(),
                    count,
                },
                None,
            )));
        }
        Some(set)
    }
}

thread_local! {
    /// CPU time of probe polls nested in the poll running on this thread.
    static NESTED_CPU_NANOS: Cell<u64> = const { Cell::new(0) };
}

/// CPU time consumed by the calling thread, in nanoseconds.
fn thread_cpu_nanos() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec; CLOCK_THREAD_CPUTIME_ID
    // is supported on every platform icemerge builds for (Linux, macOS).
    let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    if status != 0 {
        return 0;
    }
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// Runs `poll`, returning its result and the thread CPU time it spent
/// outside the measured polls nested in it (which it reports to an
/// enclosing measured poll as its own).
fn measured_poll<T>(poll: impl FnOnce() -> T) -> (T, u64) {
    let outer = NESTED_CPU_NANOS.with(|n| n.replace(0));
    let before = thread_cpu_nanos();
    let result = poll();
    let inclusive = thread_cpu_nanos().saturating_sub(before);
    let nested = NESTED_CPU_NANOS.with(|n| n.replace(outer + inclusive));
    (result, inclusive.saturating_sub(nested))
}

/// Runs `future` and returns its output with the thread CPU time its polls
/// took (stage probes polled inside it excluded).
pub async fn measure_thread_cpu<F: Future>(future: F) -> (F::Output, Duration) {
    let mut future = std::pin::pin!(future);
    let mut spent = 0;
    let output = futures::future::poll_fn(|cx| {
        let (polled, own) = measured_poll(|| future.as_mut().poll(cx));
        spent += own;
        polled
    })
    .await;
    (output, Duration::from_nanos(spent))
}

struct ProbeStream {
    input: SendableRecordBatchStream,
    rows: Count,
    cpu: Time,
    first: Timestamp,
    last: Timestamp,
    started: bool,
}

impl Stream for ProbeStream {
    type Item = Result<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if !self.started {
            self.started = true;
            self.first.record();
        }
        let (polled, own) = measured_poll(|| self.input.poll_next_unpin(cx));
        self.cpu.add_duration(Duration::from_nanos(own));
        match &polled {
            Poll::Ready(Some(Ok(batch))) => {
                self.rows.add(batch.num_rows());
                self.last.record();
            }
            Poll::Ready(_) => self.last.record(),
            Poll::Pending => {}
        }
        polled
    }
}

impl RecordBatchStream for ProbeStream {
    fn schema(&self) -> arrow::datatypes::SchemaRef {
        self.input.schema()
    }
}
