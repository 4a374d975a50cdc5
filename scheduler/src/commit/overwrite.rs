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
//! manifest.
//!
//! If another writer moved the table since, what this attempt wrote is
//! deleted, the table reloaded, and every snapshot committed since the base
//! validated against the statement's commit context (`concurrent.rs`,
//! `validation.rs`): no conflict, and the same changes are planned again on
//! the new head (no data file is rewritten) and swapped again, within the
//! table's `commit.retry.*` settings (`retry.rs`); a conflict is returned
//! for the caller to re-run the statement or fail. The caller owns the
//! added data files.

use std::collections::{HashMap, HashSet};

use datafusion::error::Result;
use iceberg::spec::{DataFile, Operation};
use iceberg::table::Table;

use icemerge_executor::iceberg_err;

use super::concurrent::{table_name, validate_since};
use super::context::CommitContext;
use super::evolved_schema::carry_schema;
use super::plan::ManifestPolicy;
use super::producer::{produce, CatalogRow, Outcome, SnapshotChanges};
use super::retry::Retries;
use super::validation::{Conflict, ConflictKind};
use crate::catalog::OpenCatalog;
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
    /// A new snapshot is the table's current snapshot, after `attempts`
    /// compare-and-swaps (1 when no other writer came in between).
    Committed { snapshot_id: i64, attempts: usize },
    /// Nothing added and nothing removed: no snapshot was made.
    NothingToCommit,
    /// A snapshot committed since the base conflicts with the statement;
    /// nothing was committed (the statement may run again on the new head).
    Conflict(Conflict),
}

/// Commits `commit` against the snapshot `base` (the table as loaded at plan
/// time) and swaps the catalog pointer from `base`'s metadata file to the
/// new one. When another writer swapped first, the table is reloaded, what
/// was committed since is validated against `context`, and the same
/// changes are planned again on the new head and swapped, within the
/// table's `commit.retry.*` settings.
pub async fn commit_overwrite(
    catalog: &OpenCatalog,
    base: &Table,
    commit: OverwriteCommit,
    context: &CommitContext,
) -> Result<CommitOutcome> {
    commit_with_retries(catalog, base, context, &commit.removed, || changes(&commit)).await
}

/// Produces `changes()` against `base` and swaps the catalog row; when
/// another writer swapped first, reloads the table, validates what was
/// committed since against `context` and `depends_on` (the data files this
/// statement removes or adds deletes for) and tries again on the new head,
/// within the table's `commit.retry.*` settings. Shared by the overwrite
/// and the row delta.
pub(super) async fn commit_with_retries(
    catalog: &OpenCatalog,
    base: &Table,
    context: &CommitContext,
    depends_on: &HashSet<String>,
    changes: impl Fn() -> SnapshotChanges,
) -> Result<CommitOutcome> {
    let row = CatalogRow {
        uri: &catalog.uri,
        catalog_name: &catalog.name,
    };
    let ident = base.identifier();
    let properties = base.metadata().table_properties().map_err(iceberg_err)?;
    let mut retries = Retries::of(&properties);
    let mut context = context.clone();
    let mut table = base.clone();
    let mut attempts = 0;
    loop {
        attempts += 1;
        match produce(&row, &table, changes()).await? {
            Outcome::Committed { snapshot_id } => {
                return Ok(CommitOutcome::Committed {
                    snapshot_id,
                    attempts,
                })
            }
            Outcome::NothingToCommit => return Ok(CommitOutcome::NothingToCommit),
            Outcome::Lost => {}
        }
        if !retries.wait().await {
            return Err(conflict(format!(
                "concurrent commit to {ident}: other writers committed first {attempts} times \
                 in a row (commit.retry.num-retries = {}); nothing was committed",
                properties.commit_num_retries
            )));
        }
        let head = catalog
            .catalog
            .load_table(ident)
            .await
            .map_err(iceberg_err)?;
        if let Some(found) = validate_since(&table, &head, &context, depends_on).await? {
            return Ok(CommitOutcome::Conflict(found));
        }
        context.base_snapshot_id = head.metadata().current_snapshot_id();
        table = match context.schema_evolved_from {
            None => head,
            Some(from) => match carry_schema(&table, head.clone(), from)? {
                Some(evolved) => evolved,
                None => {
                    return Ok(CommitOutcome::Conflict(Conflict {
                        table: table_name(&table),
                        snapshot_id: head.metadata().current_snapshot_id(),
                        isolation: context.isolation,
                        kind: ConflictKind::SchemaChanged,
                    }))
                }
            },
        };
    }
}

fn changes(commit: &OverwriteCommit) -> SnapshotChanges {
    SnapshotChanges {
        operation: commit.operation.clone(),
        added: commit.added.clone(),
        added_deletes: vec![],
        removed: commit.removed.clone(),
        properties: commit.summary.clone(),
        policy: ManifestPolicy::Merging,
    }
}
