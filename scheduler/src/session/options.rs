//! How a session is opened and the DataFusion settings every engine runs
//! with.

use ballista_core::extension::SessionConfigExt;
use datafusion::common::extensions_options;
use datafusion::config::ConfigExtension;
use datafusion::prelude::SessionConfig;
use icemerge_proto::memory_budget::MemoryBudget;

use crate::catalog::{CatalogOptions, DEFAULT_CATALOG_NAME};
use crate::engine::EngineKind;
use crate::session::names::DEFAULT_NAMESPACE;

/// How to open a session.
#[derive(Debug, Clone, Default)]
pub struct SessionOptions {
    pub catalog: CatalogOptions,
    pub engine: EngineKind,
    /// Executors of the in-process cluster (default: available cores).
    pub executors: Option<usize>,
    /// Partitions per stage (default: available cores, at least 2 per executor).
    pub target_partitions: Option<usize>,
    /// Memory of this process for running statements (default: half the
    /// machine's RAM); the in-process cluster's executors share it.
    pub memory_limit: Option<MemoryBudget>,
}

/// The machine's available cores (2 when unknown).
pub fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
}

extensions_options! {
    /// icemerge's own session settings (`SET icemerge.<name> = <value>`).
    pub struct IcemergeOptions {
        /// How many times a MERGE that conflicts with a concurrent commit is
        /// run again on the new snapshot (only when its source is
        /// deterministic); 0 fails on the first conflict.
        pub max_statement_retries: usize, default = 3
        /// Test hook, not for production: a directory. After a MERGE's job
        /// and before its commit, the coordinator creates `paused` in it and
        /// waits until `go` exists (at most 120 s); with `go` already there
        /// it does not wait. Lets a test commit a concurrent snapshot at a
        /// known point.
        pub test_pause_before_commit: Option<String>, default = None
    }
}

impl ConfigExtension for IcemergeOptions {
    const PREFIX: &'static str = "icemerge";
}

/// Rows per batch when each partition's share of the memory budget is at
/// least [`LARGE_BATCH_SHARE`] (DataFusion's default, 8192, otherwise).
/// A merge moves every row of its source and of the files it rewrites
/// through a dozen operators, each with a cost per batch: at 10M rows,
/// four times DataFusion's batch took 14-23 % off the local engine's
/// full-table upsert and no-op upsert at the same peak RSS; but a sort of
/// such batches asks for ~20 MB at once, more than a small budget has
/// (docs/BENCHMARKS.md, "Larger batches").
pub const LARGE_BATCH_ROWS: usize = 32768;

/// The share of the memory budget per partition from which a session runs
/// with [`LARGE_BATCH_ROWS`].
pub const LARGE_BATCH_SHARE: u64 = 256 << 20;

/// `config` with the batch size `budget` affords over `partitions`
/// partitions ([`LARGE_BATCH_ROWS`] or DataFusion's default). For the
/// engines whose tasks run in this process's budget; a scheduler process
/// does not know its executors' budgets and keeps the default.
pub fn with_batch_size_for(
    config: SessionConfig,
    budget: &MemoryBudget,
    partitions: usize,
) -> SessionConfig {
    if budget.bytes() / partitions.max(1) as u64 >= LARGE_BATCH_SHARE {
        config.with_batch_size(LARGE_BATCH_ROWS)
    } else {
        config
    }
}

/// The DataFusion settings icemerge runs with, on every engine.
pub fn session_config(target_partitions: usize) -> SessionConfig {
    // Broadcast promotion of joins is off: it is unsafe for outer joins,
    // which MERGE relies on.
    let mut config = SessionConfig::new_with_ballista()
        .with_ballista_broadcast_join_threshold_bytes(0)
        .with_target_partitions(target_partitions)
        .with_information_schema(true)
        .with_default_catalog_and_schema(DEFAULT_CATALOG_NAME, DEFAULT_NAMESPACE)
        .with_create_default_catalog_and_schema(false)
        .with_option_extension(IcemergeOptions::default());
    let options = config.options_mut();
    options.optimizer.prefer_hash_join = true;
    options.sql_parser.map_string_types_to_utf8view = false;
    options.execution.parquet.schema_force_view_types = false;
    options.sql_parser.enable_ident_normalization = true;
    config
}

/// The settings of the local engine: as [`session_config`], and in one
/// process a hash join may build one table for all partitions (DataFusion's
/// defaults), outer joins included; Ballista cannot, so the cluster keeps
/// every join partitioned.
pub fn local_session_config(target_partitions: usize) -> SessionConfig {
    let mut config = session_config(target_partitions);
    let defaults = datafusion::config::OptimizerOptions::default();
    let optimizer = &mut config.options_mut().optimizer;
    optimizer.hash_join_single_partition_threshold = defaults.hash_join_single_partition_threshold;
    optimizer.hash_join_single_partition_threshold_rows =
        defaults.hash_join_single_partition_threshold_rows;
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch_size(budget: &str, partitions: usize) -> usize {
        let budget: MemoryBudget = budget.parse().unwrap();
        with_batch_size_for(session_config(partitions), &budget, partitions).batch_size()
    }

    #[test]
    fn large_batches_where_each_partition_has_the_memory_for_them() {
        let default = SessionConfig::new().batch_size();
        assert_eq!(batch_size("12GiB", 2), LARGE_BATCH_ROWS);
        assert_eq!(batch_size("512MiB", 2), LARGE_BATCH_ROWS);
        assert_eq!(batch_size("512MiB", 4), default);
        assert_eq!(batch_size("48MiB", 2), default);
        assert_ne!(default, LARGE_BATCH_ROWS);
    }
}
