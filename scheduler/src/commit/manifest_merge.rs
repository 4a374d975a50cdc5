//! A commit's merge of small data manifests, as Iceberg's merge append
//! (the one Spark's INSERT commits through) and merging snapshot producer
//! (its overwrites and row deltas) do. Each write adds one manifest of its
//! files; without merging, a table written N times carries N manifests,
//! and every scan's planning and every commit reads them all.
//!
//! When the table's `commit.manifest-merge.enabled` is true (the
//! default), a commit that adds data files packs the carried data
//! manifests of its partition spec that it loaded (an append loads every
//! one holding live files, to refuse a path already in the table; an
//! overwrite or row delta every one when it removes files), in manifest
//! list order (oldest first), and its own manifest last, into bins of at
//! most `commit.manifest.target-size-bytes` (default 8 MiB) of manifest
//! files, from the oldest: every bin but the last is full. A bin of one
//! manifest is kept as it is; the last bin, the one holding the new
//! manifest, is kept as it is until it counts
//! `commit.manifest.min-count-to-merge` (default 100) manifests; every
//! other bin becomes one manifest: the commit's files `Added`, the carried
//! live entries `Existing` with their snapshot ids and sequence numbers,
//! deleted entries dropped. Merging reads nothing more. Manifests the
//! commit rewrites (its removed files `Deleted`) and delete manifests are
//! kept apart; a commit that adds no data file merges nothing.
//! Format-version 3 tables keep every manifest (their manifests assign
//! row ids).

use iceberg::spec::{DataFile, FormatVersion, Manifest, ManifestFile, TableMetadata};

use datafusion::error::Result;

use super::manifest_clusters::{positive_property, target_size_bytes};
use super::manifests::{write_manifest, NewEntry};
use super::staging::Staging;
use icemerge_proto::error::invalid_input;

/// Iceberg's `commit.manifest-merge.enabled` table property.
const MERGE_ENABLED_PROPERTY: &str = "commit.manifest-merge.enabled";
/// Iceberg's `commit.manifest.min-count-to-merge` table property and its
/// default.
const MIN_COUNT_PROPERTY: &str = "commit.manifest.min-count-to-merge";
const DEFAULT_MIN_COUNT: usize = 100;

/// The table's manifest merge settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MergeSettings {
    pub target_size_bytes: u64,
    pub min_count: usize,
}

impl MergeSettings {
    /// The settings of `metadata`'s properties; None when merging is off
    /// (or the table is format-version 3). A value that is not what the
    /// property takes is an error naming it.
    pub(crate) fn of(metadata: &TableMetadata) -> Result<Option<Self>> {
        let properties = metadata.properties();
        let enabled = match properties.get(MERGE_ENABLED_PROPERTY) {
            None => true,
            Some(v) => v.trim().parse::<bool>().map_err(|_| {
                invalid_input(format!(
                    "table property {MERGE_ENABLED_PROPERTY} = '{v}': expected true or false"
                ))
            })?,
        };
        if !enabled || metadata.format_version() >= FormatVersion::V3 {
            return Ok(None);
        }
        Ok(Some(MergeSettings {
            target_size_bytes: target_size_bytes(metadata)?,
            min_count: positive_property(properties.get(MIN_COUNT_PROPERTY), MIN_COUNT_PROPERTY)?
                .map_or(DEFAULT_MIN_COUNT, |n| n as usize),
        }))
    }
}

/// The bins of manifests of `lengths` (in order, the new manifest last),
/// as index ranges, and whether each is merged: packed from the first, a
/// bin taking manifests while their lengths stay within the target size
/// (a manifest larger than it fills a bin alone).
pub(crate) fn bins(
    lengths: &[u64],
    settings: MergeSettings,
) -> Vec<(std::ops::Range<usize>, bool)> {
    let mut bins = vec![];
    let (mut start, mut bytes) = (0, 0u64);
    for (i, &length) in lengths.iter().enumerate() {
        if i > start && bytes + length > settings.target_size_bytes {
            bins.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes += length;
    }
    if start < lengths.len() {
        bins.push(start..lengths.len());
    }
    let last = lengths.len();
    bins.into_iter()
        .map(|bin| {
            let merged = bin.len() > 1 && (bin.end < last || bin.len() >= settings.min_count);
            (bin, merged)
        })
        .collect()
}

/// A carried data manifest that may be merged, with its entries.
pub(crate) struct Mergeable<'a> {
    pub file: ManifestFile,
    pub manifest: &'a Manifest,
}

/// A commit's data manifests: `mergeable` (carried, loaded, of the
/// default spec, in manifest list order) and `new` (the commit's manifest
/// of `added`, already written) packed and merged as the module doc says.
/// Returns the manifests the list holds in their place; a merged new
/// manifest's file is deleted.
pub(crate) async fn merged_manifests(
    staging: &mut Staging,
    metadata: &TableMetadata,
    settings: MergeSettings,
    mergeable: Vec<Mergeable<'_>>,
    new: ManifestFile,
    added: &[DataFile],
) -> Result<Vec<ManifestFile>> {
    let lengths: Vec<u64> = mergeable
        .iter()
        .map(|m| m.file.manifest_length as u64)
        .chain([new.manifest_length as u64])
        .collect();
    let mut out = vec![];
    let mut new = Some(new);
    let schema = metadata.current_schema().clone();
    let spec = metadata.default_partition_spec().as_ref().clone();
    for (bin, merged) in bins(&lengths, settings) {
        let holds_new = bin.end == lengths.len();
        let carried = &mergeable[bin.start..bin.end.min(mergeable.len())];
        if !merged {
            out.extend(carried.iter().map(|m| m.file.clone()));
            if holds_new {
                out.extend(new.take());
            }
            continue;
        }
        let added_entries = if holds_new { added } else { &[] };
        // Collected before the write: an iterator of closures held across
        // its await would keep the commit's future from being `Send`.
        let mut entries: Vec<NewEntry> = added_entries.iter().map(NewEntry::Added).collect();
        for m in carried {
            for entry in m.manifest.entries().iter().filter(|e| e.is_alive()) {
                entries.push(NewEntry::Existing {
                    entry: entry.as_ref(),
                    manifest_snapshot_id: m.file.added_snapshot_id,
                });
            }
        }
        out.push(write_manifest(staging, schema.clone(), spec.clone(), entries).await?);
        if holds_new {
            if let Some(replaced) = new.take() {
                staging.discard(&replaced.manifest_path).await;
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SETTINGS: MergeSettings = MergeSettings {
        target_size_bytes: 100,
        min_count: 3,
    };

    #[test]
    fn the_last_bin_waits_for_the_minimum_count() {
        assert_eq!(bins(&[10, 10], SETTINGS), vec![(0..2, false)]);
        assert_eq!(bins(&[10, 10, 10], SETTINGS), vec![(0..3, true)]);
    }

    #[test]
    fn full_bins_before_the_last_are_merged_and_single_ones_kept() {
        assert_eq!(
            bins(&[60, 30, 60, 30, 200, 10], SETTINGS),
            vec![(0..2, true), (2..4, true), (4..5, false), (5..6, false)]
        );
    }

    #[test]
    fn a_single_manifest_is_never_rewritten() {
        assert_eq!(bins(&[10], SETTINGS), vec![(0..1, false)]);
        assert_eq!(
            bins(
                &[10],
                MergeSettings {
                    min_count: 1,
                    ..SETTINGS
                }
            ),
            vec![(0..1, false)]
        );
    }
}
