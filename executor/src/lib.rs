//! icemerge-executor: the operators that run on executors (Iceberg scan,
//! Iceberg writer), their wire codec, and Iceberg file access.

pub mod cleanup;
pub mod codec;
pub mod file_io;
pub mod merge_writer_exec;
pub mod process;
pub mod scan_exec;
pub mod write_exec;

use datafusion::error::DataFusionError;

/// Wraps an iceberg error so that its message reaches the user intact.
pub fn iceberg_err(e: iceberg::Error) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}
