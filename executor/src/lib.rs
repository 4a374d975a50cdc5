//! icemerge-executor: the operators that run on executors and their wire
//! codec, Iceberg file access, and the `icemerge-executor` process.
//!
//! - `scan_exec`: `IcebergScanExec`, also MERGE's target scan with row ids;
//! - `write_exec`: `IcebergWriteExec` (INSERT) and the table file writer;
//! - `merge_writer`: `CopyOnWriteWriterExec`, MERGE's writer (stage D);
//! - `codec`: `IcemergePhysicalCodec`, how these operators cross the wire;
//! - `file_io`: warehouse access from shipped FileIO properties;
//! - `cleanup`: removal of uncommitted files;
//! - `process`: the executor process.

pub mod cleanup;
pub mod codec;
pub mod file_io;
pub mod merge_writer;
pub mod process;
pub mod scan_exec;
pub mod write_exec;

use datafusion::error::DataFusionError;

/// Wraps an iceberg error so that its message reaches the user intact.
pub fn iceberg_err(e: iceberg::Error) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}
