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
//!    and the manifests it needs (`manifests.rs`), decides which manifests
//!    are carried, rewritten or dropped (`plan.rs`, a pure function), writes
//!    the new manifests (`manifests::write_manifest`), the summary
//!    (`summary.rs`), the manifest list (`manifest_list.rs`), the snapshot
//!    and the next metadata file (`metadata.rs`);
//! 3. it swaps the catalog row from the base's metadata file to the new one
//!    (`catalog_swap.rs`). A lost swap means another writer committed first:
//!    what this commit wrote (`staging.rs` keeps the list) is deleted, and
//!    the action fails ("concurrent commit") or, for an append, reloads
//!    and produces again. A commit that adds and removes nothing makes no
//!    snapshot.
//!
//! Actions: `append.rs` (INSERT, CTAS) and `overwrite.rs` (MERGE). How
//! row-delta, replace and metadata-only actions plug in is described in
//! `producer.rs`.

mod append;
mod catalog_swap;
mod manifest_list;
mod manifests;
mod metadata;
mod overwrite;
mod plan;
mod producer;
mod staging;
mod summary;
#[cfg(test)]
mod tests;

pub use crate::catalog::manifests::{load_manifests, ManifestReadError, MANIFEST_READ_CONCURRENCY};
pub use append::{commit_append, data_files_from_batches, discard_write};
pub use catalog_swap::{current_metadata_location, swap_metadata_location};
pub use overwrite::{commit_overwrite, CommitOutcome, OverwriteCommit};
