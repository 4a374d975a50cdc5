//! `remove_orphan_files(table, older_than, location, dry_run)`: files under
//! the table's location (or `location`, which must lie inside it) that no
//! metadata of the table names and that were last modified before
//! `older_than` (default: 3 days ago, so that a write still running is
//! never raced; a time in the future is refused) are deleted — or only
//! listed with `dry_run => true`.
//!
//! Named files: the current metadata file and every one in its metadata
//! log, every snapshot's manifest list, every manifest those lists name,
//! every data and delete file those manifests name (entries of any status),
//! and the statistics files. The Hadoop checksum file `.<name>.crc` beside
//! a named file counts as named. The listing is taken BEFORE the table is
//! loaded for its references, so a commit that lands while the directory
//! is listed has its files named. Local locations are walked directory by
//! directory; `s3://` ones listed through opendal with the catalog's S3
//! settings. Output: one `orphan_file_location` row per file.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use datafusion::error::Result;
use futures::{StreamExt, TryStreamExt};
use iceberg::table::Table;
use iceberg::TableIdent;
use icemerge_executor::cleanup::{local_path, s3_operator};
use icemerge_planner::procedures::Cutoff;
use icemerge_proto::error::{invalid_input, io_error};

use super::reachable::{for_each_entry, manifests_of};
use super::{load, now_ms, string_rows};
use crate::catalog::purge::delete_once;
use crate::catalog::OpenCatalog;
use crate::session::StatementOutput;

/// The default `older_than`: 3 days before now.
const DEFAULT_ORPHAN_AGE_MS: i64 = 3 * 24 * 3600 * 1000;

/// The procedure's arguments.
#[derive(Debug, Clone)]
pub struct OrphanOptions {
    pub older_than: Option<Cutoff>,
    pub location: Option<String>,
    pub dry_run: bool,
    pub concurrency: usize,
}

/// A listed file: its location as the listing spells it, the key it is
/// compared by, and when it was last modified.
struct Listed {
    location: String,
    key: String,
    modified_ms: i64,
}

/// Lists the table's location and deletes the orphans in it.
pub async fn remove_orphan_files(
    catalog: &OpenCatalog,
    ident: &TableIdent,
    options: OrphanOptions,
    what: &str,
) -> Result<StatementOutput> {
    let now = now_ms();
    let cutoff = match options.older_than {
        Some(c) => {
            let at = c.millis(now);
            if at > now {
                return Err(invalid_input(format!(
                    "{what}: older_than is in the future: files being written right now would \
                     count as orphans; give a time in the past (the default is 3 days ago)"
                )));
            }
            at
        }
        None => now - DEFAULT_ORPHAN_AGE_MS,
    };
    let table = load(catalog, ident).await?;
    let table_location = table
        .metadata()
        .location()
        .trim_end_matches('/')
        .to_string();
    let root = match options.location {
        Some(location) => {
            let location = location.trim_end_matches('/').to_string();
            let (inner, outer) = (file_key(&location), file_key(&table_location));
            if inner != outer && !inner.starts_with(&format!("{outer}/")) {
                return Err(invalid_input(format!(
                    "{what}: location '{location}' is not inside the table location \
                     '{table_location}'"
                )));
            }
            location
        }
        None => table_location,
    };

    let listed = list_files(&root, catalog)
        .await
        .map_err(|e| io_error(format!("{what}: listing {root}: {e}")))?;
    // Loaded after the listing: whatever was committed while listing is named.
    let table = load(catalog, ident).await?;
    let named = named_files(&table).await?;
    let mut orphans: Vec<&Listed> = listed
        .iter()
        .filter(|f| f.modified_ms < cutoff && !is_named(&f.key, &named))
        .collect();
    orphans.sort_by(|a, b| a.location.cmp(&b.location));

    if !options.dry_run {
        let io = table.file_io();
        let deletions: Vec<_> = orphans.iter().map(|f| delete_orphan(io, f)).collect();
        let errors: Vec<String> = futures::stream::iter(deletions)
            .buffer_unordered(options.concurrency.max(1))
            .collect::<Vec<Option<String>>>()
            .await
            .into_iter()
            .flatten()
            .collect();
        if let Some(first) = errors.first() {
            return Err(io_error(format!(
                "{what}: {} of {} orphan files could not be deleted; first: {first}",
                errors.len(),
                orphans.len()
            )));
        }
    }
    Ok(string_rows(
        "orphan_file_location",
        orphans.into_iter().map(|f| f.location.clone()).collect(),
    ))
}

/// Deletes one orphan; the error's text if it could not be deleted.
async fn delete_orphan(io: &iceberg::io::FileIO, f: &Listed) -> Option<String> {
    let result = match local_path(&f.key) {
        Some(path) => match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.to_string()),
            _ => Ok(()),
        },
        None => delete_once(io, &f.location)
            .await
            .map_err(|e| e.to_string()),
    };
    result
        .err()
        .map(|e| format!("deleting {}: {e}", f.location))
}

/// Whether `key` is named, or is the checksum file of a named file.
fn is_named(key: &str, named: &HashSet<String>) -> bool {
    if named.contains(key) {
        return true;
    }
    let (dir, name) = key.rsplit_once('/').unwrap_or(("", key));
    if name == "version-hint.text" {
        return true;
    }
    match name.strip_prefix('.').and_then(|n| n.strip_suffix(".crc")) {
        Some(base) => named.contains(&format!("{dir}/{base}")),
        None => false,
    }
}

/// The key a location is compared by: the path of a local location (any
/// spelling), `s3://` for `s3a://`, otherwise the location itself.
fn file_key(location: &str) -> String {
    if let Some(path) = local_path(location) {
        return path.to_string_lossy().into_owned();
    }
    match location.strip_prefix("s3a://") {
        Some(rest) => format!("s3://{rest}"),
        None => location.to_string(),
    }
}

/// Every file the table's metadata names, by key.
async fn named_files(table: &Table) -> Result<HashSet<String>> {
    let metadata = table.metadata();
    let mut named: HashSet<String> = metadata
        .metadata_log()
        .iter()
        .map(|m| file_key(&m.metadata_file))
        .collect();
    if let Some(current) = table.metadata_location() {
        named.insert(file_key(current));
    }
    named.extend(
        metadata
            .statistics_iter()
            .map(|s| file_key(&s.statistics_path)),
    );
    named.extend(
        metadata
            .partition_statistics_iter()
            .map(|s| file_key(&s.statistics_path)),
    );
    let snapshots: Vec<_> = metadata.snapshots().cloned().collect();
    let manifests = manifests_of(table, &snapshots).await?;
    named.extend(manifests.lists.iter().map(|l| file_key(l)));
    named.extend(manifests.manifests.keys().map(|m| file_key(m)));
    for_each_entry(table, manifests.manifests.values(), |_, entry| {
        named.insert(file_key(entry.file_path()));
    })
    .await?;
    Ok(named)
}

/// Every file under `root`.
async fn list_files(root: &str, catalog: &OpenCatalog) -> std::result::Result<Vec<Listed>, String> {
    if let Some(path) = local_path(root) {
        let path = path.to_path_buf();
        let prefix = if root.starts_with("file://") {
            "file://"
        } else if root.starts_with("file:") {
            "file:"
        } else {
            ""
        };
        return tokio::task::spawn_blocking(move || walk_local(&path, prefix))
            .await
            .map_err(|e| e.to_string())?;
    }
    if root.starts_with("s3://") || root.starts_with("s3a://") {
        return list_s3(root, catalog).await;
    }
    Err(format!(
        "'{root}': only local and s3:// locations can be listed"
    ))
}

fn walk_local(root: &Path, prefix: &str) -> std::result::Result<Vec<Listed>, String> {
    let mut out = vec![];
    let mut dirs: Vec<PathBuf> = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("{}: {e}", dir.display())),
        };
        for entry in entries {
            let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
            let kind = entry.file_type().map_err(|e| e.to_string())?;
            let path = entry.path();
            if kind.is_dir() {
                dirs.push(path);
            } else if kind.is_file() {
                let modified = entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                let key = path.to_string_lossy().into_owned();
                out.push(Listed {
                    location: format!("{prefix}{key}"),
                    key,
                    modified_ms: millis(modified),
                });
            }
        }
    }
    Ok(out)
}

async fn list_s3(root: &str, catalog: &OpenCatalog) -> std::result::Result<Vec<Listed>, String> {
    let (operator, key) = s3_operator(root, &catalog.file_io_props)?;
    let bucket = operator.info().name().to_string();
    let dir = if key.is_empty() {
        String::new()
    } else {
        format!("{key}/")
    };
    let mut lister = operator
        .lister_with(&dir)
        .recursive(true)
        .await
        .map_err(|e| e.to_string())?;
    let mut out = vec![];
    while let Some(entry) = lister.try_next().await.map_err(|e| e.to_string())? {
        if !entry.metadata().is_file() {
            continue;
        }
        let modified = match entry.metadata().last_modified() {
            Some(t) => t,
            None => operator
                .stat(entry.path())
                .await
                .map_err(|e| e.to_string())?
                .last_modified()
                .ok_or_else(|| format!("{}: no modification time", entry.path()))?,
        };
        let location = format!("s3://{bucket}/{}", entry.path());
        out.push(Listed {
            key: location.clone(),
            location,
            modified_ms: millis(SystemTime::from(modified)),
        });
    }
    Ok(out)
}

fn millis(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_checksums() {
        assert_eq!(file_key("file:///wh/t/a.parquet"), "/wh/t/a.parquet");
        assert_eq!(file_key("file:/wh/t/a.parquet"), "/wh/t/a.parquet");
        assert_eq!(file_key("s3a://b/t/a"), "s3://b/t/a");
        let named: HashSet<String> = ["/wh/t/data/a.parquet".to_string()].into();
        assert!(is_named("/wh/t/data/a.parquet", &named));
        assert!(is_named("/wh/t/data/.a.parquet.crc", &named));
        assert!(!is_named("/wh/t/data/.b.parquet.crc", &named));
        assert!(!is_named("/wh/t/data/b.parquet", &named));
        assert!(is_named("/wh/t/metadata/version-hint.text", &named));
    }
}
