//! The source side of a MERGE's ON keys, for dynamic pruning of the target.
//!
//! Every top-level ON conjunct `target.col = <expression over the source
//! only>` is a key: a target row can only match when its `col` equals one of
//! the values the expression takes over the source. Before the target scan is
//! planned, the probe queries here are run on the source alone; their min /
//! max (and, when there are few, the distinct values) become a predicate on
//! the target's columns that prunes data files by partition values and column
//! bounds. The same probe counts the source rows, which bounds how many rows
//! the merge can insert.
//!
//! No probe exists when a `WHEN NOT MATCHED BY SOURCE` clause needs every
//! target row.

use datafusion::error::Result;
use datafusion::sql::sqlparser::ast::{BinaryOperator, Expr};

use crate::merge::{conjuncts, ident_value, source_sql, target_column, BoundMerge};

/// The probe queries of one MERGE.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceKeyProbe {
    /// The target column of each key, in ON order.
    pub columns: Vec<String>,
    /// The source expression of each key, as SQL.
    pub expressions: Vec<String>,
    /// `SELECT count(*), min(k0), max(k0), min(k1), max(k1), ... FROM source`.
    pub ranges_sql: String,
    /// Per key: up to `distinct_limit + 1` distinct non-NULL values.
    pub distinct_sql: Vec<String>,
}

/// The probe of `bound`; `None` when a NOT MATCHED BY SOURCE clause needs
/// every target row (then nothing may be pruned).
pub fn source_key_probe(
    bound: &BoundMerge,
    columns: &[String],
    distinct_limit: usize,
) -> Result<Option<SourceKeyProbe>> {
    let merge = &bound.merge;
    if bound.needs_every_target_row() {
        return Ok(None);
    }
    let (source_alias, source) = source_sql(merge)?;
    let mut keys: Vec<(String, String)> = vec![];
    collect_keys(
        &merge.on,
        &bound.target_alias,
        &source_alias,
        columns,
        &mut keys,
    );
    keys.dedup();
    let mut select = vec!["count(*)".to_string()];
    for (_, expr) in &keys {
        select.push(format!("min({expr})"));
        select.push(format!("max({expr})"));
    }
    let distinct_sql = keys
        .iter()
        .map(|(_, expr)| {
            format!(
                "SELECT DISTINCT {expr} FROM {source} WHERE {expr} IS NOT NULL LIMIT {}",
                distinct_limit + 1
            )
        })
        .collect();
    Ok(Some(SourceKeyProbe {
        columns: keys.iter().map(|(c, _)| c.clone()).collect(),
        expressions: keys.iter().map(|(_, e)| e.clone()).collect(),
        ranges_sql: format!("SELECT {} FROM {source}", select.join(", ")),
        distinct_sql,
    }))
}

/// Collects `(target column, source expression)` from ON's top-level
/// conjuncts.
fn collect_keys(
    on: &Expr,
    target_alias: &str,
    source_alias: &str,
    columns: &[String],
    out: &mut Vec<(String, String)>,
) {
    for conjunct in conjuncts(on) {
        let Expr::BinaryOp {
            left,
            op: BinaryOperator::Eq,
            right,
        } = conjunct
        else {
            continue;
        };
        let key = [(left, right), (right, left)]
            .into_iter()
            .find_map(|(a, b)| {
                let column = target_column(a, target_alias, columns)?;
                (source_only(b, source_alias) == Some(true)).then(|| (column, b.to_string()))
            });
        out.extend(key);
    }
}

/// Whether `expr` reads only the source: `Some(true)` when it references
/// the source and nothing else, `Some(false)` when it is a constant, `None`
/// when it references anything else or has a shape not judged here.
fn source_only(expr: &Expr, source_alias: &str) -> Option<bool> {
    match expr {
        Expr::CompoundIdentifier(parts) => {
            (parts.len() == 2 && ident_value(&parts[0]) == source_alias).then_some(true)
        }
        Expr::Value(_) => Some(false),
        Expr::Nested(inner) | Expr::UnaryOp { expr: inner, .. } => source_only(inner, source_alias),
        Expr::Cast { expr: inner, .. } => source_only(inner, source_alias),
        Expr::BinaryOp { left, right, .. } => {
            let (left, right) = (
                source_only(left, source_alias)?,
                source_only(right, source_alias)?,
            );
            Some(left || right)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merge::{bind_merge, parse_row_level};

    fn probe(sql: &str, columns: &[&str]) -> Option<SourceKeyProbe> {
        let bound = bind_merge(parse_row_level(sql).unwrap().expect("a MERGE")).unwrap();
        let columns: Vec<String> = columns.iter().map(|c| c.to_string()).collect();
        source_key_probe(&bound, &columns, 64).unwrap()
    }

    #[test]
    fn keys_are_target_columns_equal_to_source_expressions() {
        let p = probe(
            "MERGE INTO db.t USING src AS s ON t.id = s.id AND s.k + 1 = t.k AND t.region = 'EU' \
             WHEN MATCHED THEN DELETE",
            &["id", "k", "region"],
        )
        .unwrap();
        assert_eq!(p.columns, vec!["id", "k"]);
        assert_eq!(p.expressions, vec!["s.id", "s.k + 1"]);
        assert_eq!(
            p.ranges_sql,
            "SELECT count(*), min(s.id), max(s.id), min(s.k + 1), max(s.k + 1) FROM src AS s"
        );
        assert_eq!(
            p.distinct_sql[1],
            "SELECT DISTINCT s.k + 1 FROM src AS s WHERE s.k + 1 IS NOT NULL LIMIT 65"
        );
    }

    #[test]
    fn expressions_mixing_target_and_source_are_not_keys() {
        let p = probe(
            "MERGE INTO t USING s ON t.id = s.id + t.v WHEN NOT MATCHED THEN INSERT *",
            &["id", "v"],
        )
        .unwrap();
        assert!(p.columns.is_empty(), "{p:?}");
        assert_eq!(p.ranges_sql, "SELECT count(*) FROM s");
    }

    #[test]
    fn not_matched_by_source_needs_every_target_row() {
        assert!(probe(
            "MERGE INTO t USING s ON t.id = s.id WHEN NOT MATCHED BY SOURCE THEN DELETE",
            &["id"],
        )
        .is_none());
    }
}
