//! Time travel: a table read as of a past snapshot, in Trino's and Spark's
//! syntax — `ns.t FOR VERSION AS OF <snapshot id | 'branch or tag'>`,
//! `ns.t FOR TIMESTAMP AS OF <'timestamp' | TIMESTAMP 'timestamp'>` (also
//! without `FOR`, and with `SYSTEM_VERSION` / `SYSTEM_TIME`, as Spark
//! allows) — wherever a table is read: queries, INSERT ... SELECT, CTAS, a
//! MERGE source.
//!
//! The SQL parser does not take these clauses, so before a statement is
//! parsed each one is resolved here: the table is loaded, the snapshot
//! found (by id, by branch or tag name, or the one current at the
//! timestamp, read as UTC), and a provider pinned to it is registered under
//! a name of its own that replaces `ns.t FOR ... AS OF ...` in the text
//! (keeping the name the statement refers to it by as its alias). The
//! names are dropped when the statement ends. A past snapshot is never
//! written: the target of INSERT, MERGE, UPDATE or DELETE cannot carry the
//! clause.

use datafusion::error::Result;
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
use iceberg::spec::TableMetadata;
use icemerge_executor::iceberg_err;
use icemerge_proto::error::{invalid_input, not_found};
use std::sync::Arc;

use crate::catalog::IcebergTableProvider;

use super::Session;

/// One `FOR ... AS OF` clause found in a statement's tokens.
#[derive(Debug, PartialEq)]
struct Clause {
    /// Token range replaced: the table name through the clause's value.
    start: usize,
    end: usize,
    /// The table name as written.
    name: String,
    /// The name the statement refers to the table by (its last part), when
    /// no alias follows the clause.
    alias: Option<String>,
    at: At,
    /// The statement writes to this table (refused).
    written: bool,
}

#[derive(Debug, PartialEq)]
enum At {
    Snapshot(i64),
    Ref(String),
    Timestamp(String),
}

/// The statement's tokens' `FOR ... AS OF` clauses, in order.
fn find_clauses(tokens: &[Token]) -> Result<Vec<Clause>> {
    let sig: Vec<usize> = (0..tokens.len())
        .filter(|&i| !matches!(tokens[i], Token::Whitespace(_)))
        .collect();
    let word = |k: usize| match sig.get(k).map(|&i| &tokens[i]) {
        Some(Token::Word(w)) if w.quote_style.is_none() => w.value.to_uppercase(),
        _ => String::new(),
    };
    let mut clauses = vec![];
    let mut k = 0;
    while k < sig.len() {
        // [FOR] (VERSION | SYSTEM_VERSION | TIMESTAMP | SYSTEM_TIME) AS OF
        let kind_at = if word(k) == "FOR" { k + 1 } else { k };
        let kind = word(kind_at);
        let is_kind = matches!(
            kind.as_str(),
            "VERSION" | "SYSTEM_VERSION" | "TIMESTAMP" | "SYSTEM_TIME"
        );
        if !(is_kind && word(kind_at + 1) == "AS" && word(kind_at + 2) == "OF") || k == 0 {
            k += 1;
            continue;
        }
        // The table name before it: word (. word)*.
        let mut first = k - 1;
        if !matches!(tokens[sig[first]], Token::Word(_)) {
            k += 1;
            continue;
        }
        while first >= 2
            && matches!(tokens[sig[first - 1]], Token::Period)
            && matches!(tokens[sig[first - 2]], Token::Word(_))
        {
            first -= 2;
        }
        let name: String = (first..k).map(|j| tokens[sig[j]].to_string()).collect();
        let last = tokens[sig[k - 1]].to_string();
        // Its value.
        let mut v = kind_at + 3;
        if word(v) == "TIMESTAMP" {
            v += 1;
        }
        let timestamp = matches!(kind.as_str(), "TIMESTAMP" | "SYSTEM_TIME");
        let at = match (sig.get(v).map(|&i| &tokens[i]), timestamp) {
            (Some(Token::SingleQuotedString(s)), true) => At::Timestamp(s.clone()),
            (Some(Token::SingleQuotedString(s)), false) => At::Ref(s.clone()),
            (Some(Token::Number(n, _)), false) => At::Snapshot(n.parse().map_err(|_| {
                invalid_input(format!("{name} FOR VERSION AS OF {n}: not a snapshot id"))
            })?),
            (other, _) => {
                let found = other.map(|t| t.to_string()).unwrap_or_default();
                let expected = if timestamp {
                    "a timestamp literal, e.g. TIMESTAMP '2024-05-01 12:00:00'"
                } else {
                    "a snapshot id or a branch or tag name in quotes"
                };
                return Err(invalid_input(format!(
                    "{name} FOR {kind} AS OF {found}: expected {expected}"
                )));
            }
        };
        // An alias after the clause (AS x, or a bare non-keyword word).
        let aliased = match sig.get(v + 1).map(|&i| &tokens[i]) {
            Some(Token::Word(w)) => w.keyword == Keyword::AS || w.keyword == Keyword::NoKeyword,
            _ => false,
        };
        let before = |n: usize| {
            if first >= n {
                word(first - n)
            } else {
                String::new()
            }
        };
        let written = matches!(before(1).as_str(), "INTO" | "UPDATE" | "TABLE")
            || (before(1) == "FROM" && before(2) == "DELETE");
        clauses.push(Clause {
            start: sig[first],
            end: sig[v] + 1,
            name,
            alias: (!aliased).then_some(last),
            at,
            written,
        });
        k = v + 1;
    }
    Ok(clauses)
}

/// The snapshot `at` names in `metadata` (of table `name`).
fn snapshot_at(name: &str, metadata: &TableMetadata, at: &At) -> Result<i64> {
    match at {
        At::Snapshot(id) => Ok(*id),
        At::Ref(r) => metadata
            .snapshot_for_ref(r)
            .map(|s| s.snapshot_id())
            .ok_or_else(|| not_found(format!("table {name} has no branch or tag '{r}'"))),
        At::Timestamp(text) => {
            let nanos = arrow::compute::kernels::cast_utils::string_to_timestamp_nanos(text)
                .map_err(|e| {
                    invalid_input(format!(
                        "{name} FOR TIMESTAMP AS OF '{text}': not a timestamp ({e})"
                    ))
                })?;
            let ms = nanos.div_euclid(1_000_000);
            metadata
                .history()
                .iter()
                .rev()
                .find(|log| log.timestamp_ms <= ms)
                .map(|log| log.snapshot_id)
                .ok_or_else(|| {
                    not_found(format!(
                        "table {name} has no snapshot at or before '{text}' (UTC)"
                    ))
                })
        }
    }
}

/// Names registered for one statement's time-travel reads.
pub(super) struct PinnedTables(Vec<String>);

impl Session {
    /// Resolves the statement's `FOR ... AS OF` clauses (see the module
    /// doc): the text to run, and the names to drop after it.
    pub(super) async fn pin_time_travel(&self, sql: &str) -> Result<(String, PinnedTables)> {
        let Ok(tokens) = Tokenizer::new(&GenericDialect {}, sql).tokenize() else {
            return Ok((sql.to_string(), PinnedTables(vec![])));
        };
        let clauses = find_clauses(&tokens)?;
        if clauses.is_empty() {
            return Ok((sql.to_string(), PinnedTables(vec![])));
        }
        if let Some(written) = clauses.iter().find(|c| c.written) {
            return Err(invalid_input(format!(
                "{}: a table read as of a past snapshot cannot be written; time travel only \
                 reads",
                written.name
            )));
        }
        let mut pinned = PinnedTables(vec![]);
        let mut out = String::new();
        let mut next = 0;
        for clause in &clauses {
            let registered = match self.pin(clause).await {
                Ok(name) => name,
                Err(e) => {
                    self.unpin(pinned);
                    return Err(e);
                }
            };
            out.extend(tokens[next..clause.start].iter().map(|t| t.to_string()));
            out.push_str(&registered);
            if let Some(alias) = &clause.alias {
                out.push_str(&format!(" AS {alias}"));
            }
            pinned.0.push(registered);
            next = clause.end;
        }
        out.extend(tokens[next..].iter().map(|t| t.to_string()));
        Ok((out, pinned))
    }

    /// Registers the table of `clause` at its snapshot; returns the name.
    async fn pin(&self, clause: &Clause) -> Result<String> {
        let object = Parser::new(&GenericDialect {})
            .try_with_sql(&clause.name)
            .and_then(|mut p| p.parse_object_name(false))
            .map_err(|e| invalid_input(format!("{}: {e}", clause.name)))?;
        let ident = self.object_ident(&object)?;
        self.ensure_namespace(ident.namespace()).await?;
        let catalog = &self.catalog.catalog;
        if !catalog.table_exists(&ident).await.map_err(iceberg_err)? {
            return Err(not_found(format!("table '{}' does not exist", clause.name)));
        }
        let table = catalog.load_table(&ident).await.map_err(iceberg_err)?;
        let name = format!("{}.{}", ident.namespace().to_url_string(), ident.name());
        let snapshot = snapshot_at(&name, table.metadata(), &clause.at)?;
        let provider =
            IcebergTableProvider::try_new(name, table, self.catalog.file_io_props.clone())?
                .at_snapshot(snapshot)?;
        let registered = format!("__icemerge_at_{}", uuid::Uuid::new_v4().simple());
        self.ctx
            .register_table(registered.as_str(), Arc::new(provider))?;
        Ok(registered)
    }

    /// Drops the names a statement's time travel registered.
    pub(super) fn unpin(&self, pinned: PinnedTables) {
        for name in pinned.0 {
            let _ = self.ctx.deregister_table(name.as_str());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clauses(sql: &str) -> Vec<Clause> {
        let tokens = Tokenizer::new(&GenericDialect {}, sql).tokenize().unwrap();
        find_clauses(&tokens).unwrap()
    }

    #[test]
    fn trino_and_spark_forms_are_found() {
        let c = clauses("SELECT * FROM db.t FOR VERSION AS OF 42 WHERE id = 1");
        assert_eq!(c.len(), 1);
        assert_eq!(
            (
                c[0].name.as_str(),
                c[0].alias.as_deref(),
                &c[0].at,
                c[0].written
            ),
            ("db.t", Some("t"), &At::Snapshot(42), false)
        );
        let c = clauses(
            "SELECT * FROM db.t TIMESTAMP AS OF '2024-05-01 00:00:00' AS x \
             JOIN u FOR SYSTEM_TIME AS OF TIMESTAMP '2024-05-02' y ON x.id = y.id",
        );
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].at, At::Timestamp("2024-05-01 00:00:00".into()));
        assert_eq!(c[0].alias, None, "aliased AS x");
        assert_eq!((c[1].name.as_str(), c[1].alias.as_deref()), ("u", None));
        assert_eq!(c[1].at, At::Timestamp("2024-05-02".into()));
        let c = clauses("SELECT * FROM db.t FOR VERSION AS OF 'audit'");
        assert_eq!(c[0].at, At::Ref("audit".into()));
    }

    #[test]
    fn written_targets_are_marked() {
        assert!(clauses("INSERT INTO db.t FOR VERSION AS OF 1 VALUES (1)")[0].written);
        assert!(clauses("DELETE FROM db.t FOR VERSION AS OF 1")[0].written);
        let merge = clauses(
            "MERGE INTO db.t USING db.s FOR VERSION AS OF 7 AS s ON t.id = s.id \
             WHEN MATCHED THEN DELETE",
        );
        assert!(!merge[0].written, "a MERGE source is read");
    }

    #[test]
    fn other_sql_is_left_alone_and_bad_values_are_named() {
        assert!(clauses("SELECT version, timestamp FROM t").is_empty());
        let tokens = Tokenizer::new(&GenericDialect {}, "SELECT * FROM t FOR VERSION AS OF x")
            .tokenize()
            .unwrap();
        let err = find_clauses(&tokens).unwrap_err().to_string();
        assert!(err.contains("expected a snapshot id"), "{err}");
    }
}
