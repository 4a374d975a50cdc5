//! Reading a snapshot's manifest list and writing new manifests. Every manifest a
//! commit writes (added files, deleted-only, rewritten) goes through
//! [`write_manifest`].

use datafusion::error::Result;
use iceberg::spec::{
    DataFile, FormatVersion, ManifestEntry, ManifestFile, ManifestWriter, ManifestWriterBuilder,
    PartitionSpec, SchemaRef, SnapshotRef,
};
use iceberg::table::Table;
use iceberg::TableIdent;

use super::staging::Staging;
use icemerge_proto::error::{internal, unsupported};

/// The manifest list of `snapshot` (empty without a snapshot).
pub(crate) async fn read_manifest_list(
    table: &Table,
    snapshot: Option<&SnapshotRef>,
    ident: &TableIdent,
) -> Result<Vec<ManifestFile>> {
    let Some(snapshot) = snapshot else {
        return Ok(vec![]);
    };
    if snapshot.encryption_key_id().is_some() {
        return Err(unsupported(format!(
            "commit to {ident}: encrypted tables are not supported"
        )));
    }
    Ok(table
        .manifest_list_reader(snapshot)
        .load()
        .await
        .map_err(super::staging::commit_err(
            ident,
            "reading the manifest list",
        ))?
        .consume_entries()
        .into_iter()
        .collect())
}

/// One entry of a new manifest.
pub(crate) enum NewEntry<'a> {
    /// Added by this commit (its sequence number is inherited from the
    /// manifest list entry).
    Added(&'a DataFile),
    /// Carried into a rewritten manifest with its original snapshot id
    /// (`manifest_snapshot_id` when the entry inherited it) and sequence
    /// numbers.
    Existing {
        entry: &'a ManifestEntry,
        manifest_snapshot_id: i64,
    },
    /// Removed by this commit, keeping its sequence numbers.
    Deleted(&'a ManifestEntry),
}

/// Writes one new data manifest of `entries` in `schema` / `spec` at the
/// commit's next manifest path.
pub(crate) async fn write_manifest<'a>(
    staging: &mut Staging,
    schema: SchemaRef,
    spec: PartitionSpec,
    entries: impl IntoIterator<Item = NewEntry<'a>>,
) -> Result<ManifestFile> {
    let path = staging.next_manifest_path();
    let mut writer = manifest_writer(staging, &path, schema, spec)
        .map_err(staging.err("creating a manifest"))?;
    for entry in entries {
        add_entry(&mut writer, entry, &staging.ident)?;
    }
    writer
        .write_manifest_file()
        .await
        .map_err(staging.err("writing a manifest"))
}

fn manifest_writer(
    staging: &Staging,
    path: &str,
    schema: SchemaRef,
    spec: PartitionSpec,
) -> iceberg::Result<ManifestWriter> {
    let output = staging.file_io.new_output(path)?;
    let builder = ManifestWriterBuilder::new(output, Some(staging.snapshot_id), schema, spec);
    Ok(match staging.format_version {
        FormatVersion::V1 => builder.build_v1(),
        FormatVersion::V2 => builder.build_v2_data(),
        FormatVersion::V3 => builder.build_v3_data(),
    })
}

fn add_entry(writer: &mut ManifestWriter, entry: NewEntry, ident: &TableIdent) -> Result<()> {
    let (result, what) = match entry {
        // No sequence number: inherited from the manifest list entry.
        NewEntry::Added(file) => (writer.add_file(file.clone(), -1), "adding a data file"),
        NewEntry::Existing {
            entry,
            manifest_snapshot_id,
        } => {
            let (sequence_number, file_sequence_number) = sequence_numbers(entry, ident)?;
            let result = writer.add_existing_file(
                entry.data_file().clone(),
                entry.snapshot_id().unwrap_or(manifest_snapshot_id),
                sequence_number,
                file_sequence_number,
            );
            (result, "adding an existing data file")
        }
        NewEntry::Deleted(entry) => {
            let (sequence_number, file_sequence_number) = sequence_numbers(entry, ident)?;
            let result = writer.add_delete_file(
                entry.data_file().clone(),
                sequence_number,
                file_sequence_number,
            );
            (result, "adding a deleted data file")
        }
    };
    result.map_err(super::staging::commit_err(ident, what))
}

/// An entry's data and file sequence numbers, as a rewrite must keep them.
fn sequence_numbers(entry: &ManifestEntry, ident: &TableIdent) -> Result<(i64, Option<i64>)> {
    let sequence_number = entry.sequence_number().ok_or_else(|| {
        internal(format!(
            "commit to {ident}: manifest entry of '{}' has no sequence number",
            entry.file_path()
        ))
    })?;
    Ok((
        sequence_number,
        entry.file_sequence_number.or(Some(sequence_number)),
    ))
}
