//! `expire_snapshots(table, older_than, retain_last, snapshot_ids)`:
//! snapshots dropped from the table's metadata, then the files that only
//! they reached deleted.
//!
//! Which snapshots go: those committed before `older_than` (default: now
//! minus `history.expire.max-snapshot-age-ms`, 5 days), plus the
//! `snapshot_ids` named, except every snapshot a branch or tag points at
//! and, on each branch, the `retain_last` most recent ancestors (default:
//! the branch's `min-snapshots-to-keep`, else
//! `history.expire.min-snapshots-to-keep`, 1). Naming a snapshot a ref
//! points at, or one the table does not have, is an error and nothing
//! changes. A table with `gc.enabled` = false is refused (its files may be
//! shared).
//!
//! The metadata commit comes FIRST (a metadata-only commit; after a lost
//! swap the choice is made again on the new metadata). Only then are files
//! deleted: the manifest lists of the expired snapshots, the manifests they
//! name that no retained snapshot's list names, the data and delete files
//! those manifests name that no live entry of any retained manifest names,
//! and the statistics files of the expired snapshots. A file a retained
//! snapshot reaches is never deleted; a crash between the commit and the
//! deletions leaves orphans for `remove_orphan_files`, never a dangling
//! reference. Old metadata files stay (`write.metadata.previous-versions-max`
//! governs them). Output: Spark's six counts of deleted files by kind.

use std::collections::{BTreeSet, HashMap, HashSet};

use datafusion::error::Result;
use futures::StreamExt;
use iceberg::spec::{DataContentType, ManifestFile, SnapshotRef, SnapshotRetention, TableMetadata};
use iceberg::table::Table;
use iceberg::TableIdent;
use icemerge_planner::procedures::Cutoff;
use icemerge_proto::error::{invalid_input, io_error, unsupported};

use super::reachable::{for_each_entry, manifests_of};
use super::{load, long_row, now_ms, table_refs};
use crate::catalog::purge::delete_once;
use crate::catalog::OpenCatalog;
use crate::commit::commit_metadata_change;
use crate::session::StatementOutput;

/// `history.expire.max-snapshot-age-ms`'s default: 5 days.
const DEFAULT_MAX_SNAPSHOT_AGE_MS: i64 = 5 * 24 * 3600 * 1000;
/// `history.expire.min-snapshots-to-keep`'s default.
const DEFAULT_MIN_SNAPSHOTS_TO_KEEP: usize = 1;

/// The procedure's arguments.
#[derive(Debug, Clone)]
pub struct ExpireOptions {
    pub older_than: Option<Cutoff>,
    pub retain_last: Option<u32>,
    pub snapshot_ids: Vec<i64>,
    pub concurrency: usize,
}

/// Files deleted, by kind.
#[derive(Debug, Default)]
struct Deleted {
    data: i64,
    position_deletes: i64,
    equality_deletes: i64,
    manifests: i64,
    manifest_lists: i64,
    statistics: i64,
}

/// Expires snapshots of `ident` and deletes the files only they reached.
pub async fn expire_snapshots(
    catalog: &OpenCatalog,
    ident: &TableIdent,
    options: ExpireOptions,
    what: &str,
) -> Result<StatementOutput> {
    let now = now_ms();
    let table = load(catalog, ident).await?;
    if table
        .metadata()
        .properties()
        .get("gc.enabled")
        .is_some_and(|v| v.eq_ignore_ascii_case("false"))
    {
        return Err(unsupported(format!(
            "{what}: the table sets gc.enabled = false: its files may be shared with other \
             tables, so snapshots are not expired"
        )));
    }
    if choose(table.metadata(), &options, now, what)?.is_empty() {
        return Ok(output(&Deleted::default()));
    }

    let mut before: Option<Table> = None;
    let mut expired: Vec<i64> = vec![];
    let committed = commit_metadata_change(catalog, ident, |table, builder| {
        let ids = choose(table.metadata(), &options, now, what)?;
        let mut builder = builder.remove_snapshots(&ids);
        for id in &ids {
            builder = builder
                .remove_statistics(*id)
                .remove_partition_statistics(*id);
        }
        before = Some(table.clone());
        expired = ids;
        Ok(builder)
    })
    .await?;
    let before = before.expect("the change ran");

    let deleted = delete_unreachable(&before, &committed, &expired, options.concurrency)
        .await
        .map_err(|e| {
            io_error(format!(
                "{what}: snapshots {expired:?} were expired, but deleting the files only they \
                 reached failed (remove_orphan_files removes what is left): {e}"
            ))
        })?;
    Ok(output(&deleted))
}

fn output(d: &Deleted) -> StatementOutput {
    long_row(&[
        ("deleted_data_files_count", Some(d.data)),
        (
            "deleted_position_delete_files_count",
            Some(d.position_deletes),
        ),
        (
            "deleted_equality_delete_files_count",
            Some(d.equality_deletes),
        ),
        ("deleted_manifest_files_count", Some(d.manifests)),
        ("deleted_manifest_lists_count", Some(d.manifest_lists)),
        ("deleted_statistics_files_count", Some(d.statistics)),
    ])
}

/// The ids of the snapshots to expire from `metadata`.
fn choose(
    metadata: &TableMetadata,
    options: &ExpireOptions,
    now: i64,
    what: &str,
) -> Result<Vec<i64>> {
    let properties = metadata.properties();
    let property = |key: &str| -> Result<Option<i64>> {
        properties
            .get(key)
            .map(|v| {
                v.trim().parse::<i64>().map_err(|_| {
                    invalid_input(format!(
                        "{what}: table property '{key}' = '{v}' is not an integer"
                    ))
                })
            })
            .transpose()
    };
    let max_age =
        property("history.expire.max-snapshot-age-ms")?.unwrap_or(DEFAULT_MAX_SNAPSHOT_AGE_MS);
    let min_keep = property("history.expire.min-snapshots-to-keep")?
        .map(|n| n.max(1) as usize)
        .unwrap_or(DEFAULT_MIN_SNAPSHOTS_TO_KEEP);
    let cutoff = match options.older_than {
        Some(c) => c.millis(now),
        None => now.saturating_sub(max_age),
    };

    let refs = table_refs(metadata)?;
    let mut heads: HashMap<i64, Vec<&str>> = HashMap::new();
    let mut retained: HashSet<i64> = HashSet::new();
    for (name, reference) in &refs {
        heads
            .entry(reference.snapshot_id)
            .or_default()
            .push(name.as_str());
        retained.insert(reference.snapshot_id);
        if let SnapshotRetention::Branch {
            min_snapshots_to_keep,
            ..
        } = &reference.retention
        {
            let keep = options
                .retain_last
                .map(|n| n as usize)
                .unwrap_or(min_keep)
                .max(
                    min_snapshots_to_keep
                        .map(|n| n.max(1) as usize)
                        .unwrap_or(1),
                );
            let mut next = Some(reference.snapshot_id);
            for _ in 0..keep {
                let Some(snapshot) = next.and_then(|id| metadata.snapshot_by_id(id)) else {
                    break;
                };
                retained.insert(snapshot.snapshot_id());
                next = snapshot.parent_snapshot_id();
            }
        }
    }

    let mut expire: BTreeSet<i64> = metadata
        .snapshots()
        .filter(|s| s.timestamp_ms() < cutoff && !retained.contains(&s.snapshot_id()))
        .map(|s| s.snapshot_id())
        .collect();
    for id in &options.snapshot_ids {
        if metadata.snapshot_by_id(*id).is_none() {
            return Err(invalid_input(format!(
                "{what}: snapshot_ids: the table has no snapshot {id}"
            )));
        }
        if let Some(names) = heads.get(id) {
            return Err(invalid_input(format!(
                "{what}: snapshot_ids: snapshot {id} cannot be expired: the table's {} \
                 point(s) at it",
                names.join(", ")
            )));
        }
        expire.insert(*id);
    }
    Ok(expire.into_iter().collect())
}

/// Deletes what the `expired` snapshots of `before` reached and no snapshot
/// of `after` reaches.
async fn delete_unreachable(
    before: &Table,
    after: &TableMetadata,
    expired: &[i64],
    concurrency: usize,
) -> Result<Deleted> {
    let gone: Vec<SnapshotRef> = expired
        .iter()
        .filter_map(|id| before.metadata().snapshot_by_id(*id).cloned())
        .collect();
    let kept: Vec<SnapshotRef> = after.snapshots().cloned().collect();
    let gone = manifests_of(before, &gone).await?;
    let kept = manifests_of(before, &kept).await?;

    let lists: Vec<String> = gone.lists.difference(&kept.lists).cloned().collect();
    let manifests: Vec<ManifestFile> = gone
        .manifests
        .into_iter()
        .filter(|(path, _)| !kept.manifests.contains_key(path))
        .map(|(_, m)| m)
        .collect();

    // Content files the dropped manifests name, less those a live entry of
    // a retained manifest names.
    let mut content: HashMap<String, DataContentType> = HashMap::new();
    for_each_entry(before, &manifests, |_, entry| {
        content.insert(entry.file_path().to_string(), entry.content_type());
    })
    .await?;
    if !content.is_empty() {
        for_each_entry(before, kept.manifests.values(), |_, entry| {
            if entry.is_alive() {
                content.remove(entry.file_path());
            }
        })
        .await?;
    }

    let kept_statistics: HashSet<&str> = after
        .statistics_iter()
        .map(|s| s.statistics_path.as_str())
        .chain(
            after
                .partition_statistics_iter()
                .map(|s| s.statistics_path.as_str()),
        )
        .collect();
    let statistics: Vec<String> = before
        .metadata()
        .statistics_iter()
        .filter(|s| expired.contains(&s.snapshot_id))
        .map(|s| s.statistics_path.clone())
        .chain(
            before
                .metadata()
                .partition_statistics_iter()
                .filter(|s| expired.contains(&s.snapshot_id))
                .map(|s| s.statistics_path.clone()),
        )
        .filter(|p| !kept_statistics.contains(p.as_str()))
        .collect::<BTreeSet<String>>()
        .into_iter()
        .collect();

    let mut deleted = Deleted::default();
    let io = before.file_io();
    // Data first, then what names it: a deletion cut short leaves files
    // still named by what remains, for remove_orphan_files.
    let content_paths: Vec<String> = content.keys().cloned().collect();
    let kinds = delete_all(io, content_paths, concurrency).await?;
    for path in &kinds {
        match content[path] {
            DataContentType::Data => deleted.data += 1,
            DataContentType::PositionDeletes => deleted.position_deletes += 1,
            DataContentType::EqualityDeletes => deleted.equality_deletes += 1,
        }
    }
    let manifest_paths: Vec<String> = manifests.iter().map(|m| m.manifest_path.clone()).collect();
    deleted.manifests = delete_all(io, manifest_paths, concurrency).await?.len() as i64;
    deleted.manifest_lists = delete_all(io, lists, concurrency).await?.len() as i64;
    deleted.statistics = delete_all(io, statistics, concurrency).await?.len() as i64;
    Ok(deleted)
}

/// Deletes `paths`, `concurrency` at a time; returns the paths deleted (or
/// already gone), or the first error after trying them all.
async fn delete_all(
    io: &iceberg::io::FileIO,
    paths: Vec<String>,
    concurrency: usize,
) -> Result<Vec<String>> {
    let deletions: Vec<_> = paths
        .into_iter()
        .map(|path| delete_path(io, path))
        .collect();
    let results: Vec<(String, iceberg::Result<()>)> = futures::stream::iter(deletions)
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    let mut done = vec![];
    let mut first_error = None;
    for (path, result) in results {
        match result {
            Ok(()) => done.push(path),
            Err(e) if first_error.is_none() => {
                first_error = Some(io_error(format!("deleting {path}: {e}")))
            }
            Err(_) => {}
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(done),
    }
}

async fn delete_path(io: &iceberg::io::FileIO, path: String) -> (String, iceberg::Result<()>) {
    let result = delete_once(io, &path).await;
    (path, result)
}
