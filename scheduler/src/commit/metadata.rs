//! The new snapshot and the metadata file that makes it the table's current
//! one on `main`.

use std::str::FromStr;
use std::time::{SystemTime, UNIX_EPOCH};

use datafusion::error::Result;
use iceberg::spec::{Snapshot, Summary, TableMetadata, MAIN_BRANCH};
use iceberg::MetadataLocation;

use super::manifest_list::WrittenList;
use super::staging::Staging;

/// Writes the metadata file of `metadata` (read from `expected`) plus the
/// new snapshot (its manifest list and summary), current on `main`; returns
/// the new metadata location.
pub(crate) async fn write_metadata(
    staging: &mut Staging,
    metadata: &TableMetadata,
    expected: &str,
    list: WrittenList,
    summary: Summary,
) -> Result<String> {
    let snapshot = new_snapshot(staging.snapshot_id, metadata, list, summary);
    let new_metadata = metadata
        .clone()
        .into_builder(Some(expected.to_string()))
        .set_branch_snapshot(snapshot, MAIN_BRANCH)
        .map_err(staging.err("adding the snapshot"))?
        .build()
        .map_err(staging.err("building the table metadata"))?
        .metadata;
    let new_location = MetadataLocation::from_str(expected)
        .map_err(staging.err("parsing the metadata location"))?
        .with_next_version()
        .with_new_metadata(&new_metadata);
    let location = staging.record(new_location.to_string());
    new_metadata
        .write_to(&staging.file_io, &new_location)
        .await
        .map_err(staging.err("writing the table metadata"))?;
    Ok(location)
}

/// The snapshot on top of `metadata`'s current one.
fn new_snapshot(
    snapshot_id: i64,
    metadata: &TableMetadata,
    list: WrittenList,
    summary: Summary,
) -> Snapshot {
    let builder = Snapshot::builder()
        .with_snapshot_id(snapshot_id)
        .with_parent_snapshot_id(metadata.current_snapshot_id())
        .with_sequence_number(metadata.next_sequence_number())
        .with_timestamp_ms(now_ms(metadata))
        .with_manifest_list(list.path)
        .with_summary(summary)
        .with_schema_id(metadata.current_schema_id());
    match list.row_range {
        Some((first_row_id, next_row_id)) => builder
            .with_row_range(first_row_id, next_row_id - first_row_id)
            .build(),
        None => builder.build(),
    }
}

/// Now, but never before the table's last update (clock skew between
/// writers would make the snapshot log go backwards).
fn now_ms(metadata: &TableMetadata) -> i64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    now.max(metadata.last_updated_ms())
}
