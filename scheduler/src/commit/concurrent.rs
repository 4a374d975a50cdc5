//! Reading what other writers committed after a statement's base: the
//! snapshots between the base and the new head (their own manifests'
//! added and deleted entries), and, when the rules need it, the head's
//! files that match the statement's conflict filter and the delete files
//! that apply to the files the statement depends on (iceberg's own scan
//! planning evaluates partition values, column bounds and delete-file
//! scope). Then `validation::validate` decides.

use std::collections::HashSet;

use datafusion::error::Result;
use futures::TryStreamExt;
use iceberg::spec::{DataContentType, ManifestStatus, SnapshotRef, TableMetadata};
use iceberg::table::Table;
use icemerge_executor::iceberg_err;
use icemerge_proto::error::io_error;

use super::context::{CommitContext, ConflictFilter};
use super::isolation::IsolationLevel;
use super::manifests::read_manifest_list;
use super::validation::{validate, Conflict, ConflictKind, HeadView, SnapshotChangesView};
use crate::catalog::manifests::load_manifests;
use crate::catalog::narrow_position_deletes;

/// Validates a statement that read `base` and removes `removed` against
/// every snapshot `head` (the table as reloaded) committed since.
pub(crate) async fn validate_since(
    base: &Table,
    head: &Table,
    context: &CommitContext,
    removed: &HashSet<String>,
) -> Result<Option<Conflict>> {
    let conflict = |snapshot_id, kind| Conflict {
        table: table_name(base),
        snapshot_id,
        isolation: context.isolation,
        kind,
    };
    let metadata = head.metadata();
    let Some(snapshots) = snapshots_since(metadata, context.base_snapshot_id) else {
        let newest = metadata.current_snapshot_id();
        return Ok(Some(conflict(newest, ConflictKind::HistoryRewritten)));
    };
    if let Some(first) = snapshots.first().map(|s| s.snapshot_id()) {
        if schema_or_spec_changed(base.metadata(), metadata) {
            return Ok(Some(conflict(Some(first), ConflictKind::SchemaChanged)));
        }
    }
    let changes = read_changes(head, &snapshots).await?;
    let view = head_view(head, context, removed, &changes).await?;
    Ok(validate(context, removed, &changes, &view)
        .err()
        .map(|(id, kind)| conflict(Some(id), kind)))
}

pub(super) fn table_name(table: &Table) -> String {
    let ident = table.identifier();
    format!("{}.{}", ident.namespace().to_url_string(), ident.name())
}

/// The snapshots after `base` up to the current one, oldest first; `None`
/// when `base` is not an ancestor of the current snapshot.
pub(crate) fn snapshots_since(
    metadata: &TableMetadata,
    base: Option<i64>,
) -> Option<Vec<SnapshotRef>> {
    let mut since = vec![];
    let mut at = metadata.current_snapshot_id();
    while at != base {
        let snapshot = metadata.snapshot_by_id(at?)?;
        at = snapshot.parent_snapshot_id();
        since.push(snapshot.clone());
    }
    since.reverse();
    Some(since)
}

fn schema_or_spec_changed(base: &TableMetadata, head: &TableMetadata) -> bool {
    base.current_schema_id() != head.current_schema_id()
        || base.default_partition_spec_id() != head.default_partition_spec_id()
}

/// What each snapshot added and removed, read from the manifests it wrote.
async fn read_changes(head: &Table, snapshots: &[SnapshotRef]) -> Result<Vec<SnapshotChangesView>> {
    let mut views = vec![];
    for snapshot in snapshots {
        let id = snapshot.snapshot_id();
        let list = read_manifest_list(head, Some(snapshot), head.identifier()).await?;
        let own = list.iter().filter(|m| m.added_snapshot_id == id);
        let manifests = load_manifests(head.file_io(), own).await.map_err(|e| {
            io_error(format!(
                "validating the commit to {}: {e}",
                table_name(head)
            ))
        })?;
        let mut view = SnapshotChangesView {
            snapshot_id: id,
            ..Default::default()
        };
        for entry in manifests.iter().flat_map(|m| m.entries()) {
            if entry.snapshot_id() != Some(id) {
                continue;
            }
            let path = entry.file_path().to_string();
            match (entry.status(), entry.content_type()) {
                (ManifestStatus::Added, DataContentType::Data) => view.added_data.push(path),
                (ManifestStatus::Deleted, DataContentType::Data) => view.removed_data.push(path),
                (ManifestStatus::Added, _) => view.added_deletes.push(path),
                _ => {}
            }
        }
        views.push(view);
    }
    Ok(views)
}

/// Plans the head (with the conflict filter) when a rule needs it: for
/// added data under serializable isolation with a filter, and for added
/// delete files.
async fn head_view(
    head: &Table,
    context: &CommitContext,
    removed: &HashSet<String>,
    changes: &[SnapshotChangesView],
) -> Result<HeadView> {
    let filtered_data = context.isolation == IsolationLevel::Serializable
        && matches!(context.conflict_filter, ConflictFilter::Rows(_))
        && changes.iter().any(|c| !c.added_data.is_empty());
    let deletes = changes.iter().any(|c| !c.added_deletes.is_empty());
    let mut view = HeadView::default();
    let Some(snapshot) = head.metadata().current_snapshot() else {
        return Ok(view);
    };
    if !filtered_data && !deletes {
        return Ok(view);
    }
    let mut scan = head
        .scan()
        .snapshot_id(snapshot.snapshot_id())
        .select_empty();
    if let ConflictFilter::Rows(predicate) = &context.conflict_filter {
        scan = scan.with_filter(predicate.clone());
    }
    let mut tasks: Vec<_> = scan
        .build()
        .map_err(iceberg_err)?
        .plan_files()
        .await
        .map_err(iceberg_err)?
        .try_collect()
        .await
        .map_err(iceberg_err)?;
    // A position delete file another writer added applies only to the data
    // files it names, as in Iceberg's own validation.
    narrow_position_deletes(head, snapshot, &mut tasks).await?;
    let depends_on =
        |path: &str| removed.contains(path) || context.deletes_added_for.contains(path);
    for task in tasks {
        if depends_on(&task.data_file_path) && !task.deletes.is_empty() {
            let deletes: Vec<String> = task.deletes.iter().map(|d| d.file_path.clone()).collect();
            view.deletes_for
                .entry(task.data_file_path.clone())
                .or_default()
                .extend(deletes);
        }
        if filtered_data {
            view.matching.insert(task.data_file_path);
        }
    }
    Ok(view)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn history_walk_stops_at_the_base() {
        // Exercised end to end (tests/tests/concurrent_writers.rs); here the
        // empty-history case: no snapshot and no base means nothing since.
        let metadata = iceberg::spec::TableMetadataBuilder::new(
            iceberg::spec::Schema::builder().build().unwrap(),
            iceberg::spec::PartitionSpec::unpartition_spec(),
            iceberg::spec::SortOrder::unsorted_order(),
            "file:///tmp/t".to_string(),
            iceberg::spec::FormatVersion::V2,
            HashMap::new(),
        )
        .unwrap()
        .build()
        .unwrap()
        .metadata;
        assert_eq!(snapshots_since(&metadata, None).map(|s| s.len()), Some(0));
        assert!(snapshots_since(&metadata, Some(7)).is_none());
    }
}
