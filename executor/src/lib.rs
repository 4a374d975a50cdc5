//! icemerge-executor: the operators that run on executors and their wire
//! codec, Iceberg file access, and the `icemerge-executor` process.
//!
//! - `scan_exec`: `IcebergScanExec`, also MERGE's target scan with row ids;
//! - `counted_rows`: the rows of data files a scan needs no column of,
//!   counted from record counts and position deletes instead of read;
//! - `write_exec`: `IcebergWriteExec` (INSERT) and the table file writer;
//! - `write_order`: the table's write order, applied and recorded by writers;
//! - `parquet_properties`: the Parquet settings of data files from the
//!   table's `write.parquet.*` properties;
//! - `checked_arithmetic`, `checked_constants`: `+`, `-`, `*` that fail on
//!   overflow (a physical rule; an analyzer rule for constants);
//! - `checked_sum`: `sum` of BIGINT that fails on overflow;
//! - `merge_writer`: `CopyOnWriteWriterExec`, MERGE's writer (stage D), and
//!   `SortChangesByFileExec`, its input order;
//! - `batch_slices`: `BatchSlicesExec`, a join's oversized batches (its
//!   unmatched build rows, all in one) cut to the batch size;
//! - `merge_on_read`: `MergeOnReadWriterExec`, MERGE's writer in
//!   merge-on-read mode (position delete files, new data files);
//! - `position_set`: the row positions a MERGE writer gathers per data
//!   file, a bitmap;
//! - `deletes`: position and equality delete files, read and matched where
//!   positions must be kept;
//! - `live_rows`: one data file's live rows with their original positions;
//! - `row_groups`: the row groups of a data file a predicate can match,
//!   judged from the footer's statistics, read as runs of known positions;
//! - `stage_probe`: `StageProbeExec`, the top of a stage, measuring it;
//! - `task_figures`: a Ballista task's shuffle output and times;
//! - `codec`: `IcemergePhysicalCodec`, how these operators cross the wire;
//! - `file_io`: warehouse access from shipped FileIO properties;
//! - `filter_pushdown`: DataFusion filters as Iceberg predicates (pushed
//!   filters, a MERGE's source keys);
//! - `cleanup`: removal of uncommitted files;
//! - `process`: the executor process.

pub mod batch_slices;
pub mod checked_arithmetic;
pub mod checked_constants;
pub mod checked_sum;
pub mod cleanup;
pub mod codec;
pub mod counted_rows;
pub mod deletes;
pub mod file_io;
pub mod filter_pushdown;
pub mod insert_route;
pub mod live_rows;
pub mod merge_on_read;
pub mod merge_writer;
pub mod parquet_properties;
pub mod position_set;
pub mod process;
pub mod row_groups;
pub mod scan_exec;
pub mod shuffle_inputs;
pub mod stage_probe;
pub mod task_figures;
pub mod write_exec;
pub mod write_order;
pub mod writer_route;

use datafusion::error::DataFusionError;
use iceberg::ErrorKind as IcebergKind;
use icemerge_proto::error::IcemergeError;

/// An iceberg error as icemerge's error of the same kind; its message
/// reaches the user intact.
pub fn iceberg_err(e: iceberg::Error) -> DataFusionError {
    let message = e.to_string();
    let error = match e.kind() {
        IcebergKind::TableNotFound | IcebergKind::NamespaceNotFound => {
            IcemergeError::NotFound(message)
        }
        IcebergKind::TableAlreadyExists | IcebergKind::NamespaceAlreadyExists => {
            IcemergeError::AlreadyExists(message)
        }
        IcebergKind::CatalogCommitConflicts => IcemergeError::Conflict(message),
        IcebergKind::FeatureUnsupported => IcemergeError::Unsupported(message),
        IcebergKind::DataInvalid | IcebergKind::PreconditionFailed => {
            IcemergeError::InvalidInput(message)
        }
        _ => IcemergeError::Io(message),
    };
    error.into()
}
