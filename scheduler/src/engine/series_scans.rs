//! `generate_series` / `range` scans on a cluster. DataFusion's plan codec
//! sends a series scan with the schema it outputs but not its projection,
//! so a scan that projects no column (`SELECT count(*) FROM
//! generate_series(1, 10)`, `INSERT ... SELECT 1, 2 FROM generate_series(..)`)
//! would decode on the executors as a one-column generator under an empty
//! schema and fail. Before a plan is shipped, such a scan is replaced by the
//! series' whole column under a projection of no column.

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::error::Result;
use datafusion::physical_plan::memory::LazyMemoryExec;
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};
use datafusion::physical_plan::ExecutionPlan;

/// `plan` with every one-generator lazy memory scan of no column replaced
/// by the generator's whole output under an empty projection.
pub fn with_series_scans_unprojected(
    plan: Arc<dyn ExecutionPlan>,
) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        let Some(scan) = node.as_any().downcast_ref::<LazyMemoryExec>() else {
            return Ok(Transformed::no(node));
        };
        let [generator] = scan.generators().as_slice() else {
            return Ok(Transformed::no(node));
        };
        if !scan.schema().fields().is_empty() {
            return Ok(Transformed::no(node));
        }
        // The generator's own schema is private: a fresh copy of it makes
        // one batch, whose schema it is. An empty series makes none, and
        // then there is nothing to decode wrongly.
        let fresh = generator.read().reset_state();
        let Some(first) = fresh.write().generate_next_batch()? else {
            return Ok(Transformed::no(node));
        };
        let whole = LazyMemoryExec::try_new(first.schema(), vec![Arc::clone(generator)])?;
        let unprojected = ProjectionExec::try_new(Vec::<ProjectionExpr>::new(), Arc::new(whole))?;
        Ok(Transformed::yes(
            Arc::new(unprojected) as Arc<dyn ExecutionPlan>
        ))
    })
    .map(|t| t.data)
}
