//! Error reporting: turns an error into the single `error: <message>` line
//! the command prints on stderr (newlines collapsed, DataFusion's noisy
//! category prefixes stripped).

use std::fmt::Display;

/// Category prefixes DataFusion (and Arrow) put in front of an error's
/// message; they say nothing a user needs, so they are stripped from the
/// start of a message (repeatedly: errors wrap errors), with the space that
/// follows them.
const NOISY_PREFIXES: &[&str] = &[
    "Error during planning:",
    "External error:",
    "Execution error:",
    "This feature is not implemented:",
    "Invalid or Unsupported Configuration:",
    "Arrow error:",
    "Schema error:",
];

/// Cleans an error message for one-line display: lines are trimmed and
/// joined with single spaces, and noisy prefixes are stripped from the start
/// for as long as one matches.
pub fn clean_error_message(message: &str) -> String {
    let joined = message
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let mut rest = joined.as_str();
    'strip: loop {
        for prefix in NOISY_PREFIXES {
            if let Some(stripped) = rest.strip_prefix(prefix) {
                if stripped.is_empty() || stripped.starts_with(' ') {
                    rest = stripped.trim_start();
                    continue 'strip;
                }
            }
        }
        break;
    }
    if rest.is_empty() {
        "unknown error".to_string()
    } else {
        rest.to_string()
    }
}

/// The cleaned one-line message of an error.
pub fn error_message(error: &dyn Display) -> String {
    clean_error_message(&error.to_string())
}

/// Prints `error: <message>` as one line on stderr.
pub fn report(error: &dyn Display) {
    eprintln!("error: {}", error_message(error));
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::error::DataFusionError;

    #[test]
    fn strips_planning_prefix() {
        let e = DataFusionError::Plan("table 'default.t' does not exist".into());
        assert_eq!(error_message(&e), "table 'default.t' does not exist");
    }

    #[test]
    fn strips_nested_prefixes_repeatedly() {
        let e = DataFusionError::External(Box::new(DataFusionError::Execution("disk full".into())));
        assert_eq!(error_message(&e), "disk full");
        assert_eq!(
            clean_error_message("External error: Error during planning: Execution error: boom"),
            "boom"
        );
    }

    #[test]
    fn strips_not_implemented_and_configuration() {
        let e = DataFusionError::NotImplemented("MERGE is not supported yet".into());
        assert_eq!(error_message(&e), "MERGE is not supported yet");
        let e = DataFusionError::Configuration("unsupported catalog URI 'x'".into());
        assert_eq!(error_message(&e), "unsupported catalog URI 'x'");
    }

    #[test]
    fn collapses_newlines() {
        assert_eq!(
            clean_error_message("Error during planning: first line\n  second line\r\n\nthird\n"),
            "first line second line third"
        );
    }

    #[test]
    fn keeps_prefixes_that_are_not_at_the_start() {
        assert_eq!(
            clean_error_message("while committing: Execution error: conflict"),
            "while committing: Execution error: conflict"
        );
    }

    #[test]
    fn empty_message() {
        assert_eq!(clean_error_message("Execution error: "), "unknown error");
        assert_eq!(clean_error_message(""), "unknown error");
    }
}
