//! The scheduler's statement commands, recognised in SQL text:
//! `SHOW STATEMENTS` (the running and recent statements of an
//! `icemerge-scheduler`) and `CANCEL STATEMENT <id>` (cancel one of them).
//! They are answered by the scheduler's Flight SQL service, not planned;
//! an embedded session refuses them by name. Also the leading words of a
//! statement (keywords, comments skipped), which classify statements.

use datafusion::error::Result;
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
use icemerge_proto::error::invalid_input;

/// A statement command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatementCommand {
    /// `SHOW STATEMENTS`.
    Show,
    /// `CANCEL STATEMENT <id>`.
    Cancel(u64),
}

impl StatementCommand {
    /// The command's words, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Show => "SHOW STATEMENTS",
            Self::Cancel(_) => "CANCEL STATEMENT",
        }
    }

    /// Recognises a statement command; `None` for any other statement. A
    /// command with missing or extra words is an error naming its form.
    pub fn parse(sql: &str) -> Result<Option<Self>> {
        let words = tokens(sql);
        let word = |i: usize| match words.get(i) {
            Some(Token::Word(w)) => Some(w.value.to_ascii_uppercase()),
            _ => None,
        };
        match (word(0).as_deref(), word(1).as_deref()) {
            (Some("SHOW"), Some("STATEMENTS")) => match words.len() {
                2 => Ok(Some(Self::Show)),
                _ => Err(invalid_input(
                    "SHOW STATEMENTS takes nothing after it".to_string(),
                )),
            },
            (Some("CANCEL"), _) => {
                let id = match (word(1).as_deref(), words.get(2), words.len()) {
                    (Some("STATEMENT"), Some(Token::Number(n, _)), 3) => n.parse::<u64>().ok(),
                    _ => None,
                };
                match id {
                    Some(id) => Ok(Some(Self::Cancel(id))),
                    None => Err(invalid_input(format!(
                        "expected CANCEL STATEMENT <id> (an id SHOW STATEMENTS lists), got '{}'",
                        sql.trim().trim_end_matches(';').trim()
                    ))),
                }
            }
            _ => Ok(None),
        }
    }
}

/// The first `n` words of `sql` (keywords and names, upper-cased), after
/// comments, white space and opening parentheses; fewer when the
/// statement is shorter, none when it does not tokenize.
pub fn leading_words(sql: &str, n: usize) -> Vec<String> {
    tokens(sql)
        .into_iter()
        .skip_while(|t| matches!(t, Token::LParen))
        .take(n)
        .map_while(|t| match t {
            Token::Word(w) => Some(w.value.to_ascii_uppercase()),
            _ => None,
        })
        .collect()
}

/// The statement's tokens without white space, comments and a trailing `;`.
fn tokens(sql: &str) -> Vec<Token> {
    let mut tokens: Vec<Token> = Tokenizer::new(&GenericDialect {}, sql)
        .tokenize()
        .unwrap_or_default()
        .into_iter()
        .filter(|t| !matches!(t, Token::Whitespace(_) | Token::EOF))
        .collect();
    while tokens.last() == Some(&Token::SemiColon) {
        tokens.pop();
    }
    tokens
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_the_commands() {
        let parse = |sql| StatementCommand::parse(sql).unwrap();
        assert_eq!(parse("SHOW STATEMENTS"), Some(StatementCommand::Show));
        assert_eq!(
            parse("  -- list\n show statements ;"),
            Some(StatementCommand::Show)
        );
        assert_eq!(
            parse("cancel statement 42"),
            Some(StatementCommand::Cancel(42))
        );
        assert_eq!(parse("SHOW TABLES"), None);
        assert_eq!(parse("SELECT 'CANCEL STATEMENT 1'"), None);
        for bad in [
            "CANCEL STATEMENT",
            "CANCEL STATEMENT x",
            "CANCEL 3",
            "CANCEL STATEMENT 3 4",
            "CANCEL STATEMENT -3",
        ] {
            let err = StatementCommand::parse(bad).unwrap_err().to_string();
            assert!(
                err.contains("expected CANCEL STATEMENT <id>"),
                "{bad}: {err}"
            );
        }
        let err = StatementCommand::parse("SHOW STATEMENTS LIKE 'x'").unwrap_err();
        assert!(err.to_string().contains("takes nothing after it"), "{err}");
    }

    #[test]
    fn leading_words_skip_comments_and_parentheses() {
        assert_eq!(
            leading_words("/* hi */ ( select 1)", 2),
            vec!["SELECT".to_string()]
        );
        assert_eq!(
            leading_words("-- x\nINSERT OVERWRITE t SELECT 1", 2),
            vec!["INSERT".to_string(), "OVERWRITE".to_string()]
        );
        assert!(leading_words("", 1).is_empty());
    }
}
