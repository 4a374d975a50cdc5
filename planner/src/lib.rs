//! icemerge-planner: SQL statements → plans. DDL parsing,
//! MERGE binding and classification, the source-key probe for dynamic
//! pruning, the tables' row-level write modes, and EXPLAIN rendering.

pub mod ddl;
pub mod explain;
pub mod merge;
pub mod source_keys;
pub mod write_mode;
