//! How a manifest rewrite regroups entries: which manifests are rewritten
//! together (same content, data or deletes, and same partition spec), how
//! many entries fit in a manifest of the target size, whether a group is
//! worth rewriting, the partition order of its entries and where new
//! manifests are cut; and the table's target manifest size, which the
//! rewrite and a commit's manifest merge (`manifest_merge.rs`) both cut
//! at. Pure functions, tested without I/O.

use std::cmp::Ordering;

use datafusion::error::Result;
use iceberg::spec::{ManifestFile, Struct, TableMetadata};
use icemerge_proto::error::invalid_input;

/// Iceberg's `commit.manifest.target-size-bytes` table property and its
/// default (8 MiB).
pub(crate) const TARGET_SIZE_PROPERTY: &str = "commit.manifest.target-size-bytes";
pub(crate) const DEFAULT_TARGET_SIZE_BYTES: u64 = 8 * 1024 * 1024;

/// The table's `commit.manifest.target-size-bytes` (the size merged and
/// rewritten manifests are cut at).
pub(crate) fn target_size_bytes(metadata: &TableMetadata) -> Result<u64> {
    Ok(positive_property(
        metadata.properties().get(TARGET_SIZE_PROPERTY),
        TARGET_SIZE_PROPERTY,
    )?
    .unwrap_or(DEFAULT_TARGET_SIZE_BYTES))
}

/// A property's value, which must be a positive integer (None: unset).
pub(crate) fn positive_property(value: Option<&String>, property: &str) -> Result<Option<u64>> {
    value
        .map(|v| {
            v.trim()
                .parse::<u64>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| {
                    invalid_input(format!(
                        "table property {property} = '{v}': expected a positive integer"
                    ))
                })
        })
        .transpose()
}

/// What the manifest list tells about a group of manifests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GroupSize {
    pub manifests: usize,
    pub bytes: u64,
    /// Entries of any status; None when a manifest does not record its
    /// counts.
    pub entries: Option<u64>,
    /// Added and existing entries; None when unknown.
    pub live: Option<u64>,
}

impl GroupSize {
    pub(crate) fn of<'a>(manifests: impl IntoIterator<Item = &'a ManifestFile>) -> Self {
        let mut size = GroupSize {
            manifests: 0,
            bytes: 0,
            entries: Some(0),
            live: Some(0),
        };
        for m in manifests {
            let count = |c: Option<u32>| c.map(u64::from);
            let live = count(m.added_files_count)
                .zip(count(m.existing_files_count))
                .map(|(a, e)| a + e);
            let all = live.zip(count(m.deleted_files_count)).map(|(l, d)| l + d);
            size.manifests += 1;
            size.bytes += u64::try_from(m.manifest_length).unwrap_or(0);
            size.live = size.live.zip(live).map(|(s, l)| s + l);
            size.entries = size.entries.zip(all).map(|(s, a)| s + a);
        }
        size
    }

    /// How many entries a manifest of `target_bytes` holds, estimated from
    /// the group's bytes per entry (at least one).
    pub(crate) fn entries_per_manifest(&self, target_bytes: u64) -> usize {
        let per_entry = match self.entries {
            Some(entries) if entries > 0 => (self.bytes / entries).max(1),
            _ => return usize::MAX,
        };
        usize::try_from(target_bytes / per_entry)
            .unwrap_or(usize::MAX)
            .max(1)
    }

    /// A rewrite changes the group: the number of manifests its live
    /// entries need differs from the number it has (or the counts are
    /// unknown).
    pub(crate) fn worth_rewriting(&self, target_bytes: u64) -> bool {
        let Some(live) = self.live else {
            return true;
        };
        let per_manifest = self.entries_per_manifest(target_bytes) as u64;
        let needed = live.div_ceil(per_manifest);
        needed != self.manifests as u64
    }
}

/// Orders partition values field by field (null first); values of
/// different types (not in one spec) compare equal.
pub(crate) fn compare_partitions(a: &Struct, b: &Struct) -> Ordering {
    for (x, y) in a.fields().iter().zip(b.fields()) {
        let order = match (x, y) {
            (None, None) => Ordering::Equal,
            (None, Some(_)) => Ordering::Less,
            (Some(_), None) => Ordering::Greater,
            (Some(x), Some(y)) => match (x.as_primitive_literal(), y.as_primitive_literal()) {
                (Some(x), Some(y)) => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
                _ => Ordering::Equal,
            },
        };
        if order != Ordering::Equal {
            return order;
        }
    }
    a.fields().len().cmp(&b.fields().len())
}

/// The entry counts of the new manifests of a group whose entries, sorted
/// by partition, form runs of one partition each of `runs` entries: a
/// manifest takes whole partitions while they fit in `per_manifest`
/// entries; a partition larger than that fills manifests of its own.
pub(crate) fn manifest_sizes(runs: &[usize], per_manifest: usize) -> Vec<usize> {
    let cap = per_manifest.max(1);
    let mut sizes = vec![];
    let mut current = 0;
    for &run in runs {
        if current > 0 && current + run > cap {
            sizes.push(current);
            current = 0;
        }
        let mut run = run;
        while current + run > cap {
            sizes.push(cap);
            run -= cap;
        }
        current += run;
    }
    if current > 0 {
        sizes.push(current);
    }
    sizes
}

/// The lengths of the runs of equal neighbours in `items` (sorted).
pub(crate) fn runs<T>(items: &[T], same: impl Fn(&T, &T) -> bool) -> Vec<usize> {
    let mut runs: Vec<usize> = vec![];
    for (i, item) in items.iter().enumerate() {
        match runs.last_mut() {
            Some(last) if same(&items[i - 1], item) => *last += 1,
            _ => runs.push(1),
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use iceberg::spec::Literal;

    use super::*;

    #[test]
    fn whole_partitions_fill_manifests() {
        assert_eq!(manifest_sizes(&[2, 2, 2], 4), vec![4, 2]);
        assert_eq!(manifest_sizes(&[1, 1, 1], 1), vec![1, 1, 1]);
        assert_eq!(manifest_sizes(&[3, 3, 1], 4), vec![3, 4]);
        assert_eq!(manifest_sizes(&[1, 9, 1], 4), vec![1, 4, 4, 2]);
        assert_eq!(manifest_sizes(&[5], 100), vec![5]);
        assert_eq!(manifest_sizes(&[], 10), Vec::<usize>::new());
        assert_eq!(manifest_sizes(&[2, 2], 0), vec![1, 1, 1, 1]);
    }

    #[test]
    fn runs_of_equal_neighbours() {
        assert_eq!(runs(&[1, 1, 2, 3, 3, 3], |a, b| a == b), vec![2, 1, 3]);
        assert_eq!(runs::<i32>(&[], |a, b| a == b), Vec::<usize>::new());
    }

    #[test]
    fn partitions_order_nulls_first() {
        let p = |values: Vec<Option<Literal>>| Struct::from_iter(values);
        let a = p(vec![Some(Literal::int(1)), Some(Literal::string("b"))]);
        let b = p(vec![Some(Literal::int(1)), Some(Literal::string("c"))]);
        let n = p(vec![None, Some(Literal::string("a"))]);
        assert_eq!(compare_partitions(&a, &b), Ordering::Less);
        assert_eq!(compare_partitions(&b, &a), Ordering::Greater);
        assert_eq!(compare_partitions(&a, &a), Ordering::Equal);
        assert_eq!(compare_partitions(&n, &a), Ordering::Less);
        let mut values = vec![b.clone(), n.clone(), a.clone()];
        values.sort_by(compare_partitions);
        assert_eq!(values, vec![n, a, b]);
    }

    fn size(manifests: usize, bytes: u64, entries: u64, live: u64) -> GroupSize {
        GroupSize {
            manifests,
            bytes,
            entries: Some(entries),
            live: Some(live),
        }
    }

    #[test]
    fn a_group_is_rewritten_when_its_manifest_count_changes() {
        // Ten small manifests of one entry each: one manifest holds them.
        let small = size(10, 70_000, 10, 10);
        assert_eq!(small.entries_per_manifest(8 << 20), 1198);
        assert!(small.worth_rewriting(8 << 20));
        // Already one manifest: nothing to gain.
        assert!(!size(1, 7_000, 10, 10).worth_rewriting(8 << 20));
        // One manifest far over the target is split.
        assert!(size(1, 100_000, 100, 100).worth_rewriting(10_000));
        // Manifests with no live entry are dropped.
        assert!(size(2, 14_000, 2, 0).worth_rewriting(8 << 20));
        let unknown = GroupSize {
            manifests: 1,
            bytes: 10,
            entries: None,
            live: None,
        };
        assert!(unknown.worth_rewriting(8 << 20));
        assert_eq!(unknown.entries_per_manifest(8 << 20), usize::MAX);
    }
}
