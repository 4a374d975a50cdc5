//! The merge-row contract of a MERGE, stage C (join / classify) → stage D
//! (the copy-on-write writer).
//!
//! Stage C outputs one merge row per action, with these columns first, in
//! this order, followed by the new value of every target column:
//!
//! | column | type | meaning |
//! |---|---|---|
//! | [`OP_COLUMN`] | Int8 | the action, a [`MergeOp`] code |
//! | [`FILE_COLUMN`] | Utf8View (Utf8 accepted) | row id: the data file path exactly as in the manifest (NULL for inserts) |
//! | [`POS_COLUMN`] | Int64 | row id: 0-based row position in that file (NULL for inserts) |
//! | [`KEY_COLUMN`] | Struct of the ON-key columns (a NULL Utf8 when ON compares no target column, or nothing is matched) | the target row's ON-key values, for error messages |
//! | [`ROUTE_COLUMN`] | Utf8View or Utf8 | the writer partition key: the data file, or a spread value for inserts |
//!
//! The exchange into stage D partitions the rows by [`ROUTE_COLUMN`] and
//! drops it: a writer reads the other columns.
//!
//! [`FILE_COLUMN`] and [`POS_COLUMN`] are also the row-id columns the MERGE
//! target scan (stage A) appends after the table's columns.

use std::fmt;

/// The operation of a merge row.
pub const OP_COLUMN: &str = "__icemerge_op";
/// Row id: the data file a target row lives in.
pub const FILE_COLUMN: &str = "_file";
/// Row id: the target row's 0-based position in its data file.
pub const POS_COLUMN: &str = "_pos";
/// The target row's ON-key values, a struct of the target columns ON compares
/// by equality (formatted `id=2, k=x` only when an error names the row).
pub const KEY_COLUMN: &str = "__icemerge_key";
/// The writer partition a merge row is routed to.
pub const ROUTE_COLUMN: &str = "__icemerge_route";

/// What a merge row does, with Trino's numbering as its code
/// (`MergeOp::Update as i8 == 3`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i8)]
pub enum MergeOp {
    /// A new row (no row id).
    Insert = 1,
    /// Removes the target row at the row id.
    Delete = 2,
    /// Replaces the target row at the row id with the row's values.
    Update = 3,
}

/// An operation code that is not a [`MergeOp`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnknownMergeOp(pub i8);

impl fmt::Display for UnknownMergeOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown merge operation code {}", self.0)
    }
}

impl std::error::Error for UnknownMergeOp {}

impl TryFrom<i8> for MergeOp {
    type Error = UnknownMergeOp;

    fn try_from(code: i8) -> Result<Self, Self::Error> {
        match code {
            1 => Ok(MergeOp::Insert),
            2 => Ok(MergeOp::Delete),
            3 => Ok(MergeOp::Update),
            other => Err(UnknownMergeOp(other)),
        }
    }
}

impl From<MergeOp> for i8 {
    fn from(op: MergeOp) -> i8 {
        op as i8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_trinos_and_round_trip() {
        assert_eq!(
            [MergeOp::Insert, MergeOp::Delete, MergeOp::Update].map(|op| op as i8),
            [1, 2, 3]
        );
        for code in 1..=3 {
            assert_eq!(MergeOp::try_from(code).map(i8::from), Ok(code));
        }
        assert_eq!(MergeOp::try_from(0), Err(UnknownMergeOp(0)));
        assert_eq!(
            UnknownMergeOp(7).to_string(),
            "unknown merge operation code 7"
        );
    }
}
