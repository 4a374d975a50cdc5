//! Wire contracts of icemerge: the messages that carry our physical plan
//! nodes between the coordinator and executors (`plan_nodes`), the merge rows
//! that stage C of a MERGE hands to its writer (`merge_rows`), and the commit
//! fragments that writer tasks hand to the commit (`fragment`), the progress
//! report of the scheduler's `icemerge.progress` action (`progress`), the
//! message size every service agrees on (`limits`), the memory budget every
//! process runs statements in (`memory_budget`) and the pool that enforces
//! it (`spill_pool`), and the kinds of failure a statement ends with, which
//! clients decide on (`error`).

pub mod error;
pub mod fragment;
pub mod limits;
pub mod memory_budget;
pub mod merge_rows;
pub mod plan_nodes;
pub mod progress;
pub mod spill_pool;

pub use plan_nodes::*;
