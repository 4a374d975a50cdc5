//! What a merge did, read from its writers' commit fragments, and what
//! becomes of it: committed as one snapshot (`append` when it only
//! inserted; otherwise an `overwrite` in copy-on-write mode, a row delta —
//! `overwrite`, or `delete` when it only deleted — in merge-on-read mode),
//! and the statement's files that the commit does not keep deleted.

use std::collections::{BTreeMap, HashSet};

use arrow::record_batch::RecordBatch;
use datafusion::error::Result;
use iceberg::spec::{deserialize_data_file_from_json, DataFile, Operation, StructType};
use iceberg::table::Table;
use icemerge_executor::cleanup::{
    data_location, delete_files_with_prefix_except, delete_files_with_prefix_now_and_later,
    local_path,
};
use icemerge_executor::iceberg_err;
use icemerge_proto::fragment::{self, Fragment};

use super::PlannedMerge;
use crate::catalog::OpenCatalog;
use crate::commit::{
    commit_overwrite, commit_row_delta, CommitContext, CommitOutcome, OverwriteCommit,
    RowDeltaCommit,
};
use icemerge_proto::error::internal;

/// What a MERGE did.
#[derive(Debug, Default, Clone)]
pub struct MergeOutcome {
    pub stats: BTreeMap<String, u64>,
    pub added: Vec<DataFile>,
    /// Position delete files (merge-on-read), without their partitions yet.
    pub added_deletes: Vec<DataFile>,
    pub removed: Vec<String>,
    /// Compare-and-swaps of the catalog row its commit took (0: nothing
    /// to commit; more than 1: it was rebased onto other writers' commits).
    pub commit_attempts: u64,
    /// Times the statement was run again after a conflict.
    pub reexecutions: u64,
}

impl MergeOutcome {
    pub fn stat(&self, name: &str) -> u64 {
        self.stats.get(name).copied().unwrap_or(0)
    }
}

/// Reads the writers' fragments: added files, removed paths, counters.
pub fn collect_fragments(base: &Table, batches: &[RecordBatch]) -> Result<MergeOutcome> {
    let metadata = base.metadata();
    let spec = metadata.default_partition_spec();
    let mut outcome = MergeOutcome::default();
    let mut removed = HashSet::new();
    for batch in batches {
        for entry in fragment::decode(batch)? {
            match entry {
                Fragment::AddedFile { data_file_json, .. } => outcome.added.push(
                    deserialize_data_file_from_json(
                        &data_file_json,
                        spec.spec_id(),
                        metadata.default_partition_type(),
                        metadata.current_schema(),
                    )
                    .map_err(iceberg_err)?,
                ),
                Fragment::AddedDeleteFile {
                    delete_file_json, ..
                } => outcome.added_deletes.push(
                    deserialize_data_file_from_json(
                        &delete_file_json,
                        spec.spec_id(),
                        &StructType::new(vec![]),
                        metadata.current_schema(),
                    )
                    .map_err(iceberg_err)?,
                ),
                Fragment::RemovedFile { path } => {
                    if !removed.insert(path.clone()) {
                        return Err(internal(format!(
                            "MERGE: data file {path} was rewritten by two writers"
                        )));
                    }
                    outcome.removed.push(path);
                }
                Fragment::Stat { name, count } => {
                    *outcome.stats.entry(name).or_default() += count;
                }
            }
        }
    }
    outcome
        .stats
        .insert("files_added".into(), outcome.added.len() as u64);
    outcome
        .stats
        .insert("files_removed".into(), outcome.removed.len() as u64);
    outcome.stats.insert(
        "delete_files_added".into(),
        outcome.added_deletes.len() as u64,
    );
    Ok(outcome)
}

/// Commits a merge's outcome against the snapshot it read, rebasing onto
/// snapshots other writers committed meanwhile when they do not conflict
/// (`crate::commit::commit_overwrite`).
pub async fn commit_merge(
    catalog: &OpenCatalog,
    planned: &PlannedMerge,
    outcome: &MergeOutcome,
) -> Result<CommitOutcome> {
    if outcome.added.is_empty() && outcome.removed.is_empty() && outcome.added_deletes.is_empty() {
        return Ok(CommitOutcome::NothingToCommit);
    }
    let mut summary = std::collections::HashMap::new();
    for (k, v) in &outcome.stats {
        summary.insert(format!("icemerge.{k}"), v.to_string());
    }
    let mut context = CommitContext::copy_on_write(
        planned.base.metadata().current_snapshot_id(),
        planned.isolation,
        planned.conflict_filter.clone(),
    );
    context.schema_evolved_from = planned.schema_evolved_from;
    if !outcome.added_deletes.is_empty() {
        if !outcome.removed.is_empty() {
            return Err(internal("MERGE: a merge-on-read writer removed data files"));
        }
        let commit = RowDeltaCommit {
            added: outcome.added.clone(),
            added_deletes: outcome.added_deletes.clone(),
            summary,
        };
        return commit_row_delta(catalog, &planned.base, commit, &context).await;
    }
    // As Iceberg's own overwrite names its snapshots: only removing files
    // is a `delete`, only adding them an `append`.
    let operation = match (outcome.added.is_empty(), outcome.removed.is_empty()) {
        (_, true) => Operation::Append,
        (true, false) => Operation::Delete,
        (false, false) => Operation::Overwrite,
    };
    let commit = OverwriteCommit {
        added: outcome.added.clone(),
        removed: outcome.removed.iter().cloned().collect(),
        summary,
        operation,
    };
    commit_overwrite(catalog, &planned.base, commit, &context).await
}

/// Deletes the files of this merge that are not part of the commit: those
/// of discarded task attempts after a success (`keep`: the committed data
/// and delete files).
pub fn discard_uncommitted(planned: &PlannedMerge, keep: &[&DataFile]) -> usize {
    let location = data_location(planned.base.metadata());
    let keep: Vec<&str> = keep.iter().map(|f| f.file_path()).collect();
    delete_files_with_prefix_except(&location, &planned.write_id, &keep)
}

/// Deletes every file of a merge that failed; with `tasks_may_linger` (it
/// ran on a cluster whose executors may still be finishing its tasks), or
/// in an object store (an upload sent before the failure completes at the
/// store even when its task is dropped), also again over the next half
/// minute.
pub fn discard_failed(planned: &PlannedMerge, tasks_may_linger: bool) -> usize {
    let location = data_location(planned.base.metadata());
    if tasks_may_linger || local_path(&location).is_none() {
        delete_files_with_prefix_now_and_later(&location, &planned.write_id)
    } else {
        delete_files_with_prefix_except(&location, &planned.write_id, &[])
    }
}
