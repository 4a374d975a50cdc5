//! A set of row positions of one data file, as the MERGE writers gather the
//! rows they delete or update: a bitmap (a bit per position up to the
//! largest one, an eighth of a byte per row of the file at most), which
//! tells at insertion whether a position was already taken and gives the
//! positions back in ascending order.

use datafusion::error::Result;
use icemerge_proto::error::internal;

#[derive(Debug, Default, Clone)]
pub struct PositionSet {
    /// Bit `p % 64` of word `p / 64` is set when position `p` is in the set.
    words: Vec<u64>,
    len: usize,
}

impl PositionSet {
    /// Adds `pos`; `false` when it was in the set already.
    pub fn insert(&mut self, pos: i64) -> Result<bool> {
        let p = usize::try_from(pos)
            .map_err(|_| internal(format!("MERGE: a row at negative position {pos}")))?;
        let (word, bit) = (p / 64, 1u64 << (p % 64));
        if word >= self.words.len() {
            self.words.resize(word + 1, 0);
        }
        if self.words[word] & bit != 0 {
            return Ok(false);
        }
        self.words[word] |= bit;
        self.len += 1;
        Ok(true)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The positions, ascending.
    pub fn iter(&self) -> impl Iterator<Item = i64> + '_ {
        self.words.iter().enumerate().flat_map(|(w, &word)| {
            let mut rest = word;
            std::iter::from_fn(move || {
                (rest != 0).then(|| {
                    let bit = rest.trailing_zeros() as usize;
                    rest &= rest - 1;
                    (w * 64 + bit) as i64
                })
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_taken_twice_are_told_and_come_out_ascending() {
        let mut set = PositionSet::default();
        for pos in [130, 2, 64, 63, 0] {
            assert!(set.insert(pos).unwrap(), "{pos}");
        }
        assert!(!set.insert(2).unwrap());
        assert!(!set.insert(130).unwrap());
        assert_eq!(set.len(), 5);
        assert_eq!(set.iter().collect::<Vec<_>>(), vec![0, 2, 63, 64, 130]);
        assert!(set.insert(-1).is_err());
        assert!(PositionSet::default().is_empty());
    }
}
