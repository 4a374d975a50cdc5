//! Which files a set of snapshots reaches: their manifest lists, the
//! manifests those name (each once, however many snapshots share it) and
//! the entries of those manifests, visited a few manifests at a time so a
//! table's file list is never held as manifests in memory. Expiry and
//! orphan removal both start here.

use std::collections::{BTreeMap, BTreeSet};

use datafusion::error::Result;
use futures::{StreamExt, TryStreamExt};
use iceberg::io::FileIO;
use iceberg::spec::{Manifest, ManifestEntry, ManifestFile, SnapshotRef};
use iceberg::table::Table;
use icemerge_proto::error::io_error;

use crate::catalog::manifests::MANIFEST_READ_CONCURRENCY;

/// The manifest lists of some snapshots and the manifests they name.
#[derive(Debug, Default)]
pub struct Manifests {
    /// Manifest-list paths (snapshots without one, e.g. v1 with inline
    /// manifests, add none).
    pub lists: BTreeSet<String>,
    /// Each manifest once, by path.
    pub manifests: BTreeMap<String, ManifestFile>,
}

/// Reads the manifest lists of `snapshots` (of `table`'s metadata or of an
/// earlier metadata of the same table).
pub async fn manifests_of(table: &Table, snapshots: &[SnapshotRef]) -> Result<Manifests> {
    // The reads are built here, not in a stream closure: the caller's
    // future then stays `Send` (see catalog/manifests.rs).
    let reads: Vec<_> = snapshots
        .iter()
        .cloned()
        .map(|snapshot| read_list(table, snapshot))
        .collect();
    let lists: Vec<(String, Vec<ManifestFile>)> = futures::stream::iter(reads)
        .buffer_unordered(MANIFEST_READ_CONCURRENCY)
        .try_collect()
        .await?;
    let mut out = Manifests::default();
    for (list, manifests) in lists {
        if !list.is_empty() {
            out.lists.insert(list);
        }
        for manifest in manifests {
            out.manifests
                .entry(manifest.manifest_path.clone())
                .or_insert(manifest);
        }
    }
    Ok(out)
}

async fn read_list(table: &Table, snapshot: SnapshotRef) -> Result<(String, Vec<ManifestFile>)> {
    let list = table
        .manifest_list_reader(&snapshot)
        .load()
        .await
        .map_err(|e| {
            io_error(format!(
                "reading the manifest list {} of snapshot {}: {e}",
                snapshot.manifest_list(),
                snapshot.snapshot_id()
            ))
        })?;
    Ok((
        snapshot.manifest_list().to_string(),
        list.entries().to_vec(),
    ))
}

/// Calls `visit` with every entry (any status) of every manifest in
/// `manifests`, reading at most [`MANIFEST_READ_CONCURRENCY`] manifests at a
/// time. A manifest that cannot be read is an error.
pub async fn for_each_entry<'a>(
    table: &Table,
    manifests: impl IntoIterator<Item = &'a ManifestFile>,
    mut visit: impl FnMut(&ManifestFile, &ManifestEntry),
) -> Result<()> {
    let io = table.file_io();
    let reads: Vec<_> = manifests
        .into_iter()
        .map(|manifest| read_manifest(io, manifest))
        .collect();
    let mut loaded = futures::stream::iter(reads).buffer_unordered(MANIFEST_READ_CONCURRENCY);
    while let Some((manifest, loaded)) = loaded.try_next().await? {
        for entry in loaded.entries() {
            visit(manifest, entry);
        }
    }
    Ok(())
}

async fn read_manifest<'a>(
    io: &FileIO,
    manifest: &'a ManifestFile,
) -> Result<(&'a ManifestFile, Manifest)> {
    let loaded = manifest
        .load_manifest(io)
        .await
        .map_err(|e| io_error(format!("reading manifest {}: {e}", manifest.manifest_path)))?;
    Ok((manifest, loaded))
}
