//! The changes of one touched data file as the copy-on-write writer gathers
//! them: one per position, kept in arrival order, and the set of positions
//! taken, which finds a position acted on twice (a duplicate match) as the
//! second change arrives, while its merge row is at hand to name the key.

use datafusion::error::Result;

use super::apply::Change;
use crate::position_set::PositionSet;

#[derive(Debug, Default)]
pub(super) struct FileChanges {
    taken: PositionSet,
    /// The changes, by position, in arrival order.
    changes: Vec<(i64, Change)>,
}

impl FileChanges {
    /// Records `change` at position `pos`; `false` when the position has a
    /// change already (nothing is recorded then).
    pub fn insert(&mut self, pos: i64, change: Change) -> Result<bool> {
        if !self.taken.insert(pos)? {
            return Ok(false);
        }
        self.changes.push((pos, change));
        Ok(true)
    }

    pub fn len(&self) -> usize {
        self.changes.len()
    }

    /// The changes, in arrival order.
    pub fn changes(&self) -> impl Iterator<Item = &Change> {
        self.changes.iter().map(|(_, c)| c)
    }

    /// The changes sorted by position.
    pub fn sorted(&self) -> Vec<(i64, &Change)> {
        let mut sorted: Vec<(i64, &Change)> = self.changes.iter().map(|(p, c)| (*p, c)).collect();
        sorted.sort_unstable_by_key(|(p, _)| *p);
        sorted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_position_taken_twice_is_refused_and_changes_come_out_by_position() {
        let mut changes = FileChanges::default();
        let update = Change::Update { batch: 0, row: 3 };
        for (pos, change) in [(130, Change::Delete), (2, update), (64, Change::Delete)] {
            assert!(changes.insert(pos, change).unwrap());
        }
        assert!(!changes.insert(2, Change::Delete).unwrap());
        assert!(!changes.insert(130, update).unwrap());
        assert!(changes.insert(63, Change::Delete).unwrap());
        assert_eq!(changes.len(), 4);
        let positions: Vec<i64> = changes.sorted().iter().map(|(p, _)| *p).collect();
        assert_eq!(positions, vec![2, 63, 64, 130]);
        assert_eq!(changes.sorted()[0].1, &update);
        assert!(changes.insert(-1, Change::Delete).is_err());
    }
}
