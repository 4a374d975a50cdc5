//! Running SQL text: splits it into statements, executes them in order on a
//! session (embedded or remote) and prints each output as soon as its statement completes,
//! stopping at the first error.

use std::fmt;
use std::io::{self, Write};

use arrow::error::ArrowError;
use datafusion::error::DataFusionError;
use icemerge_planner::ddl::split_statements;
use icemerge_proto::error::{ErrorKind, IcemergeError};

use crate::backend::Backend;
use crate::output::Printer;

/// Why running a script stopped.
#[derive(Debug)]
pub enum RunError {
    /// A statement failed (or the text did not split into statements).
    Sql(DataFusionError),
    /// Printing an output failed.
    Output(anyhow::Error),
}

impl RunError {
    /// Whether a statement was cancelled (Ctrl-C): the command then exits
    /// as an interrupted one.
    pub fn is_cancelled(&self) -> bool {
        matches!(self, RunError::Sql(e) if IcemergeError::kind_of(e) == Some(ErrorKind::Cancelled))
    }

    /// Whether printing failed because the reader of stdout went away
    /// (e.g. `icemerge ... | head`): not worth an error message.
    pub fn is_broken_pipe(&self) -> bool {
        let RunError::Output(error) = self else {
            return false;
        };
        error.chain().any(|cause| {
            if let Some(io) = cause.downcast_ref::<io::Error>() {
                return io.kind() == io::ErrorKind::BrokenPipe;
            }
            match cause.downcast_ref::<ArrowError>() {
                Some(ArrowError::IoError(_, io)) => io.kind() == io::ErrorKind::BrokenPipe,
                Some(other) => other.to_string().contains("Broken pipe"),
                None => false,
            }
        })
    }
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Sql(e) => write!(f, "{e}"),
            RunError::Output(e) => write!(f, "cannot write output: {e:#}"),
        }
    }
}

/// Runs every statement of `sql` in order, writing each output to `out`
/// (flushed after each statement); stops at the first error.
pub async fn run_script(
    session: &Backend,
    sql: &str,
    printer: &Printer,
    out: &mut dyn Write,
) -> Result<(), RunError> {
    for statement in split_statements(sql).map_err(RunError::Sql)? {
        let output = session
            .execute_one(&statement)
            .await
            .map_err(RunError::Sql)?;
        printer
            .write(out, &output)
            .and_then(|()| out.flush().map_err(Into::into))
            .map_err(RunError::Output)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use icemerge_scheduler::{CatalogOptions, Session, SessionOptions};

    use super::*;
    use crate::output::Format;

    async fn session(dir: &std::path::Path) -> Backend {
        let options = SessionOptions {
            catalog: CatalogOptions {
                warehouse: dir.to_path_buf(),
                catalog_uri: None,
                ..Default::default()
            },
            ..Default::default()
        };
        Backend::Embedded(Session::open(options).await.expect("open session"))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn runs_statements_in_order_and_stops_at_first_error() {
        let dir = tempfile::tempdir().unwrap();
        let session = session(dir.path()).await;
        let printer = Printer {
            format: Format::Table,
            quiet: false,
        };
        let mut out = Vec::new();
        let sql = "CREATE SCHEMA s;
                   CREATE TABLE s.t (id BIGINT, name VARCHAR);
                   INSERT INTO s.t VALUES (2, 'b'), (1, NULL);
                   SELECT id, name FROM s.t ORDER BY id;
                   SELECT * FROM missing;
                   SELECT 1;";
        let error = run_script(&session, sql, &printer, &mut out)
            .await
            .unwrap_err();
        assert!(matches!(error, RunError::Sql(_)), "{error}");
        assert!(!error.is_broken_pipe());
        let printed = String::from_utf8(out).unwrap();
        let expected = "\
CREATE SCHEMA s
CREATE TABLE s.t
+-------+
| count |
+-------+
|     2 |
+-------+
(1 row)
+----+------+
| id | name |
+----+------+
|  1 | NULL |
|  2 | b    |
+----+------+
(2 rows)
";
        assert_eq!(printed, expected);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn csv_output_of_a_query() {
        let dir = tempfile::tempdir().unwrap();
        let session = session(dir.path()).await;
        let printer = Printer {
            format: Format::Csv,
            quiet: false,
        };
        let mut out = Vec::new();
        run_script(
            &session,
            "SELECT 1 AS a, 'x' AS b; CREATE SCHEMA s2",
            &printer,
            &mut out,
        )
        .await
        .unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "a,b\n1,x\n");
    }
}
