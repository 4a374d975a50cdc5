//! Trino-like Iceberg metadata ("system") tables.
//!
//! This module owns the Arrow schemas and the record-batch builders for the
//! read-only metadata tables that can be queried next to an Iceberg table:
//!
//! * `$snapshots` ([`snapshots_schema`] / [`snapshots_batch`]): one row per
//!   snapshot recorded in the table metadata, ordered by commit time.
//! * `$files` ([`files_schema`] / [`files_batch`]): one row per live data or
//!   delete file of the table's current snapshot, ordered by file path.
//! * `$partitions` ([`partitions_schema`] / [`partitions_batch`]): `$files`
//!   summed per partition.
//!
//! Everything here works from an [`iceberg::table::Table`] only (metadata,
//! manifest lists and manifests); no data files are read. Registering these
//! batches as DataFusion tables is left to the caller.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, Int32Array, Int32Builder, Int64Array, Int64Builder, MapBuilder, StringArray,
    StringBuilder, StructArray, TimestampMillisecondArray,
};
use arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};
use arrow::record_batch::RecordBatch;
use datafusion::error::{DataFusionError, Result};
use iceberg::spec::{
    DataContentType, Datum, Literal, ManifestEntryRef, ManifestStatus, PartitionSpec,
    PrimitiveLiteral, PrimitiveType, Schema as IcebergSchema, Struct, Transform, Type,
};
use iceberg::table::Table;

use super::manifests::load_manifests;
use icemerge_proto::error::io_error;

/// Map type produced by arrow's `MapBuilder` with default field names
/// (`entries` / `keys` / `values`, values nullable).
fn map_type(key: DataType, value: DataType) -> DataType {
    DataType::Map(
        Arc::new(Field::new(
            "entries",
            DataType::Struct(Fields::from(vec![
                Field::new("keys", key, false),
                Field::new("values", value, true),
            ])),
            false,
        )),
        false,
    )
}

fn iceberg_err(context: impl std::fmt::Display, e: iceberg::Error) -> DataFusionError {
    io_error(format!("{context}: {e}"))
}

fn arrow_err(context: &str, e: arrow::error::ArrowError) -> DataFusionError {
    DataFusionError::ArrowError(Box::new(e), Some(context.to_string()))
}

// ---------------------------------------------------------------------------
// $snapshots
// ---------------------------------------------------------------------------

/// Schema of the `$snapshots` system table.
pub fn snapshots_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new(
            "committed_at",
            DataType::Timestamp(TimeUnit::Millisecond, Some("+00:00".into())),
            false,
        ),
        Field::new("snapshot_id", DataType::Int64, false),
        Field::new("parent_id", DataType::Int64, true),
        Field::new("operation", DataType::Utf8, true),
        Field::new("manifest_list", DataType::Utf8, true),
        Field::new("summary", map_type(DataType::Utf8, DataType::Utf8), true),
    ]))
}

/// One row per snapshot of `table`, ordered by commit time (ties broken by
/// sequence number, then snapshot id).
pub fn snapshots_batch(table: &Table) -> Result<RecordBatch> {
    let mut snapshots: Vec<_> = table.metadata().snapshots().collect();
    snapshots.sort_by_key(|s| (s.timestamp_ms(), s.sequence_number(), s.snapshot_id()));

    let mut committed_at = Vec::with_capacity(snapshots.len());
    let mut snapshot_id = Vec::with_capacity(snapshots.len());
    let mut parent_id = Vec::with_capacity(snapshots.len());
    let mut operation = Vec::with_capacity(snapshots.len());
    let mut manifest_list = Vec::with_capacity(snapshots.len());
    let mut summary = MapBuilder::new(None, StringBuilder::new(), StringBuilder::new());

    for snapshot in snapshots {
        committed_at.push(snapshot.timestamp_ms());
        snapshot_id.push(snapshot.snapshot_id());
        parent_id.push(snapshot.parent_snapshot_id());
        operation.push(snapshot.summary().operation.as_str().to_string());
        manifest_list.push(snapshot.manifest_list().to_string());

        let mut props: Vec<_> = snapshot.summary().additional_properties.iter().collect();
        props.sort();
        for (k, v) in props {
            summary.keys().append_value(k);
            summary.values().append_value(v);
        }
        summary
            .append(true)
            .map_err(|e| arrow_err("building $snapshots summary", e))?;
    }

    let columns: Vec<ArrayRef> = vec![
        Arc::new(TimestampMillisecondArray::from(committed_at).with_timezone("+00:00")),
        Arc::new(Int64Array::from(snapshot_id)),
        Arc::new(Int64Array::from(parent_id)),
        Arc::new(StringArray::from(operation)),
        Arc::new(StringArray::from(manifest_list)),
        Arc::new(summary.finish()),
    ];
    RecordBatch::try_new(snapshots_schema(), columns)
        .map_err(|e| arrow_err("building $snapshots batch", e))
}

// ---------------------------------------------------------------------------
// $files
// ---------------------------------------------------------------------------

/// The fields describing one file, shared by `$files` (its first columns)
/// and `$entries` (its `data_file` struct).
fn data_file_fields() -> Vec<Field> {
    let counts = map_type(DataType::Int32, DataType::Int64);
    let bounds = map_type(DataType::Int32, DataType::Utf8);
    vec![
        Field::new("content", DataType::Int32, false),
        Field::new("file_path", DataType::Utf8, false),
        Field::new("file_format", DataType::Utf8, false),
        Field::new("spec_id", DataType::Int32, false),
        Field::new("partition", DataType::Utf8, false),
        Field::new("record_count", DataType::Int64, false),
        Field::new("file_size_in_bytes", DataType::Int64, false),
        Field::new("column_sizes", counts.clone(), true),
        Field::new("value_counts", counts.clone(), true),
        Field::new("null_value_counts", counts, true),
        Field::new("lower_bounds", bounds.clone(), true),
        Field::new("upper_bounds", bounds, true),
        Field::new("sort_order_id", DataType::Int32, true),
    ]
}

/// Schema of the `$files` system table.
pub fn files_schema() -> SchemaRef {
    let mut fields = data_file_fields();
    fields.push(Field::new("sequence_number", DataType::Int64, true));
    fields.push(Field::new("snapshot_id", DataType::Int64, true));
    Arc::new(Schema::new(fields))
}

/// One live file (data or delete) of the current snapshot, with the context
/// needed to render it.
struct FileRow {
    entry: ManifestEntryRef,
    spec_id: i32,
    partition: String,
}

/// The live (not `DELETED`) data and delete files of the current snapshot
/// of `table`, ordered by file path; none when it has no snapshot.
async fn live_files(table: &Table) -> Result<Vec<FileRow>> {
    manifest_entries(table, false).await
}

/// The entries of the current snapshot's manifests (with `deleted`, also
/// those of files the snapshot removed), ordered by file path.
async fn manifest_entries(table: &Table, deleted: bool) -> Result<Vec<FileRow>> {
    let Some(snapshot) = table.metadata().current_snapshot() else {
        return Ok(vec![]);
    };

    let manifest_list = table
        .manifest_list_reader(snapshot)
        .load()
        .await
        .map_err(|e| {
            iceberg_err(
                format!(
                    "failed to read manifest list {} of snapshot {}",
                    snapshot.manifest_list(),
                    snapshot.snapshot_id()
                ),
                e,
            )
        })?;

    let manifest_files = manifest_list.entries();
    let manifests = load_manifests(table.file_io(), manifest_files)
        .await
        .map_err(|e| io_error(e.to_string()))?;
    let per_manifest = manifest_files
        .iter()
        .zip(&manifests)
        .map(|(manifest_file, manifest)| {
            let spec = manifest.metadata().partition_spec();
            let schema = manifest.metadata().schema();
            manifest
                .entries()
                .iter()
                .filter(|entry| deleted || entry.status() != ManifestStatus::Deleted)
                .map(|entry| FileRow {
                    entry: entry.clone(),
                    spec_id: manifest_file.partition_spec_id,
                    partition: render_partition(entry.data_file().partition(), spec, schema),
                })
                .collect::<Vec<_>>()
        });

    let mut rows: Vec<FileRow> = per_manifest.into_iter().flatten().collect();
    rows.sort_by(|a, b| a.entry.file_path().cmp(b.entry.file_path()));
    Ok(rows)
}

/// One row per live (not `DELETED`) data or delete file of the current
/// snapshot of `table`, ordered by file path. Empty when the table has no
/// snapshot.
pub async fn files_batch(table: &Table) -> Result<RecordBatch> {
    let rows = live_files(table).await?;
    let mut sequence_number = Int64Builder::with_capacity(rows.len());
    let mut snapshot_id = Int64Builder::with_capacity(rows.len());
    for row in &rows {
        sequence_number.append_option(row.entry.sequence_number());
        snapshot_id.append_option(row.entry.snapshot_id());
    }
    let mut columns = data_file_columns(&rows)?;
    columns.push(Arc::new(sequence_number.finish()));
    columns.push(Arc::new(snapshot_id.finish()));
    RecordBatch::try_new(files_schema(), columns).map_err(|e| arrow_err("building $files batch", e))
}

/// The [`data_file_fields`] columns of `rows`.
fn data_file_columns(rows: &[FileRow]) -> Result<Vec<ArrayRef>> {
    let n = rows.len();
    let mut content = Int32Builder::with_capacity(n);
    let mut file_path = StringBuilder::new();
    let mut file_format = StringBuilder::new();
    let mut spec_id = Int32Builder::with_capacity(n);
    let mut partition = StringBuilder::new();
    let mut record_count = Int64Builder::with_capacity(n);
    let mut file_size = Int64Builder::with_capacity(n);
    let mut column_sizes = MapBuilder::new(None, Int32Builder::new(), Int64Builder::new());
    let mut value_counts = MapBuilder::new(None, Int32Builder::new(), Int64Builder::new());
    let mut null_value_counts = MapBuilder::new(None, Int32Builder::new(), Int64Builder::new());
    let mut lower_bounds = MapBuilder::new(None, Int32Builder::new(), StringBuilder::new());
    let mut upper_bounds = MapBuilder::new(None, Int32Builder::new(), StringBuilder::new());
    let mut sort_order_id = Int32Builder::with_capacity(n);

    for row in rows {
        let data_file = row.entry.data_file();
        content.append_value(data_file.content_type() as i32);
        file_path.append_value(data_file.file_path());
        file_format.append_value(data_file.file_format().to_string().to_uppercase());
        spec_id.append_value(row.spec_id);
        partition.append_value(&row.partition);
        record_count.append_value(to_i64(data_file.record_count()));
        file_size.append_value(to_i64(data_file.file_size_in_bytes()));
        append_count_map(&mut column_sizes, data_file.column_sizes())?;
        append_count_map(&mut value_counts, data_file.value_counts())?;
        append_count_map(&mut null_value_counts, data_file.null_value_counts())?;
        append_bound_map(&mut lower_bounds, data_file.lower_bounds())?;
        append_bound_map(&mut upper_bounds, data_file.upper_bounds())?;
        sort_order_id.append_option(data_file.sort_order_id());
    }

    Ok(vec![
        Arc::new(content.finish()),
        Arc::new(file_path.finish()),
        Arc::new(file_format.finish()),
        Arc::new(spec_id.finish()),
        Arc::new(partition.finish()),
        Arc::new(record_count.finish()),
        Arc::new(file_size.finish()),
        Arc::new(column_sizes.finish()),
        Arc::new(value_counts.finish()),
        Arc::new(null_value_counts.finish()),
        Arc::new(lower_bounds.finish()),
        Arc::new(upper_bounds.finish()),
        Arc::new(sort_order_id.finish()),
    ])
}

// ---------------------------------------------------------------------------
// $entries
// ---------------------------------------------------------------------------

/// Schema of the `$entries` system table (Spark's and Trino's columns:
/// the manifest entry's status — 0 existing, 1 added, 2 deleted — its
/// snapshot and sequence numbers, and the file as a struct of `$files`'s
/// columns).
pub fn entries_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("status", DataType::Int32, false),
        Field::new("snapshot_id", DataType::Int64, true),
        Field::new("sequence_number", DataType::Int64, true),
        Field::new("file_sequence_number", DataType::Int64, true),
        Field::new(
            "data_file",
            DataType::Struct(data_file_fields().into()),
            false,
        ),
    ]))
}

/// One row per entry of the current snapshot's manifests, including the
/// files it removed (status 2), ordered by file path.
pub async fn entries_batch(table: &Table) -> Result<RecordBatch> {
    let rows = manifest_entries(table, true).await?;
    let n = rows.len();
    let mut status = Int32Builder::with_capacity(n);
    let mut snapshot_id = Int64Builder::with_capacity(n);
    let mut sequence_number = Int64Builder::with_capacity(n);
    let mut file_sequence_number = Int64Builder::with_capacity(n);
    for row in &rows {
        status.append_value(row.entry.status() as i32);
        snapshot_id.append_option(row.entry.snapshot_id());
        sequence_number.append_option(row.entry.sequence_number());
        file_sequence_number.append_option(row.entry.file_sequence_number);
    }
    let data_file =
        StructArray::try_new(data_file_fields().into(), data_file_columns(&rows)?, None)
            .map_err(|e| arrow_err("building $entries data_file", e))?;
    let columns: Vec<ArrayRef> = vec![
        Arc::new(status.finish()),
        Arc::new(snapshot_id.finish()),
        Arc::new(sequence_number.finish()),
        Arc::new(file_sequence_number.finish()),
        Arc::new(data_file),
    ];
    RecordBatch::try_new(entries_schema(), columns)
        .map_err(|e| arrow_err("building $entries batch", e))
}

// ---------------------------------------------------------------------------
// $partitions
// ---------------------------------------------------------------------------

/// Schema of the `$partitions` system table (Spark's columns).
pub fn partitions_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("partition", DataType::Utf8, false),
        Field::new("spec_id", DataType::Int32, false),
        Field::new("record_count", DataType::Int64, false),
        Field::new("file_count", DataType::Int64, false),
        Field::new("total_data_file_size_in_bytes", DataType::Int64, false),
        Field::new("position_delete_record_count", DataType::Int64, false),
        Field::new("position_delete_file_count", DataType::Int64, false),
        Field::new("equality_delete_record_count", DataType::Int64, false),
        Field::new("equality_delete_file_count", DataType::Int64, false),
    ]))
}

/// One row per partition (spec and value) of the current snapshot's live
/// files (those [`files_batch`] lists), summed: data rows, files and bytes, and the
/// position and equality delete rows and files. Ordered by spec, then
/// partition.
pub async fn partitions_batch(table: &Table) -> Result<RecordBatch> {
    // (spec, partition) -> [records, files, bytes, pos rows, pos files, eq rows, eq files]
    let mut sums: std::collections::BTreeMap<(i32, String), [i64; 7]> = Default::default();
    for row in live_files(table).await? {
        let file = row.entry.data_file();
        let sum = sums.entry((row.spec_id, row.partition)).or_default();
        let (rows, bytes) = (
            to_i64(file.record_count()),
            to_i64(file.file_size_in_bytes()),
        );
        match file.content_type() {
            DataContentType::Data => {
                sum[0] += rows;
                sum[1] += 1;
                sum[2] += bytes;
            }
            DataContentType::PositionDeletes => {
                sum[3] += rows;
                sum[4] += 1;
            }
            DataContentType::EqualityDeletes => {
                sum[5] += rows;
                sum[6] += 1;
            }
        }
    }
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(sums.keys().map(|(_, p)| p))),
        Arc::new(Int32Array::from_iter_values(sums.keys().map(|(s, _)| *s))),
    ];
    for i in 0..7 {
        columns.push(Arc::new(Int64Array::from_iter_values(
            sums.values().map(|sum| sum[i]),
        )));
    }
    RecordBatch::try_new(partitions_schema(), columns)
        .map_err(|e| arrow_err("building $partitions batch", e))
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn append_count_map(
    builder: &mut MapBuilder<Int32Builder, Int64Builder>,
    map: &HashMap<i32, u64>,
) -> Result<()> {
    let mut items: Vec<_> = map.iter().collect();
    items.sort_by_key(|(k, _)| **k);
    for (k, v) in items {
        builder.keys().append_value(*k);
        builder.values().append_value(to_i64(*v));
    }
    builder
        .append(true)
        .map_err(|e| arrow_err("building $files metrics map", e))
}

fn append_bound_map(
    builder: &mut MapBuilder<Int32Builder, StringBuilder>,
    map: &HashMap<i32, Datum>,
) -> Result<()> {
    let mut items: Vec<_> = map.iter().collect();
    items.sort_by_key(|(k, _)| **k);
    for (k, v) in items {
        builder.keys().append_value(*k);
        builder.values().append_value(datum_to_string(v));
    }
    builder
        .append(true)
        .map_err(|e| arrow_err("building $files bounds map", e))
}

/// Whether `Datum`'s `Display` handles this type/literal pair. `Display`
/// panics on combinations it does not know; a well-formed manifest never
/// contains them, but a system table must not bring the process down.
fn display_compatible(ty: &PrimitiveType, lit: &PrimitiveLiteral) -> bool {
    use PrimitiveLiteral as L;
    use PrimitiveType as T;
    matches!(
        (ty, lit),
        (
            _,
            L::Boolean(_) | L::Float(_) | L::Double(_) | L::String(_) | L::Binary(_)
        ) | (T::Int | T::Date, L::Int(_))
            | (
                T::Long
                    | T::Time
                    | T::Timestamp
                    | T::Timestamptz
                    | T::TimestampNs
                    | T::TimestamptzNs,
                L::Long(_)
            )
            | (T::Uuid, L::UInt128(_))
            | (T::Decimal { .. }, L::Int128(_))
    )
}

/// Renders a bound via `Datum`'s `Display` (falling back to the literal's
/// debug form for pairs `Display` cannot handle).
fn datum_to_string(datum: &Datum) -> String {
    if display_compatible(datum.data_type(), datum.literal()) {
        datum.to_string()
    } else {
        format!("{:?}", datum.literal())
    }
}

/// Renders a partition tuple as `{name=value, ...}` (`{}` when
/// unpartitioned), with values shown in their transformed types: dates as
/// dates, timestamps as ISO-8601, `year`/`month`/`hour` transforms as
/// `2024`, `2024-01` and `2024-01-02-03`.
fn render_partition(partition: &Struct, spec: &PartitionSpec, schema: &IcebergSchema) -> String {
    let field_types: Option<Vec<Type>> = spec.partition_type(schema).ok().map(|t| {
        t.fields()
            .iter()
            .map(|f| f.field_type.as_ref().clone())
            .collect()
    });
    let parts: Vec<String> = partition
        .iter()
        .enumerate()
        .map(|(i, value)| {
            let field = spec.fields().get(i);
            let name = field
                .map(|f| f.name.clone())
                .unwrap_or_else(|| format!("field_{i}"));
            let transform = field.map(|f| f.transform).unwrap_or(Transform::Identity);
            let ty = field_types.as_ref().and_then(|t| t.get(i));
            format!("{name}={}", render_partition_value(value, transform, ty))
        })
        .collect();
    format!("{{{}}}", parts.join(", "))
}

fn render_partition_value(
    value: Option<&Literal>,
    transform: Transform,
    ty: Option<&Type>,
) -> String {
    let Some(value) = value else {
        return "null".to_string();
    };
    let Some(lit) = value.as_primitive_literal() else {
        return format!("{value:?}");
    };
    let ty = ty.and_then(|t| t.as_primitive_type());
    match (transform, ty, &lit) {
        (Transform::Void, _, _) => "null".to_string(),
        (Transform::Year, _, PrimitiveLiteral::Int(v)) => format!("{}", 1970 + *v as i64),
        (Transform::Month, _, PrimitiveLiteral::Int(v)) => {
            let v = *v as i64;
            format!("{:04}-{:02}", 1970 + v.div_euclid(12), v.rem_euclid(12) + 1)
        }
        (Transform::Hour, _, PrimitiveLiteral::Int(v)) => {
            arrow::temporal_conversions::timestamp_s_to_datetime(*v as i64 * 3600)
                .map(|dt| dt.format("%Y-%m-%d-%H").to_string())
                .unwrap_or_else(|| v.to_string())
        }
        (_, Some(PrimitiveType::Timestamp), PrimitiveLiteral::Long(v)) => iso_timestamp(
            arrow::temporal_conversions::timestamp_us_to_datetime(*v)
                .map(|dt| dt.format(ISO_FORMAT).to_string()),
            "",
            *v,
        ),
        (_, Some(PrimitiveType::Timestamptz), PrimitiveLiteral::Long(v)) => iso_timestamp(
            arrow::temporal_conversions::timestamp_us_to_datetime(*v)
                .map(|dt| dt.format(ISO_FORMAT).to_string()),
            "+00:00",
            *v,
        ),
        (_, Some(PrimitiveType::TimestampNs), PrimitiveLiteral::Long(v)) => iso_timestamp(
            arrow::temporal_conversions::timestamp_ns_to_datetime(*v)
                .map(|dt| dt.format(ISO_FORMAT).to_string()),
            "",
            *v,
        ),
        (_, Some(PrimitiveType::TimestamptzNs), PrimitiveLiteral::Long(v)) => iso_timestamp(
            arrow::temporal_conversions::timestamp_ns_to_datetime(*v)
                .map(|dt| dt.format(ISO_FORMAT).to_string()),
            "+00:00",
            *v,
        ),
        // Dates, strings (unquoted), decimals, uuids, ...: the datum's
        // human-readable form.
        (_, Some(p), _) if display_compatible(p, &lit) => {
            Transform::Identity.to_human_string(&Type::Primitive(p.clone()), Some(value))
        }
        _ => render_bare_literal(&lit),
    }
}

/// `%.f` prints the fractional seconds only when they are non-zero.
const ISO_FORMAT: &str = "%Y-%m-%dT%H:%M:%S%.f";

fn iso_timestamp(formatted: Option<String>, suffix: &str, raw: i64) -> String {
    match formatted {
        Some(s) => format!("{s}{suffix}"),
        None => raw.to_string(),
    }
}

fn render_bare_literal(lit: &PrimitiveLiteral) -> String {
    match lit {
        PrimitiveLiteral::Boolean(v) => v.to_string(),
        PrimitiveLiteral::Int(v) => v.to_string(),
        PrimitiveLiteral::Long(v) => v.to_string(),
        PrimitiveLiteral::Float(v) => v.0.to_string(),
        PrimitiveLiteral::Double(v) => v.0.to_string(),
        PrimitiveLiteral::String(s) => s.clone(),
        PrimitiveLiteral::Int128(v) => v.to_string(),
        PrimitiveLiteral::UInt128(v) => v.to_string(),
        PrimitiveLiteral::Binary(b) => b.iter().map(|x| format!("{x:02X}")).collect(),
        PrimitiveLiteral::AboveMax => "+inf".to_string(),
        PrimitiveLiteral::BelowMin => "-inf".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use arrow::array::{Array, AsArray, Int64Array, MapArray, StringArray};
    use arrow::datatypes::{Int32Type, Int64Type, TimestampMillisecondType};
    use arrow::record_batch::RecordBatch;
    use iceberg::io::LocalFsStorageFactory;
    use iceberg::memory::{MemoryCatalogBuilder, MEMORY_CATALOG_WAREHOUSE};
    use iceberg::spec::{
        DataFileFormat, Literal, NestedField, PartitionSpec, PrimitiveType, Schema, Struct,
        Transform, Type,
    };
    use iceberg::table::Table;
    use iceberg::transaction::{ApplyTransactionAction, Transaction};
    use iceberg::writer::base_writer::data_file_writer::DataFileWriterBuilder;
    use iceberg::writer::file_writer::location_generator::{
        DefaultFileNameGenerator, DefaultLocationGenerator,
    };
    use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
    use iceberg::writer::file_writer::ParquetWriterBuilder;
    use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};
    use iceberg::{Catalog, CatalogBuilder, MemoryCatalog, NamespaceIdent, TableCreation};
    use parquet::file::properties::WriterProperties;

    use super::*;

    fn table_schema() -> Schema {
        Schema::builder()
            .with_fields(vec![
                NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
                NestedField::optional(2, "name", Type::Primitive(PrimitiveType::String)).into(),
            ])
            .build()
            .unwrap()
    }

    async fn new_table(dir: &tempfile::TempDir) -> (MemoryCatalog, Table) {
        let catalog = MemoryCatalogBuilder::default()
            .with_storage_factory(Arc::new(LocalFsStorageFactory))
            .load(
                "memory",
                HashMap::from([(
                    MEMORY_CATALOG_WAREHOUSE.to_string(),
                    format!("file://{}", dir.path().display()),
                )]),
            )
            .await
            .unwrap();
        let ns = NamespaceIdent::new("db".to_string());
        catalog.create_namespace(&ns, HashMap::new()).await.unwrap();
        let table = catalog
            .create_table(
                &ns,
                TableCreation::builder()
                    .name("t".to_string())
                    .schema(table_schema())
                    .build(),
            )
            .await
            .unwrap();
        (catalog, table)
    }

    /// Writes one parquet data file with the given ids and commits it with a
    /// fast append.
    async fn append(catalog: &MemoryCatalog, table: &Table, ids: &[i64]) -> Table {
        let iceberg_schema = table.metadata().current_schema().clone();
        let arrow_schema =
            Arc::new(iceberg::arrow::schema_to_arrow_schema(&iceberg_schema).unwrap());
        let names: Vec<String> = ids.iter().map(|i| format!("name-{i}")).collect();
        let batch = RecordBatch::try_new(
            arrow_schema,
            vec![
                Arc::new(Int64Array::from(ids.to_vec())),
                Arc::new(StringArray::from(names)),
            ],
        )
        .unwrap();

        let rolling = RollingFileWriterBuilder::new_with_default_file_size(
            ParquetWriterBuilder::new(WriterProperties::default(), iceberg_schema),
            table.file_io().clone(),
            DefaultLocationGenerator::new(table.metadata()).unwrap(),
            DefaultFileNameGenerator::new(
                format!("data-{}", uuid::Uuid::new_v4()),
                None,
                DataFileFormat::Parquet,
            ),
        );
        let mut writer = DataFileWriterBuilder::new(rolling)
            .build(None)
            .await
            .unwrap();
        writer.write(batch).await.unwrap();
        let data_files = writer.close().await.unwrap();

        let tx = Transaction::new(table);
        let tx = tx
            .fast_append()
            .add_data_files(data_files)
            .apply(tx)
            .unwrap();
        tx.commit(catalog).await.unwrap()
    }

    fn map_entries<K, V>(
        map: &MapArray,
        row: usize,
        key: impl Fn(&dyn Array, usize) -> K,
        value: impl Fn(&dyn Array, usize) -> V,
    ) -> Vec<(K, V)> {
        let entries = map.value(row);
        (0..entries.len())
            .map(|i| (key(entries.column(0), i), value(entries.column(1), i)))
            .collect()
    }

    fn bounds(batch: &RecordBatch, column: &str, row: usize) -> HashMap<i32, String> {
        let map = batch.column_by_name(column).unwrap().as_map();
        map_entries(
            map,
            row,
            |a, i| a.as_primitive::<Int32Type>().value(i),
            |a, i| a.as_string::<i32>().value(i).to_string(),
        )
        .into_iter()
        .collect()
    }

    #[tokio::test]
    async fn snapshots_and_files_of_two_appends() {
        let dir = tempfile::tempdir().unwrap();
        let (catalog, table) = new_table(&dir).await;
        let table = append(&catalog, &table, &[3, 1, 2]).await;
        let table = append(&catalog, &table, &[20, 10]).await;

        // $snapshots
        let snaps = snapshots_batch(&table).unwrap();
        assert_eq!(snaps.schema(), snapshots_schema());
        assert_eq!(snaps.num_rows(), 2);
        let ids = snaps
            .column_by_name("snapshot_id")
            .unwrap()
            .as_primitive::<Int64Type>();
        let parents = snaps
            .column_by_name("parent_id")
            .unwrap()
            .as_primitive::<Int64Type>();
        let ops = snaps
            .column_by_name("operation")
            .unwrap()
            .as_string::<i32>();
        let lists = snaps
            .column_by_name("manifest_list")
            .unwrap()
            .as_string::<i32>();
        let committed = snaps
            .column_by_name("committed_at")
            .unwrap()
            .as_primitive::<TimestampMillisecondType>();
        assert_eq!(ops.value(0), "append");
        assert_eq!(ops.value(1), "append");
        assert!(parents.is_null(0));
        assert_eq!(parents.value(1), ids.value(0));
        assert_eq!(
            ids.value(1),
            table.metadata().current_snapshot().unwrap().snapshot_id()
        );
        assert!(committed.value(0) <= committed.value(1));
        assert!(!lists.value(0).is_empty() && lists.value(0) != lists.value(1));
        let summary = map_entries(
            snaps.column_by_name("summary").unwrap().as_map(),
            1,
            |a, i| a.as_string::<i32>().value(i).to_string(),
            |a, i| a.as_string::<i32>().value(i).to_string(),
        );
        let summary: HashMap<_, _> = summary.into_iter().collect();
        assert_eq!(summary.get("added-records").map(String::as_str), Some("2"));
        assert_eq!(summary.get("total-records").map(String::as_str), Some("5"));
        assert!(!summary.contains_key("operation"));

        // $files
        let files = files_batch(&table).await.unwrap();
        assert_eq!(files.schema(), files_schema());
        assert_eq!(files.num_rows(), 2);
        let paths = files
            .column_by_name("file_path")
            .unwrap()
            .as_string::<i32>();
        assert!(paths.value(0) < paths.value(1), "rows ordered by file_path");
        let counts = files
            .column_by_name("record_count")
            .unwrap()
            .as_primitive::<Int64Type>();
        let sizes = files
            .column_by_name("file_size_in_bytes")
            .unwrap()
            .as_primitive::<Int64Type>();
        let content = files
            .column_by_name("content")
            .unwrap()
            .as_primitive::<Int32Type>();
        let format = files
            .column_by_name("file_format")
            .unwrap()
            .as_string::<i32>();
        let partition = files
            .column_by_name("partition")
            .unwrap()
            .as_string::<i32>();
        let file_snapshot = files
            .column_by_name("snapshot_id")
            .unwrap()
            .as_primitive::<Int64Type>();
        let seq = files
            .column_by_name("sequence_number")
            .unwrap()
            .as_primitive::<Int64Type>();

        let mut seen = Vec::new();
        for row in 0..2 {
            let path = paths.value(row);
            let local = path.strip_prefix("file://").unwrap_or(path);
            let meta = std::fs::metadata(local).unwrap_or_else(|e| panic!("{path}: {e}"));
            assert_eq!(meta.len() as i64, sizes.value(row));
            assert_eq!(content.value(row), 0);
            assert_eq!(format.value(row), "PARQUET");
            assert_eq!(partition.value(row), "{}");
            let value_counts: HashMap<i32, i64> = map_entries(
                files.column_by_name("value_counts").unwrap().as_map(),
                row,
                |a, i| a.as_primitive::<Int32Type>().value(i),
                |a, i| a.as_primitive::<Int64Type>().value(i),
            )
            .into_iter()
            .collect();
            assert_eq!(value_counts.get(&1), Some(&counts.value(row)));
            let lower = bounds(&files, "lower_bounds", row);
            let upper = bounds(&files, "upper_bounds", row);
            seen.push((
                counts.value(row),
                lower[&1].clone(),
                upper[&1].clone(),
                file_snapshot.value(row),
                seq.value(row),
            ));
        }
        seen.sort();
        assert_eq!(
            seen,
            vec![
                (2, "10".to_string(), "20".to_string(), ids.value(1), 2),
                (3, "1".to_string(), "3".to_string(), ids.value(0), 1),
            ]
        );
    }

    #[tokio::test]
    async fn table_without_snapshot_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let (_catalog, table) = new_table(&dir).await;
        let snaps = snapshots_batch(&table).unwrap();
        assert_eq!(snaps.num_rows(), 0);
        assert_eq!(snaps.schema(), snapshots_schema());
        let files = files_batch(&table).await.unwrap();
        assert_eq!(files.num_rows(), 0);
        assert_eq!(files.schema(), files_schema());
    }

    #[test]
    fn partition_rendering() {
        let schema = Schema::builder()
            .with_fields(vec![
                NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
                NestedField::required(2, "ts", Type::Primitive(PrimitiveType::Timestamp)).into(),
                NestedField::required(3, "tz", Type::Primitive(PrimitiveType::Timestamptz)).into(),
                NestedField::optional(4, "s", Type::Primitive(PrimitiveType::String)).into(),
                NestedField::required(5, "ts2", Type::Primitive(PrimitiveType::Timestamp)).into(),
                NestedField::required(6, "ts3", Type::Primitive(PrimitiveType::Timestamp)).into(),
            ])
            .build()
            .unwrap();
        let spec = PartitionSpec::builder(schema.clone())
            .add_partition_field("id", "id_bucket", Transform::Bucket(16))
            .unwrap()
            .add_partition_field("ts", "ts_day", Transform::Day)
            .unwrap()
            .add_partition_field("ts2", "ts_month", Transform::Month)
            .unwrap()
            .add_partition_field("ts3", "ts_hour", Transform::Hour)
            .unwrap()
            .add_partition_field("tz", "tz", Transform::Identity)
            .unwrap()
            .add_partition_field("s", "s", Transform::Identity)
            .unwrap()
            .build()
            .unwrap();
        // 2024-01-02 is day 19724; 2024-01-02T03:00 is hour 473379.
        let data = Struct::from_iter([
            Some(Literal::int(3)),
            Some(Literal::date(19724)),
            Some(Literal::int(54 * 12)),
            Some(Literal::int(473_379)),
            Some(Literal::timestamptz(1_704_164_645_500_000)),
            None,
        ]);
        assert_eq!(
            render_partition(&data, &spec, &schema),
            "{id_bucket=3, ts_day=2024-01-02, ts_month=2024-01, ts_hour=2024-01-02-03, \
             tz=2024-01-02T03:04:05.500+00:00, s=null}"
        );

        let data = Struct::from_iter([
            Some(Literal::int(0)),
            Some(Literal::date(0)),
            Some(Literal::int(0)),
            Some(Literal::int(0)),
            Some(Literal::timestamptz(0)),
            Some(Literal::string("a b")),
        ]);
        assert_eq!(
            render_partition(&data, &spec, &schema),
            "{id_bucket=0, ts_day=1970-01-01, ts_month=1970-01, ts_hour=1970-01-01-00, \
             tz=1970-01-01T00:00:00+00:00, s=a b}"
        );

        let unpartitioned = PartitionSpec::builder(schema.clone()).build().unwrap();
        assert_eq!(
            render_partition(&Struct::empty(), &unpartitioned, &schema),
            "{}"
        );
    }
}
