//! A stage's shuffle inputs, each map output read once.
//!
//! When Ballista 53 re-runs a whole map stage after an executor was lost
//! (its inputs lost partitions too), the stage that reads it keeps the
//! locations its first attempt's surviving tasks reported and gets the new
//! attempt's as well: the same map partition listed twice, so its rows
//! would be read twice. A map task's output is a function of its input
//! (icemerge's plans route rows deterministically), so the reader keeps one
//! location per map partition: the last reported.

use std::collections::HashSet;
use std::sync::Arc;

use ballista_core::execution_plans::ShuffleReaderExec;
use ballista_core::serde::scheduler::PartitionLocation;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::error::Result;
use datafusion::physical_plan::ExecutionPlan;

use icemerge_proto::error::internal;

/// `plan` with every shuffle reader reading each map partition once.
pub fn read_each_map_output_once(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        let Some(reader) = node.as_any().downcast_ref::<ShuffleReaderExec>() else {
            return Ok(Transformed::no(node));
        };
        let deduped: Vec<Vec<PartitionLocation>> =
            reader.partition.iter().map(|l| once_each(l)).collect();
        if deduped
            .iter()
            .map(Vec::len)
            .eq(reader.partition.iter().map(Vec::len))
        {
            return Ok(Transformed::no(node));
        }
        if reader.broadcast || reader.coalesce.is_some() {
            return Err(internal(format!(
                "stage {} lists a map output twice in a broadcast or coalesced shuffle read",
                reader.stage_id
            )));
        }
        tracing::warn!(
            stage = reader.stage_id,
            "shuffle input listed a map output twice (a re-run map stage): reading it once"
        );
        let fixed = ShuffleReaderExec::try_new(
            reader.stage_id,
            deduped,
            reader.schema(),
            reader.properties().output_partitioning().clone(),
        )?;
        Ok(Transformed::yes(Arc::new(fixed) as Arc<dyn ExecutionPlan>))
    })
    .map(|t| t.data)
}

/// `locations` with one location per (map stage, map partition, output
/// partition): the last one.
fn once_each(locations: &[PartitionLocation]) -> Vec<PartitionLocation> {
    let mut seen = HashSet::new();
    let mut kept: Vec<PartitionLocation> = locations
        .iter()
        .rev()
        .filter(|l| {
            seen.insert((
                l.partition_id.stage_id,
                l.map_partition_id,
                l.partition_id.partition_id,
            ))
        })
        .cloned()
        .collect();
    kept.reverse();
    kept
}
