//! A row-level statement's commit context: what its changes depend on, so
//! that a commit which lost the catalog swap can tell whether what other
//! writers committed meanwhile invalidates them (`validation.rs`) or can
//! be rebased onto (`overwrite.rs`).
//!
//! The files the statement removes are the action's own changes
//! (`OverwriteCommit::removed`); a merge-on-read row delta adds the data
//! files it writes position deletes for in `deletes_added_for`, and the
//! same rules then hold for them.

use std::collections::HashSet;
use std::fmt;

use iceberg::expr::Predicate;

use super::isolation::IsolationLevel;

/// Which rows of the table a statement's outcome depends on.
#[derive(Debug, Clone, PartialEq)]
pub enum ConflictFilter {
    /// Every row (a `WHEN NOT MATCHED BY SOURCE` clause, or nothing pruned).
    WholeTable,
    /// Rows that satisfy this predicate: the target-only ON conjuncts pushed
    /// into the scan and the dynamic pruning predicate from the source's
    /// keys. A data file whose partition values and column bounds rule it
    /// out cannot hold such a row.
    Rows(Predicate),
}

impl fmt::Display for ConflictFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConflictFilter::WholeTable => f.write_str("the whole table"),
            ConflictFilter::Rows(predicate) => write!(f, "{predicate}"),
        }
    }
}

/// What a row-level statement read and depends on, for validating its
/// commit against snapshots committed after its base.
#[derive(Debug, Clone)]
pub struct CommitContext {
    /// The snapshot the statement read (None: the table had none).
    pub base_snapshot_id: Option<i64>,
    /// The table's isolation level for this kind of statement.
    pub isolation: IsolationLevel,
    /// The rows the statement's outcome depends on.
    pub conflict_filter: ConflictFilter,
    /// Data files the statement adds position deletes for (merge-on-read);
    /// empty for copy-on-write, which removes the files it changes.
    pub deletes_added_for: HashSet<String>,
    /// The statement commits a schema of its own (MERGE WITH SCHEMA
    /// EVOLUTION, `evolved_schema.rs`): the id of the schema it evolved.
    pub schema_evolved_from: Option<i32>,
}

impl CommitContext {
    /// The context of a copy-on-write statement that read `base_snapshot_id`.
    pub fn copy_on_write(
        base_snapshot_id: Option<i64>,
        isolation: IsolationLevel,
        conflict_filter: ConflictFilter,
    ) -> Self {
        CommitContext {
            base_snapshot_id,
            isolation,
            conflict_filter,
            deletes_added_for: HashSet::new(),
            schema_evolved_from: None,
        }
    }
}
