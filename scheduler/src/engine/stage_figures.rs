//! Per-stage figures of a run, read from the stage probes
//! (`icemerge_executor::stage_probe`): on the local engine from the executed
//! plan (one sample per partition), on a cluster from the task ledger (one
//! sample per task, with the task's shuffle output and times from
//! `icemerge_executor::task_figures`). Both end in the same
//! [`StageFigures`], so one stage graph carries the figures on both engines.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use datafusion::physical_plan::metrics::{MetricValue, MetricsSet};
use datafusion::physical_plan::ExecutionPlan;
use icemerge_executor::stage_probe::{self, StageProbeExec};
use icemerge_executor::task_figures;
use icemerge_planner::explain::{Stage, StageFigures};

use super::TaskRecord;

/// Nanoseconds since the Unix epoch, now.
pub fn now_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// One task's (or local partition's) part of a stage.
#[derive(Debug, Default, Clone)]
struct TaskSample {
    executor: String,
    rows_out: u64,
    cpu_nanos: u64,
    start: Option<i64>,
    end: Option<i64>,
    shuffle_bytes: Option<u64>,
}

/// The counters a probe sums over its stage's operators.
#[derive(Debug, Default, Clone)]
struct OperatorTotals {
    source_rows: u64,
    source_rows_unknown: bool,
    bytes_read: u64,
    files_read: u64,
    bytes_written: u64,
    files_written: u64,
    spill_count: u64,
    spilled_bytes: u64,
    spilled_rows: u64,
}

impl OperatorTotals {
    fn add(&mut self, set: &MetricsSet) {
        let get = |name: &str| set.sum_by_name(name).map(|v| v.as_usize() as u64);
        self.source_rows += get(stage_probe::SOURCE_ROWS).unwrap_or(0);
        self.source_rows_unknown |= get(stage_probe::SOURCE_ROWS_UNKNOWN).unwrap_or(0) > 0;
        self.bytes_read += get(stage_probe::BYTES_READ).unwrap_or(0);
        self.files_read += get(stage_probe::FILES_READ).unwrap_or(0);
        self.bytes_written += get(stage_probe::BYTES_WRITTEN).unwrap_or(0);
        self.files_written += get(stage_probe::FILES_WRITTEN).unwrap_or(0);
        self.spill_count += get(stage_probe::SPILL_COUNT).unwrap_or(0);
        self.spilled_bytes += get(stage_probe::SPILLED_BYTES).unwrap_or(0);
        self.spilled_rows += get(stage_probe::SPILLED_ROWS).unwrap_or(0);
    }
}

/// Samples and totals gathered per stage id.
#[derive(Debug, Default)]
pub struct FigureCollector {
    stages: BTreeMap<usize, (Vec<TaskSample>, OperatorTotals)>,
}

impl FigureCollector {
    /// Reads every probe of an executed plan (local engine).
    pub fn from_plan(plan: &Arc<dyn ExecutionPlan>) -> Self {
        let mut collector = Self::default();
        let mut stack = vec![plan.clone()];
        while let Some(node) = stack.pop() {
            if let Some(probe) = node.as_any().downcast_ref::<StageProbeExec>() {
                if let Some(set) = probe.metrics() {
                    collector.add_local_probe(probe.stage, &set);
                }
            }
            stack.extend(node.children().into_iter().cloned());
        }
        collector
    }

    fn add_local_probe(&mut self, stage: usize, set: &MetricsSet) {
        let mut by_partition: BTreeMap<usize, TaskSample> = BTreeMap::new();
        for metric in set.iter() {
            let Some(partition) = metric.partition() else {
                continue;
            };
            let sample = by_partition.entry(partition).or_insert_with(|| TaskSample {
                executor: "local".into(),
                ..Default::default()
            });
            read_probe_metric(sample, metric.value());
        }
        let (samples, totals) = self.stages.entry(stage).or_default();
        samples.extend(by_partition.into_values().filter(|s| s.start.is_some()));
        totals.add(set);
    }

    /// Reads the probes of every finished task of a Ballista job.
    pub fn from_tasks(tasks: &[TaskRecord]) -> Self {
        let mut collector = Self::default();
        for task in tasks {
            collector.add_task(task);
        }
        collector
    }

    fn add_task(&mut self, task: &TaskRecord) {
        let own = task
            .metrics
            .iter()
            .find(|set| set.sum_by_name(task_figures::TASK).is_some());
        let mut top = true;
        for set in &task.metrics {
            let Some(stage) = set.sum_by_name(stage_probe::STAGE) else {
                continue;
            };
            let mut sample = TaskSample {
                executor: task.executor_id.clone(),
                ..Default::default()
            };
            for metric in set.iter() {
                read_probe_metric(&mut sample, metric.value());
            }
            if let (true, Some(own)) = (top, own) {
                // The Ballista stage's top: the task's own times and the
                // shuffle files it wrote are this stage's.
                let mut task_times = TaskSample::default();
                for metric in own.iter() {
                    read_probe_metric(&mut task_times, metric.value());
                }
                sample.start = task_times.start.or(sample.start);
                sample.end = task_times.end.or(sample.end);
                sample.shuffle_bytes = own
                    .sum_by_name(task_figures::SHUFFLE_BYTES)
                    .map(|v| v.as_usize() as u64);
            }
            top = false;
            let (samples, totals) = self.stages.entry(stage.as_usize()).or_default();
            samples.push(sample);
            totals.add(set);
        }
    }

    /// The figures of every stage of `stages` that ran (None for the
    /// others), `run_start` being when the run began (ns since the epoch).
    pub fn figures(&self, stages: &[Stage], run_start: i64) -> Vec<Option<StageFigures>> {
        let mut out: Vec<Option<StageFigures>> = vec![None; stages.len()];
        for stage in stages {
            let Some((samples, totals)) = self.stages.get(&stage.id) else {
                continue;
            };
            let mut figures = stage_figures(samples, totals, run_start);
            if stage.pipelined {
                figures.bytes_shuffled = None;
            }
            out[stage.id - 1] = Some(figures);
        }
        // Rows in: the stage's own sources plus what its inputs sent.
        for stage in stages {
            let Some(totals) = self.stages.get(&stage.id).map(|(_, t)| t) else {
                continue;
            };
            let from_inputs: Option<u64> = stage
                .inputs
                .iter()
                .map(|i| out.get(i - 1).and_then(|f| f.as_ref()).map(|f| f.rows_out))
                .sum();
            let own = (!totals.source_rows_unknown).then_some(totals.source_rows);
            if let Some(f) = out[stage.id - 1].as_mut() {
                f.rows_in = own.zip(from_inputs).map(|(a, b)| a + b);
            }
        }
        out
    }
}

/// What one finished task of a Ballista job read and wrote (data files,
/// summed over the stages it ran), the shuffle bytes it wrote and how long
/// it ran: the same probe figures a stage's are summed from.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct TaskTotals {
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub bytes_shuffled: u64,
    /// From the task's start to its end; None when it did not report them.
    pub wall_nanos: Option<i64>,
}

/// The [`TaskTotals`] of one task of the ledger.
pub fn task_totals(task: &TaskRecord) -> TaskTotals {
    let mut totals = OperatorTotals::default();
    for set in &task.metrics {
        if set.sum_by_name(stage_probe::STAGE).is_some() {
            totals.add(set);
        }
    }
    let own = task
        .metrics
        .iter()
        .find(|set| set.sum_by_name(task_figures::TASK).is_some());
    let mut times = TaskSample::default();
    for metric in own.iter().flat_map(|set| set.iter()) {
        read_probe_metric(&mut times, metric.value());
    }
    TaskTotals {
        bytes_read: totals.bytes_read,
        bytes_written: totals.bytes_written,
        bytes_shuffled: own
            .and_then(|set| set.sum_by_name(task_figures::SHUFFLE_BYTES))
            .map_or(0, |v| v.as_usize() as u64),
        wall_nanos: times.start.zip(times.end).map(|(s, e)| (e - s).max(0)),
    }
}

/// Folds one probe metric into a sample.
fn read_probe_metric(sample: &mut TaskSample, value: &MetricValue) {
    match value {
        MetricValue::OutputRows(count) => sample.rows_out += count.value() as u64,
        MetricValue::Time { name, time } if name == stage_probe::CPU_TIME => {
            sample.cpu_nanos += time.value() as u64
        }
        MetricValue::StartTimestamp(t) => {
            if let Some(ns) = t.value().and_then(|t| t.timestamp_nanos_opt()) {
                sample.start = Some(sample.start.map_or(ns, |s| s.min(ns)));
            }
        }
        MetricValue::EndTimestamp(t) => {
            if let Some(ns) = t.value().and_then(|t| t.timestamp_nanos_opt()) {
                sample.end = Some(sample.end.map_or(ns, |e| e.max(ns)));
            }
        }
        _ => {}
    }
}

fn millis(nanos: i64) -> f64 {
    nanos.max(0) as f64 / 1e6
}

/// One stage's figures from its task samples and operator totals.
fn stage_figures(samples: &[TaskSample], totals: &OperatorTotals, run_start: i64) -> StageFigures {
    let executors: BTreeSet<String> = samples.iter().map(|s| s.executor.clone()).collect();
    let start = samples.iter().filter_map(|s| s.start).min();
    let end = samples.iter().filter_map(|s| s.end).max();
    let mut task_walls: Vec<f64> = samples
        .iter()
        .filter_map(|s| Some(millis(s.end? - s.start?)))
        .collect();
    task_walls.sort_by(f64::total_cmp);
    let median = task_walls
        .get(task_walls.len().saturating_sub(1) / 2)
        .copied()
        .unwrap_or(0.0);
    let slowest = task_walls.last().copied().unwrap_or(0.0);
    let shuffled: Vec<u64> = samples.iter().filter_map(|s| s.shuffle_bytes).collect();
    StageFigures {
        tasks: samples.len(),
        executors: executors.into_iter().collect(),
        rows_in: None,
        rows_out: samples.iter().map(|s| s.rows_out).sum(),
        bytes_read: totals.bytes_read,
        files_read: totals.files_read,
        bytes_shuffled: (!shuffled.is_empty()).then(|| shuffled.iter().sum()),
        bytes_written: totals.bytes_written,
        files_written: totals.files_written,
        start_ms: start.map_or(0.0, |s| millis(s - run_start)),
        wall_ms: match (start, end) {
            (Some(s), Some(e)) => millis(e - s),
            _ => 0.0,
        },
        cpu_ms: samples.iter().map(|s| s.cpu_nanos).sum::<u64>() as f64 / 1e6,
        spill_count: totals.spill_count,
        spilled_bytes: totals.spilled_bytes,
        spilled_rows: totals.spilled_rows,
        slowest_task_ms: slowest,
        median_task_ms: median,
        skew: (task_walls.len() >= 2 && median > 0.0).then(|| slowest / median),
    }
}
