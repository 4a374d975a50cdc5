//! `rollback_to_snapshot(table, snapshot_id)` and
//! `set_current_snapshot(table, snapshot_id | ref)`: the main branch moved
//! to an existing snapshot in one metadata commit (no file is written but
//! the next metadata file). A rollback's target must be an ancestor of the
//! current snapshot; `set_current_snapshot` takes any snapshot of the
//! table, or the snapshot a branch or tag points at. The main branch keeps
//! its retention settings. Output: `previous_snapshot_id`,
//! `current_snapshot_id`.

use datafusion::error::Result;
use iceberg::spec::{
    SnapshotReference, SnapshotRetention, TableMetadata, TableMetadataBuilder, MAIN_BRANCH,
};
use iceberg::TableIdent;
use icemerge_executor::iceberg_err;
use icemerge_proto::error::invalid_input;

use super::{load, long_row, table_refs};
use crate::catalog::OpenCatalog;
use crate::commit::commit_metadata_change;
use crate::session::StatementOutput;

/// Moves main back to `snapshot_id`, an ancestor of the current snapshot.
pub async fn rollback_to_snapshot(
    catalog: &OpenCatalog,
    ident: &TableIdent,
    snapshot_id: i64,
    what: &str,
) -> Result<StatementOutput> {
    move_main(catalog, ident, |metadata| {
        known_snapshot(metadata, snapshot_id, what)?;
        if !is_ancestor_of_current(metadata, snapshot_id) {
            return Err(invalid_input(format!(
                "{what}: snapshot {snapshot_id} is not an ancestor of the current snapshot \
                 ({}); set_current_snapshot moves the table to any snapshot",
                current_text(metadata)
            )));
        }
        Ok(snapshot_id)
    })
    .await
}

/// Moves main to `snapshot_id`, or to the snapshot of the branch or tag
/// `reference`.
pub async fn set_current_snapshot(
    catalog: &OpenCatalog,
    ident: &TableIdent,
    snapshot_id: Option<i64>,
    reference: Option<String>,
    what: &str,
) -> Result<StatementOutput> {
    move_main(catalog, ident, |metadata| match (snapshot_id, &reference) {
        (Some(id), _) => {
            known_snapshot(metadata, id, what)?;
            Ok(id)
        }
        (None, Some(name)) => {
            let refs = table_refs(metadata)?;
            refs.get(name).map(|r| r.snapshot_id).ok_or_else(|| {
                let names: Vec<&str> = refs.keys().map(String::as_str).collect();
                invalid_input(format!(
                    "{what}: the table has no branch or tag '{name}' (it has: {})",
                    names.join(", ")
                ))
            })
        }
        (None, None) => Err(invalid_input(format!(
            "{what}: give a snapshot_id or a ref"
        ))),
    })
    .await
}

/// Commits main at the snapshot `target` picks from the table's metadata
/// (checked again after a lost swap). Nothing is committed when main is
/// already there.
async fn move_main<F>(
    catalog: &OpenCatalog,
    ident: &TableIdent,
    target: F,
) -> Result<StatementOutput>
where
    F: Fn(&TableMetadata) -> Result<i64>,
{
    let table = load(catalog, ident).await?;
    let previous = table.metadata().current_snapshot_id();
    let id = target(table.metadata())?;
    if previous == Some(id) {
        return Ok(output(previous, id));
    }
    let mut previous = previous;
    let mut chosen = id;
    commit_metadata_change(catalog, ident, |table, builder| {
        let metadata = table.metadata();
        previous = metadata.current_snapshot_id();
        chosen = target(metadata)?;
        set_main(metadata, builder, chosen)
    })
    .await?;
    Ok(output(previous, chosen))
}

/// `builder` with main at `snapshot_id`, main's retention settings kept.
pub(super) fn set_main(
    metadata: &TableMetadata,
    builder: TableMetadataBuilder,
    snapshot_id: i64,
) -> Result<TableMetadataBuilder> {
    let retention = table_refs(metadata)?
        .remove(MAIN_BRANCH)
        .map(|r| r.retention)
        .filter(|r| matches!(r, SnapshotRetention::Branch { .. }))
        .unwrap_or(SnapshotRetention::Branch {
            min_snapshots_to_keep: None,
            max_snapshot_age_ms: None,
            max_ref_age_ms: None,
        });
    builder
        .set_ref(MAIN_BRANCH, SnapshotReference::new(snapshot_id, retention))
        .map_err(iceberg_err)
}

fn output(previous: Option<i64>, current: i64) -> StatementOutput {
    long_row(&[
        ("previous_snapshot_id", previous),
        ("current_snapshot_id", Some(current)),
    ])
}

fn known_snapshot(metadata: &TableMetadata, id: i64, what: &str) -> Result<()> {
    if metadata.snapshot_by_id(id).is_none() {
        return Err(invalid_input(format!(
            "{what}: the table has no snapshot {id} (its snapshots are listed in t$snapshots)"
        )));
    }
    Ok(())
}

fn is_ancestor_of_current(metadata: &TableMetadata, id: i64) -> bool {
    let mut next = metadata.current_snapshot_id();
    while let Some(at) = next {
        if at == id {
            return true;
        }
        next = metadata
            .snapshot_by_id(at)
            .and_then(|s| s.parent_snapshot_id());
    }
    false
}

fn current_text(metadata: &TableMetadata) -> String {
    metadata
        .current_snapshot_id()
        .map(|id| id.to_string())
        .unwrap_or_else(|| "none".to_string())
}
