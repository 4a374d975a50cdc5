//! The manifest rewrite action (`rewrite_manifests`): the current
//! snapshot's manifests regrouped into fewer, partition-clustered ones, as
//! ONE `replace` snapshot through the producer's staging and swap. No data
//! or delete file is read, added or removed: the same files are live before
//! and after, and the totals of the summary stay the same.
//!
//! Manifests are grouped by content (data or deletes, never mixed) and
//! partition spec (`manifest_clusters.rs`). A group is rewritten when the
//! number of manifests its live entries need at the table's
//! `commit.manifest.target-size-bytes` (default 8 MiB; entries per
//! manifest estimated from the group's bytes per entry) differs from the
//! number it has; other groups' manifests are kept as they are. A rewritten
//! group's manifests are read a few at a time, their live entries
//! (`Added`, `Existing`) kept and their deleted ones dropped; the entries
//! are sorted by partition and written `Existing` with their original
//! snapshot id and data and file sequence numbers (delete files apply by
//! sequence number), whole partitions per manifest while they fit. When no
//! group is worth rewriting, nothing is committed.
//!
//! A commit that loses the catalog swap deletes what it wrote (the
//! producer's `publish`), reloads the table and rewrites the new head's
//! manifests from the start, within the table's `commit.retry.*` settings:
//! another writer's files are never lost.

use std::collections::{BTreeMap, HashMap};

use datafusion::error::Result;
use iceberg::spec::{
    FormatVersion, ManifestContentType, ManifestEntryRef, ManifestFile, Operation,
};
use iceberg::table::Table;
use iceberg::TableIdent;
use icemerge_executor::iceberg_err;

use super::manifest_clusters::{
    compare_partitions, manifest_sizes, runs, target_size_bytes, GroupSize,
};
use super::manifest_list::write_manifest_list;
use super::manifests::{read_manifest_list, write_manifest_of, NewEntry};
use super::metadata::write_metadata;
use super::producer::{base_metadata_location, publish, stage_with, CatalogRow, Outcome};
use super::retry::Retries;
use super::staging::Staging;
use super::summary::snapshot_summary;
use crate::catalog::manifests::{load_manifests, MANIFEST_READ_CONCURRENCY};
use crate::catalog::OpenCatalog;
use crate::session::pause_before_commit;
use icemerge_proto::error::{conflict, internal, invalid_input, io_error, unsupported};

/// What a manifest rewrite did (all zero when it committed nothing).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ManifestRewriteCounts {
    /// Manifests of the base snapshot replaced by new ones.
    pub replaced: usize,
    /// New manifests written.
    pub added: usize,
    /// Manifests of the base snapshot carried as they are.
    pub kept: usize,
    /// Live entries written into the new manifests.
    pub entries: usize,
}

/// Rewrites the manifests of `ident`'s current snapshot (of partition spec
/// `spec_id` only, when given) and commits them as one `replace` snapshot.
/// `pause_dir` (the `icemerge.test_pause_before_commit` test hook) stops it
/// after the manifests are read, before anything is written.
pub async fn commit_manifest_rewrite(
    catalog: &OpenCatalog,
    ident: &TableIdent,
    spec_id: Option<i32>,
    pause_dir: Option<&str>,
) -> Result<ManifestRewriteCounts> {
    let row = CatalogRow {
        uri: &catalog.uri,
        catalog_name: &catalog.name,
    };
    let mut retries: Option<Retries> = None;
    loop {
        let table = catalog
            .catalog
            .load_table(ident)
            .await
            .map_err(iceberg_err)?;
        let properties = table.metadata().table_properties().map_err(iceberg_err)?;
        let retries = retries.get_or_insert_with(|| Retries::of(&properties));
        if let Some(id) = spec_id {
            if table.metadata().partition_spec_by_id(id).is_none() {
                return Err(invalid_input(format!(
                    "rewrite_manifests on {ident}: the table has no partition spec {id}"
                )));
            }
        }
        let Some(rewrite) = plan_rewrite(&table, spec_id).await? else {
            return Ok(ManifestRewriteCounts::default());
        };
        let counts = rewrite.counts();
        if let Some(dir) = pause_dir {
            pause_before_commit(dir, &|| false).await?;
        }
        match produce_rewrite(&row, &table, rewrite).await? {
            Outcome::Committed { .. } => return Ok(counts),
            Outcome::NothingToCommit => return Ok(ManifestRewriteCounts::default()),
            Outcome::Lost => {}
        }
        if !retries.wait().await {
            return Err(conflict(format!(
                "rewrite_manifests on {ident}: other writers committed first {} times in a row \
                 (commit.retry.num-retries = {}); nothing was committed",
                retries.lost, properties.commit_num_retries
            )));
        }
    }
}

/// One group of the base's manifests rewritten together.
struct Group {
    content: ManifestContentType,
    spec_id: i32,
    /// Live entries sorted by partition, each with the snapshot id of the
    /// manifest it came from (for an entry that inherited it).
    entries: Vec<(ManifestEntryRef, i64)>,
    /// Entry counts of the new manifests, in order.
    sizes: Vec<usize>,
    /// Manifests of the base it replaces.
    replaced: usize,
}

/// What a rewrite writes, against one base.
pub(super) struct Rewrite {
    groups: Vec<Group>,
    kept: Vec<ManifestFile>,
}

impl Rewrite {
    fn counts(&self) -> ManifestRewriteCounts {
        ManifestRewriteCounts {
            replaced: self.groups.iter().map(|g| g.replaced).sum(),
            added: self.groups.iter().map(|g| g.sizes.len()).sum(),
            kept: self.kept.len(),
            entries: self.groups.iter().map(|g| g.entries.len()).sum(),
        }
    }

    fn summary_properties(&self) -> HashMap<String, String> {
        let counts = self.counts();
        HashMap::from([
            ("manifests-created".into(), counts.added.to_string()),
            ("manifests-kept".into(), counts.kept.to_string()),
            ("manifests-replaced".into(), counts.replaced.to_string()),
            ("entries-processed".into(), counts.entries.to_string()),
        ])
    }
}

/// Reads the base's manifest list and the manifests of the groups worth
/// rewriting; None when there is no snapshot or no such group.
pub(super) async fn plan_rewrite(table: &Table, spec_id: Option<i32>) -> Result<Option<Rewrite>> {
    let ident = table.identifier();
    let metadata = table.metadata();
    let base_list = read_manifest_list(table, metadata.current_snapshot(), ident).await?;
    let target = target_size_bytes(metadata)?;
    let mut by_group: BTreeMap<(bool, i32), Vec<ManifestFile>> = BTreeMap::new();
    for manifest in base_list {
        let deletes = manifest.content == ManifestContentType::Deletes;
        by_group
            .entry((deletes, manifest.partition_spec_id))
            .or_default()
            .push(manifest);
    }
    let mut rewrite = Rewrite {
        groups: vec![],
        kept: vec![],
    };
    for ((_, group_spec), manifests) in by_group {
        let size = GroupSize::of(&manifests);
        if spec_id.is_some_and(|id| id != group_spec) || !size.worth_rewriting(target) {
            rewrite.kept.extend(manifests);
            continue;
        }
        let group = read_group(table, &manifests, size.entries_per_manifest(target)).await?;
        rewrite.groups.push(group);
    }
    Ok((!rewrite.groups.is_empty()).then_some(rewrite))
}

/// Reads `manifests` (one content and spec) a few at a time, keeps their
/// live entries, sorts them by partition and cuts them into new manifests
/// of at most `per_manifest` entries.
async fn read_group(
    table: &Table,
    manifests: &[ManifestFile],
    per_manifest: usize,
) -> Result<Group> {
    let ident = table.identifier();
    let v3 = table.metadata().format_version() >= FormatVersion::V3;
    let mut entries: Vec<(ManifestEntryRef, i64)> = vec![];
    for chunk in manifests.chunks(MANIFEST_READ_CONCURRENCY) {
        let loaded = load_manifests(table.file_io(), chunk)
            .await
            .map_err(|e| io_error(format!("rewrite_manifests on {ident}: {e}")))?;
        for (file, manifest) in chunk.iter().zip(loaded) {
            let keeps_row_ids = v3 && file.first_row_id.is_some();
            for entry in manifest.entries().iter().filter(|e| e.is_alive()) {
                if keeps_row_ids && entry.data_file().first_row_id().is_none() {
                    return Err(unsupported(format!(
                        "rewrite_manifests on {ident}: rewriting manifest {} of a \
                         format-version 3 table would lose its files' row ids",
                        file.manifest_path
                    )));
                }
                entries.push((entry.clone(), file.added_snapshot_id));
            }
        }
    }
    entries.sort_by(|(a, _), (b, _)| {
        compare_partitions(a.data_file().partition(), b.data_file().partition())
    });
    let partition_runs = runs(&entries, |(a, _), (b, _)| {
        a.data_file().partition() == b.data_file().partition()
    });
    let first = &manifests[0];
    Ok(Group {
        content: first.content,
        spec_id: first.partition_spec_id,
        sizes: manifest_sizes(&partition_runs, per_manifest),
        entries,
        replaced: manifests.len(),
    })
}

/// Stages the rewrite on top of `base` and swaps the catalog row.
pub(super) async fn produce_rewrite(
    row: &CatalogRow<'_>,
    base: &Table,
    rewrite: Rewrite,
) -> Result<Outcome> {
    let expected = base_metadata_location(base)?;
    let staged = stage_with(base, |mut staging| {
        let expected = expected.as_str();
        async move {
            let result = write_rewrite(base, expected, &rewrite, &mut staging).await;
            (staging, result)
        }
    })
    .await?;
    publish(row, base.identifier(), base.file_io(), &expected, staged).await
}

/// Writes the new manifests, then the manifest list (new manifests first,
/// then the kept ones) and the metadata file; returns its location.
async fn write_rewrite(
    base: &Table,
    expected: &str,
    rewrite: &Rewrite,
    staging: &mut Staging,
) -> Result<String> {
    let metadata = base.metadata();
    let schema = metadata.current_schema().clone();
    let mut manifests = vec![];
    for group in &rewrite.groups {
        let spec = metadata
            .partition_spec_by_id(group.spec_id)
            .ok_or_else(|| {
                internal(format!(
                    "rewrite_manifests on {}: no partition spec {}",
                    staging.ident, group.spec_id
                ))
            })?
            .as_ref()
            .clone();
        let mut start = 0;
        for &size in &group.sizes {
            let entries =
                group.entries[start..start + size]
                    .iter()
                    .map(|(entry, manifest_snapshot_id)| NewEntry::Existing {
                        entry: entry.as_ref(),
                        manifest_snapshot_id: *manifest_snapshot_id,
                    });
            let content = group.content;
            let written =
                write_manifest_of(staging, content, schema.clone(), spec.clone(), entries).await?;
            manifests.push(written);
            start += size;
        }
    }
    manifests.extend(rewrite.kept.iter().cloned());
    let summary = snapshot_summary(
        metadata,
        Operation::Replace,
        rewrite.summary_properties(),
        &[],
        std::iter::empty(),
    );
    let list = write_manifest_list(staging, metadata, manifests).await?;
    write_metadata(staging, metadata, expected, list, summary).await
}
