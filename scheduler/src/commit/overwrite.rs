//! An overwrite commit built by hand: iceberg 0.10.1 only has `fast_append`,
//! so the snapshot that removes some data files and adds others (a MERGE's
//! result) is produced here with the crate's public manifest, manifest list
//! and metadata writers, and published with our own catalog pointer swap
//! ([`super::catalog_swap`]).
//!
//! Against the base snapshot (the table as loaded at plan time):
//! - untouched data manifests are carried forward byte-identical (the same
//!   manifest list entry);
//! - a data manifest with some removed files is rewritten: survivors as
//!   `Existing` with their original snapshot id and sequence numbers, removed
//!   ones as `Deleted`;
//! - the removed files of a manifest whose every live file is removed are
//!   written as `Deleted` entries into one new manifest (per partition spec)
//!   and the old manifest is dropped; manifests left over from earlier
//!   commits with no live file at all are dropped;
//! - delete manifests are carried forward unchanged;
//! - added files go into one new manifest (per partition spec), status `Added`.
//!
//! If anything fails, the manifests, manifest list and metadata file this
//! commit wrote are deleted (the caller owns the added data files). A lost
//! race with another writer gives an error containing "concurrent commit".

use std::collections::{BTreeMap, HashMap, HashSet};
use std::str::FromStr;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use datafusion::error::{DataFusionError, Result};
use futures::StreamExt;
use iceberg::io::FileIO;
use iceberg::spec::{
    DataContentType, DataFile, FormatVersion, Manifest, ManifestContentType, ManifestEntryRef,
    ManifestFile, ManifestListWriter, ManifestWriter, ManifestWriterBuilder, Operation,
    PartitionSpec, PartitionSpecRef, SchemaRef, Snapshot, SnapshotSummaryCollector, Summary,
    TableMetadata, TableProperties, MAIN_BRANCH,
};
use iceberg::table::Table;
use iceberg::{MetadataLocation, TableIdent};
use uuid::Uuid;

use super::catalog_swap::{current_metadata_location, swap_metadata_location};

/// What a commit changes in the table's data files.
#[derive(Debug, Clone)]
pub struct OverwriteCommit {
    /// New data files (status `Added`).
    pub added: Vec<DataFile>,
    /// Paths of data files to remove; each must be live in the base snapshot.
    pub removed: HashSet<String>,
    /// Extra snapshot summary properties (e.g. icemerge counts). The
    /// computed `added-*`/`deleted-*`/`total-*` properties win over these.
    pub summary: HashMap<String, String>,
    /// `Overwrite` (or `Append` when nothing is removed, `Delete` when
    /// nothing is added).
    pub operation: Operation,
}

/// The result of [`commit_overwrite`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommitOutcome {
    /// A new snapshot is the table's current snapshot.
    Committed { snapshot_id: i64 },
    /// Nothing added and nothing removed: no snapshot was made.
    NothingToCommit,
}

/// How many concurrent manifest reads a commit does.
const MANIFEST_READ_CONCURRENCY: usize = 8;

/// Commits `commit` against the snapshot `base` (the table as loaded at plan
/// time) and swaps the catalog pointer from `base`'s metadata file to the new
/// one. `catalog_uri`/`catalog_name` name the SQL catalog row to swap.
pub async fn commit_overwrite(
    catalog_uri: &str,
    catalog_name: &str,
    base: &Table,
    commit: OverwriteCommit,
) -> Result<CommitOutcome> {
    let ident = base.identifier().clone();
    validate_request(&ident, &commit)?;
    if commit.added.is_empty() && commit.removed.is_empty() {
        return Ok(CommitOutcome::NothingToCommit);
    }
    let expected = base
        .metadata_location()
        .ok_or_else(|| {
            DataFusionError::Internal(format!(
                "table {ident} was loaded without a metadata location"
            ))
        })?
        .to_string();

    let file_io = base.file_io().clone();
    let mut written = Vec::new();
    let staged = match stage(base, &ident, &expected, commit, &mut written).await {
        Ok(staged) => staged,
        Err(e) => {
            delete_files(&file_io, &written).await;
            return Err(e);
        }
    };

    match swap_metadata_location(
        catalog_uri,
        catalog_name,
        &ident,
        &expected,
        &staged.metadata_location,
    )
    .await
    {
        Ok(true) => Ok(CommitOutcome::Committed {
            snapshot_id: staged.snapshot_id,
        }),
        Ok(false) => {
            delete_files(&file_io, &written).await;
            Err(DataFusionError::Execution(format!(
                "concurrent commit to {ident}: the table changed since the merge started; \
                 nothing was committed"
            )))
        }
        Err(swap_error) => {
            // The UPDATE may or may not have run: ask the catalog before
            // deleting files it might now point at.
            match current_metadata_location(catalog_uri, catalog_name, &ident).await {
                Ok(Some(current)) if current == staged.metadata_location => {
                    tracing::warn!(
                        "commit to {ident} reported an error but did commit: {swap_error}"
                    );
                    Ok(CommitOutcome::Committed {
                        snapshot_id: staged.snapshot_id,
                    })
                }
                Ok(_) => {
                    delete_files(&file_io, &written).await;
                    Err(swap_error)
                }
                Err(check_error) => Err(DataFusionError::Execution(format!(
                    "commit to {ident}: outcome unknown ({swap_error}; then {check_error}); \
                     the new metadata file {} was kept",
                    staged.metadata_location
                ))),
            }
        }
    }
}

/// Checks that need no table I/O.
fn validate_request(ident: &TableIdent, commit: &OverwriteCommit) -> Result<()> {
    let mut added_paths = HashSet::with_capacity(commit.added.len());
    for file in &commit.added {
        let path = file.file_path();
        if file.content_type() != DataContentType::Data {
            return Err(DataFusionError::Plan(format!(
                "cannot commit to {ident}: added file '{path}' is not a data file ({:?})",
                file.content_type()
            )));
        }
        if commit.removed.contains(path) {
            return Err(DataFusionError::Plan(format!(
                "cannot commit to {ident}: data file '{path}' is both removed and added"
            )));
        }
        if !added_paths.insert(path) {
            return Err(DataFusionError::Plan(format!(
                "cannot commit to {ident}: data file '{path}' is added twice"
            )));
        }
    }
    if !commit.removed.is_empty() && commit.operation == Operation::Append {
        return Err(DataFusionError::Plan(format!(
            "cannot commit to {ident}: an append cannot remove data files ({} removed)",
            commit.removed.len()
        )));
    }
    Ok(())
}

/// What [`stage`] wrote and will publish.
struct Staged {
    snapshot_id: i64,
    metadata_location: String,
}

/// One manifest of the base snapshot, decided.
enum Decision {
    /// Same entry in the new manifest list.
    Carry(ManifestFile),
    /// Some live files removed: rewrite.
    Rewrite {
        original: ManifestFile,
        manifest: Manifest,
        removed: Vec<ManifestEntryRef>,
    },
    /// Every live file removed (entries go to a deleted-only manifest), or
    /// no live file at all: not in the new list.
    Drop,
}

/// A removed file's entry with the schema and spec it was written with.
struct RemovedEntry {
    entry: ManifestEntryRef,
    schema: SchemaRef,
    spec: PartitionSpecRef,
}

/// Everything up to and including the new metadata file; every path is
/// pushed to `written` before it is written.
async fn stage(
    base: &Table,
    ident: &TableIdent,
    expected: &str,
    commit: OverwriteCommit,
    written: &mut Vec<String>,
) -> Result<Staged> {
    let metadata = base.metadata();
    let file_io = base.file_io();
    let format_version = metadata.format_version();
    let schema = metadata.current_schema().clone();
    let base_snapshot = metadata.current_snapshot().cloned();
    let ice = |what: &str| {
        let what = what.to_string();
        let ident = ident.clone();
        move |e: iceberg::Error| {
            DataFusionError::Execution(format!("commit to {ident}: {what}: {e}"))
        }
    };

    // Added files: one manifest, in the default partition spec (the spec
    // writers use; `DataFile` does not expose its spec id).
    let default_spec = metadata.default_partition_spec().clone();
    let default_partition_type = metadata.default_partition_type();
    let mut added_by_spec: BTreeMap<i32, (PartitionSpecRef, Vec<DataFile>)> = BTreeMap::new();
    for file in commit.added {
        if file.partition().fields().len() != default_partition_type.fields().len() {
            return Err(DataFusionError::Plan(format!(
                "cannot commit to {ident}: added file '{}' has a partition value that does not \
                 match the table's partition spec {}",
                file.file_path(),
                default_spec.spec_id()
            )));
        }
        added_by_spec
            .entry(default_spec.spec_id())
            .or_insert_with(|| (default_spec.clone(), vec![]))
            .1
            .push(file);
    }
    let added_paths: HashSet<String> = added_by_spec
        .values()
        .flat_map(|(_, files)| files.iter().map(|f| f.file_path().to_string()))
        .collect();

    // The base snapshot's manifests.
    let base_manifests: Vec<ManifestFile> = match &base_snapshot {
        Some(snapshot) => {
            if snapshot.encryption_key_id().is_some() {
                return Err(DataFusionError::NotImplemented(format!(
                    "commit to {ident}: encrypted tables are not supported"
                )));
            }
            base.manifest_list_reader(snapshot)
                .load()
                .await
                .map_err(ice("reading the manifest list"))?
                .consume_entries()
                .into_iter()
                .collect()
        }
        None => vec![],
    };

    // Decide every manifest; load the data manifests only when removing.
    let removed = commit.removed;
    let might_be_live = |m: &ManifestFile| m.has_added_files() || m.has_existing_files();
    let mut loaded: HashMap<usize, Manifest> = HashMap::new();
    if !removed.is_empty() {
        let to_load: Vec<usize> = base_manifests
            .iter()
            .enumerate()
            .filter(|(_, m)| m.content == ManifestContentType::Data && might_be_live(m))
            .map(|(i, _)| i)
            .collect();
        let mut reads = futures::stream::iter(to_load)
            .map(|i| {
                let manifest = &base_manifests[i];
                async move { (i, manifest.load_manifest(file_io).await) }
            })
            .buffer_unordered(MANIFEST_READ_CONCURRENCY);
        while let Some((i, result)) = reads.next().await {
            let manifest = result.map_err(ice(&format!(
                "reading manifest {}",
                base_manifests[i].manifest_path
            )))?;
            loaded.insert(i, manifest);
        }
    }

    let mut decisions = Vec::with_capacity(base_manifests.len());
    let mut found: HashSet<String> = HashSet::new();
    let mut dead: BTreeMap<i32, Vec<RemovedEntry>> = BTreeMap::new();
    let mut removed_files: Vec<RemovedEntry> = vec![];
    for (i, manifest_file) in base_manifests.into_iter().enumerate() {
        if manifest_file.content == ManifestContentType::Deletes {
            decisions.push(Decision::Carry(manifest_file));
            continue;
        }
        if !might_be_live(&manifest_file) {
            decisions.push(Decision::Drop);
            continue;
        }
        let Some(manifest) = loaded.remove(&i) else {
            decisions.push(Decision::Carry(manifest_file));
            continue;
        };
        let mut live = 0usize;
        let mut hits = vec![];
        for entry in manifest.entries().iter().filter(|e| e.is_alive()) {
            live += 1;
            let path = entry.file_path();
            if added_paths.contains(path) {
                return Err(DataFusionError::Plan(format!(
                    "cannot commit to {ident}: added data file '{path}' is already in the table"
                )));
            }
            if removed.contains(path) {
                found.insert(path.to_string());
                hits.push(entry.clone());
            }
        }
        let schema = manifest.metadata().schema().clone();
        let spec = Arc::new(manifest.metadata().partition_spec().clone());
        for entry in &hits {
            removed_files.push(RemovedEntry {
                entry: entry.clone(),
                schema: schema.clone(),
                spec: spec.clone(),
            });
        }
        if live == 0 {
            decisions.push(Decision::Drop);
        } else if hits.is_empty() {
            decisions.push(Decision::Carry(manifest_file));
        } else if hits.len() == live {
            let group = dead.entry(manifest_file.partition_spec_id).or_default();
            for entry in hits {
                group.push(RemovedEntry {
                    entry,
                    schema: schema.clone(),
                    spec: spec.clone(),
                });
            }
            decisions.push(Decision::Drop);
        } else {
            if format_version >= FormatVersion::V3 && manifest_file.first_row_id.is_some() {
                let survivor_without_row_id = manifest.entries().iter().any(|e| {
                    e.is_alive()
                        && !removed.contains(e.file_path())
                        && e.data_file().first_row_id().is_none()
                });
                if survivor_without_row_id {
                    return Err(DataFusionError::NotImplemented(format!(
                        "commit to {ident}: rewriting manifest {} of a format-version 3 table \
                         would lose its files' row ids",
                        manifest_file.manifest_path
                    )));
                }
            }
            decisions.push(Decision::Rewrite {
                original: manifest_file,
                manifest,
                removed: hits,
            });
        }
    }
    if found.len() != removed.len() {
        let mut missing: Vec<&String> = removed.iter().filter(|p| !found.contains(*p)).collect();
        missing.sort();
        let shown: Vec<String> = missing.iter().take(5).map(|p| format!("'{p}'")).collect();
        let more = if missing.len() > 5 {
            format!(" and {} more", missing.len() - 5)
        } else {
            String::new()
        };
        let snapshot = match &base_snapshot {
            Some(s) => format!("snapshot {}", s.snapshot_id()),
            None => "the table (it has no snapshot)".to_string(),
        };
        return Err(DataFusionError::Plan(format!(
            "cannot commit to {ident}: {} removed data file(s) are not live in {snapshot}: {}{more}",
            missing.len(),
            shown.join(", ")
        )));
    }

    // The new snapshot.
    let snapshot_id = new_snapshot_id(metadata);
    let parent_snapshot_id = base_snapshot.as_ref().map(|s| s.snapshot_id());
    let sequence_number = metadata.next_sequence_number();
    let location = metadata.location().trim_end_matches('/').to_string();
    let commit_uuid = Uuid::new_v4();
    let mut manifest_counter = 0usize;
    let mut next_manifest_path = || {
        let path = format!("{location}/metadata/{commit_uuid}-m{manifest_counter}.avro");
        manifest_counter += 1;
        path
    };

    // New manifests: added files first, then deleted-only ones, then the
    // base manifests in their order (carried or rewritten).
    let mut new_manifests: Vec<ManifestFile> = vec![];
    for (_, (spec, files)) in added_by_spec.iter() {
        let path = next_manifest_path();
        written.push(path.clone());
        let mut writer = manifest_writer(
            file_io,
            &path,
            snapshot_id,
            schema.clone(),
            spec.as_ref().clone(),
            format_version,
        )
        .map_err(ice("creating a manifest"))?;
        for file in files {
            // No sequence number: inherited from the manifest list entry.
            writer
                .add_file(file.clone(), -1)
                .map_err(ice("adding a data file"))?;
        }
        new_manifests.push(
            writer
                .write_manifest_file()
                .await
                .map_err(ice("writing a manifest"))?,
        );
    }
    for (_, entries) in dead.iter() {
        let first = &entries[0];
        let path = next_manifest_path();
        written.push(path.clone());
        let mut writer = manifest_writer(
            file_io,
            &path,
            snapshot_id,
            first.schema.clone(),
            first.spec.as_ref().clone(),
            format_version,
        )
        .map_err(ice("creating a manifest"))?;
        for removed in entries {
            add_deleted(&mut writer, &removed.entry, ident)?;
        }
        new_manifests.push(
            writer
                .write_manifest_file()
                .await
                .map_err(ice("writing a manifest"))?,
        );
    }
    for decision in decisions {
        match decision {
            Decision::Carry(manifest_file) => new_manifests.push(manifest_file),
            Decision::Drop => {}
            Decision::Rewrite {
                original,
                manifest,
                removed: hits,
            } => {
                let hit_paths: HashSet<&str> = hits.iter().map(|e| e.file_path()).collect();
                let path = next_manifest_path();
                written.push(path.clone());
                let mut writer = manifest_writer(
                    file_io,
                    &path,
                    snapshot_id,
                    manifest.metadata().schema().clone(),
                    manifest.metadata().partition_spec().clone(),
                    format_version,
                )
                .map_err(ice("creating a manifest"))?;
                for entry in manifest.entries().iter().filter(|e| e.is_alive()) {
                    if hit_paths.contains(entry.file_path()) {
                        add_deleted(&mut writer, entry, ident)?;
                    } else {
                        let (sequence_number, file_sequence_number) =
                            sequence_numbers(entry, ident)?;
                        let entry_snapshot_id =
                            entry.snapshot_id().unwrap_or(original.added_snapshot_id);
                        writer
                            .add_existing_file(
                                entry.data_file().clone(),
                                entry_snapshot_id,
                                sequence_number,
                                file_sequence_number,
                            )
                            .map_err(ice("adding an existing data file"))?;
                    }
                }
                new_manifests.push(
                    writer
                        .write_manifest_file()
                        .await
                        .map_err(ice("writing a manifest"))?,
                );
            }
        }
    }

    // Summary.
    let mut collector = SnapshotSummaryCollector::default();
    let partition_summary_limit = metadata
        .properties()
        .get(TableProperties::PROPERTY_WRITE_PARTITION_SUMMARY_LIMIT)
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(TableProperties::PROPERTY_WRITE_PARTITION_SUMMARY_LIMIT_DEFAULT);
    collector.set_partition_summary_limit(partition_summary_limit);
    for (spec, files) in added_by_spec.values() {
        for file in files {
            collector.add_file(file, schema.clone(), spec.clone());
        }
    }
    let mut counted: HashSet<&str> = HashSet::new();
    for removed in &removed_files {
        if counted.insert(removed.entry.file_path()) {
            collector.remove_file(
                removed.entry.data_file(),
                removed.schema.clone(),
                removed.spec.clone(),
            );
        }
    }
    let mut properties = commit.summary;
    properties.extend(collector.build());
    update_totals(&mut properties, base_snapshot.as_ref().map(|s| s.summary()));
    let summary = Summary {
        operation: commit.operation,
        additional_properties: properties,
    };

    // Manifest list.
    let manifest_list_path = format!("{location}/metadata/snap-{snapshot_id}-{commit_uuid}.avro");
    written.push(manifest_list_path.clone());
    let output = file_io
        .new_output(&manifest_list_path)
        .map_err(ice("creating the manifest list"))?
        .writer()
        .await
        .map_err(ice("creating the manifest list"))?;
    let first_row_id = metadata.next_row_id();
    let mut list_writer = match format_version {
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
    list_writer
        .add_manifests(new_manifests.into_iter())
        .map_err(ice("writing the manifest list"))?;
    let list_next_row_id = list_writer.next_row_id();
    list_writer
        .close()
        .await
        .map_err(ice("writing the manifest list"))?;

    // Snapshot and metadata file.
    let builder = Snapshot::builder()
        .with_snapshot_id(snapshot_id)
        .with_parent_snapshot_id(parent_snapshot_id)
        .with_sequence_number(sequence_number)
        .with_timestamp_ms(now_ms(metadata))
        .with_manifest_list(manifest_list_path)
        .with_summary(summary)
        .with_schema_id(metadata.current_schema_id());
    let snapshot = match list_next_row_id {
        Some(next_row_id) => builder
            .with_row_range(first_row_id, next_row_id - first_row_id)
            .build(),
        None => builder.build(),
    };
    let new_metadata = metadata
        .clone()
        .into_builder(Some(expected.to_string()))
        .set_branch_snapshot(snapshot, MAIN_BRANCH)
        .map_err(ice("adding the snapshot"))?
        .build()
        .map_err(ice("building the table metadata"))?
        .metadata;
    let new_location = MetadataLocation::from_str(expected)
        .map_err(ice("parsing the metadata location"))?
        .with_next_version()
        .with_new_metadata(&new_metadata);
    let new_location_str = new_location.to_string();
    written.push(new_location_str.clone());
    new_metadata
        .write_to(file_io, &new_location)
        .await
        .map_err(ice("writing the table metadata"))?;

    Ok(Staged {
        snapshot_id,
        metadata_location: new_location_str,
    })
}

fn manifest_writer(
    file_io: &FileIO,
    path: &str,
    snapshot_id: i64,
    schema: SchemaRef,
    spec: PartitionSpec,
    format_version: FormatVersion,
) -> iceberg::Result<ManifestWriter> {
    let output = file_io.new_output(path)?;
    let builder = ManifestWriterBuilder::new(output, Some(snapshot_id), schema, spec);
    Ok(match format_version {
        FormatVersion::V1 => builder.build_v1(),
        FormatVersion::V2 => builder.build_v2_data(),
        FormatVersion::V3 => builder.build_v3_data(),
    })
}

/// An entry's data and file sequence numbers, as a rewrite must keep them.
fn sequence_numbers(entry: &ManifestEntryRef, ident: &TableIdent) -> Result<(i64, Option<i64>)> {
    let sequence_number = entry.sequence_number().ok_or_else(|| {
        DataFusionError::Execution(format!(
            "commit to {ident}: manifest entry of '{}' has no sequence number",
            entry.file_path()
        ))
    })?;
    Ok((
        sequence_number,
        entry.file_sequence_number.or(Some(sequence_number)),
    ))
}

/// Adds `entry` as `Deleted` (by the writer's snapshot), keeping its
/// sequence numbers.
fn add_deleted(
    writer: &mut ManifestWriter,
    entry: &ManifestEntryRef,
    ident: &TableIdent,
) -> Result<()> {
    let (sequence_number, file_sequence_number) = sequence_numbers(entry, ident)?;
    writer
        .add_delete_file(
            entry.data_file().clone(),
            sequence_number,
            file_sequence_number,
        )
        .map_err(|e| {
            DataFusionError::Execution(format!(
                "commit to {ident}: adding a deleted data file: {e}"
            ))
        })
}

/// A random positive snapshot id not used by the table.
fn new_snapshot_id(metadata: &TableMetadata) -> i64 {
    loop {
        let (high, low) = Uuid::new_v4().as_u64_pair();
        let id = ((high ^ low) & (i64::MAX as u64)) as i64;
        if id != 0 && metadata.snapshot_by_id(id).is_none() {
            return id;
        }
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

/// `total-*` = previous total + added - removed, as iceberg does; a total is
/// left out when the previous snapshot does not have it (unknown), and is
/// counted from 0 for the first snapshot.
fn update_totals(properties: &mut HashMap<String, String>, previous: Option<&Summary>) {
    const TOTALS: [(&str, &str, &str); 6] = [
        ("total-data-files", "added-data-files", "deleted-data-files"),
        (
            "total-delete-files",
            "added-delete-files",
            "removed-delete-files",
        ),
        ("total-records", "added-records", "deleted-records"),
        ("total-files-size", "added-files-size", "removed-files-size"),
        (
            "total-position-deletes",
            "added-position-deletes",
            "removed-position-deletes",
        ),
        (
            "total-equality-deletes",
            "added-equality-deletes",
            "removed-equality-deletes",
        ),
    ];
    let get = |map: &HashMap<String, String>, key: &str| -> Option<u64> {
        match map.get(key) {
            None => Some(0),
            Some(v) => v.parse::<u64>().ok(),
        }
    };
    for (total, added, removed) in TOTALS {
        let previous_total = match previous {
            None => Some(0),
            Some(summary) => summary
                .additional_properties
                .get(total)
                .and_then(|v| v.parse::<u64>().ok()),
        };
        let value = previous_total.and_then(|prev| {
            let added = get(properties, added)?;
            let removed = get(properties, removed)?;
            (prev + added).checked_sub(removed)
        });
        match value {
            Some(value) => {
                properties.insert(total.to_string(), value.to_string());
            }
            None => {
                properties.remove(total);
            }
        }
    }
}

/// Best-effort deletion of what a failed commit wrote.
async fn delete_files(file_io: &FileIO, paths: &[String]) {
    for path in paths {
        if let Err(e) = file_io.delete(path).await {
            tracing::debug!("could not delete {path} after a failed commit: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::{Path, PathBuf};

    use arrow::array::{Array, ArrayRef, Int64Array, RecordBatch, StringArray};
    use datafusion::parquet::file::properties::WriterProperties;
    use futures::TryStreamExt;
    use iceberg::arrow::schema_to_arrow_schema;
    use iceberg::spec::{DataFileFormat, ManifestStatus, NestedField, PrimitiveType, Schema, Type};
    use iceberg::transaction::{ApplyTransactionAction, Transaction};
    use iceberg::writer::base_writer::data_file_writer::DataFileWriterBuilder;
    use iceberg::writer::file_writer::location_generator::{
        DefaultFileNameGenerator, DefaultLocationGenerator,
    };
    use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
    use iceberg::writer::file_writer::ParquetWriterBuilder;
    use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};
    use iceberg::{NamespaceIdent, TableCreation};
    use tempfile::TempDir;

    use super::*;
    use crate::catalog::{open_catalog, CatalogOptions, OpenCatalog};

    struct Fixture {
        _dir: TempDir,
        uri: String,
        open: OpenCatalog,
        ident: TableIdent,
    }

    impl Fixture {
        async fn new() -> Fixture {
            let dir = TempDir::new().unwrap();
            let warehouse = dir.path().join("wh");
            let open = open_catalog(&CatalogOptions {
                warehouse: warehouse.clone(),
                catalog_uri: None,
                ..Default::default()
            })
            .await
            .unwrap();
            let uri = format!("sqlite://{}/catalog.db?mode=rwc", warehouse.display());
            let namespace = NamespaceIdent::new("ns".to_string());
            open.catalog
                .create_namespace(&namespace, HashMap::new())
                .await
                .unwrap();
            let schema = Schema::builder()
                .with_schema_id(0)
                .with_fields(vec![
                    NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
                    NestedField::optional(2, "name", Type::Primitive(PrimitiveType::String)).into(),
                ])
                .build()
                .unwrap();
            let creation = TableCreation::builder()
                .name("t".to_string())
                .schema(schema)
                .build();
            open.catalog
                .create_table(&namespace, creation)
                .await
                .unwrap();
            let ident = TableIdent::new(namespace, "t".to_string());
            Fixture {
                _dir: dir,
                uri,
                open,
                ident,
            }
        }

        async fn load(&self) -> Table {
            self.open.catalog.load_table(&self.ident).await.unwrap()
        }

        /// Appends one snapshot with the given files (one manifest).
        async fn append(&self, files: Vec<DataFile>) -> Table {
            let table = self.load().await;
            let tx = Transaction::new(&table);
            let tx = tx.fast_append().add_data_files(files).apply(tx).unwrap();
            tx.commit(self.open.catalog.as_ref()).await.unwrap()
        }

        async fn commit(&self, base: &Table, commit: OverwriteCommit) -> Result<CommitOutcome> {
            commit_overwrite(&self.uri, &self.open.name, base, commit).await
        }

        async fn catalog_location(&self) -> Option<String> {
            current_metadata_location(&self.uri, &self.open.name, &self.ident)
                .await
                .unwrap()
        }
    }

    /// Writes one Parquet data file with rows (id, "n<id>").
    async fn write_file(table: &Table, ids: &[i64]) -> DataFile {
        let schema = table.metadata().current_schema().clone();
        let arrow_schema = Arc::new(schema_to_arrow_schema(&schema).unwrap());
        let names: Vec<String> = ids.iter().map(|i| format!("n{i}")).collect();
        let batch = RecordBatch::try_new(
            arrow_schema,
            vec![
                Arc::new(Int64Array::from(ids.to_vec())) as ArrayRef,
                Arc::new(StringArray::from(names)) as ArrayRef,
            ],
        )
        .unwrap();
        let parquet = ParquetWriterBuilder::new(WriterProperties::default(), schema);
        let rolling = RollingFileWriterBuilder::new_with_default_file_size(
            parquet,
            table.file_io().clone(),
            DefaultLocationGenerator::new(table.metadata()).unwrap(),
            DefaultFileNameGenerator::new(
                Uuid::new_v4().to_string(),
                None,
                DataFileFormat::Parquet,
            ),
        );
        let mut writer = DataFileWriterBuilder::new(rolling)
            .build(None)
            .await
            .unwrap();
        writer.write(batch).await.unwrap();
        let mut files = writer.close().await.unwrap();
        assert_eq!(files.len(), 1);
        files.pop().unwrap()
    }

    async fn rows(table: &Table) -> Vec<i64> {
        let batches: Vec<RecordBatch> = table
            .scan()
            .build()
            .unwrap()
            .to_arrow()
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        let mut ids = vec![];
        for batch in batches {
            let column = batch.column_by_name("id").unwrap();
            let column = column.as_any().downcast_ref::<Int64Array>().unwrap();
            ids.extend((0..column.len()).map(|i| column.value(i)));
        }
        ids.sort();
        ids
    }

    async fn manifests(table: &Table) -> Vec<(ManifestFile, Vec<ManifestEntryRef>)> {
        let snapshot = table.metadata().current_snapshot().unwrap();
        let list = table.manifest_list_reader(snapshot).load().await.unwrap();
        let mut out = vec![];
        for manifest_file in list.entries() {
            let manifest = manifest_file.load_manifest(table.file_io()).await.unwrap();
            out.push((manifest_file.clone(), manifest.entries().to_vec()));
        }
        out
    }

    fn metadata_dir(table: &Table) -> PathBuf {
        let location = table.metadata().location().trim_start_matches("file://");
        Path::new(location).join("metadata")
    }

    fn listing(dir: &Path) -> BTreeSet<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .collect()
    }

    fn overwrite(added: Vec<DataFile>, removed: &[&DataFile]) -> OverwriteCommit {
        OverwriteCommit {
            added,
            removed: removed.iter().map(|f| f.file_path().to_string()).collect(),
            summary: HashMap::new(),
            operation: Operation::Overwrite,
        }
    }

    /// Table with three snapshots of one file each: ids 1-2, 3-4, 5-6.
    async fn three_files(fx: &Fixture) -> (Table, [DataFile; 3]) {
        let table = fx.load().await;
        let f1 = write_file(&table, &[1, 2]).await;
        let f2 = write_file(&table, &[3, 4]).await;
        let f3 = write_file(&table, &[5, 6]).await;
        fx.append(vec![f1.clone()]).await;
        fx.append(vec![f2.clone()]).await;
        let table = fx.append(vec![f3.clone()]).await;
        (table, [f1, f2, f3])
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn overwrite_commit_removes_and_adds() {
        let fx = Fixture::new().await;
        let (base, [f1, f2, f3]) = three_files(&fx).await;
        let before = manifests(&base).await;
        assert_eq!(before.len(), 3);
        let base_snapshot = base.metadata().current_snapshot().unwrap().clone();
        let new = write_file(&base, &[7, 8]).await;

        let mut commit = overwrite(vec![new.clone()], &[&f2]);
        commit
            .summary
            .insert("icemerge.rows-updated".into(), "2".into());
        let outcome = fx.commit(&base, commit).await.unwrap();
        let CommitOutcome::Committed { snapshot_id } = outcome else {
            panic!("{outcome:?}")
        };

        let table = fx.load().await;
        let snapshot = table.metadata().current_snapshot().unwrap();
        assert_eq!(snapshot.snapshot_id(), snapshot_id);
        assert_eq!(snapshot.summary().operation, Operation::Overwrite);
        assert_eq!(
            snapshot.parent_snapshot_id(),
            Some(base_snapshot.snapshot_id())
        );
        assert_eq!(
            snapshot.sequence_number(),
            base_snapshot.sequence_number() + 1
        );
        assert_eq!(
            table.metadata().last_sequence_number(),
            snapshot.sequence_number()
        );
        let props = &snapshot.summary().additional_properties;
        assert_eq!(props.get("added-data-files").map(String::as_str), Some("1"));
        assert_eq!(
            props.get("deleted-data-files").map(String::as_str),
            Some("1")
        );
        assert_eq!(props.get("added-records").map(String::as_str), Some("2"));
        assert_eq!(props.get("deleted-records").map(String::as_str), Some("2"));
        assert_eq!(props.get("total-data-files").map(String::as_str), Some("3"));
        assert_eq!(props.get("total-records").map(String::as_str), Some("6"));
        let total_size =
            f1.file_size_in_bytes() + f3.file_size_in_bytes() + new.file_size_in_bytes();
        assert_eq!(props.get("total-files-size"), Some(&total_size.to_string()));
        assert_eq!(
            props.get("icemerge.rows-updated").map(String::as_str),
            Some("2")
        );
        assert!(snapshot
            .manifest_list()
            .contains(&format!("/metadata/snap-{snapshot_id}-")));

        assert_eq!(rows(&table).await, vec![1, 2, 5, 6, 7, 8]);

        // Manifests: f1's and f3's carried as-is, f2's dropped and f2 recorded
        // as Deleted in a new manifest, the new file Added in another.
        let after = manifests(&table).await;
        let carried: Vec<&ManifestFile> = after
            .iter()
            .map(|(m, _)| m)
            .filter(|m| before.iter().any(|(b, _)| b == *m))
            .collect();
        assert_eq!(carried.len(), 2);
        for (old, entries) in &before {
            let path = entries[0].file_path();
            if path == f2.file_path() {
                assert!(!after
                    .iter()
                    .any(|(m, _)| m.manifest_path == old.manifest_path));
            } else {
                assert!(
                    after.iter().any(|(m, _)| m == old),
                    "manifest of {path} not carried"
                );
            }
        }
        let new_manifests: Vec<_> = after
            .iter()
            .filter(|(m, _)| m.added_snapshot_id == snapshot_id)
            .collect();
        assert_eq!(new_manifests.len(), 2);
        let f2_seq = before
            .iter()
            .find(|(_, e)| e[0].file_path() == f2.file_path())
            .unwrap()
            .1[0]
            .sequence_number();
        let deleted: Vec<&ManifestEntryRef> = after
            .iter()
            .flat_map(|(_, e)| e)
            .filter(|e| e.status() == ManifestStatus::Deleted)
            .collect();
        assert_eq!(deleted.len(), 1);
        assert_eq!(deleted[0].file_path(), f2.file_path());
        assert_eq!(deleted[0].snapshot_id(), Some(snapshot_id));
        assert_eq!(deleted[0].sequence_number(), f2_seq);
        let added: Vec<&ManifestEntryRef> = after
            .iter()
            .flat_map(|(_, e)| e)
            .filter(|e| e.status() == ManifestStatus::Added && e.snapshot_id() == Some(snapshot_id))
            .collect();
        assert_eq!(added.len(), 1);
        assert_eq!(added[0].file_path(), new.file_path());
        assert_eq!(added[0].sequence_number(), Some(snapshot.sequence_number()));

        // The catalog row points at the new metadata file.
        let location = fx.catalog_location().await.unwrap();
        assert_eq!(Some(location.as_str()), table.metadata_location());
        assert_ne!(Some(location.as_str()), base.metadata_location());
        assert_eq!(table.metadata().snapshots().count(), 4);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn partly_hit_manifest_is_rewritten_with_existing_survivors() {
        let fx = Fixture::new().await;
        let table = fx.load().await;
        let fa = write_file(&table, &[1]).await;
        let fb = write_file(&table, &[2]).await;
        let fc = write_file(&table, &[3]).await;
        let base = fx.append(vec![fa.clone(), fb.clone(), fc.clone()]).await;
        let base_snapshot = base.metadata().current_snapshot().unwrap().clone();
        let before = manifests(&base).await;
        assert_eq!(before.len(), 1);

        let CommitOutcome::Committed { snapshot_id } =
            fx.commit(&base, overwrite(vec![], &[&fb])).await.unwrap()
        else {
            panic!()
        };
        let table = fx.load().await;
        assert_eq!(rows(&table).await, vec![1, 3]);
        let after = manifests(&table).await;
        assert_eq!(after.len(), 1);
        let (manifest, entries) = &after[0];
        assert_eq!(manifest.added_snapshot_id, snapshot_id);
        assert_eq!(manifest.existing_files_count, Some(2));
        assert_eq!(manifest.deleted_files_count, Some(1));
        assert_eq!(
            manifest.min_sequence_number,
            base_snapshot.sequence_number()
        );
        for entry in entries {
            if entry.file_path() == fb.file_path() {
                assert_eq!(entry.status(), ManifestStatus::Deleted);
                assert_eq!(entry.snapshot_id(), Some(snapshot_id));
            } else {
                assert_eq!(entry.status(), ManifestStatus::Existing);
                assert_eq!(entry.snapshot_id(), Some(base_snapshot.snapshot_id()));
            }
            assert_eq!(
                entry.sequence_number(),
                Some(base_snapshot.sequence_number())
            );
            assert_eq!(
                entry.file_sequence_number,
                Some(base_snapshot.sequence_number())
            );
        }

        // A second commit removing the rest: Deleted entries of earlier
        // commits are not carried along, the survivors' history is kept.
        let CommitOutcome::Committed {
            snapshot_id: second,
        } = fx.commit(&table, overwrite(vec![], &[&fa])).await.unwrap()
        else {
            panic!()
        };
        let table = fx.load().await;
        assert_eq!(rows(&table).await, vec![3]);
        let after = manifests(&table).await;
        assert_eq!(after.len(), 1);
        let entries = &after[0].1;
        assert_eq!(entries.len(), 2);
        let fa_entry = entries
            .iter()
            .find(|e| e.file_path() == fa.file_path())
            .unwrap();
        assert_eq!(
            (fa_entry.status(), fa_entry.snapshot_id()),
            (ManifestStatus::Deleted, Some(second))
        );
        let fc_entry = entries
            .iter()
            .find(|e| e.file_path() == fc.file_path())
            .unwrap();
        assert_eq!(
            (fc_entry.status(), fc_entry.snapshot_id()),
            (ManifestStatus::Existing, Some(base_snapshot.snapshot_id()))
        );
        let props = &table
            .metadata()
            .current_snapshot()
            .unwrap()
            .summary()
            .additional_properties;
        assert_eq!(props.get("total-data-files").map(String::as_str), Some("1"));
        assert_eq!(props.get("total-records").map(String::as_str), Some("1"));

        // Removing the last file: the deleted-only manifest replaces it;
        // the one after that drops it.
        fx.commit(&table, overwrite(vec![], &[&fc])).await.unwrap();
        let table = fx.load().await;
        assert_eq!(rows(&table).await, Vec::<i64>::new());
        let after = manifests(&table).await;
        assert_eq!(after.len(), 1);
        assert_eq!(after[0].0.existing_files_count, Some(0));
        assert_eq!(after[0].0.added_files_count, Some(0));
        let fd = write_file(&table, &[4]).await;
        let mut append = overwrite(vec![fd], &[]);
        append.operation = Operation::Append;
        fx.commit(&table, append).await.unwrap();
        let table = fx.load().await;
        assert_eq!(rows(&table).await, vec![4]);
        assert_eq!(manifests(&table).await.len(), 1);
        let props = &table
            .metadata()
            .current_snapshot()
            .unwrap()
            .summary()
            .additional_properties;
        assert_eq!(props.get("total-data-files").map(String::as_str), Some("1"));
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn refusals_change_nothing() {
        let fx = Fixture::new().await;
        let (base, [f1, _f2, _f3]) = three_files(&fx).await;
        let dir = metadata_dir(&base);
        let files_before = listing(&dir);
        let location_before = fx.catalog_location().await;
        let new = write_file(&base, &[9]).await;

        // A removed path that is not in the table.
        let mut commit = overwrite(vec![new.clone()], &[]);
        commit
            .removed
            .insert(format!("{}/data/nope.parquet", base.metadata().location()));
        let err = fx.commit(&base, commit).await.unwrap_err().to_string();
        assert!(err.contains("not live"), "{err}");
        assert!(err.contains("nope.parquet"), "{err}");

        // A path both removed and added.
        let err = fx
            .commit(&base, overwrite(vec![f1.clone()], &[&f1]))
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("both removed and added"), "{err}");

        // A file already in the table added again (while removing another).
        let err = fx
            .commit(&base, overwrite(vec![f1.clone()], &[&_f2]))
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("already in the table"), "{err}");

        // An append that removes.
        let mut commit = overwrite(vec![new.clone()], &[&f1]);
        commit.operation = Operation::Append;
        let err = fx.commit(&base, commit).await.unwrap_err().to_string();
        assert!(err.contains("append cannot remove"), "{err}");

        assert_eq!(fx.catalog_location().await, location_before);
        assert_eq!(listing(&dir), files_before);
        assert_eq!(rows(&fx.load().await).await, vec![1, 2, 3, 4, 5, 6]);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn concurrent_commit_is_refused_and_cleaned_up() {
        let fx = Fixture::new().await;
        let (stale, [f1, _f2, f3]) = three_files(&fx).await;
        // Another commit moves the table on.
        fx.commit(&stale, overwrite(vec![], &[&f1])).await.unwrap();
        let location = fx.catalog_location().await;
        let dir = metadata_dir(&stale);
        let files_before = listing(&dir);

        let new = write_file(&stale, &[9]).await;
        let err = fx
            .commit(&stale, overwrite(vec![new.clone()], &[&f3]))
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("concurrent commit"), "{err}");
        assert!(err.contains("ns.t"), "{err}");
        assert_eq!(
            listing(&dir),
            files_before,
            "the failed commit left files behind"
        );
        assert_eq!(fx.catalog_location().await, location);
        assert_eq!(rows(&fx.load().await).await, vec![3, 4, 5, 6]);
        // The data file is the caller's to delete.
        assert!(Path::new(new.file_path().trim_start_matches("file://")).exists());
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn nothing_to_commit() {
        let fx = Fixture::new().await;
        let (base, _) = three_files(&fx).await;
        let dir = metadata_dir(&base);
        let files_before = listing(&dir);
        let location = fx.catalog_location().await;
        let outcome = fx.commit(&base, overwrite(vec![], &[])).await.unwrap();
        assert_eq!(outcome, CommitOutcome::NothingToCommit);
        assert_eq!(fx.catalog_location().await, location);
        assert_eq!(listing(&dir), files_before);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn first_snapshot_of_an_empty_table() {
        let fx = Fixture::new().await;
        let base = fx.load().await;
        assert!(base.metadata().current_snapshot().is_none());
        let f = write_file(&base, &[1, 2, 3]).await;

        let err = fx
            .commit(&base, overwrite(vec![f.clone()], &[&f]))
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("both removed and added"), "{err}");
        let mut commit = overwrite(vec![], &[]);
        commit.removed.insert("file:///nowhere.parquet".into());
        let err = fx.commit(&base, commit).await.unwrap_err().to_string();
        assert!(
            err.contains("not live") && err.contains("no snapshot"),
            "{err}"
        );

        let mut commit = overwrite(vec![f.clone()], &[]);
        commit.operation = Operation::Append;
        let CommitOutcome::Committed { snapshot_id } = fx.commit(&base, commit).await.unwrap()
        else {
            panic!()
        };
        let table = fx.load().await;
        let snapshot = table.metadata().current_snapshot().unwrap();
        assert_eq!(snapshot.snapshot_id(), snapshot_id);
        assert_eq!(snapshot.parent_snapshot_id(), None);
        assert_eq!(snapshot.summary().operation, Operation::Append);
        assert_eq!(
            snapshot
                .summary()
                .additional_properties
                .get("total-records")
                .map(String::as_str),
            Some("3")
        );
        assert_eq!(rows(&table).await, vec![1, 2, 3]);
        // fast_append still works on top of it.
        let g = write_file(&table, &[4]).await;
        let table = fx.append(vec![g]).await;
        assert_eq!(rows(&table).await, vec![1, 2, 3, 4]);
    }
}
