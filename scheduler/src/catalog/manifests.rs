//! Reading a snapshot's manifests, a few at a time: the commit (which
//! manifests to carry or rewrite) and the system tables (`t$files`) both
//! read them this way.

use std::fmt;
use std::future::Future;

use futures::{StreamExt, TryStreamExt};
use iceberg::io::FileIO;
use iceberg::spec::{Manifest, ManifestContentType, ManifestFile, SnapshotRef};
use iceberg::table::Table;

/// How many manifests are read at once.
pub const MANIFEST_READ_CONCURRENCY: usize = 8;

/// A manifest that could not be read.
#[derive(Debug)]
pub struct ManifestReadError {
    pub manifest_path: String,
    pub source: iceberg::Error,
}

impl fmt::Display for ManifestReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "reading manifest {}: {}",
            self.manifest_path, self.source
        )
    }
}

impl std::error::Error for ManifestReadError {}

/// Reads `manifests` (e.g. entries of a snapshot's manifest list), at most
/// [`MANIFEST_READ_CONCURRENCY`] at a time; the result is in their order.
pub fn load_manifests<'a>(
    file_io: &'a FileIO,
    manifests: impl IntoIterator<Item = &'a ManifestFile>,
) -> impl Future<Output = std::result::Result<Vec<Manifest>, ManifestReadError>> + Send + 'a {
    // The reads are built here, not in a stream closure: the returned
    // future then holds no closure type and stays `Send` for the callers'
    // spawned tasks.
    let reads: Vec<_> = manifests
        .into_iter()
        .map(|manifest| load_manifest(file_io, manifest))
        .collect();
    futures::stream::iter(reads)
        .buffered(MANIFEST_READ_CONCURRENCY)
        .try_collect()
}

/// The data manifests (not the delete manifests) of `snapshot`'s manifest
/// list.
pub async fn data_manifests(
    table: &Table,
    snapshot: &SnapshotRef,
) -> iceberg::Result<Vec<ManifestFile>> {
    let list = table.manifest_list_reader(snapshot).load().await?;
    Ok(list
        .entries()
        .iter()
        .filter(|m| m.content == ManifestContentType::Data)
        .cloned()
        .collect())
}

async fn load_manifest(
    file_io: &FileIO,
    manifest: &ManifestFile,
) -> std::result::Result<Manifest, ManifestReadError> {
    manifest
        .load_manifest(file_io)
        .await
        .map_err(|source| ManifestReadError {
            manifest_path: manifest.manifest_path.clone(),
            source,
        })
}
