//! Translating DataFusion filter expressions into Iceberg predicates, so that
//! iceberg's planner prunes data files by partition values and column
//! statistics (and row groups inside files). Only exact translations are
//! produced; a conjunct that cannot be translated is left to DataFusion
//! (filters are pushed as Inexact, so DataFusion always re-applies them).

use datafusion::common::ScalarValue;
use datafusion::logical_expr::{Between, BinaryExpr, Expr, Operator};
use iceberg::expr::{Predicate, Reference};
use iceberg::spec::Datum;

/// Translates the conjunction of `filters`; `None` when nothing translates.
pub fn to_iceberg_predicate(filters: &[Expr]) -> Option<Predicate> {
    filters
        .iter()
        .flat_map(split_conjunction)
        .filter_map(translate)
        .reduce(Predicate::and)
}

/// `filter` as one Iceberg predicate when every conjunct translates
/// exactly (a filter that is only partly expressible is `None`).
pub fn to_exact_iceberg_predicate(filter: &Expr) -> Option<Predicate> {
    split_conjunction(filter)
        .into_iter()
        .map(translate)
        .collect::<Option<Vec<_>>>()?
        .into_iter()
        .reduce(Predicate::and)
}

fn split_conjunction(expr: &Expr) -> Vec<&Expr> {
    match expr {
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::And,
            right,
        }) => {
            let mut out = split_conjunction(left);
            out.extend(split_conjunction(right));
            out
        }
        other => vec![other],
    }
}

/// Exact translation of one expression, or `None`.
fn translate(expr: &Expr) -> Option<Predicate> {
    match expr {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => match op {
            Operator::And => Some(translate(left)?.and(translate(right)?)),
            Operator::Or => Some(translate(left)?.or(translate(right)?)),
            _ => comparison(left, *op, right),
        },
        Expr::Not(inner) => Some(translate(inner)?.negate()),
        Expr::IsNull(inner) => Some(reference(inner)?.is_null()),
        Expr::IsNotNull(inner) => Some(reference(inner)?.is_not_null()),
        Expr::InList(list) => {
            let column = reference(&list.expr)?;
            let values = list.list.iter().map(datum).collect::<Option<Vec<_>>>()?;
            if list.negated {
                Some(column.is_not_in(values))
            } else {
                Some(column.is_in(values))
            }
        }
        Expr::Between(Between {
            expr,
            negated,
            low,
            high,
        }) => {
            let low = reference(expr)?.greater_than_or_equal_to(datum(low)?);
            let high = reference(expr)?.less_than_or_equal_to(datum(high)?);
            let both = low.and(high);
            Some(if *negated { both.negate() } else { both })
        }
        _ => None,
    }
}

fn comparison(left: &Expr, op: Operator, right: &Expr) -> Option<Predicate> {
    let (column, value, op) = match (reference(left), datum(right)) {
        (Some(c), Some(v)) => (c, v, op),
        _ => (reference(right)?, datum(left)?, op.swap()?),
    };
    Some(match op {
        Operator::Eq => column.equal_to(value),
        Operator::NotEq => column.not_equal_to(value),
        Operator::Lt => column.less_than(value),
        Operator::LtEq => column.less_than_or_equal_to(value),
        Operator::Gt => column.greater_than(value),
        Operator::GtEq => column.greater_than_or_equal_to(value),
        _ => return None,
    })
}

fn reference(expr: &Expr) -> Option<Reference> {
    match expr {
        Expr::Column(c) => Some(Reference::new(c.name.clone())),
        _ => None,
    }
}

fn datum(expr: &Expr) -> Option<Datum> {
    let Expr::Literal(value, _) = expr else {
        return None;
    };
    Some(match value {
        ScalarValue::Boolean(Some(v)) => Datum::bool(*v),
        ScalarValue::Int8(Some(v)) => Datum::int(*v as i32),
        ScalarValue::Int16(Some(v)) => Datum::int(*v as i32),
        ScalarValue::Int32(Some(v)) => Datum::int(*v),
        ScalarValue::Int64(Some(v)) => Datum::long(*v),
        ScalarValue::Float32(Some(v)) => Datum::float(*v),
        ScalarValue::Float64(Some(v)) => Datum::double(*v),
        ScalarValue::Utf8(Some(v))
        | ScalarValue::LargeUtf8(Some(v))
        | ScalarValue::Utf8View(Some(v)) => Datum::string(v),
        ScalarValue::Date32(Some(v)) => Datum::date(*v),
        ScalarValue::TimestampMicrosecond(Some(v), None) => Datum::timestamp_micros(*v),
        ScalarValue::TimestampMicrosecond(Some(v), Some(_)) => Datum::timestamptz_micros(*v),
        ScalarValue::Decimal128(Some(_), _, _) => {
            Datum::decimal_from_str(value.to_string()).ok()?
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::{col, lit};

    #[test]
    fn translates_comparisons_and_drops_untranslatable_conjuncts() {
        let filters = vec![col("id").gt(lit(5i64)).and(col("name").like(lit("a%")))];
        let p = to_iceberg_predicate(&filters).expect("predicate");
        assert_eq!(p.to_string(), "id > 5");
    }

    #[test]
    fn swaps_literal_on_the_left() {
        let p = to_iceberg_predicate(&[lit(5i64).lt(col("id"))]).expect("predicate");
        assert_eq!(p.to_string(), "id > 5");
    }

    #[test]
    fn or_needs_both_sides() {
        let filters = vec![col("id").eq(lit(1i64)).or(col("name").like(lit("a%")))];
        assert!(to_iceberg_predicate(&filters).is_none());
        let filters = vec![col("id").eq(lit(1i64)).or(col("id").eq(lit(3i64)))];
        assert_eq!(
            to_iceberg_predicate(&filters).unwrap().to_string(),
            "(id = 1) OR (id = 3)"
        );
    }
}
