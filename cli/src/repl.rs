//! The interactive prompt: reads statements with rustyline (history in
//! `~/.icemerge_history`), lets a statement span lines until it ends with
//! `;`, runs it and keeps going after errors.

use std::io::Write;
use std::path::PathBuf;

use rustyline::error::ReadlineError;
use rustyline::history::DefaultHistory;
use rustyline::{Config, Editor};

use crate::backend::Backend;
use crate::error;
use crate::output::Printer;
use crate::script::run_script;

/// The prompt of a new statement.
pub const PROMPT: &str = "icemerge> ";
/// The prompt of a statement's further lines.
pub const CONTINUATION_PROMPT: &str = "      -> ";

const HISTORY_FILE: &str = ".icemerge_history";
const HISTORY_SIZE: usize = 1000;

/// What a line typed at the prompt means.
#[derive(Debug, PartialEq, Eq)]
pub enum LineAction {
    /// End the session.
    Quit,
    /// Nothing to do (a blank line with no statement pending).
    Skip,
    /// More lines are needed: the statement does not end with `;` yet.
    Continue,
    /// The buffer holds complete statements: run them.
    Run(String),
}

/// Accumulates typed lines into statements.
#[derive(Debug, Default)]
pub struct LineBuffer {
    buffer: String,
}

impl LineBuffer {
    /// Whether a statement is pending (the continuation prompt is due).
    pub fn is_pending(&self) -> bool {
        !self.buffer.is_empty()
    }

    /// Drops the pending statement (Ctrl-C).
    pub fn clear(&mut self) {
        self.buffer.clear();
    }

    /// Adds a typed line. `\q` quits at any point; `quit` and `exit` only
    /// when no statement is pending.
    pub fn push_line(&mut self, line: &str) -> LineAction {
        let trimmed = line.trim();
        if trimmed == "\\q" {
            return LineAction::Quit;
        }
        if self.buffer.is_empty() {
            let word = trimmed.trim_end_matches(';').trim_end();
            if word.eq_ignore_ascii_case("quit") || word.eq_ignore_ascii_case("exit") {
                return LineAction::Quit;
            }
            if trimmed.is_empty() {
                return LineAction::Skip;
            }
        } else {
            self.buffer.push('\n');
        }
        self.buffer.push_str(line);
        if self.buffer.trim_end().ends_with(';') {
            LineAction::Run(std::mem::take(&mut self.buffer).trim().to_string())
        } else {
            LineAction::Continue
        }
    }
}

fn history_path() -> Option<PathBuf> {
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty())?;
    Some(PathBuf::from(home).join(HISTORY_FILE))
}

/// Runs the prompt until `\q`, `quit`, `exit` or Ctrl-D.
pub async fn run(session: &Backend, printer: &Printer) -> anyhow::Result<()> {
    let config = Config::builder()
        .max_history_size(HISTORY_SIZE)?
        .auto_add_history(false)
        .build();
    let mut editor: Editor<(), DefaultHistory> = Editor::with_config(config)?;
    let history = history_path();
    if let Some(path) = &history {
        let _ = editor.load_history(path);
    }
    let mut lines = LineBuffer::default();
    loop {
        let prompt = if lines.is_pending() {
            CONTINUATION_PROMPT
        } else {
            PROMPT
        };
        let line = match editor.readline(prompt) {
            Ok(line) => line,
            Err(ReadlineError::Interrupted) => {
                lines.clear();
                continue;
            }
            Err(ReadlineError::Eof) => break,
            Err(e) => return Err(e.into()),
        };
        let sql = match lines.push_line(&line) {
            LineAction::Quit => break,
            LineAction::Skip | LineAction::Continue => continue,
            LineAction::Run(sql) => sql,
        };
        let _ = editor.add_history_entry(sql.as_str());
        if let Some(path) = &history {
            let _ = editor.save_history(path);
        }
        let mut stdout = std::io::stdout().lock();
        let result = run_script(session, &sql, printer, &mut stdout).await;
        let _ = stdout.flush();
        drop(stdout);
        if let Err(e) = result {
            error::report(&e);
        }
    }
    if let Some(path) = &history {
        let _ = editor.save_history(path);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statement_spanning_lines() {
        let mut lines = LineBuffer::default();
        assert_eq!(lines.push_line("SELECT 1,"), LineAction::Continue);
        assert!(lines.is_pending());
        assert_eq!(
            lines.push_line("  2;  "),
            LineAction::Run("SELECT 1,\n  2;".into())
        );
        assert!(!lines.is_pending());
    }

    #[test]
    fn quit_words() {
        let mut lines = LineBuffer::default();
        assert_eq!(lines.push_line("  "), LineAction::Skip);
        assert_eq!(lines.push_line("quit"), LineAction::Quit);
        assert_eq!(lines.push_line("EXIT;"), LineAction::Quit);
        assert_eq!(lines.push_line("\\q"), LineAction::Quit);
        // Inside a statement, `exit` is SQL text but `\q` still quits.
        assert_eq!(lines.push_line("SELECT"), LineAction::Continue);
        assert_eq!(lines.push_line("exit"), LineAction::Continue);
        assert_eq!(lines.push_line("\\q"), LineAction::Quit);
    }

    #[test]
    fn clear_drops_pending_statement() {
        let mut lines = LineBuffer::default();
        assert_eq!(lines.push_line("SELECT"), LineAction::Continue);
        lines.clear();
        assert_eq!(
            lines.push_line("SELECT 2;"),
            LineAction::Run("SELECT 2;".into())
        );
    }
}
