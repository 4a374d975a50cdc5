//! The overwrite action (MERGE, and later UPDATE / DELETE / INSERT
//! OVERWRITE by copy-on-write): remove some data files, add others, against
//! the snapshot the statement was planned on.
//!
//! Against that base snapshot (see `plan.rs`): untouched data manifests are
//! carried forward byte-identical; partly hit ones are rewritten (survivors
//! `Existing` with their original snapshot id and sequence numbers, removed
//! ones `Deleted`); wholly dead ones are dropped and their removed files
//! recorded in a deleted-only manifest; manifests with no live file are
//! dropped; delete manifests are carried; added files go into one new
//! manifest. If another writer moved the table since, nothing is committed
//! ("concurrent commit"), and what this commit wrote is deleted (the caller
//! owns the added data files).

use std::collections::{HashMap, HashSet};

use datafusion::error::Result;
use iceberg::spec::{DataFile, Operation};
use iceberg::table::Table;

use super::plan::ManifestPolicy;
use super::producer::{produce, CatalogRow, Outcome, SnapshotChanges};
use icemerge_proto::error::conflict;

/// What a commit changes in the table's data files.
#[derive(Debug, Clone)]
pub struct OverwriteCommit {
    /// New data files (status `Added`).
    pub added: Vec<DataFile>,
    /// Paths of data files to remove; each must be live in the base snapshot.
    pub removed: HashSet<String>,
    /// Extra snapshot summary properties (e.g. icemerge counts). The
    /// computed `added-*`/`deleted-*`/`total-*` properties win over these.
    pub summary: HashMap<String, String>,
    /// `Overwrite` (or `Append` when nothing is removed, `Delete` when
    /// nothing is added).
    pub operation: Operation,
}

/// The result of [`commit_overwrite`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommitOutcome {
    /// A new snapshot is the table's current snapshot.
    Committed { snapshot_id: i64 },
    /// Nothing added and nothing removed: no snapshot was made.
    NothingToCommit,
}

/// Commits `commit` against the snapshot `base` (the table as loaded at plan
/// time) and swaps the catalog pointer from `base`'s metadata file to the new
/// one. `catalog_uri`/`catalog_name` name the SQL catalog row to swap.
pub async fn commit_overwrite(
    catalog_uri: &str,
    catalog_name: &str,
    base: &Table,
    commit: OverwriteCommit,
) -> Result<CommitOutcome> {
    let row = CatalogRow {
        uri: catalog_uri,
        catalog_name,
    };
    let changes = SnapshotChanges {
        operation: commit.operation,
        added: commit.added,
        added_deletes: vec![],
        removed: commit.removed,
        properties: commit.summary,
        policy: ManifestPolicy::Merging,
    };
    match produce(&row, base, changes).await? {
        Outcome::Committed { snapshot_id } => Ok(CommitOutcome::Committed { snapshot_id }),
        Outcome::NothingToCommit => Ok(CommitOutcome::NothingToCommit),
        Outcome::Lost => Err(conflict(format!(
            "concurrent commit to {}: the table changed since the merge started; \
             nothing was committed",
            base.identifier()
        ))),
    }
}
