//! Which position delete files a commit that removes data files drops: a
//! pure function over the base snapshot's live data paths, so it is tested
//! without I/O.
//!
//! A position delete file deletes rows of the data files whose paths it
//! lists. What it may reference is known from its manifest entry: its
//! `referenced_data_file`, else the lower and upper bounds of its
//! `file_path` column (a range of paths). It is dropped when every live data
//! file of the base snapshot in that range is removed by the commit (the
//! rows it deleted are gone with them; files this commit adds have a later
//! sequence number, to which older position deletes never apply). One whose
//! references are unknown, or that may still reference a surviving file, is
//! carried. Equality delete files are always carried: they keep applying,
//! by sequence number, to the older data files that survive.

use std::collections::HashSet;

/// The live data file paths of the base snapshot, sorted (for range
/// lookups).
pub(crate) struct LiveDataPaths<'a> {
    sorted: Vec<&'a str>,
}

impl<'a> LiveDataPaths<'a> {
    pub(crate) fn new(paths: impl IntoIterator<Item = &'a str>) -> Self {
        let mut sorted: Vec<&str> = paths.into_iter().collect();
        sorted.sort_unstable();
        sorted.dedup();
        Self { sorted }
    }

    /// Every live path within `lower..=upper` is in `removed`.
    pub(crate) fn all_removed_in(
        &self,
        lower: &str,
        upper: &str,
        removed: &HashSet<String>,
    ) -> bool {
        let start = self.sorted.partition_point(|p| *p < lower);
        self.sorted[start..]
            .iter()
            .take_while(|p| **p <= upper)
            .all(|p| removed.contains(*p))
    }
}

/// Is a live position delete file that may reference the paths
/// `references` (inclusive range; `None`: unknown) dropped when `removed`
/// data files leave a snapshot whose live data files are `live`?
pub(crate) fn is_dangling(
    references: Option<(&str, &str)>,
    live: &LiveDataPaths,
    removed: &HashSet<String>,
) -> bool {
    match references {
        Some((lower, upper)) => lower <= upper && live.all_removed_in(lower, upper, removed),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn removed(paths: &[&str]) -> HashSet<String> {
        paths.iter().map(|p| p.to_string()).collect()
    }

    #[test]
    fn a_file_scoped_delete_goes_with_its_data_file() {
        let live = LiveDataPaths::new(["d/a", "d/b", "d/c"]);
        assert!(is_dangling(Some(("d/b", "d/b")), &live, &removed(&["d/b"])));
        assert!(!is_dangling(
            Some(("d/b", "d/b")),
            &live,
            &removed(&["d/a"])
        ));
    }

    #[test]
    fn a_delete_over_a_range_goes_when_every_live_file_in_it_goes() {
        let live = LiveDataPaths::new(["d/a", "d/b", "d/c", "d/d"]);
        let range = Some(("d/b", "d/c"));
        assert!(!is_dangling(range, &live, &removed(&["d/b"])));
        assert!(is_dangling(range, &live, &removed(&["d/b", "d/c"])));
        // Files outside the range do not matter.
        assert!(is_dangling(range, &live, &removed(&["d/b", "d/c", "d/a"])));
        // Bounds may be truncated prefixes: "d/" .. "d/c~" still covers d/a..d/d.
        assert!(!is_dangling(
            Some(("d/", "d/c~")),
            &live,
            &removed(&["d/b", "d/c"])
        ));
    }

    #[test]
    fn a_delete_referencing_nothing_live_is_dangling_already() {
        let live = LiveDataPaths::new(["d/a"]);
        assert!(is_dangling(Some(("d/x", "d/y")), &live, &removed(&["d/a"])));
    }

    #[test]
    fn unknown_references_are_carried() {
        let live = LiveDataPaths::new(["d/a"]);
        assert!(!is_dangling(None, &live, &removed(&["d/a"])));
    }
}
