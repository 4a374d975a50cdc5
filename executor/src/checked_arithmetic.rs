//! Integer and decimal `+`, `-` and `*` that fail on overflow, as in Trino
//! and DuckDB, instead of DataFusion's default of wrapping around: a value
//! is never silently changed, in a SELECT or on its way into a table
//! (INSERT, CTAS, MERGE, UPDATE).
//!
//! [`CheckedArithmetic`] is a physical optimizer rule run last on the
//! coordinator: every such expression in a projection or a filter becomes a
//! [`CheckedArithmeticExpr`], DataFusion's `BinaryExpr` with its checked
//! kernels on. It is an expression of its own (not the flag alone) because
//! DataFusion's plan serialization drops the flag: ours travels through
//! `IcemergePhysicalCodec` to the executors intact. An overflow is an error
//! naming the expression. Arithmetic on constants alone, which the logical
//! optimizer folds before any physical plan exists, is checked by the
//! analyzer rule of `checked_constants.rs`.

use std::any::Any;
use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use arrow::datatypes::{DataType, FieldRef, Schema};
use arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::config::ConfigOptions;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{ColumnarValue, Operator};
use datafusion::physical_expr::expressions::BinaryExpr;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::filter::{FilterExec, FilterExecBuilder};
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};
use datafusion::physical_plan::ExecutionPlan;
use icemerge_proto::error::{internal, invalid_input};

/// `left op right` (`+`, `-` or `*` on integers or decimals) that fails on
/// overflow.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CheckedArithmeticExpr {
    inner: BinaryExpr,
}

impl CheckedArithmeticExpr {
    pub fn new(left: Arc<dyn PhysicalExpr>, op: Operator, right: Arc<dyn PhysicalExpr>) -> Self {
        Self {
            inner: BinaryExpr::new(left, op, right).with_fail_on_overflow(true),
        }
    }

    pub fn op(&self) -> &Operator {
        self.inner.op()
    }

    /// The name of the operator in plan messages (`+`, `-`, `*`).
    pub fn op_name(&self) -> String {
        self.inner.op().to_string()
    }

    /// The operator named by [`Self::op_name`].
    pub fn parse_op(name: &str) -> Result<Operator> {
        match name {
            "+" => Ok(Operator::Plus),
            "-" => Ok(Operator::Minus),
            "*" => Ok(Operator::Multiply),
            other => Err(internal(format!(
                "checked arithmetic: unknown operator '{other}'"
            ))),
        }
    }
}

impl fmt::Display for CheckedArithmeticExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

/// The expression as SQL, for the overflow error.
struct Sql<'a>(&'a CheckedArithmeticExpr);

impl fmt::Display for Sql<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt_sql(f)
    }
}

impl PhysicalExpr for CheckedArithmeticExpr {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn data_type(&self, input_schema: &Schema) -> Result<DataType> {
        self.inner.data_type(input_schema)
    }

    fn nullable(&self, input_schema: &Schema) -> Result<bool> {
        self.inner.nullable(input_schema)
    }

    fn return_field(&self, input_schema: &Schema) -> Result<FieldRef> {
        self.inner.return_field(input_schema)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        self.inner.evaluate(batch).map_err(|e| match overflow(&e) {
            true => {
                let of = self
                    .data_type(&batch.schema())
                    .map(|t| format!(" ({t})"))
                    .unwrap_or_default();
                invalid_input(format!("numeric overflow in {}{of}", Sql(self)))
            }
            false => e,
        })
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![self.inner.left(), self.inner.right()]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        let [left, right]: [Arc<dyn PhysicalExpr>; 2] = children
            .try_into()
            .map_err(|_| internal("checked arithmetic takes two children"))?;
        Ok(Arc::new(Self::new(left, *self.op(), right)))
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt_sql(f)
    }
}

/// Whether `e` is an arithmetic overflow of a checked kernel.
fn overflow(e: &DataFusionError) -> bool {
    match e {
        DataFusionError::ArrowError(inner, _) => {
            matches!(
                inner.as_ref(),
                arrow::error::ArrowError::ArithmeticOverflow(_)
            )
        }
        DataFusionError::Context(_, inner) => overflow(inner),
        _ => false,
    }
}

/// The rule turning wrapping `+`, `-`, `*` on integers and decimals into
/// [`CheckedArithmeticExpr`] in every projection and filter.
#[derive(Debug, Default)]
pub struct CheckedArithmetic;

impl PhysicalOptimizerRule for CheckedArithmetic {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            if let Some(projection) = node.as_any().downcast_ref::<ProjectionExec>() {
                let schema = projection.input().schema();
                let mut changed = false;
                let exprs = projection
                    .expr()
                    .iter()
                    .map(|p| {
                        let expr = checked(p.expr.clone(), &schema)?;
                        changed |= expr.transformed;
                        Ok(ProjectionExpr {
                            expr: expr.data,
                            alias: p.alias.clone(),
                        })
                    })
                    .collect::<Result<Vec<_>>>()?;
                if !changed {
                    return Ok(Transformed::no(node));
                }
                let plan = ProjectionExec::try_new(exprs, projection.input().clone())?;
                return Ok(Transformed::yes(Arc::new(plan) as Arc<dyn ExecutionPlan>));
            }
            if let Some(filter) = node.as_any().downcast_ref::<FilterExec>() {
                let predicate = checked(filter.predicate().clone(), &filter.input().schema())?;
                if !predicate.transformed {
                    return Ok(Transformed::no(node));
                }
                let plan = FilterExecBuilder::from(filter)
                    .with_predicate(predicate.data)
                    .build()?;
                return Ok(Transformed::yes(Arc::new(plan) as Arc<dyn ExecutionPlan>));
            }
            Ok(Transformed::no(node))
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "icemerge_checked_arithmetic"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `expr` with its integer and decimal `+`, `-`, `*` checked.
pub(crate) fn checked(
    expr: Arc<dyn PhysicalExpr>,
    schema: &Schema,
) -> Result<Transformed<Arc<dyn PhysicalExpr>>> {
    expr.transform_up(|e| {
        let Some(binary) = e.as_any().downcast_ref::<BinaryExpr>() else {
            return Ok(Transformed::no(e));
        };
        if !matches!(
            binary.op(),
            Operator::Plus | Operator::Minus | Operator::Multiply
        ) {
            return Ok(Transformed::no(e));
        }
        let exact = |t: &DataType| t.is_integer() || t.is_decimal();
        let (left, right) = (
            binary.left().data_type(schema)?,
            binary.right().data_type(schema)?,
        );
        if !(exact(&left) && exact(&right)) {
            return Ok(Transformed::no(e));
        }
        let checked =
            CheckedArithmeticExpr::new(binary.left().clone(), *binary.op(), binary.right().clone());
        Ok(Transformed::yes(Arc::new(checked) as Arc<dyn PhysicalExpr>))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, Int64Array};
    use arrow::datatypes::Field;
    use datafusion::physical_expr::expressions::{col, lit};

    fn batch(values: Vec<i64>) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(values))]).unwrap()
    }

    #[test]
    fn overflow_is_an_error_naming_the_expression() {
        let b = batch(vec![1, i64::MAX]);
        let expr =
            CheckedArithmeticExpr::new(col("v", &b.schema()).unwrap(), Operator::Plus, lit(1i64));
        let err = expr.evaluate(&b).unwrap_err().to_string();
        assert!(err.contains("numeric overflow in v + 1 (Int64)"), "{err}");
        let fine = expr.evaluate(&batch(vec![1, 2])).unwrap();
        let ColumnarValue::Array(a) = fine else {
            panic!("an array")
        };
        let a = a.as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(a.values(), &[2, 3]);
    }

    #[test]
    fn only_exact_arithmetic_is_checked() {
        let schema = Schema::new(vec![
            Field::new("i", DataType::Int64, false),
            Field::new("f", DataType::Float64, false),
        ]);
        let binary = |l: &str, op| -> Arc<dyn PhysicalExpr> {
            Arc::new(BinaryExpr::new(
                col(l, &schema).unwrap(),
                op,
                col(l, &schema).unwrap(),
            ))
        };
        for (expr, expected) in [
            (binary("i", Operator::Multiply), true),
            (binary("i", Operator::Minus), true),
            (binary("f", Operator::Plus), false),
            (binary("i", Operator::Divide), false),
            (binary("i", Operator::Eq), false),
        ] {
            let out = checked(expr.clone(), &schema).unwrap();
            assert_eq!(out.transformed, expected, "{expr}");
            assert_eq!(
                out.data.as_any().is::<CheckedArithmeticExpr>(),
                expected,
                "{expr}"
            );
        }
    }
}
