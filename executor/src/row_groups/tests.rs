//! Row groups chosen from a real Parquet file's footer, and the rows read
//! back through those runs carrying their positions in the whole file.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{AsArray, Int64Array, StringArray};
use arrow::datatypes::{DataType, Field, Int64Type, Schema as ArrowSchema};
use arrow::record_batch::RecordBatch;
use datafusion::physical_plan::metrics::Count;
use futures::TryStreamExt;
use iceberg::expr::{Bind, Predicate, Reference};
use iceberg::scan::FileScanTask;
use iceberg::spec::{DataFileFormat, Datum, NestedField, PrimitiveType, Schema, Type};
use parquet::arrow::{ArrowWriter, PARQUET_FIELD_ID_META_KEY};
use parquet::file::properties::WriterProperties;

use super::*;
use crate::deletes::DataFileDeletes;
use crate::file_io::file_io_from_props;
use crate::live_rows::read_live_rows_in;

const ROWS: i64 = 1000;
const PER_GROUP: usize = 100;

fn field(name: &str, data_type: DataType, id: i32) -> Field {
    Field::new(name, data_type, true).with_metadata(HashMap::from([(
        PARQUET_FIELD_ID_META_KEY.to_string(),
        id.to_string(),
    )]))
}

fn table_schema() -> Arc<Schema> {
    Arc::new(
        Schema::builder()
            .with_fields(vec![
                NestedField::optional(1, "k", Type::Primitive(PrimitiveType::Long)).into(),
                NestedField::optional(2, "s", Type::Primitive(PrimitiveType::String)).into(),
            ])
            .build()
            .unwrap(),
    )
}

/// A file of `ROWS` rows in row groups of `PER_GROUP`: `k` = position
/// (sorted), `s` NULL in the row groups from 500 on.
fn write_file(dir: &std::path::Path) -> (String, u64) {
    let schema = Arc::new(ArrowSchema::new(vec![
        field("k", DataType::Int64, 1),
        field("s", DataType::Utf8, 2),
    ]));
    let path = dir.join("data.parquet");
    let file = std::fs::File::create(&path).unwrap();
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(PER_GROUP))
        .build();
    let mut writer = ArrowWriter::try_new(file, schema.clone(), Some(props)).unwrap();
    let keys = Int64Array::from_iter_values(0..ROWS);
    let strings = StringArray::from_iter((0..ROWS).map(|i| (i < 500).then(|| format!("v{i:04}"))));
    let batch = RecordBatch::try_new(schema, vec![Arc::new(keys), Arc::new(strings)]).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    let size = std::fs::metadata(&path).unwrap().len();
    (format!("file://{}", path.display()), size)
}

fn bound(predicate: Predicate) -> BoundPredicate {
    predicate.bind(table_schema(), true).unwrap()
}

async fn kept(path: &str, size: u64, predicates: &[Predicate]) -> RowGroupSelection {
    let file_io = file_io_from_props(&HashMap::new());
    let bound: Vec<BoundPredicate> = predicates.iter().cloned().map(bound).collect();
    let refs: Vec<&BoundPredicate> = bound.iter().collect();
    select_row_groups(&file_io, path, size, &refs, &Count::new())
        .await
        .unwrap()
}

/// The first rows of the runs of a selection.
fn first_rows(selection: &RowGroupSelection) -> Vec<i64> {
    match selection {
        RowGroupSelection::All => vec![0],
        RowGroupSelection::Runs { runs, .. } => runs.iter().map(|r| r.first_row).collect(),
    }
}

#[tokio::test]
async fn row_groups_are_kept_by_their_statistics() {
    let dir = tempfile::tempdir().unwrap();
    let (path, size) = write_file(dir.path());
    let k = || Reference::new("k");

    // Nothing to prune with, or nothing pruned: the whole file.
    assert_eq!(kept(&path, size, &[]).await, RowGroupSelection::All);
    assert_eq!(
        kept(&path, size, &[k().greater_than_or_equal_to(Datum::long(0))]).await,
        RowGroupSelection::All
    );

    // k < 150: row groups 0 and 1, one run from row 0.
    let below = kept(&path, size, &[k().less_than(Datum::long(150))]).await;
    assert_eq!(first_rows(&below), vec![0]);

    // k = 250 or k in (720, 730, 999): row groups 2, 7 and 9, three runs.
    let scattered = kept(
        &path,
        size,
        &[k().equal_to(Datum::long(250)).or(k().is_in([
            Datum::long(720),
            Datum::long(730),
            Datum::long(999),
        ]))],
    )
    .await;
    assert_eq!(first_rows(&scattered), vec![200, 700, 900]);

    // Two predicates must both hold: k >= 300 and s IS NOT NULL (s is NULL
    // from row 500): row groups 3 and 4.
    let both = kept(
        &path,
        size,
        &[
            k().greater_than_or_equal_to(Datum::long(300)),
            Reference::new("s").is_not_null(),
        ],
    )
    .await;
    assert_eq!(first_rows(&both), vec![300]);

    // A string comparison against the row groups' bounds.
    let strings = kept(
        &path,
        size,
        &[Reference::new("s").equal_to(Datum::string("v0150"))],
    )
    .await;
    assert_eq!(first_rows(&strings), vec![100]);

    // Out of every range: nothing to read.
    assert_eq!(
        kept(&path, size, &[k().greater_than(Datum::long(ROWS))]).await,
        RowGroupSelection::Runs {
            runs: vec![],
            pruned: 10
        }
    );
    // NOT (k < 150) is k >= 150: row groups 1 to 9.
    let negated = kept(&path, size, &[k().less_than(Datum::long(150)).negate()]).await;
    assert_eq!(first_rows(&negated), vec![100]);
}

#[tokio::test]
async fn rows_read_through_runs_keep_their_positions_in_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let (path, size) = write_file(dir.path());
    let k = || Reference::new("k");
    let selection = kept(
        &path,
        size,
        &[k()
            .less_than(Datum::long(120))
            .or(k().is_in([Datum::long(555), Datum::long(980)]))],
    )
    .await;
    assert_eq!(first_rows(&selection), vec![0, 500, 900]);

    let task = FileScanTask::builder()
        .with_file_size_in_bytes(size)
        .with_start(0)
        .with_length(size)
        .with_record_count(Some(ROWS as u64))
        .with_data_file_path(path.clone())
        .with_data_file_format(DataFileFormat::Parquet)
        .with_schema(table_schema())
        .with_project_field_ids(vec![1])
        .with_case_sensitive(true)
        .build();
    let file_io = file_io_from_props(&HashMap::new());
    let batches: Vec<_> = read_live_rows_in(
        file_io,
        task,
        DataFileDeletes::default(),
        64,
        Count::new(),
        selection,
    )
    .unwrap()
    .try_collect()
    .await
    .unwrap();
    let mut keys: Vec<i64> = vec![];
    let mut positions: Vec<i64> = vec![];
    for live in &batches {
        keys.extend(live.batch.column(0).as_primitive::<Int64Type>().values());
        positions.extend(live.positions.values());
    }
    let expected: Vec<i64> = (0..200).chain(500..600).chain(900..1000).collect();
    // k equals the row's position in the file: each row's position is its own.
    assert_eq!(keys, expected);
    assert_eq!(positions, expected);
}
