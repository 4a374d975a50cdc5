//! The row-delta action (MERGE in merge-on-read mode, as Iceberg's
//! `RowDelta`): add data files and delete files in one snapshot,
//! against the snapshot the statement was planned on; no data file is
//! removed. Operation `overwrite`, or `delete` when only delete files are
//! added (`append` when only data files are). Each delete file must
//! reference a data file live in the base snapshot and takes its partition
//! (`delete_files.rs`); base manifests are carried. If another writer moved
//! the table since, the commit is validated, rebased and retried as the
//! overwrite's is (the caller owns the added files).

use std::collections::{HashMap, HashSet};

use datafusion::error::Result;
use iceberg::spec::{DataFile, Operation};
use iceberg::table::Table;

use super::context::CommitContext;
use super::overwrite::{commit_with_retries, CommitOutcome};
use super::plan::ManifestPolicy;
use super::producer::SnapshotChanges;
use crate::catalog::OpenCatalog;

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
/// time) and swaps the catalog pointer from `base`'s metadata file to the
/// new one; when another writer swapped first, validates what was committed
/// since against `context` (a data file this merge adds deletes for that
/// was removed or got new deletes concurrently is a conflict) and tries
/// again on the new head, as the overwrite does.
pub async fn commit_row_delta(
    catalog: &OpenCatalog,
    base: &Table,
    commit: RowDeltaCommit,
    context: &CommitContext,
) -> Result<CommitOutcome> {
    let mut context = context.clone();
    context.deletes_added_for = commit
        .added_deletes
        .iter()
        .filter_map(|f| f.referenced_data_file())
        .collect();
    let operation = commit.operation();
    let removes_nothing = HashSet::new();
    commit_with_retries(catalog, base, &context, &removes_nothing, || {
        SnapshotChanges {
            operation: operation.clone(),
            added: commit.added.clone(),
            added_deletes: commit.added_deletes.clone(),
            removed: HashSet::new(),
            properties: commit.summary.clone(),
            policy: ManifestPolicy::Merging,
        }
    })
    .await
}
