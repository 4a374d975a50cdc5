//! icemerge-planner: SQL statements → plans. DDL parsing, system tables,
//! and (later) the MERGE planner and EXPLAIN rendering.

pub mod ddl;
pub mod explain;
pub mod merge;
pub mod system_tables;
