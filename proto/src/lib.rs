//! Wire contracts of icemerge: the messages that carry our physical plan
//! nodes between the coordinator and executors (`plan_nodes`), the merge rows
//! that stage C of a MERGE hands to its writer (`merge_rows`), and the commit
//! fragments that writer tasks hand to the commit (`fragment`).

pub mod fragment;
pub mod merge_rows;
pub mod plan_nodes;

pub use plan_nodes::*;
