//! The catalog side of the coordinator: opening the Iceberg SQL catalog and
//! its warehouse (`open`) in either layout of Iceberg's JDBC catalog
//! (`sql_catalog`), the files of a dropped table (`purge`), the catalog as DataFusion's catalog of schemas and
//! tables (`provider`), an Iceberg table as a DataFusion table pinned to one
//! snapshot (`table`; `delete_scope` narrows each data file's position
//! delete files to those that name it; `snapshot_schema` when the snapshot was written with
//! an earlier schema than the one it is read with), a snapshot's manifests read a few at a time
//! (`manifests`) (pushed filters become Iceberg predicates in
//! `icemerge_executor::filter_pushdown`), the system tables (`system_tables`: `$snapshots`,
//! `$files`; `history_tables`: `$history`, `$refs`, `$manifests`) and files
//! outside the catalog as table sources (`table_functions`: `read_parquet`,
//! `read_csv`).

mod delete_scope;
pub mod history_tables;
pub mod manifests;
pub mod open;
pub mod provider;
pub mod purge;
mod snapshot_schema;
pub mod sql_catalog;
pub mod system_tables;
pub mod table;
pub mod table_functions;

pub(crate) use delete_scope::narrow_position_deletes;
pub(crate) use open::redact;
pub use open::{open_catalog, CatalogOptions, OpenCatalog, S3Options, DEFAULT_CATALOG_NAME};
pub use provider::IcebergCatalogProvider;
pub use sql_catalog::{CatalogLayout, SqlCatalog};
pub use table::IcebergTableProvider;
