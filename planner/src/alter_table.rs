//! `ALTER TABLE` statements, parsed from tokens (sqlparser has no
//! `UNSET TBLPROPERTIES` nor Spark's partition-field clauses), as Spark
//! writes them (Trino's spellings where they differ, e.g. `SET DATA TYPE`):
//! - properties: `SET TBLPROPERTIES ('k' = 'v', ...)`,
//!   `UNSET TBLPROPERTIES [IF EXISTS] ('k', ...)`;
//! - the name: `RENAME TO name`;
//! - the schema: `ADD COLUMN[S] [(]c type [COMMENT '...'], ...[)]`,
//!   `DROP COLUMN[S] [IF EXISTS] c, ...`, `RENAME COLUMN a TO b`,
//!   `ALTER COLUMN c TYPE type | SET DATA TYPE type | DROP NOT NULL |
//!   COMMENT '...'`;
//! - the partition spec: `ADD PARTITION FIELD transform [AS name]`,
//!   `DROP PARTITION FIELD name-or-transform`,
//!   `REPLACE PARTITION FIELD name-or-transform WITH transform [AS name]`;
//! - the write order: `WRITE [LOCALLY] ORDERED BY c [ASC|DESC] [NULLS
//!   FIRST|LAST], ...`, `WRITE UNORDERED`, `WRITE DISTRIBUTED BY PARTITION
//!   [LOCALLY ORDERED BY ...]`.
//!
//! Any other `ALTER TABLE` is refused by name. What a change means for the
//! table (does the column exist, is the promotion allowed) is checked
//! where it is applied, against the table's metadata.

use std::collections::HashSet;

use datafusion::error::Result;
use datafusion::sql::sqlparser::ast::{Ident, ObjectName, ObjectNamePart};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
use iceberg::spec::Type;
use icemerge_proto::error::{invalid_input, unsupported};

use crate::ddl::{iceberg_type, normalize_ident, partition_item, PartitionItem};

/// An `ALTER TABLE` statement.
#[derive(Debug, Clone, PartialEq)]
pub struct AlterTable {
    pub table: ObjectName,
    pub change: TableChange,
}

/// What the statement changes.
#[derive(Debug, Clone, PartialEq)]
pub enum TableChange {
    /// `SET TBLPROPERTIES`: these keys take these values.
    SetProperties(Vec<(String, String)>),
    /// `UNSET TBLPROPERTIES`: these keys go; with `IF EXISTS`, a key that is
    /// not set is no error.
    UnsetProperties { keys: Vec<String>, if_exists: bool },
    /// `RENAME TO name`: the table's new name (one part: in the table's own
    /// namespace). A catalog change, no metadata.
    RenameTo(ObjectName),
    /// `ADD COLUMN(S)`: new optional top-level columns, last in the schema.
    AddColumns(Vec<NewColumn>),
    /// `DROP COLUMN(S)`: with `IF EXISTS`, a missing column is no error.
    DropColumns {
        columns: Vec<String>,
        if_exists: bool,
    },
    /// `RENAME COLUMN from TO to`.
    RenameColumn { from: String, to: String },
    /// `ALTER COLUMN column ...`.
    AlterColumn {
        column: String,
        change: ColumnChange,
    },
    /// `ADD PARTITION FIELD transform [AS name]`.
    AddPartitionField {
        field: PartitionItem,
        name: Option<String>,
    },
    /// `DROP PARTITION FIELD name-or-transform`.
    DropPartitionField(PartitionFieldRef),
    /// `REPLACE PARTITION FIELD old WITH transform [AS name]`.
    ReplacePartitionField {
        from: PartitionFieldRef,
        to: PartitionItem,
        name: Option<String>,
    },
    /// `WRITE ... ORDERED BY` / `WRITE UNORDERED` / `WRITE DISTRIBUTED BY
    /// PARTITION`: the table's sort order is replaced (unsorted when empty)
    /// and `write.distribution-mode` set, as Spark does.
    WriteOrder(WriteOrder),
}

/// A table's write order as `ALTER TABLE ... WRITE` gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct WriteOrder {
    /// The sort order's terms, in order; empty: unsorted.
    pub order: Vec<SortItem>,
    /// `write.distribution-mode`: `range` (`ORDERED BY`), `none`
    /// (`LOCALLY ORDERED BY`, `UNORDERED`) or `hash` (`DISTRIBUTED BY
    /// PARTITION`).
    pub distribution: &'static str,
}

/// One term of a sort order.
#[derive(Debug, Clone, PartialEq)]
pub struct SortItem {
    pub term: PartitionItem,
    pub descending: bool,
    /// Nulls first: Iceberg's default is first for ascending, last for
    /// descending.
    pub nulls_first: bool,
}

/// A column `ADD COLUMN` adds (always optional: Iceberg cannot add a
/// required column to rows already written).
#[derive(Debug, Clone, PartialEq)]
pub struct NewColumn {
    pub name: String,
    pub data_type: Type,
    pub comment: Option<String>,
}

/// What `ALTER COLUMN` does to the column.
#[derive(Debug, Clone, PartialEq)]
pub enum ColumnChange {
    /// `TYPE t` / `SET DATA TYPE t`: one of Iceberg's promotions.
    Type(Type),
    /// `DROP NOT NULL`: the column becomes optional.
    DropNotNull,
    /// `COMMENT '...'`: the column's doc.
    Comment(String),
}

/// A partition field named in `DROP` / `REPLACE PARTITION FIELD`: a bare
/// name (a partition field's name, else an identity field on that column)
/// or a transform of a column.
#[derive(Debug, Clone, PartialEq)]
pub enum PartitionFieldRef {
    Name(String),
    Transform(PartitionItem),
}

/// The statement when `sql` is an `ALTER TABLE`; None for any other.
pub fn parse_alter_table(sql: &str) -> Result<Option<AlterTable>> {
    let tokens: Vec<Token> = Tokenizer::new(&GenericDialect {}, sql)
        .tokenize()
        .map_err(|e| invalid_input(format!("cannot tokenize SQL: {e}")))?
        .into_iter()
        .filter(|t| !matches!(t, Token::Whitespace(_) | Token::SemiColon | Token::EOF))
        .collect();
    let mut at = Cursor { tokens, next: 0 };
    if !(at.keyword(Keyword::ALTER) && at.keyword(Keyword::TABLE)) {
        return Ok(None);
    }
    let table = at.object_name()?;
    let clause = at.next;
    let change = if at.keyword(Keyword::SET) {
        at.expect_keyword(Keyword::TBLPROPERTIES, "SET")?;
        TableChange::SetProperties(at.pairs()?)
    } else if at.word("UNSET") {
        at.expect_keyword(Keyword::TBLPROPERTIES, "UNSET")?;
        let if_exists = at.keyword(Keyword::IF);
        if if_exists {
            at.expect_keyword(Keyword::EXISTS, "UNSET TBLPROPERTIES IF")?;
        }
        TableChange::UnsetProperties {
            keys: at.keys()?,
            if_exists,
        }
    } else if at.word("RENAME") {
        if at.keyword(Keyword::COLUMN) {
            let from = at.column_name()?;
            at.expect_keyword(Keyword::TO, "RENAME COLUMN")?;
            let to = at.column_name()?;
            TableChange::RenameColumn { from, to }
        } else {
            at.expect_keyword(Keyword::TO, "RENAME")?;
            TableChange::RenameTo(at.object_name()?)
        }
    } else if at.keyword(Keyword::ADD) {
        if at.keyword(Keyword::PARTITION) {
            at.expect_word("FIELD", "ADD PARTITION")?;
            let field = at.transform()?;
            let name = at.alias()?;
            TableChange::AddPartitionField { field, name }
        } else {
            if !(at.keyword(Keyword::COLUMN) || at.keyword(Keyword::COLUMNS)) {
                return Err(at.unsupported(&table, clause));
            }
            TableChange::AddColumns(at.new_columns()?)
        }
    } else if at.keyword(Keyword::DROP) {
        if at.keyword(Keyword::PARTITION) {
            at.expect_word("FIELD", "DROP PARTITION")?;
            TableChange::DropPartitionField(at.partition_field_ref()?)
        } else {
            if !(at.keyword(Keyword::COLUMN) || at.keyword(Keyword::COLUMNS)) {
                return Err(at.unsupported(&table, clause));
            }
            let if_exists = at.keyword(Keyword::IF);
            if if_exists {
                at.expect_keyword(Keyword::EXISTS, "DROP COLUMN IF")?;
            }
            let columns = at.column_names()?;
            TableChange::DropColumns { columns, if_exists }
        }
    } else if at.keyword(Keyword::REPLACE) {
        at.expect_keyword(Keyword::PARTITION, "REPLACE")?;
        at.expect_word("FIELD", "REPLACE PARTITION")?;
        let from = at.partition_field_ref()?;
        at.expect_keyword(Keyword::WITH, "REPLACE PARTITION FIELD ...")?;
        let to = at.transform()?;
        let name = at.alias()?;
        TableChange::ReplacePartitionField { from, to, name }
    } else if at.word("WRITE") {
        TableChange::WriteOrder(at.write_order()?)
    } else if at.keyword(Keyword::ALTER) {
        at.keyword(Keyword::COLUMN);
        let column = at.column_name()?;
        let change = at.column_change(&column)?;
        TableChange::AlterColumn { column, change }
    } else {
        return Err(at.unsupported(&table, clause));
    };
    if at.next < at.tokens.len() {
        return Err(invalid_input(format!(
            "ALTER TABLE {table}: unexpected '{}' at the end of the statement",
            at.rest()
        )));
    }
    Ok(Some(AlterTable { table, change }))
}

struct Cursor {
    tokens: Vec<Token>,
    next: usize,
}

impl Cursor {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.next)
    }

    /// Consumes the keyword when it comes next.
    fn keyword(&mut self, keyword: Keyword) -> bool {
        let found = matches!(self.peek(), Some(Token::Word(w)) if w.keyword == keyword);
        self.next += usize::from(found);
        found
    }

    /// Consumes an unquoted word (any case) when it comes next.
    fn word(&mut self, word: &str) -> bool {
        let found = matches!(self.peek(), Some(Token::Word(w))
            if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(word));
        self.next += usize::from(found);
        found
    }

    fn expect_keyword(&mut self, keyword: Keyword, after: &str) -> Result<()> {
        if self.keyword(keyword) {
            Ok(())
        } else {
            Err(invalid_input(format!(
                "ALTER TABLE: expected {keyword:?} after {after}, found '{}'",
                self.rest()
            )))
        }
    }

    fn expect(&mut self, token: Token, what: &str) -> Result<()> {
        if self.peek() == Some(&token) {
            self.next += 1;
            Ok(())
        } else {
            Err(invalid_input(format!(
                "ALTER TABLE: expected {what}, found '{}'",
                self.rest()
            )))
        }
    }

    fn expect_word(&mut self, word: &str, after: &str) -> Result<()> {
        if self.word(word) {
            Ok(())
        } else {
            Err(invalid_input(format!(
                "ALTER TABLE: expected {word} after {after}, found '{}'",
                self.rest()
            )))
        }
    }

    /// The clause starting at token `clause` is not one icemerge runs.
    fn unsupported(
        &mut self,
        table: &ObjectName,
        clause: usize,
    ) -> datafusion::error::DataFusionError {
        self.next = clause;
        unsupported(format!(
            "ALTER TABLE {table} {}: supported are SET / UNSET TBLPROPERTIES, RENAME TO, \
             ADD / DROP / RENAME / ALTER COLUMN, ADD / DROP / REPLACE PARTITION FIELD and \
             WRITE [LOCALLY] ORDERED BY / UNORDERED / DISTRIBUTED BY PARTITION",
            self.rest()
        ))
    }

    /// A sqlparser parser over the tokens from here on; [`Cursor::resume`]
    /// moves past what it consumed.
    fn parser(&self) -> Parser<'static> {
        Parser::new(&GenericDialect {}).with_tokens(self.tokens[self.next..].to_vec())
    }

    /// Moves past the tokens `parser` consumed.
    fn resume(&mut self, parser: &Parser<'_>) {
        self.next += parser.index();
    }

    /// A top-level column name (a dotted, nested name is refused).
    fn column_name(&mut self) -> Result<String> {
        match self.peek() {
            Some(Token::Word(w)) if w.quote_style.is_some() || !is_clause_word(&w.value) => {
                let ident = match w.quote_style {
                    Some(q) => Ident::with_quote(q, w.value.clone()),
                    None => Ident::new(w.value.clone()),
                };
                self.next += 1;
                if self.peek() == Some(&Token::Period) {
                    return Err(unsupported(format!(
                        "ALTER TABLE: nested column '{}{}' : only top-level columns can be \
                         changed",
                        ident,
                        self.rest().replace(' ', "")
                    )));
                }
                Ok(normalize_ident(&ident))
            }
            _ => Err(invalid_input(format!(
                "ALTER TABLE: expected a column name, found '{}'",
                self.rest()
            ))),
        }
    }

    /// `a, b` or `(a, b)`.
    fn column_names(&mut self) -> Result<Vec<String>> {
        let columns = if self.peek() == Some(&Token::LParen) {
            self.list(Cursor::column_name)?
        } else {
            let mut columns = vec![self.column_name()?];
            while self.peek() == Some(&Token::Comma) {
                self.next += 1;
                columns.push(self.column_name()?);
            }
            columns
        };
        unique_columns(&columns)?;
        Ok(columns)
    }

    /// `c type [COMMENT '...'], ...`, with or without parentheses.
    fn new_columns(&mut self) -> Result<Vec<NewColumn>> {
        let columns = if self.peek() == Some(&Token::LParen) {
            self.list(Cursor::new_column)?
        } else {
            let mut columns = vec![self.new_column()?];
            while self.peek() == Some(&Token::Comma) {
                self.next += 1;
                columns.push(self.new_column()?);
            }
            columns
        };
        let names: Vec<String> = columns.iter().map(|c| c.name.clone()).collect();
        unique_columns(&names)?;
        Ok(columns)
    }

    fn new_column(&mut self) -> Result<NewColumn> {
        let name = self.column_name()?;
        let data_type = self.data_type(&name)?;
        let mut comment = None;
        loop {
            if self.keyword(Keyword::COMMENT) {
                comment = Some(self.string(&format!("COMMENT of column '{name}'"))?);
            } else if self.keyword(Keyword::NOT) {
                self.expect_keyword(Keyword::NULL, "NOT")?;
                return Err(invalid_input(format!(
                    "ALTER TABLE ADD COLUMN {name}: a NOT NULL column cannot be added to a \
                     table (rows already written have no value for it)"
                )));
            } else if self.keyword(Keyword::NULL) {
            } else if self.keyword(Keyword::FIRST) || self.keyword(Keyword::AFTER) {
                return Err(unsupported(format!(
                    "ALTER TABLE ADD COLUMN {name}: FIRST / AFTER are not supported; new \
                     columns go last"
                )));
            } else if self.keyword(Keyword::DEFAULT) {
                return Err(unsupported(format!(
                    "ALTER TABLE ADD COLUMN {name}: DEFAULT values are not supported"
                )));
            } else {
                break;
            }
        }
        Ok(NewColumn {
            name,
            data_type,
            comment,
        })
    }

    /// A SQL type, as CREATE TABLE maps it to Iceberg.
    fn data_type(&mut self, column: &str) -> Result<Type> {
        let mut parser = self.parser();
        let data_type = parser.parse_data_type().map_err(|e| {
            invalid_input(format!(
                "ALTER TABLE: expected a type for column '{column}': {e}"
            ))
        })?;
        self.resume(&parser);
        iceberg_type(&data_type, column)
    }

    fn string(&mut self, what: &str) -> Result<String> {
        match self.peek() {
            Some(Token::SingleQuotedString(s)) => {
                let s = s.clone();
                self.next += 1;
                Ok(s)
            }
            _ => Err(invalid_input(format!(
                "ALTER TABLE: expected a quoted string for the {what}, found '{}'",
                self.rest()
            ))),
        }
    }

    /// After `ALTER COLUMN c`.
    fn column_change(&mut self, column: &str) -> Result<ColumnChange> {
        if self.word("TYPE") {
            return Ok(ColumnChange::Type(self.data_type(column)?));
        }
        if self.keyword(Keyword::SET) {
            if self.keyword(Keyword::DATA) {
                self.expect_word("TYPE", "SET DATA")?;
                return Ok(ColumnChange::Type(self.data_type(column)?));
            }
            if self.keyword(Keyword::NOT) {
                return Err(invalid_input(format!(
                    "ALTER TABLE ALTER COLUMN {column} SET NOT NULL: an optional column cannot \
                     become required (rows already written may hold NULL)"
                )));
            }
        }
        if self.keyword(Keyword::DROP) {
            self.expect_keyword(Keyword::NOT, "ALTER COLUMN ... DROP")?;
            self.expect_keyword(Keyword::NULL, "DROP NOT")?;
            return Ok(ColumnChange::DropNotNull);
        }
        if self.keyword(Keyword::COMMENT) {
            return Ok(ColumnChange::Comment(
                self.string(&format!("COMMENT of column '{column}'"))?,
            ));
        }
        Err(unsupported(format!(
            "ALTER TABLE ALTER COLUMN {column} {}: supported are TYPE t, SET DATA TYPE t, \
             DROP NOT NULL and COMMENT '...'",
            self.rest()
        )))
    }

    /// A partition transform: `col`, `bucket(16, col)`, `days(ts)`, ...
    fn transform(&mut self) -> Result<PartitionItem> {
        let mut parser = self.parser();
        let expr = parser.parse_expr().map_err(|e| {
            invalid_input(format!(
                "ALTER TABLE: expected a partition transform, e.g. bucket(16, id): {e}"
            ))
        })?;
        self.resume(&parser);
        partition_item(&expr)
    }

    /// What follows `WRITE`.
    fn write_order(&mut self) -> Result<WriteOrder> {
        if self.word("UNORDERED") {
            return Ok(WriteOrder {
                order: vec![],
                distribution: "none",
            });
        }
        let distributed = self.word("DISTRIBUTED");
        if distributed {
            self.expect_keyword(Keyword::BY, "WRITE DISTRIBUTED")?;
            self.expect_keyword(Keyword::PARTITION, "WRITE DISTRIBUTED BY")?;
            if self.next == self.tokens.len() {
                return Ok(WriteOrder {
                    order: vec![],
                    distribution: "hash",
                });
            }
        }
        let locally = self.word("LOCALLY");
        if distributed && !locally {
            return Err(invalid_input(format!(
                "ALTER TABLE: expected LOCALLY ORDERED BY after WRITE DISTRIBUTED BY PARTITION, \
                 found '{}'",
                self.rest()
            )));
        }
        if !self.word("ORDERED") {
            return Err(invalid_input(format!(
                "ALTER TABLE: expected [LOCALLY] ORDERED BY, UNORDERED or DISTRIBUTED BY \
                 PARTITION after WRITE, found '{}'",
                self.rest()
            )));
        }
        self.expect_keyword(Keyword::BY, "ORDERED")?;
        let mut order = vec![];
        loop {
            let mut parser = self.parser();
            let item = parser.parse_order_by_expr().map_err(|e| {
                invalid_input(format!(
                    "ALTER TABLE ... WRITE ORDERED BY: expected a column or transform with \
                     [ASC | DESC] [NULLS FIRST | LAST]: {e}"
                ))
            })?;
            self.resume(&parser);
            let descending = item.options.asc == Some(false);
            order.push(SortItem {
                term: partition_item(&item.expr)?,
                descending,
                nulls_first: item.options.nulls_first.unwrap_or(!descending),
            });
            if self.peek() != Some(&Token::Comma) {
                break;
            }
            self.next += 1;
        }
        let distribution = match (distributed, locally) {
            (true, _) => "hash",
            (false, true) => "none",
            (false, false) => "range",
        };
        Ok(WriteOrder {
            order,
            distribution,
        })
    }

    /// A partition field's name or a transform.
    fn partition_field_ref(&mut self) -> Result<PartitionFieldRef> {
        let bare = matches!(self.peek(), Some(Token::Word(_)))
            && !matches!(
                self.tokens.get(self.next + 1),
                Some(Token::LParen | Token::Period)
            );
        if bare {
            return Ok(PartitionFieldRef::Name(self.column_name()?));
        }
        Ok(PartitionFieldRef::Transform(self.transform()?))
    }

    /// `[AS name]`.
    fn alias(&mut self) -> Result<Option<String>> {
        if self.keyword(Keyword::AS) {
            return Ok(Some(self.column_name()?));
        }
        Ok(None)
    }

    /// What is left of the statement, for messages.
    fn rest(&self) -> String {
        self.tokens[self.next.min(self.tokens.len())..]
            .iter()
            .map(|t| t.to_string())
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn object_name(&mut self) -> Result<ObjectName> {
        let mut parts = vec![];
        loop {
            match self.peek() {
                Some(Token::Word(w)) => {
                    let ident = match w.quote_style {
                        Some(q) => Ident::with_quote(q, w.value.clone()),
                        None => Ident::new(w.value.clone()),
                    };
                    parts.push(ObjectNamePart::Identifier(ident));
                    self.next += 1;
                }
                _ => return Err(invalid_input("ALTER TABLE: expected a table name")),
            }
            if self.peek() != Some(&Token::Period) {
                return Ok(ObjectName(parts));
            }
            self.next += 1;
        }
    }

    /// A quoted property key.
    fn key(&mut self) -> Result<String> {
        match self.peek() {
            Some(Token::SingleQuotedString(s) | Token::DoubleQuotedString(s)) => {
                let key = s.clone();
                self.next += 1;
                Ok(key)
            }
            _ => Err(invalid_input(format!(
                "ALTER TABLE: expected a quoted property key, found '{}'",
                self.rest()
            ))),
        }
    }

    /// A property value: a string, number or boolean literal.
    fn value(&mut self, key: &str) -> Result<String> {
        let value = match self.peek() {
            Some(Token::SingleQuotedString(s) | Token::DoubleQuotedString(s)) => s.clone(),
            Some(Token::Number(n, _)) => n.clone(),
            Some(Token::Word(w))
                if w.quote_style.is_none()
                    && (w.keyword == Keyword::TRUE || w.keyword == Keyword::FALSE) =>
            {
                w.value.to_lowercase()
            }
            _ => {
                return Err(invalid_input(format!(
                    "table property '{key}': expected a string, number or boolean value, \
                     found '{}'",
                    self.rest()
                )))
            }
        };
        self.next += 1;
        Ok(value)
    }

    /// `('k' [=] 'v', ...)`, each key once.
    fn pairs(&mut self) -> Result<Vec<(String, String)>> {
        self.list(|at| {
            let key = at.key()?;
            if at.peek() == Some(&Token::Eq) {
                at.next += 1;
            }
            let value = at.value(&key)?;
            Ok((key, value))
        })
        .and_then(|pairs| {
            unique(pairs.iter().map(|(k, _)| k.as_str()))?;
            Ok(pairs)
        })
    }

    /// `('k', ...)`, each key once.
    fn keys(&mut self) -> Result<Vec<String>> {
        let keys = self.list(Cursor::key)?;
        unique(keys.iter().map(String::as_str))?;
        Ok(keys)
    }

    fn list<T>(&mut self, mut item: impl FnMut(&mut Cursor) -> Result<T>) -> Result<Vec<T>> {
        self.expect(Token::LParen, "'('")?;
        let mut items = vec![item(self)?];
        while self.peek() == Some(&Token::Comma) {
            self.next += 1;
            items.push(item(self)?);
        }
        self.expect(Token::RParen, "')'")?;
        Ok(items)
    }
}

/// Words that start the next clause, never a column name when unquoted.
fn is_clause_word(word: &str) -> bool {
    ["WITH", "AS", "TO", "COMMENT", "TYPE"]
        .iter()
        .any(|w| w.eq_ignore_ascii_case(word))
}

fn unique_columns(columns: &[String]) -> Result<()> {
    let mut seen = HashSet::new();
    for column in columns {
        if !seen.insert(column.as_str()) {
            return Err(invalid_input(format!(
                "ALTER TABLE: column '{column}' is named twice"
            )));
        }
    }
    Ok(())
}

fn unique<'a>(keys: impl Iterator<Item = &'a str>) -> Result<()> {
    let mut seen = HashSet::new();
    for key in keys {
        if !seen.insert(key) {
            return Err(invalid_input(format!(
                "table property '{key}' is given twice"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(sql: &str) -> Result<Option<AlterTable>> {
        parse_alter_table(sql)
    }

    #[test]
    fn set_and_unset() {
        let set = parse(
            "ALTER TABLE db.t SET TBLPROPERTIES ('write.merge.mode' = 'merge-on-read', \
             'commit.retry.num-retries' 10, 'x' = true);",
        )
        .unwrap()
        .unwrap();
        assert_eq!(set.table.to_string(), "db.t");
        assert_eq!(
            set.change,
            TableChange::SetProperties(vec![
                ("write.merge.mode".into(), "merge-on-read".into()),
                ("commit.retry.num-retries".into(), "10".into()),
                ("x".into(), "true".into()),
            ])
        );
        let unset = parse("alter table \"Db\".t unset tblproperties if exists ('a', 'b')")
            .unwrap()
            .unwrap();
        assert_eq!(unset.table.to_string(), "\"Db\".t");
        assert_eq!(
            unset.change,
            TableChange::UnsetProperties {
                keys: vec!["a".into(), "b".into()],
                if_exists: true
            }
        );
        assert_eq!(parse("SELECT 1").unwrap(), None);
        assert_eq!(parse("ALTERED").unwrap(), None);
    }

    fn change(sql: &str) -> TableChange {
        parse(sql).unwrap().unwrap().change
    }

    #[test]
    fn write_orders() {
        use crate::ddl::PartitionTransform::{Bucket, Identity};
        let item = |column: &str, transform, descending, nulls_first| SortItem {
            term: PartitionItem {
                column: column.into(),
                transform,
            },
            descending,
            nulls_first,
        };
        assert_eq!(
            change("ALTER TABLE db.t WRITE ORDERED BY a, B DESC, c ASC NULLS LAST, bucket(4, d) DESC NULLS FIRST"),
            TableChange::WriteOrder(WriteOrder {
                order: vec![
                    item("a", Identity, false, true),
                    item("b", Identity, true, false),
                    item("c", Identity, false, false),
                    item("d", Bucket(4), true, true),
                ],
                distribution: "range",
            })
        );
        let locally = change("ALTER TABLE t WRITE LOCALLY ORDERED BY a");
        assert_eq!(
            locally,
            TableChange::WriteOrder(WriteOrder {
                order: vec![item("a", Identity, false, true)],
                distribution: "none",
            })
        );
        let hashed =
            change("ALTER TABLE t WRITE DISTRIBUTED BY PARTITION LOCALLY ORDERED BY a DESC");
        assert_eq!(
            hashed,
            TableChange::WriteOrder(WriteOrder {
                order: vec![item("a", Identity, true, false)],
                distribution: "hash",
            })
        );
        for (sql, distribution) in [
            ("ALTER TABLE t WRITE UNORDERED", "none"),
            ("ALTER TABLE t WRITE DISTRIBUTED BY PARTITION", "hash"),
        ] {
            assert_eq!(
                change(sql),
                TableChange::WriteOrder(WriteOrder {
                    order: vec![],
                    distribution
                })
            );
        }
        for bad in [
            "ALTER TABLE t WRITE SORTED BY a",
            "ALTER TABLE t WRITE DISTRIBUTED BY PARTITION ORDERED BY a",
            "ALTER TABLE t WRITE ORDERED BY a b",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn schema_changes() {
        use iceberg::spec::PrimitiveType::{Decimal, Long, String as Str};
        assert_eq!(
            change("ALTER TABLE t ADD COLUMN c BIGINT COMMENT 'the c'"),
            TableChange::AddColumns(vec![NewColumn {
                name: "c".into(),
                data_type: Type::Primitive(Long),
                comment: Some("the c".into()),
            }])
        );
        let TableChange::AddColumns(columns) =
            change("alter table t add columns (\"D\" decimal(10, 2), e string)")
        else {
            panic!("not ADD COLUMNS")
        };
        assert_eq!(columns[0].name, "D");
        assert_eq!(
            columns[0].data_type,
            Type::Primitive(Decimal {
                precision: 10,
                scale: 2
            })
        );
        assert_eq!(columns[1].data_type, Type::Primitive(Str));
        assert_eq!(
            change("ALTER TABLE t DROP COLUMN IF EXISTS a, b"),
            TableChange::DropColumns {
                columns: vec!["a".into(), "b".into()],
                if_exists: true
            }
        );
        assert_eq!(
            change("ALTER TABLE t RENAME COLUMN A TO b"),
            TableChange::RenameColumn {
                from: "a".into(),
                to: "b".into()
            }
        );
        for sql in [
            "ALTER TABLE t ALTER COLUMN v TYPE BIGINT",
            "ALTER TABLE t ALTER v SET DATA TYPE bigint",
        ] {
            assert_eq!(
                change(sql),
                TableChange::AlterColumn {
                    column: "v".into(),
                    change: ColumnChange::Type(Type::Primitive(Long))
                }
            );
        }
        assert_eq!(
            change("ALTER TABLE t ALTER COLUMN v DROP NOT NULL"),
            TableChange::AlterColumn {
                column: "v".into(),
                change: ColumnChange::DropNotNull
            }
        );
    }

    #[test]
    fn partition_field_changes() {
        use crate::ddl::PartitionTransform;
        let bucket = PartitionItem {
            column: "id".into(),
            transform: PartitionTransform::Bucket(16),
        };
        assert_eq!(
            change("ALTER TABLE t ADD PARTITION FIELD bucket(16, id) AS shard"),
            TableChange::AddPartitionField {
                field: bucket.clone(),
                name: Some("shard".into())
            }
        );
        assert_eq!(
            change("ALTER TABLE t DROP PARTITION FIELD shard"),
            TableChange::DropPartitionField(PartitionFieldRef::Name("shard".into()))
        );
        assert_eq!(
            change("ALTER TABLE t REPLACE PARTITION FIELD bucket(16, id) WITH days(ts)"),
            TableChange::ReplacePartitionField {
                from: PartitionFieldRef::Transform(bucket),
                to: PartitionItem {
                    column: "ts".into(),
                    transform: PartitionTransform::Day
                },
                name: None
            }
        );
    }

    #[test]
    fn bad_statements_are_named() {
        let err = |sql: &str| parse(sql).unwrap_err().to_string();
        assert!(err("ALTER TABLE t ADD CONSTRAINT c").contains("ADD CONSTRAINT c"));
        assert!(err("ALTER TABLE t ADD COLUMN c INT NOT NULL").contains("NOT NULL column"));
        assert!(err("ALTER TABLE t ADD COLUMN c INT AFTER b").contains("AFTER"));
        assert!(err("ALTER TABLE t ADD COLUMN c LIST").contains("'c'"));
        assert!(err("ALTER TABLE t ADD COLUMNS (c INT, c INT)").contains("twice"));
        assert!(err("ALTER TABLE t DROP COLUMN s.x").contains("nested"));
        assert!(err("ALTER TABLE t ALTER COLUMN c SET NOT NULL").contains("required"));
        assert!(err("ALTER TABLE t ADD PARTITION FIELD upper(c)").contains("upper(c)"));
        assert!(err("ALTER TABLE t SET TBLPROPERTIES ()").contains("quoted property key"));
        assert!(err("ALTER TABLE t SET TBLPROPERTIES ('a' = 'b', 'a' = 'c')").contains("twice"));
        assert!(err("ALTER TABLE t SET TBLPROPERTIES ('a' = x)").contains("'a'"));
        assert!(err("ALTER TABLE t UNSET TBLPROPERTIES ('a') extra").contains("extra"));
        assert!(err("ALTER TABLE t SET LOCATION '/x'").contains("TBLPROPERTIES"));
    }
}
