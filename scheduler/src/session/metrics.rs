//! Operator counters of the last plan a session ran, summed over operators
//! and tasks (`files_scanned`, `rows_written`, ...).

use std::collections::BTreeMap;

use datafusion::physical_plan::metrics::{MetricValue, MetricsSet};
use datafusion::physical_plan::ExecutionPlan;

/// Named counters summed over operators and tasks.
#[derive(Debug, Clone, Default)]
pub struct OperatorMetrics(pub BTreeMap<String, usize>);

impl OperatorMetrics {
    /// The total of counter `name` (0 when absent).
    pub fn get(&self, name: &str) -> usize {
        self.0.get(name).copied().unwrap_or(0)
    }

    /// Adds the counters of one operator's metrics.
    pub fn add(&mut self, set: &MetricsSet) {
        for metric in set.iter() {
            if let MetricValue::Count { name, count } = metric.value() {
                *self.0.entry(name.to_string()).or_default() += count.value();
            }
        }
    }

    /// Sums the counters of every operator of an executed plan.
    pub fn from_plan(plan: &dyn ExecutionPlan) -> Self {
        let mut totals = Self::default();
        let mut stack = vec![plan];
        while let Some(node) = stack.pop() {
            if let Some(set) = node.metrics() {
                totals.add(&set);
            }
            stack.extend(node.children().into_iter().map(|c| c.as_ref()));
        }
        totals
    }
}
