//! The merge writer's operator metrics, and the counters among them that
//! its commit fragment carries.

use datafusion::physical_plan::metrics::{Count, ExecutionPlanMetricsSet, MetricBuilder};
use icemerge_proto::fragment::Fragment;

/// The counters of one writer partition.
pub(crate) struct WriterMetrics {
    pub updated: Count,
    pub deleted: Count,
    pub inserted: Count,
    pub copied: Count,
    pub files_rewritten: Count,
    pub files_removed: Count,
    pub files_added: Count,
    /// Position delete files written (merge-on-read).
    pub delete_files_added: Count,
    /// Data files opened for a rewrite.
    pub files_read: Count,
    pub bytes_read: Count,
    pub bytes_written: Count,
}

impl WriterMetrics {
    pub fn new(set: &ExecutionPlanMetricsSet, partition: usize) -> Self {
        let c = |name: &'static str| MetricBuilder::new(set).counter(name, partition);
        Self {
            updated: c("rows_updated"),
            deleted: c("rows_deleted"),
            inserted: c("rows_inserted"),
            copied: c("rows_copied"),
            files_rewritten: c("files_rewritten"),
            files_removed: c("files_removed"),
            files_added: c("files_added"),
            delete_files_added: c("delete_files_added"),
            files_read: c("files_read"),
            bytes_read: c("bytes_read"),
            bytes_written: c("bytes_written"),
        }
    }

    /// The counters the commit fragment reports, as `Stat` entries.
    pub fn stats(&self) -> Vec<Fragment> {
        [
            ("rows_updated", &self.updated),
            ("rows_deleted", &self.deleted),
            ("rows_inserted", &self.inserted),
            ("rows_copied", &self.copied),
            ("bytes_read", &self.bytes_read),
            ("bytes_written", &self.bytes_written),
        ]
        .into_iter()
        .map(|(name, count)| Fragment::Stat {
            name: name.to_string(),
            count: count.value() as u64,
        })
        .collect()
    }
}
