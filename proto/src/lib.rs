//! Wire contracts of icemerge: the messages that carry our physical plan
//! nodes between the coordinator and executors (`plan_nodes`).

pub mod plan_nodes;

pub use plan_nodes::*;
