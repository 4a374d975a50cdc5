//! The system tables read from a table's metadata file and its current
//! manifest list alone (beside `system_tables.rs`' `$snapshots` and
//! `$files`), with Trino's columns:
//!
//! * `$history`: one row per entry of the snapshot log — when each snapshot
//!   became current, its parent, and whether it is an ancestor of the
//!   current snapshot (a rollback leaves entries that are not);
//! * `$refs`: one row per branch and tag, with its snapshot and retention;
//! * `$manifests`: one row per manifest of the current snapshot, data
//!   (content 0) and delete (content 1) manifests, with their file and row
//!   counts.

use std::collections::HashSet;
use std::sync::Arc;

use arrow::array::TimestampMillisecondArray;
use arrow::array::{ArrayRef, BooleanArray, Int32Array, Int64Array, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use arrow::record_batch::RecordBatch;
use datafusion::error::{DataFusionError, Result};
use iceberg::spec::{ManifestContentType, TableMetadata};
use iceberg::table::Table;
use icemerge_proto::error::{internal, io_error};

fn batch(schema: SchemaRef, columns: Vec<ArrayRef>, what: &str) -> Result<RecordBatch> {
    RecordBatch::try_new(schema, columns)
        .map_err(|e| DataFusionError::ArrowError(Box::new(e), Some(format!("building {what}"))))
}

fn timestamp_type() -> DataType {
    DataType::Timestamp(TimeUnit::Millisecond, Some("+00:00".into()))
}

/// Schema of `$history`.
pub fn history_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("made_current_at", timestamp_type(), false),
        Field::new("snapshot_id", DataType::Int64, false),
        Field::new("parent_id", DataType::Int64, true),
        Field::new("is_current_ancestor", DataType::Boolean, false),
    ]))
}

/// The snapshots the current one descends from (itself included).
fn current_ancestors(metadata: &TableMetadata) -> HashSet<i64> {
    let mut ancestors = HashSet::new();
    let mut next = metadata.current_snapshot_id();
    while let Some(id) = next {
        if !ancestors.insert(id) {
            break;
        }
        next = metadata
            .snapshot_by_id(id)
            .and_then(|s| s.parent_snapshot_id());
    }
    ancestors
}

/// One row per snapshot log entry of `table`, oldest first.
pub fn history_batch(table: &Table) -> Result<RecordBatch> {
    let metadata = table.metadata();
    let ancestors = current_ancestors(metadata);
    let log = metadata.history();
    let at: Vec<i64> = log.iter().map(|e| e.timestamp_ms).collect();
    let ids: Vec<i64> = log.iter().map(|e| e.snapshot_id).collect();
    let parents: Vec<Option<i64>> = ids
        .iter()
        .map(|id| {
            metadata
                .snapshot_by_id(*id)
                .and_then(|s| s.parent_snapshot_id())
        })
        .collect();
    let current: Vec<bool> = ids.iter().map(|id| ancestors.contains(id)).collect();
    batch(
        history_schema(),
        vec![
            Arc::new(TimestampMillisecondArray::from(at).with_timezone("+00:00")),
            Arc::new(Int64Array::from(ids)),
            Arc::new(Int64Array::from(parents)),
            Arc::new(BooleanArray::from(current)),
        ],
        "$history",
    )
}

/// Schema of `$refs`.
pub fn refs_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("name", DataType::Utf8, false),
        Field::new("type", DataType::Utf8, false),
        Field::new("snapshot_id", DataType::Int64, false),
        Field::new("max_reference_age_in_ms", DataType::Int64, true),
        Field::new("min_snapshots_to_keep", DataType::Int32, true),
        Field::new("max_snapshot_age_in_ms", DataType::Int64, true),
    ]))
}

/// One row per branch and tag of `table`, by name. The references are read
/// from the metadata's JSON form (the spec's `refs`), which is what the
/// Iceberg library exposes of them.
pub fn refs_batch(table: &Table) -> Result<RecordBatch> {
    let json = serde_json::to_value(table.metadata())
        .map_err(|e| internal(format!("table metadata as JSON: {e}")))?;
    let mut refs: Vec<(String, serde_json::Value)> = json
        .get("refs")
        .and_then(|r| r.as_object())
        .map(|o| o.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    refs.sort_by(|a, b| a.0.cmp(&b.0));
    let int = |v: &serde_json::Value, key: &str| v.get(key).and_then(|x| x.as_i64());
    let mut snapshot_ids = vec![];
    for (name, r) in &refs {
        snapshot_ids.push(int(r, "snapshot-id").ok_or_else(|| {
            io_error(format!(
                "reference '{name}' of the table metadata has no snapshot-id"
            ))
        })?);
    }
    batch(
        refs_schema(),
        vec![
            Arc::new(StringArray::from_iter_values(refs.iter().map(|(n, _)| n))),
            Arc::new(StringArray::from_iter_values(refs.iter().map(|(_, r)| {
                r.get("type")
                    .and_then(|t| t.as_str())
                    .unwrap_or("branch")
                    .to_uppercase()
            }))),
            Arc::new(Int64Array::from(snapshot_ids)),
            Arc::new(Int64Array::from_iter(
                refs.iter().map(|(_, r)| int(r, "max-ref-age-ms")),
            )),
            Arc::new(Int32Array::from_iter(refs.iter().map(|(_, r)| {
                int(r, "min-snapshots-to-keep").and_then(|v| i32::try_from(v).ok())
            }))),
            Arc::new(Int64Array::from_iter(
                refs.iter().map(|(_, r)| int(r, "max-snapshot-age-ms")),
            )),
        ],
        "$refs",
    )
}

/// Schema of `$manifests`.
pub fn manifests_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("content", DataType::Int32, false),
        Field::new("path", DataType::Utf8, false),
        Field::new("length", DataType::Int64, false),
        Field::new("partition_spec_id", DataType::Int32, false),
        Field::new("added_snapshot_id", DataType::Int64, false),
        Field::new("added_files_count", DataType::Int64, true),
        Field::new("added_rows_count", DataType::Int64, true),
        Field::new("existing_files_count", DataType::Int64, true),
        Field::new("existing_rows_count", DataType::Int64, true),
        Field::new("deleted_files_count", DataType::Int64, true),
        Field::new("deleted_rows_count", DataType::Int64, true),
    ]))
}

/// One row per manifest of `table`'s current snapshot, in list order.
pub async fn manifests_batch(table: &Table) -> Result<RecordBatch> {
    let manifests = match table.metadata().current_snapshot() {
        None => vec![],
        Some(snapshot) => table
            .manifest_list_reader(snapshot)
            .load()
            .await
            .map_err(|e| io_error(format!("reading the manifest list: {e}")))?
            .consume_entries()
            .into_iter()
            .collect(),
    };
    let count = |f: fn(&iceberg::spec::ManifestFile) -> Option<u64>| -> ArrayRef {
        Arc::new(Int64Array::from_iter(
            manifests
                .iter()
                .map(|m| f(m).map(|v| v.min(i64::MAX as u64) as i64)),
        ))
    };
    batch(
        manifests_schema(),
        vec![
            Arc::new(Int32Array::from_iter_values(manifests.iter().map(
                |m| match m.content {
                    ManifestContentType::Data => 0,
                    ManifestContentType::Deletes => 1,
                },
            ))),
            Arc::new(StringArray::from_iter_values(
                manifests.iter().map(|m| m.manifest_path.as_str()),
            )),
            Arc::new(Int64Array::from_iter_values(
                manifests.iter().map(|m| m.manifest_length),
            )),
            Arc::new(Int32Array::from_iter_values(
                manifests.iter().map(|m| m.partition_spec_id),
            )),
            Arc::new(Int64Array::from_iter_values(
                manifests.iter().map(|m| m.added_snapshot_id),
            )),
            count(|m| m.added_files_count.map(u64::from)),
            count(|m| m.added_rows_count),
            count(|m| m.existing_files_count.map(u64::from)),
            count(|m| m.existing_rows_count),
            count(|m| m.deleted_files_count.map(u64::from)),
            count(|m| m.deleted_rows_count),
        ],
        "$manifests",
    )
}
