//! What a statement gives back: rows (queries, the count row of INSERT, the
//! figures row of MERGE, EXPLAIN text) or a message (DDL).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, StringArray, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;

use crate::merge::MergeOutcome;

/// The columns of a one-document output: EXPLAIN's JSON and SVG.
pub const DOCUMENT_COLUMNS: [&str; 2] = ["plan_json", "plan_svg"];

/// What a statement produced.
#[derive(Debug, Clone)]
pub enum StatementOutput {
    /// Rows (queries, and the row count of INSERT / MERGE).
    Rows {
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
    },
    /// A statement without rows (DDL): what it did.
    Done { message: String },
}

impl StatementOutput {
    /// Total number of rows in a `Rows` output.
    pub fn row_count(&self) -> usize {
        match self {
            StatementOutput::Rows { batches, .. } => batches.iter().map(|b| b.num_rows()).sum(),
            StatementOutput::Done { .. } => 0,
        }
    }

    /// A statement without rows.
    pub fn done(message: impl Into<String>) -> Self {
        StatementOutput::Done {
            message: message.into(),
        }
    }

    /// One text column named `name`, one row per line of `text`.
    pub fn text(name: &str, text: &str) -> Self {
        let schema = Arc::new(Schema::new(vec![Field::new(name, DataType::Utf8, false)]));
        let column: ArrayRef = Arc::new(StringArray::from(text.lines().collect::<Vec<_>>()));
        Self::one_batch(schema, vec![column])
    }

    /// One row, one text column `name` holding a whole document (EXPLAIN's
    /// JSON or SVG): the CLI prints it as it is.
    pub fn document(name: &str, text: &str) -> Self {
        let schema = Arc::new(Schema::new(vec![Field::new(name, DataType::Utf8, false)]));
        let column: ArrayRef = Arc::new(StringArray::from(vec![text]));
        Self::one_batch(schema, vec![column])
    }

    /// The document of a [`StatementOutput::document`] output.
    pub fn as_document(&self) -> Option<&str> {
        let StatementOutput::Rows { schema, batches } = self else {
            return None;
        };
        let [field] = schema.fields().iter().collect::<Vec<_>>()[..] else {
            return None;
        };
        if !DOCUMENT_COLUMNS.contains(&field.name().as_str()) {
            return None;
        }
        let batch = batches.iter().find(|b| b.num_rows() == 1)?;
        let text = batch.column(0).as_any().downcast_ref::<StringArray>()?;
        Some(text.value(0))
    }

    /// The value of the UInt64 column `name` of a one-row output (a figure
    /// of the MERGE result row, e.g. `commit_attempts`).
    pub fn figure(&self, name: &str) -> Option<u64> {
        let StatementOutput::Rows { schema, batches } = self else {
            return None;
        };
        let index = schema.index_of(name).ok()?;
        let [batch] = &batches[..] else {
            return None;
        };
        let column = batch.column(index).as_any().downcast_ref::<UInt64Array>()?;
        (column.len() == 1 && !column.is_null(0)).then(|| column.value(0))
    }

    /// The row of an INSERT: how many rows it wrote.
    pub fn count(rows: u64) -> Self {
        Self::figures(&[("count", rows)])
    }

    /// The MERGE result row: the count, then the per-kind figures.
    pub fn merge(outcome: &MergeOutcome, files_scanned: u64) -> Self {
        let count = outcome.stat("rows_updated")
            + outcome.stat("rows_deleted")
            + outcome.stat("rows_inserted");
        Self::figures(&[
            ("count", count),
            ("rows_updated", outcome.stat("rows_updated")),
            ("rows_deleted", outcome.stat("rows_deleted")),
            ("rows_inserted", outcome.stat("rows_inserted")),
            ("rows_copied", outcome.stat("rows_copied")),
            ("files_scanned", files_scanned),
            ("files_removed", outcome.stat("files_removed")),
            ("files_added", outcome.stat("files_added")),
            ("bytes_read", outcome.stat("bytes_read")),
            ("bytes_written", outcome.stat("bytes_written")),
            ("commit_attempts", outcome.commit_attempts),
            ("reexecutions", outcome.reexecutions),
        ])
    }

    /// One row of named UInt64 figures.
    fn figures(figures: &[(&str, u64)]) -> Self {
        let schema = Arc::new(Schema::new(
            figures
                .iter()
                .map(|(name, _)| Field::new(*name, DataType::UInt64, false))
                .collect::<Vec<_>>(),
        ));
        let columns = figures
            .iter()
            .map(|(_, v)| Arc::new(UInt64Array::from(vec![*v])) as ArrayRef)
            .collect();
        Self::one_batch(schema, columns)
    }

    fn one_batch(schema: SchemaRef, columns: Vec<ArrayRef>) -> Self {
        let batch = RecordBatch::try_new(schema.clone(), columns).expect("columns match schema");
        StatementOutput::Rows {
            schema,
            batches: vec![batch],
        }
    }
}
