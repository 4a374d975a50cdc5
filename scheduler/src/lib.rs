//! icemerge-scheduler: the coordinator. Each folder is one concern:
//!
//! - `session`: statements — dispatch, DDL, INSERT, MERGE, output;
//! - `catalog`: the Iceberg catalog and warehouse, as DataFusion sees them;
//! - `merge`: planning a MERGE's stage graph (pruning, checks) and reading
//!   its outcome;
//! - `commit`: ONE snapshot per write and the catalog compare-and-swap;
//! - `engine`: where plans run — local DataFusion, the in-process Ballista
//!   cluster, a running scheduler — and job control;
//! - `maintenance`: table maintenance procedures (`CALL system.*`);
//! - `server`: the `icemerge-scheduler` process (Ballista scheduler service,
//!   Flight SQL, progress).

pub mod catalog;
pub mod commit;
pub mod engine;
pub mod maintenance;
pub mod merge;
pub mod server;
pub mod session;

pub use catalog::{CatalogOptions, S3Options, DEFAULT_CATALOG_NAME};
pub use engine::{EngineKind, SchedulerTarget};
pub use session::{Session, SessionOptions, StatementOutput};
