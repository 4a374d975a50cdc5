//! How a session is opened and the DataFusion settings every engine runs
//! with.

use ballista_core::extension::SessionConfigExt;
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

/// The DataFusion settings icemerge runs with, on every engine.
pub fn session_config(target_partitions: usize) -> SessionConfig {
    // Broadcast promotion of joins is off: it is unsafe for outer joins,
    // which MERGE relies on.
    let mut config = SessionConfig::new_with_ballista()
        .with_ballista_broadcast_join_threshold_bytes(0)
        .with_target_partitions(target_partitions)
        .with_information_schema(true)
        .with_default_catalog_and_schema(DEFAULT_CATALOG_NAME, DEFAULT_NAMESPACE)
        .with_create_default_catalog_and_schema(false);
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
