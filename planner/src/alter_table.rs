//! `ALTER TABLE` statements, parsed from tokens (sqlparser has no
//! `UNSET TBLPROPERTIES`): `SET TBLPROPERTIES ('k' = 'v', ...)`,
//! `UNSET TBLPROPERTIES [IF EXISTS] ('k', ...)` and `RENAME TO name`, as
//! Spark writes them. Any other `ALTER TABLE` is refused by name.

use std::collections::HashSet;

use datafusion::error::Result;
use datafusion::sql::sqlparser::ast::{Ident, ObjectName, ObjectNamePart};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
use icemerge_proto::error::{invalid_input, unsupported};

/// An `ALTER TABLE` of a table's properties.
#[derive(Debug, Clone, PartialEq)]
pub struct AlterTableProperties {
    pub table: ObjectName,
    pub change: PropertyChange,
}

/// What the statement does to the properties.
#[derive(Debug, Clone, PartialEq)]
pub enum PropertyChange {
    /// `SET TBLPROPERTIES`: these keys take these values.
    Set(Vec<(String, String)>),
    /// `UNSET TBLPROPERTIES`: these keys go; with `IF EXISTS`, a key that is
    /// not set is no error.
    Unset { keys: Vec<String>, if_exists: bool },
    /// `RENAME TO name`: the table's new name (one part: in the table's own
    /// namespace). Not a property change: a catalog change, no metadata.
    RenameTo(ObjectName),
}

/// The statement when `sql` is an `ALTER TABLE`; None for any other.
pub fn parse_alter_table(sql: &str) -> Result<Option<AlterTableProperties>> {
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
    let change = if at.keyword(Keyword::SET) {
        at.expect_keyword(Keyword::TBLPROPERTIES, "SET")?;
        PropertyChange::Set(at.pairs()?)
    } else if at.word("UNSET") {
        at.expect_keyword(Keyword::TBLPROPERTIES, "UNSET")?;
        let if_exists = at.keyword(Keyword::IF);
        if if_exists {
            at.expect_keyword(Keyword::EXISTS, "UNSET TBLPROPERTIES IF")?;
        }
        PropertyChange::Unset {
            keys: at.keys()?,
            if_exists,
        }
    } else if at.word("RENAME") {
        at.expect_keyword(Keyword::TO, "RENAME")?;
        PropertyChange::RenameTo(at.object_name()?)
    } else {
        let what = at.rest();
        return Err(unsupported(format!(
            "ALTER TABLE {table} {what}: only SET TBLPROPERTIES, UNSET TBLPROPERTIES and \
             RENAME TO are supported"
        )));
    };
    if at.next < at.tokens.len() {
        return Err(invalid_input(format!(
            "ALTER TABLE {table}: unexpected '{}' at the end of the statement",
            at.rest()
        )));
    }
    Ok(Some(AlterTableProperties { table, change }))
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

    fn parse(sql: &str) -> Result<Option<AlterTableProperties>> {
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
            PropertyChange::Set(vec![
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
            PropertyChange::Unset {
                keys: vec!["a".into(), "b".into()],
                if_exists: true
            }
        );
        assert_eq!(parse("SELECT 1").unwrap(), None);
        assert_eq!(parse("ALTERED").unwrap(), None);
    }

    #[test]
    fn bad_statements_are_named() {
        let err = |sql: &str| parse(sql).unwrap_err().to_string();
        assert!(err("ALTER TABLE t ADD COLUMN c INT").contains("ADD COLUMN c INT"));
        assert!(err("ALTER TABLE t SET TBLPROPERTIES ()").contains("quoted property key"));
        assert!(err("ALTER TABLE t SET TBLPROPERTIES ('a' = 'b', 'a' = 'c')").contains("twice"));
        assert!(err("ALTER TABLE t SET TBLPROPERTIES ('a' = x)").contains("'a'"));
        assert!(err("ALTER TABLE t UNSET TBLPROPERTIES ('a') extra").contains("extra"));
        assert!(err("ALTER TABLE t SET LOCATION '/x'").contains("TBLPROPERTIES"));
    }
}
