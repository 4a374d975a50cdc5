//! `UPDATE ns.t [AS a] SET c = expr, ... [WHERE cond]` and
//! `DELETE FROM ns.t [AS a] [WHERE cond]`, bound as the MERGE they are
//! equivalent to: one `WHEN MATCHED THEN UPDATE SET ...` (or `DELETE`)
//! clause acting on every target row the WHERE selects. No source is
//! joined: the classification reads the target's row-id scan filtered by
//! the WHERE (pushed into the scan, where it prunes files), and the rows go
//! through the same writer stage (copy-on-write or merge-on-read, per
//! `write.update.mode` / `write.delete.mode`) and the same commit as a
//! MERGE's.
//!
//! Forms Spark and Trino do not have (`UPDATE ... FROM`, `DELETE ...
//! USING`, `RETURNING`, `LIMIT`, `ORDER BY`, several tables) are refused by
//! name; MERGE says them.

use datafusion::error::Result;
use datafusion::sql::sqlparser::ast::{Delete, FromTable, Statement, TableWithJoins, Update};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::Parser;
use icemerge_proto::error::invalid_input;

use crate::merge::{first_keyword, parse_merge, RowLevelKind, RowLevelStatement};

/// The relation an UPDATE's or DELETE's MERGE names as its source; the
/// classification never reads it.
const NO_SOURCE: &str = "(SELECT 1 AS __icemerge_none) AS __icemerge_no_source";

/// Parses an `UPDATE` or `DELETE` statement into the MERGE it is; `None`
/// for any other statement.
pub fn parse_update_or_delete(sql: &str) -> Result<Option<RowLevelStatement>> {
    let Some(first) = first_keyword(sql) else {
        return Ok(None);
    };
    let kind = match first.to_ascii_uppercase().as_str() {
        "UPDATE" => RowLevelKind::Update,
        "DELETE" => RowLevelKind::Delete,
        _ => return Ok(None),
    };
    let statements = Parser::parse_sql(&GenericDialect {}, sql).map_err(|e| {
        invalid_input(format!(
            "SQL syntax error in {}: {e}",
            kind.keyword().to_uppercase()
        ))
    })?;
    let statement = match <[Statement; 1]>::try_from(statements) {
        Ok([statement]) => statement,
        Err(_) => return Err(invalid_input("expected exactly one statement")),
    };
    let (target, action, selection) = match statement {
        Statement::Update(update) => update_parts(update)?,
        Statement::Delete(delete) => delete_parts(delete)?,
        _ => return Ok(None),
    };
    let merge_sql =
        format!("MERGE INTO {target} USING {NO_SOURCE} ON FALSE WHEN MATCHED THEN {action}");
    let merge = parse_merge(&merge_sql)?.ok_or_else(|| {
        invalid_input(format!(
            "{}: cannot be planned as a MERGE",
            kind.keyword().to_uppercase()
        ))
    })?;
    Ok(Some(RowLevelStatement {
        kind,
        merge,
        target_filter: selection,
        schema_evolution: false,
    }))
}

type Parts = (
    String,
    String,
    Option<datafusion::sql::sqlparser::ast::Expr>,
);

fn update_parts(update: Update) -> Result<Parts> {
    let refuse = |what: &str| {
        invalid_input(format!(
            "UPDATE: {what} is not supported; write the statement as MERGE INTO ... USING ..."
        ))
    };
    if update.from.is_some() {
        return Err(refuse("UPDATE ... FROM"));
    }
    if update.returning.is_some() {
        return Err(refuse("RETURNING"));
    }
    if update.limit.is_some() {
        return Err(refuse("LIMIT"));
    }
    if update.or.is_some() {
        return Err(refuse("UPDATE OR ..."));
    }
    let target = single_table("UPDATE", &update.table)?;
    let assignments: Vec<String> = update.assignments.iter().map(|a| a.to_string()).collect();
    Ok((
        target,
        format!("UPDATE SET {}", assignments.join(", ")),
        update.selection,
    ))
}

fn delete_parts(delete: Delete) -> Result<Parts> {
    let refuse = |what: &str| {
        invalid_input(format!(
            "DELETE: {what} is not supported; write the statement as MERGE INTO ... USING ... \
             WHEN MATCHED THEN DELETE, or use WHERE ... IN (SELECT ...)"
        ))
    };
    if !delete.tables.is_empty() {
        return Err(refuse("deleting from several tables"));
    }
    if delete.using.is_some() {
        return Err(refuse("DELETE ... USING"));
    }
    if delete.returning.is_some() {
        return Err(refuse("RETURNING"));
    }
    if delete.limit.is_some() || !delete.order_by.is_empty() {
        return Err(refuse("ORDER BY / LIMIT"));
    }
    let tables = match &delete.from {
        FromTable::WithFromKeyword(t) | FromTable::WithoutKeyword(t) => t,
    };
    let [table] = tables.as_slice() else {
        return Err(refuse("deleting from several tables"));
    };
    let target = single_table("DELETE FROM", table)?;
    Ok((target, "DELETE".to_string(), delete.selection))
}

/// The target of an UPDATE or DELETE, which must be one table.
fn single_table(statement: &str, table: &TableWithJoins) -> Result<String> {
    if !table.joins.is_empty() {
        return Err(invalid_input(format!(
            "{statement}: the target must be one table, found '{table}'; write the statement as \
             MERGE INTO ... USING ..."
        )));
    }
    Ok(table.relation.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::ast::{MergeAction, MergeClauseKind};

    fn parse(sql: &str) -> RowLevelStatement {
        parse_update_or_delete(sql)
            .unwrap()
            .expect("UPDATE or DELETE")
    }

    #[test]
    fn update_is_one_matched_update_clause_with_its_where() {
        let s = parse("UPDATE db.t AS a SET v = v + 1, w = 'x' WHERE a.id > 3");
        assert_eq!(s.kind, RowLevelKind::Update);
        assert_eq!(s.merge.table.to_string(), "db.t AS a");
        let [clause] = s.merge.clauses.as_slice() else {
            panic!("one clause")
        };
        assert_eq!(clause.clause_kind, MergeClauseKind::Matched);
        let MergeAction::Update(update) = &clause.action else {
            panic!("an UPDATE action")
        };
        let set: Vec<String> = update.assignments.iter().map(|a| a.to_string()).collect();
        assert_eq!(set, ["v = v + 1", "w = 'x'"]);
        assert_eq!(s.target_filter.unwrap().to_string(), "a.id > 3");
    }

    #[test]
    fn delete_without_where_deletes_every_row() {
        let s = parse("delete from db.t");
        assert_eq!(s.kind, RowLevelKind::Delete);
        assert!(s.target_filter.is_none());
        assert!(matches!(
            s.merge.clauses[0].action,
            MergeAction::Delete { .. }
        ));
    }

    #[test]
    fn other_statements_are_none() {
        assert!(parse_update_or_delete("SELECT 1").unwrap().is_none());
        assert!(parse_update_or_delete(
            "MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN DELETE"
        )
        .unwrap()
        .is_none());
    }

    #[test]
    fn forms_without_a_merge_equivalent_are_refused_by_name() {
        for (sql, named) in [
            (
                "UPDATE db.t SET v = s.v FROM s WHERE t.id = s.id",
                "UPDATE ... FROM",
            ),
            ("UPDATE db.t SET v = 1 RETURNING id", "RETURNING"),
            (
                "DELETE FROM db.t USING s WHERE t.id = s.id",
                "DELETE ... USING",
            ),
            ("DELETE FROM db.t WHERE id = 1 RETURNING id", "RETURNING"),
            ("DELETE FROM t1, t2 WHERE t1.id = 1", "several tables"),
            (
                "DELETE FROM db.t AS a JOIN db.s AS b ON a.id = b.id",
                "the target must be one table",
            ),
        ] {
            let err = parse_update_or_delete(sql).unwrap_err().to_string();
            assert!(err.contains(named), "{sql}: {err}");
        }
    }
}
