//! MERGE's writer, stage D: `CopyOnWriteWriterExec`. Its input is the merge
//! rows of one writer partition (`icemerge_proto::merge_rows`; every row of
//! a touched data file lands in the same partition): an operation, the row
//! id (`_file`, `_pos`) and the new values of the target's columns. Inserted
//! rows stream into new data files. Deletes and updates are collected per
//! data file; each touched file is read once and rewritten without its
//! deleted rows and with its updated rows in place (file order kept); rows
//! its delete files had removed stay removed. The plan sorts the writer's
//! changes by data file (a sort that spills under the memory budget;
//! inserted rows skip it and arrive first), so a
//! file is rewritten as soon as a row of the next file arrives and the
//! writer holds one file's changes at a time; an unsorted input is
//! rewritten file by file at its end. A file whose rows
//! are all deleted gets no replacement and, when
//! its record count is known from the target scan, is not read at all;
//! nor is one whose every row is updated (its rows are the updates). A
//! target row acted on twice fails the statement (duplicate match). The
//! output is the commit fragment of the partition
//! (`icemerge_proto::fragment`).
//!
//! - `exec.rs`: the plan node;
//! - `changes_by_file.rs`: `SortChangesByFileExec`, the writer's input
//!   order: changes sorted by data file (spilling), inserts passed through
//!   ahead of them unsorted;
//! - `file_changes.rs`: one touched file's changes as they are gathered
//!   (a position acted on twice found as it arrives);
//! - `file_ordinals.rs`: the sort's key, each data file's place in path
//!   order;
//! - `sink.rs`: one partition's writer (accept merge rows, duplicate-match
//!   check, finish → fragment, abort);
//! - `rewrite.rs`: reading one touched file and streaming it through its
//!   changes;
//! - `apply.rs`: the changes applied to one batch of a file (pure);
//! - `merge_rows.rs`: reading merge rows (shared with the merge-on-read
//!   writer, `crate::merge_on_read`);
//! - `metrics.rs`: the operator's counters (shared too).

mod apply;
mod changes_by_file;
mod exec;
mod file_changes;
mod file_ordinals;
pub(crate) mod merge_rows;
pub(crate) mod metrics;
mod rewrite;
mod sink;

use std::collections::HashMap;
use std::sync::Arc;

use iceberg::scan::FileScanTaskDeleteFile;

pub use changes_by_file::SortChangesByFileExec;
pub use exec::CopyOnWriteWriterExec;
pub(crate) use file_ordinals::per_path;
pub use file_ordinals::FileOrdinals;
pub(crate) use merge_rows::file_views;

/// What the writer knows of the data files the target scan reads.
#[derive(Debug, Clone, Default)]
pub struct TargetFiles {
    /// Record count of each file (from its manifest entry).
    pub rows: Arc<HashMap<String, u64>>,
    /// The delete files that apply to each file; files without any are not
    /// listed.
    pub deletes: Arc<HashMap<String, Vec<FileScanTaskDeleteFile>>>,
}
