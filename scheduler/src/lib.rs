//! icemerge-scheduler: the coordinator. Catalog access, the DataFusion view
//! of the catalog, statement dispatch (`Session`), the engines (local and
//! Ballista), the in-process cluster, the commit protocol, and the
//! `icemerge-scheduler` process (Ballista scheduler service + Flight SQL).

pub mod catalog;
pub mod catalog_provider;
pub mod cluster;
pub mod commit;
pub mod dynamic_pruning;
pub mod engine;
pub mod filter_pushdown;
pub mod flight_sql;
pub mod merge;
pub mod scheduler_process;
pub mod session;
pub mod shipped_plan;
pub mod table_functions;
pub mod table_provider;
pub mod task_tracker;

pub use catalog::{CatalogOptions, S3Options, DEFAULT_CATALOG_NAME};
pub use engine::{EngineKind, SchedulerTarget};
pub use session::{Session, SessionOptions, StatementOutput};
