//! The prepared statements of the Flight SQL service: a statement's text
//! and placeholders under a handle, the parameter values a client bound to
//! it, and the statements to run once the values are in (one per row of
//! values for an update, exactly one for a query).
//!
//! A handle lives until its client closes it, or [`PREPARED_TTL`] after its
//! last use.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use arrow::record_batch::RecordBatch;
use datafusion::error::Result;
use icemerge_planner::statement_parameters::Placeholders;
use icemerge_proto::error::{invalid_input, not_found};

/// How long an unused prepared statement is kept.
pub const PREPARED_TTL: Duration = Duration::from_secs(3600);

struct Prepared {
    sql: String,
    placeholders: Placeholders,
    /// The values last bound (`DoPut` of `CommandPreparedStatementQuery`).
    bound: Option<RecordBatch>,
    used: Instant,
}

/// The open prepared statements, by handle.
#[derive(Default)]
pub struct PreparedStatements {
    open: Mutex<HashMap<String, Prepared>>,
}

impl PreparedStatements {
    /// Prepares `sql`: returns its handle and its placeholders.
    pub fn create(&self, sql: &str) -> Result<(String, Placeholders)> {
        let placeholders = Placeholders::find(sql)?;
        let handle = uuid::Uuid::new_v4().to_string();
        let mut open = self.open.lock().expect("prepared statements lock");
        open.retain(|_, p| p.used.elapsed() < PREPARED_TTL);
        open.insert(
            handle.clone(),
            Prepared {
                sql: sql.to_string(),
                placeholders: placeholders.clone(),
                bound: None,
                used: Instant::now(),
            },
        );
        Ok((handle, placeholders))
    }

    /// Binds parameter values (one row per execution) to `handle`.
    pub fn bind(&self, handle: &str, values: RecordBatch) -> Result<()> {
        self.with(handle, |p| {
            p.bound = Some(values);
            Ok(())
        })
    }

    /// The one statement a query runs: the values bound must be one row
    /// (none when the statement takes no parameters).
    pub fn query(&self, handle: &str) -> Result<String> {
        self.with(handle, |p| {
            let rows = p.bound.as_ref().map_or(0, |b| b.num_rows());
            match (p.placeholders.count(), &p.bound) {
                (0, _) => Ok(p.sql.clone()),
                (_, Some(values)) if rows == 1 => p.placeholders.bind(&p.sql, values, 0),
                (n, _) => Err(invalid_input(format!(
                    "the prepared query takes {n} parameter(s) and runs once: bind one row of \
                     values ({rows} bound)"
                ))),
            }
        })
    }

    /// The statements an update runs: one per row of `values` (the values
    /// sent with the update, else the ones bound before); the statement
    /// itself when it takes no parameters.
    pub fn updates(&self, handle: &str, values: Option<RecordBatch>) -> Result<Vec<String>> {
        self.with(handle, |p| {
            let values = values.or_else(|| p.bound.clone());
            match (p.placeholders.count(), values) {
                (0, _) => Ok(vec![p.sql.clone()]),
                (_, Some(values)) => (0..values.num_rows())
                    .map(|row| p.placeholders.bind(&p.sql, &values, row))
                    .collect(),
                (n, None) => Err(invalid_input(format!(
                    "the prepared statement takes {n} parameter(s); none were bound"
                ))),
            }
        })
    }

    /// Closes `handle` (a handle already gone is not an error).
    pub fn close(&self, handle: &str) {
        self.open
            .lock()
            .expect("prepared statements lock")
            .remove(handle);
    }

    fn with<T>(&self, handle: &str, f: impl FnOnce(&mut Prepared) -> Result<T>) -> Result<T> {
        let mut open = self.open.lock().expect("prepared statements lock");
        let prepared = open.get_mut(handle).ok_or_else(|| {
            not_found(format!(
                "no prepared statement '{handle}': it was closed or has expired"
            ))
        })?;
        prepared.used = Instant::now();
        f(prepared)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    fn values(rows: Vec<i64>) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("p", DataType::Int64, false)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(rows))]).unwrap()
    }

    #[test]
    fn a_query_runs_with_one_row_and_an_update_once_per_row() {
        let prepared = PreparedStatements::default();
        let (handle, placeholders) = prepared.create("DELETE FROM t WHERE id = ?").unwrap();
        assert_eq!(placeholders.count(), 1);
        let e = prepared.query(&handle).unwrap_err().to_string();
        assert!(e.contains("bind one row of values (0 bound)"), "{e}");
        let e = prepared.updates(&handle, None).unwrap_err().to_string();
        assert!(e.contains("none were bound"), "{e}");
        prepared.bind(&handle, values(vec![4])).unwrap();
        assert_eq!(
            prepared.query(&handle).unwrap(),
            "DELETE FROM t WHERE id = 4"
        );
        assert_eq!(
            prepared.updates(&handle, Some(values(vec![1, 2]))).unwrap(),
            vec!["DELETE FROM t WHERE id = 1", "DELETE FROM t WHERE id = 2"]
        );
        prepared.close(&handle);
        let e = prepared.query(&handle).unwrap_err().to_string();
        assert!(e.contains("was closed or has expired"), "{e}");
    }
}
