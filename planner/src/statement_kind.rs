//! What kind of statement a SQL text is, from its leading keywords: the
//! `kind` label of the scheduler's metrics and statement list.

use crate::statement_commands::leading_words;

/// A statement's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StatementKind {
    /// SELECT, WITH, VALUES, SHOW, DESCRIBE.
    Query,
    /// INSERT INTO / INSERT OVERWRITE.
    Insert,
    Merge,
    Update,
    Delete,
    /// CREATE, DROP, ALTER (and CREATE TABLE AS SELECT).
    Ddl,
    /// EXPLAIN, SET, CALL and anything else.
    Other,
}

impl StatementKind {
    /// Every kind, in label order.
    pub const ALL: [StatementKind; 7] = [
        Self::Query,
        Self::Insert,
        Self::Merge,
        Self::Update,
        Self::Delete,
        Self::Ddl,
        Self::Other,
    ];

    /// The kind of `sql`.
    pub fn of(sql: &str) -> Self {
        let words = leading_words(sql, 1);
        match words.first().map(String::as_str) {
            Some("SELECT" | "WITH" | "VALUES" | "TABLE" | "SHOW" | "DESCRIBE" | "DESC") => {
                Self::Query
            }
            Some("INSERT") => Self::Insert,
            Some("MERGE") => Self::Merge,
            Some("UPDATE") => Self::Update,
            Some("DELETE") => Self::Delete,
            Some("CREATE" | "DROP" | "ALTER" | "TRUNCATE") => Self::Ddl,
            _ => Self::Other,
        }
    }

    /// The label: `query`, `insert`, `merge`, `update`, `delete`, `ddl`,
    /// `other`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Query => "query",
            Self::Insert => "insert",
            Self::Merge => "merge",
            Self::Update => "update",
            Self::Delete => "delete",
            Self::Ddl => "ddl",
            Self::Other => "other",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_from_the_leading_keyword() {
        let kind = |sql| StatementKind::of(sql).label();
        assert_eq!(kind("SELECT 1"), "query");
        assert_eq!(kind("-- q\n(select 1) union all (select 2)"), "query");
        assert_eq!(kind("with s as (select 1) select * from s"), "query");
        assert_eq!(kind("INSERT OVERWRITE t SELECT 1"), "insert");
        assert_eq!(kind("merge into t using s on t.id = s.id"), "merge");
        assert_eq!(kind("UPDATE t SET v = 1"), "update");
        assert_eq!(kind("DELETE FROM t"), "delete");
        assert_eq!(kind("CREATE TABLE t AS SELECT 1"), "ddl");
        assert_eq!(kind("ALTER TABLE t ADD COLUMN c INT"), "ddl");
        assert_eq!(kind("EXPLAIN ANALYZE MERGE INTO t"), "other");
        assert_eq!(kind("SET icemerge.x = 1"), "other");
        assert_eq!(kind("CALL system.expire_snapshots('t')"), "other");
        assert_eq!(kind("'unterminated"), "other");
    }
}
