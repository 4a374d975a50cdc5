//! The merge rows of a writer's input batch (the contract of
//! `icemerge_proto::merge_rows`) as both MERGE writers read them: the
//! operation, the row id, the ON-key text for errors, and the target
//! columns in the table's types; and the duplicate-match error they raise.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, Int64Array, Int8Array, RecordBatch, StringViewArray, UInt32Array,
};
use arrow::datatypes::{DataType, Int64Type, Int8Type, Schema, SchemaRef};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::error::{DataFusionError, Result};
use icemerge_proto::merge_rows::{MergeOp, FILE_COLUMN, KEY_COLUMN, OP_COLUMN, POS_COLUMN};

use icemerge_proto::error::{internal, invalid_input};

/// The `_file` column as string views (the row-id scan makes views; a
/// plan may have turned them into another string type on the way).
pub(crate) fn file_views(column: &arrow::array::ArrayRef) -> Result<StringViewArray> {
    if column.data_type() == &DataType::Utf8View {
        return Ok(column.as_string_view().clone());
    }
    Ok(arrow::compute::cast(column, &DataType::Utf8View)?
        .as_string_view()
        .clone())
}

/// `id=2, k=x`: the fields of the key struct `keys` at row `i` (NULL
/// values as `NULL`); `None` for a key that is not a struct.
fn key_text(keys: &ArrayRef, i: usize) -> Option<String> {
    let keys = keys.as_struct_opt()?;
    let options = FormatOptions::default().with_null("NULL");
    let parts: Option<Vec<String>> = keys
        .fields()
        .iter()
        .zip(keys.columns())
        .map(|(field, values)| {
            let value = ArrayFormatter::try_new(values.as_ref(), &options).ok()?;
            Some(format!("{}={}", field.name(), value.value(i)))
        })
        .collect();
    Some(parts?.join(", "))
}

/// The merge-row contract columns of one batch, and its target columns.
pub(crate) struct MergeRows {
    pub ops: Int8Array,
    files: Option<StringViewArray>,
    positions: Option<Int64Array>,
    /// The ON-key values: a struct of the key columns (or an all-NULL
    /// column when there is none).
    keys: Option<ArrayRef>,
    /// The target columns (they come last), in the table's types.
    pub values: RecordBatch,
}

impl MergeRows {
    /// The operation of row `i`, if it is a known one.
    pub fn op(&self, i: usize) -> Option<MergeOp> {
        MergeOp::try_from(self.ops.value(i)).ok()
    }

    /// The row id of row `i`.
    pub fn row_id(&self, i: usize) -> Result<(&str, i64)> {
        let (Some(files), Some(positions)) = (&self.files, &self.positions) else {
            return Err(internal("merge rows without row ids"));
        };
        Ok((files.value(i), positions.value(i)))
    }

    /// Rows `i` and `j` have the same data file (equal string views, as
    /// rows taken from one batch have, are the same file without comparing
    /// the paths).
    pub fn same_file(&self, i: usize, j: usize) -> bool {
        let Some(files) = &self.files else {
            return true;
        };
        files.views()[i] == files.views()[j] || files.value(i) == files.value(j)
    }

    /// How an error names the target row `i` at `pos`: `key (id=2, k=x)`.
    fn describe(&self, i: usize, pos: i64) -> String {
        self.keys
            .as_ref()
            .filter(|k| k.is_valid(i))
            .and_then(|k| key_text(k, i))
            .map(|k| format!("key ({k})"))
            .unwrap_or_else(|| format!("row at position {pos}"))
    }

    /// The error for target row `i` (at `file`, `pos`) acted on a second
    /// time.
    pub fn duplicate_match(&self, i: usize, file: &str, pos: i64) -> DataFusionError {
        let key = self.describe(i, pos);
        invalid_input(format!(
            "MERGE: target row {key} in data file {file} matched more than one source row; \
             the table was not changed"
        ))
    }

    /// The target columns of the rows whose operation is `op`, if any.
    pub fn values_of(&self, op: MergeOp) -> Result<Option<RecordBatch>> {
        let rows: Vec<u32> = (0..self.ops.len())
            .filter(|&i| self.ops.value(i) == op as i8)
            .map(|i| i as u32)
            .collect();
        if rows.is_empty() {
            return Ok(None);
        }
        let idx = UInt32Array::from(rows);
        Ok(Some(arrow::compute::take_record_batch(&self.values, &idx)?))
    }
}

/// Reads [`MergeRows`] out of batches whose last columns are the target's.
pub(crate) struct MergeRowReader {
    /// Number of target columns (they follow the contract columns).
    columns: usize,
    /// The table's Arrow schema with every field nullable.
    values_schema: SchemaRef,
}

impl MergeRowReader {
    /// A reader for a table whose (writer's) Arrow schema is `table`.
    pub fn new(table: &Schema) -> Self {
        let values_schema = Arc::new(Schema::new(
            table
                .fields()
                .iter()
                .map(|f| f.as_ref().clone().with_nullable(true))
                .collect::<Vec<_>>(),
        ));
        Self {
            columns: table.fields().len(),
            values_schema,
        }
    }

    /// The target columns of a merge-row batch (they come last).
    fn values(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let start = batch
            .num_columns()
            .checked_sub(self.columns)
            .ok_or_else(|| internal("merge rows lack the target columns"))?;
        let values = batch.project(&(start..batch.num_columns()).collect::<Vec<_>>())?;
        // Deleted rows carry NULLs, also in required columns: required-ness
        // is checked where rows are written.
        crate::scan_exec::conform(&self.values_schema, values)
    }

    pub fn read(&self, batch: &RecordBatch) -> Result<MergeRows> {
        let ops = batch
            .column_by_name(OP_COLUMN)
            .ok_or_else(|| internal("merge rows without operation"))?
            .as_primitive::<Int8Type>()
            .clone();
        let column = |name: &str| batch.column_by_name(name);
        Ok(MergeRows {
            ops,
            files: column(FILE_COLUMN).map(file_views).transpose()?,
            positions: column(POS_COLUMN).map(|c| c.as_primitive::<Int64Type>().clone()),
            keys: column(KEY_COLUMN).cloned(),
            values: self.values(batch)?,
        })
    }
}
