//! Plan-time checks of a MERGE, before anything runs: every assigned value
//! castable to its column, ON holding an equality between target and source
//! (the hash keys), and DataFusion's binding errors said in MERGE's terms.

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{BinaryExpr, Expr, LogicalPlan, Operator};
use icemerge_planner::merge::{assignment_probe, BoundMerge, RowLevelKind};
use icemerge_proto::error::invalid_input;

/// Every value a clause assigns must be castable to its column's type;
/// otherwise a plan-time error names the clause, the column and both types.
pub(super) async fn check_assignment_types(
    ctx: &datafusion::prelude::SessionContext,
    bound: &BoundMerge,
    relation: &str,
    columns: &[String],
    target: &arrow::datatypes::Schema,
) -> Result<()> {
    let Some(probe) = assignment_probe(bound, relation, columns)? else {
        return Ok(());
    };
    let plan = ctx
        .state()
        .create_logical_plan(&probe.sql)
        .await
        .map_err(|e| explain_bind_error(e, bound))?;
    for ((clause, column), field) in probe.assignments.iter().zip(plan.schema().fields()) {
        let (from, to) = (
            field.data_type(),
            target.field_with_name(column)?.data_type(),
        );
        if from != &arrow::datatypes::DataType::Null && !arrow::compute::can_cast_types(from, to) {
            return Err(invalid_input(format!(
                "{clause}: cannot assign a value of type {from} to column '{column}' of type {to}"
            )));
        }
    }
    Ok(())
}

/// DataFusion's binding errors, said in the statement's terms.
pub(super) fn explain_bind_error(e: DataFusionError, bound: &BoundMerge) -> DataFusionError {
    let message = e.to_string();
    // UPDATE's and DELETE's WHERE and SET are all the user wrote: any
    // binding error is theirs.
    if message.contains("__icemerge_target_") || bound.kind != RowLevelKind::Merge {
        let cleaned = message.replace("__icemerge_target_", "target ");
        return invalid_input(format!(
            "{} {}: {cleaned}",
            bound.kind.statement(),
            bound.target.join(".")
        ));
    }
    e
}

/// ON must hold at least one equality between a target and a source
/// expression: those are the hash keys. Checked on the bound (unoptimized)
/// plan, so that a source the optimizer can prove empty is still judged by
/// what the statement says.
pub(super) fn check_join_keys(plan: &LogicalPlan, bound: &BoundMerge) -> Result<()> {
    let mut equi_join = false;
    plan.apply(|node| {
        if let LogicalPlan::Join(join) = node {
            let (left, right) = (join.left.schema(), join.right.schema());
            let sides = |e: &Expr| {
                let cols = e.column_refs();
                let in_left = !cols.is_empty() && cols.iter().all(|c| left.has_column(c));
                let in_right = !cols.is_empty() && cols.iter().all(|c| right.has_column(c));
                (in_left, in_right)
            };
            let is_key = |e: &Expr| match e {
                Expr::BinaryExpr(BinaryExpr {
                    left: l,
                    op: Operator::Eq,
                    right: r,
                }) => {
                    let ((ll, lr), (rl, rr)) = (sides(l), sides(r));
                    (ll && rr) || (lr && rl)
                }
                _ => false,
            };
            equi_join = !join.on.is_empty()
                || join
                    .filter
                    .as_ref()
                    .is_some_and(|f| split_conjunction(f).into_iter().any(is_key));
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    if equi_join {
        Ok(())
    } else {
        Err(invalid_input(format!(
            "MERGE: the ON condition ({}) has no equality between a target column and a source \
             expression; one is needed to match rows (e.g. ON t.id = s.id)",
            bound.merge.on
        )))
    }
}
