//! `cherrypick_snapshot(table, snapshot_id)`: an `append` snapshot that is
//! not in the current state (e.g. left behind by a rollback) applied to
//! it. When its parent is the current snapshot, main simply moves to it (a
//! fast-forward, one metadata commit); otherwise its data files are
//! committed again as a new `append` snapshot on top of the current one
//! (the same files: nothing is copied; a file already live is refused).
//! Snapshots of other operations, which would need their deletes re-applied
//! and validated, are refused. Output: `source_snapshot_id`,
//! `current_snapshot_id`.

use datafusion::error::Result;
use iceberg::spec::{DataContentType, ManifestStatus, Operation};
use iceberg::TableIdent;
use icemerge_proto::error::{invalid_input, unsupported};

use super::reachable::{for_each_entry, manifests_of};
use super::snapshot_ref::set_main;
use super::{load, long_row};
use crate::catalog::OpenCatalog;
use crate::commit::{commit_append, commit_metadata_change};
use crate::session::StatementOutput;

/// Applies snapshot `snapshot_id` to the current state of `ident`.
pub async fn cherrypick_snapshot(
    catalog: &OpenCatalog,
    ident: &TableIdent,
    snapshot_id: i64,
    what: &str,
) -> Result<StatementOutput> {
    let table = load(catalog, ident).await?;
    let metadata = table.metadata();
    let Some(snapshot) = metadata.snapshot_by_id(snapshot_id).cloned() else {
        return Err(invalid_input(format!(
            "{what}: the table has no snapshot {snapshot_id}"
        )));
    };
    let operation = &snapshot.summary().operation;
    if *operation != Operation::Append {
        return Err(unsupported(format!(
            "{what}: snapshot {snapshot_id} is an {} snapshot; only append snapshots can be \
             cherry-picked",
            operation.as_str()
        )));
    }
    let current = metadata.current_snapshot_id();
    let mut at = current;
    while let Some(id) = at {
        if id == snapshot_id {
            return Err(invalid_input(format!(
                "{what}: snapshot {snapshot_id} is already in the current state (an ancestor of \
                 the current snapshot)"
            )));
        }
        at = metadata
            .snapshot_by_id(id)
            .and_then(|s| s.parent_snapshot_id());
    }

    if snapshot.parent_snapshot_id() == current {
        // Fast-forward: main moves to the snapshot itself.
        commit_metadata_change(catalog, ident, |table, builder| {
            let metadata = table.metadata();
            if metadata.current_snapshot_id() != current {
                return Err(invalid_input(format!(
                    "{what}: the table changed while cherry-picking; run it again"
                )));
            }
            set_main(metadata, builder, snapshot_id)
        })
        .await?;
        return Ok(output(snapshot_id, snapshot_id));
    }

    let manifests = manifests_of(&table, std::slice::from_ref(&snapshot)).await?;
    let mut added = vec![];
    for_each_entry(&table, manifests.manifests.values(), |_, entry| {
        if entry.status() == ManifestStatus::Added
            && entry.snapshot_id() == Some(snapshot_id)
            && entry.content_type() == DataContentType::Data
        {
            added.push(entry.data_file().clone());
        }
    })
    .await?;
    if added.is_empty() {
        return Err(invalid_input(format!(
            "{what}: snapshot {snapshot_id} added no data file"
        )));
    }
    if let Some(current) = metadata.current_snapshot() {
        let paths: std::collections::HashSet<&str> = added.iter().map(|f| f.file_path()).collect();
        let live = manifests_of(&table, std::slice::from_ref(current)).await?;
        let mut already = None;
        for_each_entry(&table, live.manifests.values(), |_, entry| {
            if entry.is_alive() && paths.contains(entry.file_path()) {
                already.get_or_insert_with(|| entry.file_path().to_string());
            }
        })
        .await?;
        if let Some(path) = already {
            return Err(invalid_input(format!(
                "{what}: snapshot {snapshot_id}'s data file {path} is already in the current \
                 state (was it cherry-picked before?)"
            )));
        }
    }
    commit_append(catalog, ident, added).await?;
    let now = load(catalog, ident).await?;
    Ok(output(
        snapshot_id,
        now.metadata().current_snapshot_id().unwrap_or(-1),
    ))
}

fn output(source: i64, current: i64) -> StatementOutput {
    long_row(&[
        ("source_snapshot_id", Some(source)),
        ("current_snapshot_id", Some(current)),
    ])
}
