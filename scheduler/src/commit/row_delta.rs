//! The row-delta action (MERGE in merge-on-read mode, as Iceberg's
//! `RowDelta`): add data files and delete files in one snapshot,
//! against the snapshot the statement was planned on; no data file is
//! removed. Operation `overwrite`, or `delete` when only delete files are
//! added (`append` when only data files are). Each delete file must
//! reference a data file live in the base snapshot and takes its partition
//! (`delete_files.rs`); base manifests are carried. If another writer moved
//! the table since, nothing is committed ("concurrent commit") and what
//! this commit wrote is deleted (the caller owns the added files).

use std::collections::{HashMap, HashSet};

use datafusion::error::Result;
use iceberg::spec::{DataFile, Operation};
use iceberg::table::Table;

use super::overwrite::CommitOutcome;
use super::plan::ManifestPolicy;
use super::producer::{produce, CatalogRow, Outcome, SnapshotChanges};
use icemerge_proto::error::conflict;

/// What a row delta adds.
#[derive(Debug, Clone)]
pub struct RowDeltaCommit {
    /// New data files (status `Added`).
    pub added: Vec<DataFile>,
    /// New delete files: position delete files, each naming its referenced
    /// data file (they take its partition), or equality delete files (in
    /// the table's default spec).
    pub added_deletes: Vec<DataFile>,
    /// Extra snapshot summary properties; the computed ones win.
    pub summary: HashMap<String, String>,
}

impl RowDeltaCommit {
    /// `delete` when only delete files are added, `append` when only data
    /// files are, `overwrite` otherwise.
    pub fn operation(&self) -> Operation {
        match (self.added.is_empty(), self.added_deletes.is_empty()) {
            (true, _) => Operation::Delete,
            (false, true) => Operation::Append,
            (false, false) => Operation::Overwrite,
        }
    }
}

/// Commits `commit` against the snapshot `base` (the table as loaded at plan
/// time) and swaps the catalog pointer from `base`'s metadata file to the new
/// one. `catalog_uri`/`catalog_name` name the SQL catalog row to swap.
pub async fn commit_row_delta(
    catalog_uri: &str,
    catalog_name: &str,
    base: &Table,
    commit: RowDeltaCommit,
) -> Result<CommitOutcome> {
    let row = CatalogRow {
        uri: catalog_uri,
        catalog_name,
    };
    let changes = SnapshotChanges {
        operation: commit.operation(),
        added: commit.added,
        added_deletes: commit.added_deletes,
        removed: HashSet::new(),
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
