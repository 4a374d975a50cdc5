//! The commit fragment of a MERGE, stage D (the writer tasks) → stage E (the
//! coordinator's commit): what one writer partition added (data files, and
//! in merge-on-read position delete files), what it removed, and its
//! counters.
//!
//! A fragment travels as an Arrow batch (the writer's output rows, shipped by
//! Ballista like any other result): one row per [`Fragment`], with the
//! columns `kind` (`added` / `added_delete` / `removed` / `stat`), `value`
//! (the data or delete file as iceberg's `serialize_data_file_to_json`, the
//! removed path, or the counter name) and `count` (the added file's record
//! count, 0 for a removed file, or the counter's value). [`encode`] and
//! [`decode`] are the only code that knows that layout.

use std::sync::{Arc, LazyLock};

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, StringArray, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, UInt64Type};
use arrow::error::ArrowError;

/// One entry of a writer partition's commit fragment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fragment {
    /// A data file the writer wrote (iceberg's data-file JSON).
    AddedFile {
        data_file_json: String,
        record_count: u64,
    },
    /// A position delete file the writer wrote (iceberg's data-file JSON,
    /// with an empty partition: the commit gives it the partition of the
    /// data file it references).
    AddedDeleteFile {
        delete_file_json: String,
        record_count: u64,
    },
    /// A data file of the base snapshot the writer replaced or dropped.
    RemovedFile { path: String },
    /// A counter of the writer (`rows_updated`, `bytes_read`, ...).
    Stat { name: String, count: u64 },
}

const KIND: &str = "kind";
const VALUE: &str = "value";
const COUNT: &str = "count";

const ADDED: &str = "added";
const ADDED_DELETE: &str = "added_delete";
const REMOVED: &str = "removed";
const STAT: &str = "stat";

static SCHEMA: LazyLock<SchemaRef> = LazyLock::new(|| {
    Arc::new(Schema::new(vec![
        Field::new(KIND, DataType::Utf8, false),
        Field::new(VALUE, DataType::Utf8, false),
        Field::new(COUNT, DataType::UInt64, false),
    ]))
});

/// The Arrow schema of an encoded fragment.
pub fn schema() -> SchemaRef {
    SCHEMA.clone()
}

/// `fragments` as one batch of [`schema`], in order.
pub fn encode(fragments: &[Fragment]) -> RecordBatch {
    let mut kinds = Vec::with_capacity(fragments.len());
    let mut values = Vec::with_capacity(fragments.len());
    let mut counts = Vec::with_capacity(fragments.len());
    for fragment in fragments {
        let (kind, value, count) = match fragment {
            Fragment::AddedFile {
                data_file_json,
                record_count,
            } => (ADDED, data_file_json.as_str(), *record_count),
            Fragment::AddedDeleteFile {
                delete_file_json,
                record_count,
            } => (ADDED_DELETE, delete_file_json.as_str(), *record_count),
            Fragment::RemovedFile { path } => (REMOVED, path.as_str(), 0),
            Fragment::Stat { name, count } => (STAT, name.as_str(), *count),
        };
        kinds.push(kind);
        values.push(value);
        counts.push(count);
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(kinds)),
        Arc::new(StringArray::from(values)),
        Arc::new(UInt64Array::from(counts)),
    ];
    RecordBatch::try_new(schema(), columns)
        .expect("three non-null columns of equal length match the fragment schema")
}

fn invalid(message: String) -> ArrowError {
    ArrowError::InvalidArgumentError(format!("commit fragment: {message}"))
}

fn column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a ArrayRef, ArrowError> {
    let column = batch
        .column_by_name(name)
        .ok_or_else(|| invalid(format!("no column '{name}'")))?;
    if column.null_count() > 0 {
        return Err(invalid(format!("NULL in column '{name}'")));
    }
    Ok(column)
}

fn strings<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a StringArray, ArrowError> {
    let column = column(batch, name)?;
    column
        .as_string_opt::<i32>()
        .ok_or_else(|| invalid(format!("column '{name}' is {}", column.data_type())))
}

/// The fragments in `batch` (one encoded by [`encode`]), in order. A kind
/// other than `added`, `added_delete`, `removed` or `stat` is an error
/// naming it.
pub fn decode(batch: &RecordBatch) -> Result<Vec<Fragment>, ArrowError> {
    let kinds = strings(batch, KIND)?;
    let values = strings(batch, VALUE)?;
    let counts = column(batch, COUNT)?;
    let counts = counts
        .as_primitive_opt::<UInt64Type>()
        .ok_or_else(|| invalid(format!("column '{COUNT}' is {}", counts.data_type())))?;
    (0..batch.num_rows())
        .map(|i| {
            let (value, count) = (values.value(i).to_string(), counts.value(i));
            match kinds.value(i) {
                ADDED => Ok(Fragment::AddedFile {
                    data_file_json: value,
                    record_count: count,
                }),
                ADDED_DELETE => Ok(Fragment::AddedDeleteFile {
                    delete_file_json: value,
                    record_count: count,
                }),
                REMOVED => Ok(Fragment::RemovedFile { path: value }),
                STAT => Ok(Fragment::Stat { name: value, count }),
                other => Err(invalid(format!("unknown kind '{other}' in row {i}"))),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Fragment> {
        vec![
            Fragment::AddedFile {
                data_file_json: r#"{"file_path":"s3://b/t/data/a.parquet"}"#.into(),
                record_count: 42,
            },
            Fragment::AddedDeleteFile {
                delete_file_json: r#"{"content":1,"file_path":"s3://b/t/data/d.parquet"}"#.into(),
                record_count: 3,
            },
            Fragment::RemovedFile {
                path: "s3://b/t/data/old.parquet".into(),
            },
            Fragment::Stat {
                name: "rows_updated".into(),
                count: 7,
            },
        ]
    }

    #[test]
    fn round_trip() {
        let fragments = sample();
        let batch = encode(&fragments);
        assert_eq!(batch.schema(), schema());
        assert_eq!(batch.num_rows(), 4);
        assert_eq!(decode(&batch).unwrap(), fragments);
        assert!(decode(&encode(&[])).unwrap().is_empty());
    }

    #[test]
    fn unknown_kind_is_an_error_naming_it() {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec!["added", "renamed"])),
            Arc::new(StringArray::from(vec!["{}", "x.parquet"])),
            Arc::new(UInt64Array::from(vec![1, 0])),
        ];
        let batch = RecordBatch::try_new(schema(), columns).unwrap();
        let err = decode(&batch).unwrap_err().to_string();
        assert!(err.contains("unknown kind 'renamed'"), "{err}");
    }

    #[test]
    fn a_batch_of_another_shape_is_an_error() {
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new(KIND, DataType::Int64, false)])),
            vec![Arc::new(arrow::array::Int64Array::from(vec![1]))],
        )
        .unwrap();
        let err = decode(&batch).unwrap_err().to_string();
        assert!(err.contains("column 'kind' is Int64"), "{err}");
    }
}
