//! Whether snapshots committed after a statement's base conflict with it:
//! a pure function over small views of those snapshots and of the new
//! head, so every rule is tested without I/O (the views are read in
//! `concurrent.rs`).
//!
//! The rules follow Iceberg's `MergingSnapshotProducer` validations as
//! Spark picks them per isolation level:
//! - any level: a data file the statement removes (rewrites), or adds
//!   deletes for, was removed by a concurrent snapshot, or a concurrent
//!   snapshot added a delete file that applies to it;
//! - serializable: a concurrent snapshot added a data file that could hold
//!   rows matching the statement's conflict filter (any data file when the
//!   filter is the whole table);
//! - snapshot: added data files are not a conflict.
//!
//! A base that is no longer an ancestor of the head, or a changed schema or
//! partition spec, is a conflict at any level (see `concurrent.rs`).

use std::collections::{HashMap, HashSet};
use std::fmt;

use super::context::{CommitContext, ConflictFilter};
use super::isolation::IsolationLevel;

/// What one snapshot committed after the base did to the table's files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SnapshotChangesView {
    pub snapshot_id: i64,
    /// Data files it added.
    pub added_data: Vec<String>,
    /// Data files it removed.
    pub removed_data: Vec<String>,
    /// Delete files (position or equality) it added.
    pub added_deletes: Vec<String>,
}

/// What validation needs to know about the new head snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct HeadView {
    /// Live data files that could hold rows matching the conflict filter
    /// (by partition values and column bounds). Unused for the whole table.
    pub matching: HashSet<String>,
    /// The delete files that apply to each data file the statement depends
    /// on (those it removes or adds deletes for), as the head has them.
    pub deletes_for: HashMap<String, Vec<String>>,
}

/// Why a statement cannot be rebased onto the new head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConflictKind {
    /// A data file the statement rewrote or adds deletes for was removed.
    FileRemoved { path: String },
    /// A data file the statement rewrote or adds deletes for got a new
    /// delete file.
    DeletesAdded { path: String, delete_file: String },
    /// A data file was added that could hold rows the statement's filter
    /// matches (serializable only).
    DataAdded { path: String, filter: String },
    /// The snapshot the statement read is no longer in the table's history
    /// (rollback, or the table was replaced).
    HistoryRewritten,
    /// The table's schema or partition spec changed.
    SchemaChanged,
}

impl fmt::Display for ConflictKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConflictKind::FileRemoved { path } => {
                write!(
                    f,
                    "data file '{path}' that this statement changes was removed"
                )
            }
            ConflictKind::DeletesAdded { path, delete_file } => write!(
                f,
                "data file '{path}' that this statement changes got new deletes \
                 ('{delete_file}')"
            ),
            ConflictKind::DataAdded { path, filter } => write!(
                f,
                "data file '{path}' was added and could hold rows matching {filter}"
            ),
            ConflictKind::HistoryRewritten => {
                f.write_str("the snapshot this statement read is no longer in the table's history")
            }
            ConflictKind::SchemaChanged => {
                f.write_str("the table's schema or partition spec changed")
            }
        }
    }
}

/// A conflict found by validation: the statement cannot be committed on
/// the new head without being run again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The table, as `namespace.name`.
    pub table: String,
    /// The concurrent snapshot that conflicts (None when the history no
    /// longer leads to the base).
    pub snapshot_id: Option<i64>,
    pub isolation: IsolationLevel,
    pub kind: ConflictKind,
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let snapshot = match self.snapshot_id {
            Some(id) => format!("snapshot {id}"),
            None => "a concurrent change".to_string(),
        };
        write!(
            f,
            "conflict on {}: {snapshot} committed since this statement started conflicts \
             with it under {} isolation: {}; nothing was committed",
            self.table, self.isolation, self.kind
        )
    }
}

/// Checks `concurrent` (oldest first) against a statement that removes
/// `removed` and depends on `context`; the first conflict, with the id of
/// the snapshot that made it.
pub(crate) fn validate(
    context: &CommitContext,
    removed: &HashSet<String>,
    concurrent: &[SnapshotChangesView],
    head: &HeadView,
) -> Result<(), (i64, ConflictKind)> {
    let depends_on =
        |path: &str| removed.contains(path) || context.deletes_added_for.contains(path);
    for snapshot in concurrent {
        let id = snapshot.snapshot_id;
        if let Some(path) = snapshot.removed_data.iter().find(|p| depends_on(p)) {
            return Err((id, ConflictKind::FileRemoved { path: path.clone() }));
        }
        if let Some(kind) = new_deletes(snapshot, head) {
            return Err((id, kind));
        }
        if context.isolation == IsolationLevel::Serializable {
            let matches = |path: &String| match &context.conflict_filter {
                ConflictFilter::WholeTable => true,
                ConflictFilter::Rows(_) => head.matching.contains(path),
            };
            if let Some(path) = snapshot.added_data.iter().find(|p| matches(p)) {
                let filter = context.conflict_filter.to_string();
                return Err((
                    id,
                    ConflictKind::DataAdded {
                        path: path.clone(),
                        filter,
                    },
                ));
            }
        }
    }
    Ok(())
}

/// A delete file `snapshot` added that applies to a file the statement
/// depends on.
fn new_deletes(snapshot: &SnapshotChangesView, head: &HeadView) -> Option<ConflictKind> {
    if snapshot.added_deletes.is_empty() {
        return None;
    }
    let added: HashSet<&str> = snapshot.added_deletes.iter().map(String::as_str).collect();
    let mut dependent: Vec<_> = head.deletes_for.iter().collect();
    dependent.sort();
    dependent.into_iter().find_map(|(path, deletes)| {
        deletes
            .iter()
            .find(|d| added.contains(d.as_str()))
            .map(|d| ConflictKind::DeletesAdded {
                path: path.clone(),
                delete_file: d.clone(),
            })
    })
}

#[cfg(test)]
mod tests {
    use iceberg::expr::Reference;
    use iceberg::spec::Datum;

    use super::*;

    fn set(paths: &[&str]) -> HashSet<String> {
        paths.iter().map(|p| p.to_string()).collect()
    }

    fn strings(paths: &[&str]) -> Vec<String> {
        paths.iter().map(|p| p.to_string()).collect()
    }

    fn filtered(isolation: IsolationLevel) -> CommitContext {
        let predicate = Reference::new("k").less_than(Datum::long(10));
        CommitContext::copy_on_write(Some(1), isolation, ConflictFilter::Rows(predicate))
    }

    fn snapshot(
        id: i64,
        added: &[&str],
        removed: &[&str],
        deletes: &[&str],
    ) -> SnapshotChangesView {
        SnapshotChangesView {
            snapshot_id: id,
            added_data: strings(added),
            removed_data: strings(removed),
            added_deletes: strings(deletes),
        }
    }

    fn head(matching: &[&str]) -> HeadView {
        HeadView {
            matching: set(matching),
            deletes_for: HashMap::new(),
        }
    }

    #[test]
    fn a_removed_file_removed_concurrently_conflicts_at_any_level() {
        for level in [IsolationLevel::Serializable, IsolationLevel::Snapshot] {
            let context = filtered(level);
            let concurrent = [
                snapshot(2, &[], &["other"], &[]),
                snapshot(3, &["x2"], &["x"], &[]),
            ];
            let verdict = validate(&context, &set(&["x"]), &concurrent, &head(&[]));
            assert_eq!(
                verdict,
                Err((3, ConflictKind::FileRemoved { path: "x".into() })),
                "{level}"
            );
            // Removing other files, and adding files the filter rules out,
            // is no conflict.
            let verdict = validate(&context, &set(&["y"]), &concurrent, &head(&[]));
            assert_eq!(verdict, Ok(()), "{level}");
        }
    }

    #[test]
    fn new_deletes_on_a_rewritten_file_conflict_at_any_level() {
        let mut view = head(&[]);
        view.deletes_for
            .insert("x".into(), strings(&["old-delete", "new-delete"]));
        for level in [IsolationLevel::Serializable, IsolationLevel::Snapshot] {
            let concurrent = [snapshot(4, &[], &[], &["new-delete"])];
            let verdict = validate(&filtered(level), &set(&["x"]), &concurrent, &view);
            assert_eq!(
                verdict,
                Err((
                    4,
                    ConflictKind::DeletesAdded {
                        path: "x".into(),
                        delete_file: "new-delete".into()
                    }
                ))
            );
            // A delete file that applies to none of its files is fine.
            let concurrent = [snapshot(4, &[], &[], &["elsewhere"])];
            assert_eq!(
                validate(&filtered(level), &set(&["x"]), &concurrent, &view),
                Ok(())
            );
        }
    }

    #[test]
    fn added_data_conflicts_under_serializable_only_when_it_matches() {
        let concurrent = [
            snapshot(5, &["inside"], &[], &[]),
            snapshot(6, &["outside"], &[], &[]),
        ];
        let view = head(&["inside", "x"]);
        let verdict = validate(
            &filtered(IsolationLevel::Serializable),
            &set(&["x"]),
            &concurrent,
            &view,
        );
        assert!(
            matches!(verdict, Err((5, ConflictKind::DataAdded { ref path, .. })) if path == "inside"),
            "{verdict:?}"
        );
        let only_outside = [snapshot(6, &["outside"], &[], &[])];
        assert_eq!(
            validate(
                &filtered(IsolationLevel::Serializable),
                &set(&["x"]),
                &only_outside,
                &view
            ),
            Ok(())
        );
        assert_eq!(
            validate(
                &filtered(IsolationLevel::Snapshot),
                &set(&["x"]),
                &concurrent,
                &view
            ),
            Ok(())
        );
    }

    #[test]
    fn the_whole_table_filter_matches_every_added_file() {
        let context = CommitContext::copy_on_write(
            Some(1),
            IsolationLevel::Serializable,
            ConflictFilter::WholeTable,
        );
        let concurrent = [snapshot(7, &["anywhere"], &[], &[])];
        assert!(matches!(
            validate(&context, &set(&[]), &concurrent, &head(&[])),
            Err((7, ConflictKind::DataAdded { .. }))
        ));
    }

    #[test]
    fn files_it_adds_deletes_for_count_like_removed_ones() {
        let mut context = filtered(IsolationLevel::Snapshot);
        context.deletes_added_for = set(&["d"]);
        let concurrent = [snapshot(8, &[], &["d"], &[])];
        assert_eq!(
            validate(&context, &set(&[]), &concurrent, &head(&[])),
            Err((8, ConflictKind::FileRemoved { path: "d".into() }))
        );
    }

    #[test]
    fn the_message_names_snapshot_table_level_and_kind() {
        let conflict = Conflict {
            table: "db.t".into(),
            snapshot_id: Some(42),
            isolation: IsolationLevel::Snapshot,
            kind: ConflictKind::FileRemoved { path: "f".into() },
        };
        let text = conflict.to_string();
        for part in [
            "db.t",
            "snapshot 42",
            "snapshot isolation",
            "'f'",
            "was removed",
        ] {
            assert!(text.contains(part), "{part}: {text}");
        }
    }
}
