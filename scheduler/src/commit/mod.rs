//! The coordinator's commit of a write: a statement's data files become ONE
//! new snapshot, published by a compare-and-swap of the table's catalog row.
//!
//! - `append.rs`: INSERT / CTAS (`commit_append`) and the writer-output helpers;
//! - `overwrite.rs`: MERGE's overwrite snapshot (`commit_overwrite`);
//! - `catalog_swap.rs`: the compare-and-swap of the catalog row.

mod append;
mod catalog_swap;
mod overwrite;

pub use append::{commit_append, data_files_from_batches, discard_write};
pub use catalog_swap::{current_metadata_location, swap_metadata_location};
pub use overwrite::{commit_overwrite, CommitOutcome, OverwriteCommit};
