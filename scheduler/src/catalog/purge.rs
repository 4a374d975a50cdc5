//! The files of a dropped table, deleted (DROP TABLE purges, as Trino
//! does): every data and delete file its manifests name (unless the table
//! sets `gc.enabled` = false), the manifests, manifest lists, statistics
//! files and metadata files.
//!
//! Each file is deleted once even when several manifests name it (a data
//! file a copy-on-write commit removed is named by the manifest that added it
//! and by the one that removed it), and a file already gone is not an error.
//! Beside a local file, the Hadoop checksum file (`.<name>.crc`) that Spark
//! and other Java engines write with it is removed too.

use std::collections::BTreeSet;

use futures::{stream, StreamExt, TryStreamExt};
use iceberg::io::FileIO;
use iceberg::table::Table;
use iceberg::Result;

/// How many manifests are read, and files deleted, at once.
const CONCURRENCY: usize = 16;

/// Deletes the files of `table` (whose catalog entry is already gone). Goes
/// on past a failed deletion and returns the first error at the end.
pub async fn purge_table_files(table: &Table) -> Result<()> {
    let metadata = table.metadata();
    let io = table.file_io();

    let snapshots: Vec<_> = metadata.snapshots().cloned().collect();
    let lists: Vec<(String, Vec<String>)> = stream::iter(snapshots)
        .map(|snapshot| async move {
            let list = table.manifest_list_reader(&snapshot).load().await?;
            let manifests = list
                .entries()
                .iter()
                .map(|m| m.manifest_path.clone())
                .collect();
            Ok::<_, iceberg::Error>((snapshot.manifest_list().to_string(), manifests))
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect()
        .await?;
    let mut manifest_lists = BTreeSet::new();
    let mut manifests = BTreeSet::new();
    for (list, entries) in lists {
        if !list.is_empty() {
            manifest_lists.insert(list);
        }
        manifests.extend(entries);
    }

    let mut content_files = BTreeSet::new();
    if metadata.table_properties()?.gc_enabled {
        let named: Vec<Vec<String>> = stream::iter(manifests.iter().cloned())
            .map(|path| async move {
                let bytes = io.new_input(&path)?.read().await?;
                let manifest = iceberg::spec::Manifest::parse_avro(&bytes)?;
                Ok::<_, iceberg::Error>(
                    manifest
                        .entries()
                        .iter()
                        .map(|e| e.data_file().file_path().to_string())
                        .collect(),
                )
            })
            .buffer_unordered(CONCURRENCY)
            .try_collect()
            .await?;
        content_files.extend(named.into_iter().flatten());
    }

    let mut others: BTreeSet<String> = metadata
        .metadata_log()
        .iter()
        .map(|m| m.metadata_file.clone())
        .collect();
    others.extend(
        metadata
            .statistics_iter()
            .map(|s| s.statistics_path.clone()),
    );
    others.extend(
        metadata
            .partition_statistics_iter()
            .map(|s| s.statistics_path.clone()),
    );
    if let Some(current) = table.metadata_location() {
        others.insert(current.to_string());
    }

    // Data first, the metadata that names it last: a purge cut short leaves
    // files that are still reachable from what remains.
    let mut first_error = None;
    for group in [content_files, manifests, manifest_lists, others] {
        let errors: Vec<iceberg::Error> = stream::iter(group)
            .map(|path| async move { delete_once(io, &path).await.err() })
            .buffer_unordered(CONCURRENCY)
            .filter_map(|e| async move { e })
            .collect()
            .await;
        if first_error.is_none() {
            first_error = errors.into_iter().next();
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Deletes `path`; a file that is not there (any more) is not an error.
pub(crate) async fn delete_once(io: &FileIO, path: &str) -> Result<()> {
    if let Err(e) = io.delete(path).await {
        if io.exists(path).await.unwrap_or(true) {
            return Err(e);
        }
    }
    if let Some(local) = icemerge_executor::cleanup::local_path(path) {
        if let (Some(dir), Some(name)) = (local.parent(), local.file_name()) {
            let checksum = dir.join(format!(".{}.crc", name.to_string_lossy()));
            let _ = std::fs::remove_file(checksum);
        }
    }
    Ok(())
}
