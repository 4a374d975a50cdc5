//! icemerge-planner: SQL statements → plans. DDL parsing (CREATE TABLE,
//! ALTER TABLE's properties),
//! MERGE binding and classification (UPDATE and DELETE bound as MERGEs),
//! the source-key probe for dynamic
//! pruning, the tables' row-level write modes, EXPLAIN rendering, and the
//! scheduler's statement commands, statement kinds and prepared statements'
//! parameters.

pub mod alter_table;
pub mod ddl;
pub mod explain;
pub mod merge;
pub mod procedures;
pub mod source_keys;
pub mod statement_commands;
pub mod statement_kind;
pub mod statement_parameters;
pub mod update_delete;
pub mod write_mode;
