//! `rewrite_data_files(table, strategy, sort_order, options, where)` and
//! Trino's `optimize`: compaction. The data files of the current snapshot
//! (those that may hold a row matching `where`, when given) are chosen by
//! Iceberg's bin-pack rules in groups per partition (`rewrite_groups.rs`):
//! too small or too large files, files with too many deletes. The chosen
//! files are read on the engine with their position and equality delete
//! files applied and written into files of the target size — bin-packed,
//! or with the `sort` strategy as one sorted sequence
//! (`crate::session::rewrite`) — then ONE `replace` snapshot removes the
//! files read and adds the new ones. Position delete files left with no
//! live data file go with them; when every data file of the table was
//! rewritten, every delete file goes.
//!
//! The commit validates as Iceberg's rewrite does: a data file it replaces
//! that a concurrent snapshot removed, or gave new deletes, is a conflict;
//! rows other writers added are not. A conflict drops the group of the file
//! it names — its new files are deleted, its old files stay — and the other
//! groups commit; when no group is left (or the files cannot be told apart
//! by group) nothing is rewritten and the error names the conflict.
//! Output: `rewritten_data_files_count`, `added_data_files_count`,
//! `rewritten_bytes_count`, `failed_data_files_count` (files of dropped
//! groups).

use std::collections::{HashMap, HashSet};

use datafusion::error::Result;
use iceberg::spec::{DataContentType, DataFile, Operation, Struct};
use iceberg::TableIdent;
use icemerge_executor::iceberg_err;
use icemerge_planner::procedures::RewriteDataFiles;
use icemerge_proto::error::conflict;

use super::reachable::{for_each_entry, manifests_of};
use super::rewrite_groups::{plan_groups, Candidate, FileGroup, Rules};
use super::{load, long_row};
use crate::commit::{
    commit_overwrite, position_delete_references, CommitContext, CommitOutcome, ConflictFilter,
    ConflictKind, IsolationLevel, OverwriteCommit,
};
use crate::session::{Session, StatementOutput};

/// A data file of the base snapshot, as the rules need it.
struct DataInfo {
    size: u64,
    /// Bytes of its column chunks (its size without the footer and page
    /// indexes, which rewritten files share): what the writers are sized by.
    column_bytes: u64,
    records: u64,
    /// None when written with an older partition spec.
    partition: Option<Struct>,
}

/// A delete file of the base snapshot.
struct DeleteInfo {
    records: u64,
    /// A position delete file that references one data file only.
    file_scoped: bool,
}

/// One group's part of the rewrite: the files it replaces and adds.
struct GroupWrite {
    inputs: HashSet<String>,
    bytes: u64,
    added: Vec<DataFile>,
}

/// Compacts `ident`'s data files.
pub async fn rewrite_data_files(
    session: &Session,
    ident: &TableIdent,
    args: RewriteDataFiles,
    what: &str,
) -> Result<StatementOutput> {
    let catalog = session.open_catalog();
    let base = load(catalog, ident).await?;
    let metadata = base.metadata();
    // Arguments are checked before anything is read.
    let sort = session.rewrite_sort(metadata, &args.strategy, what)?;
    let table_target = metadata
        .table_properties()
        .map_err(iceberg_err)?
        .write_target_file_size_bytes as u64;
    let rules = Rules::resolve(&args.options, table_target, what)?;
    let pruning = match &args.filter {
        Some(filter) => Some(session.file_filter(&base, filter, what)?),
        None => None,
    };
    let Some(snapshot) = metadata.current_snapshot().cloned() else {
        return Ok(output(0, 0, 0, 0));
    };
    let default_spec = metadata.default_partition_spec_id();
    let manifests = manifests_of(&base, std::slice::from_ref(&snapshot)).await?;
    let mut data: HashMap<String, DataInfo> = HashMap::new();
    let mut deletes: HashMap<String, DeleteInfo> = HashMap::new();
    for_each_entry(&base, manifests.manifests.values(), |manifest, entry| {
        if !entry.is_alive() {
            return;
        }
        let file = entry.data_file();
        match entry.content_type() {
            DataContentType::Data => {
                let columns: u64 = file.column_sizes().values().sum();
                data.insert(
                    file.file_path().to_string(),
                    DataInfo {
                        size: file.file_size_in_bytes(),
                        column_bytes: if columns > 0 {
                            columns
                        } else {
                            file.file_size_in_bytes()
                        },
                        records: file.record_count(),
                        partition: (manifest.partition_spec_id == default_spec)
                            .then(|| file.partition().clone()),
                    },
                );
            }
            content => {
                let file_scoped = content == DataContentType::PositionDeletes
                    && matches!(position_delete_references(file), Some((l, u)) if l == u);
                deletes.insert(
                    file.file_path().to_string(),
                    DeleteInfo {
                        records: file.record_count(),
                        file_scoped,
                    },
                );
            }
        }
    })
    .await?;
    if data.is_empty() {
        return Ok(output(0, 0, 0, 0));
    }

    let scan = session.scan_for_rewrite(&base, pruning).await?;
    let candidates: Vec<Candidate> = scan
        .candidates
        .iter()
        .filter_map(|c| {
            let info = data.get(&c.path)?;
            Some(Candidate {
                path: c.path.clone(),
                size: info.size,
                record_count: info.records,
                partition: info.partition.clone(),
                delete_files: c.deletes.len(),
                file_scoped_deleted: c
                    .deletes
                    .iter()
                    .filter_map(|d| deletes.get(d))
                    .filter(|d| d.file_scoped)
                    .map(|d| d.records)
                    .sum(),
            })
        })
        .collect();
    let groups = plan_groups(candidates, &rules);
    if groups.is_empty() {
        return Ok(output(0, 0, 0, 0));
    }
    let files: HashSet<String> = groups.iter().flat_map(|g| g.files.clone()).collect();
    // Small files are mostly footer: the writers are sized by column bytes.
    let column_bytes = files
        .iter()
        .filter_map(|f| data.get(f))
        .map(|d| d.column_bytes)
        .sum();
    let planned = session.plan_table_rewrite(
        scan,
        &files,
        column_bytes,
        args.options.target_file_size_bytes,
        sort,
    )?;
    let write = session.run_table_rewrite(planned).await?;
    let mut live = by_group(groups, write.files.clone());

    let mut failed = 0;
    loop {
        let inputs: HashSet<String> = live.iter().flat_map(|g| g.inputs.clone()).collect();
        let mut removed = inputs.clone();
        if inputs.len() == data.len() {
            // Every data file is rewritten: no delete file applies any more.
            removed.extend(deletes.keys().cloned());
        }
        let added: Vec<DataFile> = live.iter().flat_map(|g| g.added.clone()).collect();
        let commit = OverwriteCommit {
            added: added.clone(),
            removed,
            summary: HashMap::from([(
                "icemerge.rewrite".to_string(),
                "rewrite_data_files".to_string(),
            )]),
            operation: Operation::Replace,
        };
        // Iceberg's rewrite validation: the files replaced must still be
        // live without new deletes; added rows are not a conflict.
        let context = CommitContext::copy_on_write(
            Some(snapshot.snapshot_id()),
            IsolationLevel::Snapshot,
            ConflictFilter::WholeTable,
        );
        let outcome = commit_overwrite(catalog, &base, commit, &context).await;
        let found = match outcome {
            Ok(CommitOutcome::Committed { .. } | CommitOutcome::NothingToCommit) => {
                let bytes = live.iter().map(|g| g.bytes).sum::<u64>();
                return Ok(output(
                    inputs.len() as i64,
                    added.len() as i64,
                    bytes as i64,
                    failed,
                ));
            }
            Ok(CommitOutcome::Conflict(found)) => found,
            Err(e) => {
                session.discard_rewrite(&write);
                return Err(e);
            }
        };
        let culprit = match &found.kind {
            ConflictKind::FileRemoved { path } | ConflictKind::DeletesAdded { path, .. } => {
                live.iter().position(|g| g.inputs.contains(path))
            }
            _ => None,
        };
        match culprit {
            Some(index) if live.len() > 1 => {
                let dropped = live.remove(index);
                failed += dropped.inputs.len() as i64;
                for file in &dropped.added {
                    // Best effort: a file left behind is an orphan that
                    // remove_orphan_files finds.
                    let _ = base.file_io().delete(file.file_path()).await;
                }
            }
            _ => {
                session.discard_rewrite(&write);
                return Err(conflict(format!(
                    "{what}: another writer committed to the table while it was rewritten: \
                     {found}; nothing was rewritten (run it again)"
                )));
            }
        }
    }
}

/// The files written, told apart by the group (partition) they belong to;
/// one group of all when they cannot be (files of older specs, whose rows
/// land in several partitions).
fn by_group(groups: Vec<FileGroup>, written: Vec<DataFile>) -> Vec<GroupWrite> {
    let mut writes: Vec<GroupWrite> = groups
        .iter()
        .map(|g| GroupWrite {
            inputs: g.files.iter().cloned().collect(),
            bytes: g.bytes,
            added: vec![],
        })
        .collect();
    let index: HashMap<&Struct, usize> = groups
        .iter()
        .enumerate()
        .filter_map(|(i, g)| Some((g.partition.as_ref()?, i)))
        .collect();
    let separable = index.len() == groups.len()
        && written
            .iter()
            .all(|file| index.contains_key(file.partition()));
    if !separable {
        return vec![GroupWrite {
            inputs: writes.iter().flat_map(|g| g.inputs.clone()).collect(),
            bytes: writes.iter().map(|g| g.bytes).sum(),
            added: written,
        }];
    }
    for file in written {
        let i = index[file.partition()];
        writes[i].added.push(file);
    }
    writes
}

fn output(rewritten: i64, added: i64, bytes: i64, failed: i64) -> StatementOutput {
    long_row(&[
        ("rewritten_data_files_count", Some(rewritten)),
        ("added_data_files_count", Some(added)),
        ("rewritten_bytes_count", Some(bytes)),
        ("failed_data_files_count", Some(failed)),
    ])
}
