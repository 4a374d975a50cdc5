//! The coordinator's commit: a statement's changes to a table's data files
//! become ONE new snapshot, published by a compare-and-swap of the table's
//! catalog row. Nothing here runs on executors.
//!
//! The protocol, for every action:
//! 1. the action describes its request as a set of changes
//!    (`producer::SnapshotChanges`) against a base: the table as planned
//!    (overwrite) or as loaded at commit time (append);
//! 2. the producer (`producer.rs`) checks the request (no I/O; nothing to
//!    commit stops here), reads the base snapshot's manifest list
//!    and the manifests it needs (`catalog/manifests.rs`), decides which manifests
//!    are carried, rewritten or dropped (`plan.rs`, a pure function), writes
//!    the new manifests (`manifests::write_manifest`), the summary
//!    (`summary.rs`), the manifest list (`manifest_list.rs`), the snapshot
//!    and the next metadata file (`metadata.rs`);
//! 3. it swaps the catalog row from the base's metadata file to the new one
//!    (`catalog_swap.rs`). A lost swap means another writer committed first:
//!    what this commit wrote (`staging.rs` keeps the list) is deleted, the
//!    table reloaded and the action produced again on the new head, within
//!    the table's `commit.retry.*` settings (`retry.rs`). An append never
//!    conflicts; an overwrite first validates every snapshot committed since
//!    its base against its commit context (`context.rs`: base snapshot,
//!    isolation level from `isolation.rs`, conflict filter, files it
//!    depends on; the views read in `concurrent.rs`, the rules in
//!    `validation.rs`). A commit that adds and removes nothing makes no
//!    snapshot.
//!
//! Crash safety: every file a commit writes has a new name, and the table
//! changes only when the catalog row is swapped, in one statement; a
//! process killed at any point leaves the row at the old or the new
//! metadata file.
//!
//! Actions: `append.rs` (INSERT, CTAS), `overwrite.rs` (MERGE,
//! copy-on-write; `insert_overwrite.rs` picks INSERT OVERWRITE's replaced
//! files and commits through it), `row_delta.rs` (MERGE, merge-on-read: data and
//! position delete files added, nothing removed) and `manifest_rewrite.rs`
//! (`rewrite_manifests`: the same live files regrouped into new manifests,
//! `manifest_clusters.rs` deciding the groups, staged and swapped through
//! the producer). Metadata-only changes (ALTER of the schema, spec or
//! sort order; expiry, rollback) commit through `metadata_change.rs`; a merge that adds
//! columns carries its schema in its own snapshot's metadata (`evolved_schema.rs`). How
//! replace actions plug in is described in `producer.rs`.

mod append;
mod catalog_swap;
mod concurrent;
mod context;
mod dangling_deletes;
mod delete_files;
mod evolved_schema;
mod insert_overwrite;
mod isolation;
mod manifest_clusters;
mod manifest_list;
mod manifest_merge;
mod manifest_rewrite;
mod manifests;
mod metadata;
mod metadata_change;
mod overwrite;
mod plan;
mod producer;
mod retry;
mod row_delta;
mod staging;
mod summary;
#[cfg(test)]
mod tests;
mod validation;

pub use crate::catalog::manifests::{load_manifests, ManifestReadError, MANIFEST_READ_CONCURRENCY};
pub use append::{commit_append, data_files_from_batches, discard_write};
pub use catalog_swap::{current_metadata_location, swap_metadata_location};
pub use context::{CommitContext, ConflictFilter};
pub use evolved_schema::{metadata_with_current_schema, with_current_schema};
pub use insert_overwrite::commit_insert_overwrite;
pub use isolation::{
    check_isolation_properties, IsolationLevel, DELETE_ISOLATION_LEVEL, MERGE_ISOLATION_LEVEL,
    UPDATE_ISOLATION_LEVEL,
};
pub use manifest_rewrite::{commit_manifest_rewrite, ManifestRewriteCounts};
pub use metadata_change::commit_metadata_change;
pub use overwrite::{commit_overwrite, CommitOutcome, OverwriteCommit};
pub(crate) use plan::references as position_delete_references;
pub use row_delta::{commit_row_delta, RowDeltaCommit};
pub use validation::{Conflict, ConflictKind};
