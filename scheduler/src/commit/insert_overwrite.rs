//! `INSERT OVERWRITE`'s snapshot: the files the statement wrote replace, in
//! a partitioned table, every live data file of the partitions they were
//! written to (dynamic partition overwrite, as Spark's
//! `partitionOverwriteMode=dynamic` and Iceberg's `ReplacePartitions`); in
//! an unpartitioned table, every live data file (also when the query wrote
//! nothing: the table is then emptied). One `overwrite` snapshot through
//! the overwrite action, against the table as the statement planned it: a
//! snapshot another writer committed meanwhile is a conflict
//! (serializable, whole table), never a silent loss of its rows.

use std::collections::HashSet;

use datafusion::error::Result;
use iceberg::spec::{DataFile, ManifestContentType, Operation, Struct};
use iceberg::table::Table;
use icemerge_executor::iceberg_err;

use super::manifests::read_manifest_list;
use super::{
    commit_overwrite, load_manifests, CommitContext, CommitOutcome, ConflictFilter, IsolationLevel,
    OverwriteCommit,
};
use crate::catalog::OpenCatalog;

/// Commits `added` as replacing what [`replaced_files`] selects in `base`.
pub async fn commit_insert_overwrite(
    catalog: &OpenCatalog,
    base: &Table,
    added: Vec<DataFile>,
) -> Result<CommitOutcome> {
    let removed = replaced_files(base, &added).await?;
    let operation = match (added.is_empty(), removed.is_empty()) {
        (_, true) => Operation::Append,
        (true, false) => Operation::Delete,
        (false, false) => Operation::Overwrite,
    };
    let mut summary = std::collections::HashMap::new();
    if !base.metadata().default_partition_spec().is_unpartitioned() {
        summary.insert("replace-partitions".to_string(), "true".to_string());
    }
    let commit = OverwriteCommit {
        added,
        removed,
        summary,
        operation,
    };
    let context = CommitContext::copy_on_write(
        base.metadata().current_snapshot_id(),
        IsolationLevel::Serializable,
        ConflictFilter::WholeTable,
    );
    commit_overwrite(catalog, base, commit, &context).await
}

/// The live data files of `base` that `added` replaces: all of them when
/// the table is unpartitioned, else those of the current partition spec
/// whose partition one of `added` was written to.
async fn replaced_files(base: &Table, added: &[DataFile]) -> Result<HashSet<String>> {
    let metadata = base.metadata();
    let list = read_manifest_list(base, metadata.current_snapshot(), base.identifier()).await?;
    let data: Vec<_> = list
        .iter()
        .filter(|m| m.content == ManifestContentType::Data)
        .collect();
    let manifests = load_manifests(base.file_io(), data)
        .await
        .map_err(|e| iceberg_err(e.source))?;
    let spec = metadata.default_partition_spec();
    let written: HashSet<&Struct> = added.iter().map(|f| f.partition()).collect();
    let mut replaced = HashSet::new();
    for manifest in &manifests {
        let same_spec = manifest.metadata().partition_spec().spec_id() == spec.spec_id();
        for entry in manifest.entries().iter().filter(|e| e.is_alive()) {
            let file = entry.data_file();
            if spec.is_unpartitioned() || (same_spec && written.contains(file.partition())) {
                replaced.insert(file.file_path().to_string());
            }
        }
    }
    Ok(replaced)
}
