//! The snapshot producer every data-changing action runs: validate → plan
//! the base manifests → write new manifests → summary → manifest list →
//! snapshot and metadata file → compare-and-swap of the catalog row. What a
//! failed or lost commit wrote is deleted; the data files it names are the
//! caller's.
//!
//! Adding an action: describe the change as [`SnapshotChanges`] and map the
//! [`Outcome`]. The row delta (`row_delta.rs`, merge-on-read) adds delete
//! files: each takes the partition of the data file it references
//! (`delete_files.rs`), they are written into delete manifests (one per
//! partition spec) and counted by the summary's collector. A
//! replace (compaction) is the overwrite's changes with operation `replace`
//! and the action's own check that the rows are the same. A metadata-only
//! action (expire, rollback, ALTER) skips the manifests: it builds its new
//! metadata from the base, writes it like `metadata::write_metadata` does
//! and publishes it with [`publish`] (its [`Staged`] names the snapshot that
//! becomes current and the files to delete if the swap is lost).
//! A manifest rewrite (`manifest_rewrite.rs`) changes no file: it writes
//! its own manifests inside [`stage_with`] and publishes like the others.
//! Rebase-and-retry on a lost swap is the
//! action's choice: reload, produce again (`append.rs`), after validating
//! what was committed since against the statement's `CommitContext`
//! (`overwrite.rs`); a row delta validates with its `deletes_added_for`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use datafusion::error::{DataFusionError, Result};
use iceberg::io::FileIO;
use iceberg::spec::{
    DataContentType, DataFile, Manifest, ManifestContentType, ManifestFile, Operation,
    PartitionSpecRef, Struct, StructType, TableMetadata,
};
use iceberg::table::Table;
use iceberg::TableIdent;

use super::catalog_swap::{current_metadata_location, swap_metadata_location};
use super::delete_files::place_delete_files;
use super::manifest_list::write_manifest_list;
use super::manifest_merge::{merged_manifests, MergeSettings, Mergeable};
use super::manifests::{read_manifest_list, write_manifest, write_manifest_of, NewEntry};
use super::metadata::write_metadata;
use super::plan::{
    manifests_to_load, plan_manifests, Decision, EntryView, Fate, ManifestPlan, ManifestPolicy,
    ManifestView, PlanError, PlanInput,
};
use super::staging::{delete_files, Staging};
use super::summary::{snapshot_summary, RemovedFile};
use crate::catalog::manifests::load_manifests;
use icemerge_proto::error::{internal, invalid_input, io_error, unsupported};

/// What an action changes in the table's data files.
pub(crate) struct SnapshotChanges {
    pub operation: Operation,
    /// New data files (status `Added`), in the table's default spec.
    pub added: Vec<DataFile>,
    /// New position delete files (status `Added`), each referencing a data
    /// file live in the base; their partitions are set from it.
    pub added_deletes: Vec<DataFile>,
    /// Paths of data files to remove; each must be live in the base.
    pub removed: HashSet<String>,
    /// Extra summary properties; the computed ones win.
    pub properties: HashMap<String, String>,
    pub policy: ManifestPolicy,
}

/// The SQL catalog row a commit swaps.
pub(crate) struct CatalogRow<'a> {
    pub uri: &'a str,
    pub catalog_name: &'a str,
}

/// What became of a commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The new snapshot is the table's current one.
    Committed { snapshot_id: i64 },
    /// Nothing added and nothing removed: no snapshot was made.
    NothingToCommit,
    /// Another writer moved the catalog row first; what this commit wrote
    /// is deleted.
    Lost,
}

/// Commits `changes` on top of `base` (its current snapshot and metadata
/// file) and swaps `row` from `base`'s metadata location to the new one.
pub(crate) async fn produce(
    row: &CatalogRow<'_>,
    base: &Table,
    changes: SnapshotChanges,
) -> Result<Outcome> {
    let ident = base.identifier();
    validate(ident, &changes)?;
    if changes.added.is_empty() && changes.removed.is_empty() && changes.added_deletes.is_empty() {
        return Ok(Outcome::NothingToCommit);
    }
    let expected = base_metadata_location(base)?;
    let staged = stage(base, &expected, changes).await?;
    publish(row, ident, base.file_io(), &expected, staged).await
}

/// The metadata file `base` was loaded from: the catalog row must still
/// point at it for the swap to succeed.
pub(crate) fn base_metadata_location(base: &Table) -> Result<String> {
    base.metadata_location().map(str::to_string).ok_or_else(|| {
        internal(format!(
            "table {} was loaded without a metadata location",
            base.identifier()
        ))
    })
}

/// Checks that need no table I/O.
fn validate(ident: &TableIdent, changes: &SnapshotChanges) -> Result<()> {
    let mut added_paths = HashSet::with_capacity(changes.added.len());
    for file in &changes.added {
        let path = file.file_path();
        if file.content_type() != DataContentType::Data {
            return Err(invalid_input(format!(
                "cannot commit to {ident}: added file '{path}' is not a data file ({:?})",
                file.content_type()
            )));
        }
        if changes.removed.contains(path) {
            return Err(invalid_input(format!(
                "cannot commit to {ident}: data file '{path}' is both removed and added"
            )));
        }
        if !added_paths.insert(path) {
            return Err(invalid_input(format!(
                "cannot commit to {ident}: data file '{path}' is added twice"
            )));
        }
    }
    if !changes.added_deletes.is_empty() && changes.operation == Operation::Append {
        return Err(invalid_input(format!(
            "cannot commit to {ident}: an append cannot add delete files ({} added)",
            changes.added_deletes.len()
        )));
    }
    if !changes.removed.is_empty() && changes.operation == Operation::Append {
        return Err(invalid_input(format!(
            "cannot commit to {ident}: an append cannot remove data files ({} removed)",
            changes.removed.len()
        )));
    }
    Ok(())
}

/// A new metadata file, not yet published, and every file written for it.
pub(crate) struct Staged {
    pub snapshot_id: i64,
    pub metadata_location: String,
    pub written: Vec<String>,
}

/// Writes everything up to and including the new metadata file; on failure
/// deletes what it wrote.
async fn stage(base: &Table, expected: &str, changes: SnapshotChanges) -> Result<Staged> {
    stage_with(base, |mut staging| async move {
        let result = write_snapshot(base, expected, changes, &mut staging).await;
        (staging, result)
    })
    .await
}

/// Runs `write` (the steps up to and including the new metadata file, whose
/// location it returns) with a new [`Staging`]; on failure deletes what it
/// wrote. Actions that build their manifests otherwise (a manifest rewrite)
/// stage through this too.
pub(crate) async fn stage_with<F, Fut>(base: &Table, write: F) -> Result<Staged>
where
    F: FnOnce(Staging) -> Fut,
    Fut: std::future::Future<Output = (Staging, Result<String>)>,
{
    let (staging, result) = write(Staging::new(base)).await;
    let snapshot_id = staging.snapshot_id;
    let file_io = staging.file_io.clone();
    let written = staging.into_written();
    match result {
        Ok(metadata_location) => Ok(Staged {
            snapshot_id,
            metadata_location,
            written,
        }),
        Err(e) => {
            delete_files(&file_io, &written).await;
            Err(e)
        }
    }
}

/// The steps of [`stage`]; returns the new metadata location.
async fn write_snapshot(
    base: &Table,
    expected: &str,
    changes: SnapshotChanges,
    staging: &mut Staging,
) -> Result<String> {
    let metadata = base.metadata();
    let ident = staging.ident.clone();
    check_partition_values(&ident, metadata, &changes.added)?;
    let base_list = read_manifest_list(base, metadata.current_snapshot(), &ident).await?;
    let loaded =
        load_base_manifests(&staging.file_io, &ident, metadata, &base_list, &changes).await?;
    let plan = plan_base(&ident, metadata, &base_list, &loaded, &changes)?;
    let SnapshotChanges {
        operation,
        added,
        added_deletes,
        properties,
        policy,
        ..
    } = changes;
    let default_spec = metadata.default_partition_spec_id();
    let added_deletes =
        place_delete_files(&ident, added_deletes, default_spec, data_manifests(&loaded))?;
    let removed = removed_files(&plan, &loaded);
    let counted: Vec<DataFile> = added
        .iter()
        .chain(added_deletes.values().flatten())
        .cloned()
        .collect();
    let summary = snapshot_summary(metadata, operation, properties, &counted, removed);
    let mut manifests = write_delete_manifests(staging, metadata, &added_deletes).await?;
    manifests.extend(
        write_new_manifests(staging, metadata, &added, base_list, &loaded, &plan, policy).await?,
    );
    let list = write_manifest_list(staging, metadata, manifests).await?;
    write_metadata(staging, metadata, expected, list, summary).await
}

/// Added files must fit the default partition spec (they are written in it;
/// `DataFile` does not expose its spec id).
fn check_partition_values(
    ident: &TableIdent,
    metadata: &TableMetadata,
    added: &[DataFile],
) -> Result<()> {
    let partition_type = metadata.default_partition_type();
    for file in added {
        if !fits_partition_type(file.partition(), partition_type) {
            return Err(invalid_input(format!(
                "cannot commit to {ident}: added file '{}' has a partition value that does not \
                 match the table's partition spec {}",
                file.file_path(),
                metadata.default_partition_spec_id()
            )));
        }
    }
    Ok(())
}

/// Same arity, and each value null or of its field's type.
fn fits_partition_type(partition: &Struct, partition_type: &StructType) -> bool {
    let values = partition.fields();
    values.len() == partition_type.fields().len()
        && values
            .iter()
            .zip(partition_type.fields())
            .all(|(value, field)| match value {
                None => true,
                Some(value) => {
                    let literal = value.as_primitive_literal();
                    let field_type = field.field_type.as_primitive_type();
                    matches!((literal, field_type), (Some(l), Some(t)) if t.compatible(&l))
                }
            })
}

/// Reads the base manifests planning needs, by index in `base_list`.
async fn load_base_manifests(
    file_io: &FileIO,
    ident: &TableIdent,
    metadata: &TableMetadata,
    base_list: &[ManifestFile],
    changes: &SnapshotChanges,
) -> Result<HashMap<usize, Manifest>> {
    let views = manifest_views(metadata, base_list);
    // Removed files are looked up, and so are the data files added delete
    // files reference.
    let reading = !changes.removed.is_empty() || !changes.added_deletes.is_empty();
    let to_load = manifests_to_load(&views, changes.policy, reading);
    let manifests = load_manifests(file_io, to_load.iter().map(|&i| &base_list[i]))
        .await
        .map_err(|e| io_error(format!("commit to {ident}: {e}")))?;
    Ok(to_load.into_iter().zip(manifests).collect())
}

fn manifest_views(metadata: &TableMetadata, base_list: &[ManifestFile]) -> Vec<ManifestView> {
    let format_version = metadata.format_version();
    base_list
        .iter()
        .map(|m| ManifestView::of(m, format_version))
        .collect()
}

/// The loaded data manifests.
fn data_manifests(loaded: &HashMap<usize, Manifest>) -> impl Iterator<Item = &Manifest> {
    loaded
        .values()
        .filter(|m| m.metadata().content() == &ManifestContentType::Data)
}

/// Writes the added delete files (by partition spec id) into new delete
/// manifests, one per spec.
async fn write_delete_manifests(
    staging: &mut Staging,
    metadata: &TableMetadata,
    by_spec: &BTreeMap<i32, Vec<DataFile>>,
) -> Result<Vec<ManifestFile>> {
    let mut manifests = vec![];
    for (&spec_id, files) in by_spec {
        let spec = metadata.partition_spec_by_id(spec_id).ok_or_else(|| {
            internal(format!(
                "commit to {}: no partition spec {spec_id}",
                staging.ident
            ))
        })?;
        let schema = metadata.current_schema().clone();
        let entries = files.iter().map(NewEntry::Added);
        let content = ManifestContentType::Deletes;
        let spec = spec.as_ref().clone();
        manifests.push(write_manifest_of(staging, content, schema, spec, entries).await?);
    }
    Ok(manifests)
}

/// Decides every base manifest (see `plan.rs`).
fn plan_base(
    ident: &TableIdent,
    metadata: &TableMetadata,
    base_list: &[ManifestFile],
    loaded: &HashMap<usize, Manifest>,
    changes: &SnapshotChanges,
) -> Result<ManifestPlan> {
    let views = manifest_views(metadata, base_list);
    let entries: HashMap<usize, Vec<EntryView>> = loaded
        .iter()
        .map(|(&i, m)| (i, m.entries().iter().map(EntryView::of).collect()))
        .collect();
    let added: HashSet<&str> = changes.added.iter().map(|f| f.file_path()).collect();
    plan_manifests(&PlanInput {
        manifests: &views,
        loaded: &entries,
        removed: &changes.removed,
        added: &added,
        policy: changes.policy,
    })
    .map_err(|e| plan_error(ident, metadata, base_list, e))
}

/// The user-facing error of a refused plan.
fn plan_error(
    ident: &TableIdent,
    metadata: &TableMetadata,
    base_list: &[ManifestFile],
    error: PlanError,
) -> DataFusionError {
    match error {
        PlanError::AlreadyInTable(path) => invalid_input(format!(
            "cannot commit to {ident}: added data file '{path}' is already in the table"
        )),
        PlanError::RowIdsLost(i) => unsupported(format!(
            "commit to {ident}: rewriting manifest {} of a format-version 3 table would lose \
             its files' row ids",
            base_list[i].manifest_path
        )),
        PlanError::NotLive(missing) => {
            let shown: Vec<String> = missing.iter().take(5).map(|p| format!("'{p}'")).collect();
            let more = if missing.len() > 5 {
                format!(" and {} more", missing.len() - 5)
            } else {
                String::new()
            };
            let snapshot = match metadata.current_snapshot() {
                Some(s) => format!("snapshot {}", s.snapshot_id()),
                None => "the table (it has no snapshot)".to_string(),
            };
            invalid_input(format!(
                "cannot commit to {ident}: {} removed data file(s) are not live in {snapshot}: \
                 {}{more}",
                missing.len(),
                shown.join(", ")
            ))
        }
    }
}

/// The removed entries with the schema and spec of their manifests.
fn removed_files<'a>(
    plan: &ManifestPlan,
    loaded: &'a HashMap<usize, Manifest>,
) -> Vec<RemovedFile<'a>> {
    let mut specs: HashMap<usize, PartitionSpecRef> = HashMap::new();
    plan.removed
        .iter()
        .map(|&(m, e)| {
            let manifest = &loaded[&m];
            let spec = specs
                .entry(m)
                .or_insert_with(|| Arc::new(manifest.metadata().partition_spec().clone()));
            RemovedFile {
                file: manifest.entries()[e].data_file(),
                schema: manifest.metadata().schema().clone(),
                spec: spec.clone(),
            }
        })
        .collect()
}

/// Writes the added, deleted-only and rewritten manifests; returns the new
/// manifest list's entries: in the policy's order, or, when the table's
/// settings merge manifests and the commit adds files, the manifests
/// neither merged nor carried, then the merged ones (`manifest_merge.rs`).
/// A carried data manifest of the default spec the commit loaded may be
/// merged with the new one; a rewritten or deleted-only manifest is kept.
async fn write_new_manifests(
    staging: &mut Staging,
    metadata: &TableMetadata,
    added: &[DataFile],
    base_list: Vec<ManifestFile>,
    loaded: &HashMap<usize, Manifest>,
    plan: &ManifestPlan,
    policy: ManifestPolicy,
) -> Result<Vec<ManifestFile>> {
    let new = if added.is_empty() {
        None
    } else {
        let schema = metadata.current_schema().clone();
        let spec = metadata.default_partition_spec().as_ref().clone();
        let entries = added.iter().map(NewEntry::Added);
        Some(write_manifest(staging, schema, spec, entries).await?)
    };
    let mut deleted_only = vec![];
    for group in plan.deleted_only.values() {
        let first = &loaded[&group[0].0];
        let schema = first.metadata().schema().clone();
        let spec = first.metadata().partition_spec().clone();
        let entries = group
            .iter()
            .map(|&(m, e)| NewEntry::Deleted(loaded[&m].entries()[e].as_ref()));
        deleted_only.push(write_manifest(staging, schema, spec, entries).await?);
    }
    let default_spec = metadata.default_partition_spec_id();
    // The base manifests in list order, each carried as it is or a
    // candidate for merging.
    let mut carried: Vec<std::result::Result<ManifestFile, Mergeable>> = vec![];
    for (i, (manifest_file, decision)) in base_list.into_iter().zip(&plan.decisions).enumerate() {
        match decision {
            Decision::Drop => {}
            Decision::Rewrite(fates) => {
                let rewritten = rewrite(staging, &manifest_file, &loaded[&i], fates).await?;
                carried.push(Ok(rewritten));
            }
            Decision::Carry => carried.push(match loaded.get(&i) {
                Some(manifest)
                    if manifest_file.content == ManifestContentType::Data
                        && manifest_file.partition_spec_id == default_spec =>
                {
                    Err(Mergeable {
                        file: manifest_file,
                        manifest,
                    })
                }
                _ => Ok(manifest_file),
            }),
        }
    }
    if let (Some(settings), Some(new)) = (MergeSettings::of(metadata)?, &new) {
        let mut out = deleted_only;
        let mut mergeable = vec![];
        for manifest in carried {
            match manifest {
                Ok(kept) => out.push(kept),
                Err(candidate) => mergeable.push(candidate),
            }
        }
        let merged =
            merged_manifests(staging, metadata, settings, mergeable, new.clone(), added).await?;
        out.extend(merged);
        return Ok(out);
    }
    let carried = carried.into_iter().map(|m| m.unwrap_or_else(|m| m.file));
    Ok(match policy {
        ManifestPolicy::Merging => new.into_iter().chain(deleted_only).chain(carried).collect(),
        ManifestPolicy::Append => carried.chain(deleted_only).chain(new).collect(),
    })
}

/// A base manifest (of data or delete files) rewritten with survivors
/// `Existing` and removed entries `Deleted`.
async fn rewrite(
    staging: &mut Staging,
    original: &ManifestFile,
    manifest: &Manifest,
    fates: &[(usize, Fate)],
) -> Result<ManifestFile> {
    let schema = manifest.metadata().schema().clone();
    let spec = manifest.metadata().partition_spec().clone();
    let entries = fates.iter().map(|&(e, fate)| {
        let entry = manifest.entries()[e].as_ref();
        match fate {
            Fate::Existing => NewEntry::Existing {
                entry,
                manifest_snapshot_id: original.added_snapshot_id,
            },
            Fate::Deleted => NewEntry::Deleted(entry),
        }
    });
    write_manifest_of(staging, original.content, schema, spec, entries).await
}

/// Swaps `row` to the staged metadata file. On a lost race or a failed swap
/// the staged files are deleted — unless the catalog, asked after an error,
/// points at them after all.
pub(crate) async fn publish(
    row: &CatalogRow<'_>,
    ident: &TableIdent,
    file_io: &FileIO,
    expected: &str,
    staged: Staged,
) -> Result<Outcome> {
    let new_location = &staged.metadata_location;
    let swap = swap_metadata_location(row.uri, row.catalog_name, ident, expected, new_location);
    let swap_error = match swap.await {
        Ok(true) => {
            return Ok(Outcome::Committed {
                snapshot_id: staged.snapshot_id,
            })
        }
        Ok(false) => {
            delete_files(file_io, &staged.written).await;
            return Ok(Outcome::Lost);
        }
        Err(e) => e,
    };
    // The UPDATE may or may not have run: ask the catalog before deleting
    // files it might now point at.
    match current_metadata_location(row.uri, row.catalog_name, ident).await {
        Ok(Some(current)) if current == *new_location => {
            tracing::warn!("commit to {ident} reported an error but did commit: {swap_error}");
            Ok(Outcome::Committed {
                snapshot_id: staged.snapshot_id,
            })
        }
        Ok(_) => {
            delete_files(file_io, &staged.written).await;
            Err(swap_error)
        }
        Err(check_error) => Err(io_error(format!(
            "commit to {ident}: outcome unknown ({swap_error}; then {check_error}); \
             the new metadata file {new_location} was kept"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use iceberg::spec::{Literal, NestedField, PrimitiveType, Type};

    use super::*;

    #[test]
    fn partition_values_must_fit_the_partition_type() {
        let int_type = StructType::new(vec![NestedField::optional(
            1000,
            "p",
            Type::Primitive(PrimitiveType::Int),
        )
        .into()]);
        let partition = |values: Vec<Option<Literal>>| Struct::from_iter(values);
        assert!(fits_partition_type(
            &partition(vec![Some(Literal::int(1))]),
            &int_type
        ));
        assert!(fits_partition_type(&partition(vec![None]), &int_type));
        assert!(!fits_partition_type(
            &partition(vec![Some(Literal::long(1))]),
            &int_type
        ));
        assert!(!fits_partition_type(&partition(vec![]), &int_type));
        assert!(fits_partition_type(
            &partition(vec![]),
            &StructType::new(vec![])
        ));
    }
}
