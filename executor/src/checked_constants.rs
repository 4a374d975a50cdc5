//! Integer and decimal `+`, `-` and `*` over constants alone (`SELECT
//! 9223372036854775807 + 1`, `INSERT ... VALUES (2147483647 * 2)`): the
//! logical optimizer folds them into a literal with DataFusion's wrapping
//! kernels before the physical rule of `checked_arithmetic.rs` could see
//! them. [`CheckedConstants`], an analyzer rule run after type coercion,
//! evaluates each such expression once with the checked kernels and makes
//! an overflow the statement's error, naming the expression; the folding
//! that follows then computes the same value. Arithmetic under a `CASE`
//! (or another conditional) is left to run time, where only the branch
//! taken is evaluated.

use std::sync::Arc;

use arrow::datatypes::Schema;
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::DFSchema;
use datafusion::config::ConfigOptions;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::ExecutionProps;
use datafusion::logical_expr::{BinaryExpr, Expr, LogicalPlan, Operator};
use datafusion::optimizer::AnalyzerRule;
use datafusion::physical_expr::create_physical_expr;

use crate::checked_arithmetic::checked;

const RULE: &str = "icemerge_checked_constants";

/// The analyzer rule checking constant arithmetic for overflow.
#[derive(Debug, Default)]
pub struct CheckedConstants;

impl AnalyzerRule for CheckedConstants {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.apply_with_subqueries(|node| {
            node.apply_expressions(|expr| {
                check_expr(expr)?;
                Ok(TreeNodeRecursion::Continue)
            })
        })?;
        Ok(plan)
    }

    fn name(&self) -> &str {
        RULE
    }
}

/// `error` without the analyzer's note that this rule raised it (the
/// overflow names the expression; the rule's name says nothing to a user).
pub fn without_rule_context(error: DataFusionError) -> DataFusionError {
    match error {
        DataFusionError::Context(rule, inner) if rule == RULE => *inner,
        other => other,
    }
}

/// Evaluates, checked, every outermost arithmetic expression of `expr`
/// over constants alone.
fn check_expr(expr: &Expr) -> Result<()> {
    expr.apply(|e| match e {
        Expr::Case(_) | Expr::ScalarFunction(_) => Ok(TreeNodeRecursion::Jump),
        Expr::BinaryExpr(BinaryExpr { op, .. })
            if matches!(op, Operator::Plus | Operator::Minus | Operator::Multiply)
                && is_constant(e) =>
        {
            evaluate_checked(e)?;
            Ok(TreeNodeRecursion::Jump)
        }
        _ => Ok(TreeNodeRecursion::Continue),
    })
    .map(|_| ())
}

/// Literals, casts and arithmetic only.
fn is_constant(expr: &Expr) -> bool {
    let mut constant = true;
    let _ = expr.apply(|e| {
        constant &= matches!(
            e,
            Expr::Literal(..)
                | Expr::BinaryExpr(_)
                | Expr::Cast(_)
                | Expr::TryCast(_)
                | Expr::Negative(_)
                | Expr::Alias(_)
        );
        Ok(if constant {
            TreeNodeRecursion::Continue
        } else {
            TreeNodeRecursion::Stop
        })
    });
    constant
}

/// `expr` evaluated once with checked arithmetic; an overflow is an error,
/// anything else the optimizer may report in its own words later.
fn evaluate_checked(expr: &Expr) -> Result<()> {
    let empty = DFSchema::empty();
    let Ok(physical) = create_physical_expr(expr, &empty, &ExecutionProps::new()) else {
        return Ok(());
    };
    let schema = Arc::new(Schema::empty());
    let physical = checked(physical, &schema)?.data;
    let batch = RecordBatch::try_new_with_options(
        schema,
        vec![],
        &RecordBatchOptions::new().with_row_count(Some(1)),
    )?;
    match physical.evaluate(&batch) {
        Err(e) if e.to_string().contains("numeric overflow") => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::DataType;
    use datafusion::logical_expr::{cast, lit, when};

    #[test]
    fn constant_overflow_is_an_error_naming_the_expression() {
        let err = check_expr(&(lit(i64::MAX) + lit(1i64)))
            .unwrap_err()
            .to_string();
        assert!(err.contains("numeric overflow in"), "{err}");
        let int = |v: i32| cast(lit(v), DataType::Int32);
        let err = check_expr(&(int(i32::MAX) * int(2)))
            .unwrap_err()
            .to_string();
        assert!(err.contains("(Int32)"), "{err}");
        check_expr(&(lit(2i64) + lit(3i64) * lit(4i64))).unwrap();
        // A branch that is never taken is not evaluated.
        let case = when(lit(false), lit(i64::MAX) + lit(1i64))
            .otherwise(lit(0i64))
            .unwrap();
        check_expr(&case).unwrap();
    }
}
