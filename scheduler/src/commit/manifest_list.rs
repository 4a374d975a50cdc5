//! The new snapshot's manifest list.

use datafusion::error::Result;
use iceberg::spec::{FormatVersion, ManifestFile, ManifestListWriter, TableMetadata};

use super::staging::Staging;

/// A written manifest list.
pub(crate) struct WrittenList {
    pub path: String,
    /// For format version 3: the row ids the list assigned to new files are
    /// `first_row_id..next_row_id`.
    pub row_range: Option<(u64, u64)>,
}

/// Writes `manifests` as the manifest list of a snapshot on top of
/// `metadata`'s current one (sequence number and first row id: the table's
/// next ones).
pub(crate) async fn write_manifest_list(
    staging: &mut Staging,
    metadata: &TableMetadata,
    manifests: Vec<ManifestFile>,
) -> Result<WrittenList> {
    let path = staging.manifest_list_path();
    let snapshot_id = staging.snapshot_id;
    let parent_snapshot_id = metadata.current_snapshot_id();
    let sequence_number = metadata.next_sequence_number();
    let first_row_id = metadata.next_row_id();
    let output = staging
        .file_io
        .new_output(&path)
        .map_err(staging.err("creating the manifest list"))?
        .writer()
        .await
        .map_err(staging.err("creating the manifest list"))?;
    let mut writer = match staging.format_version {
        FormatVersion::V1 => ManifestListWriter::v1(output, snapshot_id, parent_snapshot_id),
        FormatVersion::V2 => {
            ManifestListWriter::v2(output, snapshot_id, parent_snapshot_id, sequence_number)
        }
        FormatVersion::V3 => ManifestListWriter::v3(
            output,
            snapshot_id,
            parent_snapshot_id,
            sequence_number,
            Some(first_row_id),
        ),
    };
    writer
        .add_manifests(manifests.into_iter())
        .map_err(staging.err("writing the manifest list"))?;
    let next_row_id = writer.next_row_id();
    writer
        .close()
        .await
        .map_err(staging.err("writing the manifest list"))?;
    Ok(WrittenList {
        path,
        row_range: next_row_id.map(|next| (first_row_id, next)),
    })
}
