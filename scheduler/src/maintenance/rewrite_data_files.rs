//! `rewrite_data_files(table, strategy => 'binpack', options => map(...))`:
//! compaction. Every live data file of the current snapshot is read on the
//! engine with its position and equality delete files applied and the
//! rows are written into new files of `target-file-size-bytes` (the
//! table's `write.target-file-size-bytes` by default), then ONE `replace`
//! snapshot removes the files read and adds the new ones, and removes every
//! position and equality delete file (none applies to a rewritten row any
//! more). The commit
//! validates against writers that committed meanwhile at the serializable
//! level over the whole table (as INSERT OVERWRITE does): a concurrent
//! change is a conflict, reported by name, and the rewrite's files are
//! deleted — the table keeps the other writer's commit.
//!
//! With `where => '...'`, only the data files that may hold a matching row
//! (by partition values and column statistics, as a scan prunes) are read
//! and replaced, whole; position delete files left with no live data file
//! go with them, equality delete files stay for the other files, and the
//! commit validates only against changes to rows the filter can match.
//!
//! The files chosen are rewritten when there are at least
//! `min-input-files` of them (default 5) or any carries delete files, or
//! with `rewrite-all` = true.
//! Output: `rewritten_data_files_count`, `added_data_files_count`,
//! `rewritten_bytes_count`, `failed_data_files_count`.

use std::collections::{HashMap, HashSet};

use datafusion::error::Result;
use iceberg::spec::{DataContentType, Operation};
use iceberg::TableIdent;
use icemerge_proto::error::conflict;

use super::reachable::{for_each_entry, manifests_of};
use super::{load, long_row};
use crate::commit::{
    commit_overwrite, CommitContext, CommitOutcome, ConflictFilter, IsolationLevel, OverwriteCommit,
};
use crate::session::{Session, StatementOutput};

/// Spark's default `min-input-files`.
const DEFAULT_MIN_INPUT_FILES: usize = 5;

/// The procedure's options.
#[derive(Debug, Clone)]
pub struct RewriteOptions {
    pub target_file_size_bytes: Option<u64>,
    pub min_input_files: Option<usize>,
    pub rewrite_all: bool,
    /// `where`: only the data files that may hold a matching row.
    pub filter: Option<String>,
}

/// Compacts `ident`'s data files.
pub async fn rewrite_data_files(
    session: &Session,
    ident: &TableIdent,
    options: RewriteOptions,
    what: &str,
) -> Result<StatementOutput> {
    let catalog = session.open_catalog();
    let base = load(catalog, ident).await?;
    let Some(snapshot) = base.metadata().current_snapshot().cloned() else {
        return Ok(output(0, 0, 0));
    };
    let manifests = manifests_of(&base, std::slice::from_ref(&snapshot)).await?;
    let mut data: HashMap<String, u64> = HashMap::new();
    let mut delete_files: Vec<String> = vec![];
    for_each_entry(&base, manifests.manifests.values(), |_, entry| {
        if !entry.is_alive() {
            return;
        }
        match entry.content_type() {
            DataContentType::Data => {
                data.insert(
                    entry.file_path().to_string(),
                    entry.data_file().file_size_in_bytes(),
                );
            }
            _ => delete_files.push(entry.file_path().to_string()),
        }
    })
    .await?;
    let min_input = options.min_input_files.unwrap_or(DEFAULT_MIN_INPUT_FILES);
    if data.is_empty()
        || (options.filter.is_none()
            && !options.rewrite_all
            && delete_files.is_empty()
            && data.len() < min_input)
    {
        return Ok(output(0, 0, 0));
    }
    let pruning = match &options.filter {
        Some(filter) => Some(session.file_filter(&base, filter, what)?),
        None => None,
    };
    let planned = session
        .plan_table_rewrite(
            &base,
            options.target_file_size_bytes,
            &data,
            pruning.clone(),
        )
        .await?;
    let rewritten = planned.read.len() as i64;
    let input_bytes = planned.input_bytes;
    // With `where`, the same rule over the files it chose.
    let chosen_too_few = planned.read.is_empty()
        || (!options.rewrite_all && !planned.with_deletes && planned.read.len() < min_input);
    if pruning.is_some() && chosen_too_few {
        return Ok(output(0, 0, 0));
    }
    let removed: HashSet<String> = match &pruning {
        // Every data file is rewritten, so no delete file applies any
        // more: the position and equality delete files go too.
        None => data.keys().chain(delete_files.iter()).cloned().collect(),
        // Some files: those; position delete files left with no live data
        // file go with them (the commit drops them), equality deletes stay
        // for the files not rewritten.
        Some(_) => planned.read.clone(),
    };
    let write = session.run_table_rewrite(planned).await?;
    let added = write.files.len() as i64;
    let commit = OverwriteCommit {
        added: write.files.clone(),
        removed,
        summary: HashMap::from([(
            "icemerge.rewrite".to_string(),
            "rewrite_data_files".to_string(),
        )]),
        operation: Operation::Replace,
    };
    // A concurrent change to the rows rewritten is a conflict: any row of
    // the table, or with `where` any row the files read may hold.
    let conflict_filter = match pruning {
        Some(predicate) => ConflictFilter::Rows(predicate),
        None => ConflictFilter::WholeTable,
    };
    let context = CommitContext::copy_on_write(
        Some(snapshot.snapshot_id()),
        IsolationLevel::Serializable,
        conflict_filter,
    );
    match commit_overwrite(catalog, &base, commit, &context).await {
        Ok(CommitOutcome::Committed { .. } | CommitOutcome::NothingToCommit) => {
            Ok(output(rewritten, added, input_bytes as i64))
        }
        Ok(CommitOutcome::Conflict(c)) => {
            session.discard_rewrite(&write);
            Err(conflict(format!(
                "{what}: another writer committed to the table while it was rewritten: {c}; \
                 nothing was rewritten (run it again)"
            )))
        }
        Err(e) => {
            session.discard_rewrite(&write);
            Err(e)
        }
    }
}

fn output(rewritten: i64, added: i64, bytes: i64) -> StatementOutput {
    long_row(&[
        ("rewritten_data_files_count", Some(rewritten)),
        ("added_data_files_count", Some(added)),
        ("rewritten_bytes_count", Some(bytes)),
        ("failed_data_files_count", Some(0)),
    ])
}
