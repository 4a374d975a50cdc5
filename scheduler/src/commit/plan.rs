//! Which manifests of the base snapshot the new snapshot carries, rewrites or
//! drops: a pure function over small views of the manifest list and of the
//! loaded manifests, so every rule is tested without I/O.
//!
//! Rules (for [`ManifestPolicy::Merging`], the overwrite's):
//! - a delete manifest is carried (same manifest list entry), unless the
//!   commit removes data files and some of its position delete files
//!   reference only removed ones (`dangling_deletes.rs`), or some of its
//!   delete files are themselves removed (a compaction names them): it is
//!   then rewritten with those `Deleted` (every live data manifest is read
//!   when files are removed, so the live paths are known);
//! - a data manifest with no live file (by its counts, or once loaded) is
//!   dropped;
//! - a data manifest not loaded, or loaded with no removed file, is carried;
//! - a data manifest whose every live file is removed is dropped, its
//!   removed entries going into a deleted-only manifest (one per spec);
//! - a data manifest with some removed files is rewritten: survivors
//!   `Existing`, removed ones `Deleted`; entries already dead are left out.
//!
//! Under [`ManifestPolicy::Append`] (INSERT's, which removes nothing) a
//! manifest is carried while the manifest list's counts record any file in
//! it, live or deleted. Under either policy, an added path that is live in
//! a loaded manifest, or a removed path that is live in none, is refused.

use std::collections::{BTreeMap, HashMap, HashSet};

use std::borrow::Cow;

use iceberg::metadata_columns::RESERVED_FIELD_ID_DELETE_FILE_PATH;
use iceberg::spec::{
    DataContentType, DataFile, Datum, FormatVersion, ManifestContentType, ManifestEntryRef,
    ManifestFile, PrimitiveLiteral,
};

use super::dangling_deletes::{is_dangling, LiveDataPaths};

/// How an action treats the base snapshot's manifests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ManifestPolicy {
    /// Append only: every data manifest that may hold live files is read to
    /// refuse an added path already in the table; a manifest is carried
    /// while it records any file (live or deleted); the new manifest comes
    /// after the carried ones.
    Append,
    /// Remove and add: data manifests are read only when files are removed;
    /// manifests without live files are dropped; new manifests come first.
    Merging,
}

/// What planning needs to know about one manifest of the base snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ManifestView {
    /// A delete manifest (position or equality delete files).
    pub deletes: bool,
    /// Its counts allow added or existing (live) files.
    pub may_have_live: bool,
    /// Its counts allow deleted entries.
    pub has_deleted: bool,
    /// Its partition spec.
    pub spec_id: i32,
    /// A format-version 3 manifest whose files carry row ids: a rewrite
    /// needs every survivor's `first_row_id`.
    pub keeps_row_ids: bool,
}

impl ManifestView {
    pub(crate) fn of(manifest: &ManifestFile, format_version: FormatVersion) -> Self {
        ManifestView {
            deletes: manifest.content == ManifestContentType::Deletes,
            may_have_live: manifest.has_added_files() || manifest.has_existing_files(),
            has_deleted: manifest.has_deleted_files(),
            spec_id: manifest.partition_spec_id,
            keeps_row_ids: format_version >= FormatVersion::V3 && manifest.first_row_id.is_some(),
        }
    }
}

/// What planning needs to know about one entry of a loaded manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EntryView<'a> {
    pub path: &'a str,
    /// `Added` or `Existing`.
    pub alive: bool,
    pub has_first_row_id: bool,
    /// A position delete file.
    pub position_deletes: bool,
    /// The data file paths a position delete file may reference (inclusive
    /// range), when its entry tells.
    pub references: Option<(Cow<'a, str>, Cow<'a, str>)>,
}

impl<'a> EntryView<'a> {
    pub(crate) fn of(entry: &'a ManifestEntryRef) -> Self {
        let file = entry.data_file();
        let position_deletes = file.content_type() == DataContentType::PositionDeletes;
        EntryView {
            path: entry.file_path(),
            alive: entry.is_alive(),
            has_first_row_id: file.first_row_id().is_some(),
            position_deletes,
            references: if position_deletes {
                references(file)
            } else {
                None
            },
        }
    }
}

/// A position delete file's referenced data file, else the bounds of its
/// `file_path` column.
/// The range of data file paths a position delete file may reference:
/// its `referenced_data_file` (one path), else its `file_path` bounds.
pub(crate) fn references(file: &DataFile) -> Option<(Cow<'_, str>, Cow<'_, str>)> {
    if let Some(path) = file.referenced_data_file() {
        return Some((Cow::Owned(path.clone()), Cow::Owned(path)));
    }
    let lower = path_bound(file.lower_bounds())?;
    let upper = path_bound(file.upper_bounds())?;
    Some((Cow::Borrowed(lower), Cow::Borrowed(upper)))
}

/// The `file_path` column's bound among `bounds`.
fn path_bound(bounds: &HashMap<i32, Datum>) -> Option<&str> {
    match bounds.get(&RESERVED_FIELD_ID_DELETE_FILE_PATH)?.literal() {
        PrimitiveLiteral::String(s) => Some(s.as_str()),
        _ => None,
    }
}

/// Everything [`plan_manifests`] decides on.
pub(crate) struct PlanInput<'a> {
    /// The base snapshot's manifest list, in order.
    pub manifests: &'a [ManifestView],
    /// The entries of the manifests that were read, by index in `manifests`
    /// (those [`manifests_to_load`] names).
    pub loaded: &'a HashMap<usize, Vec<EntryView<'a>>>,
    /// Paths of data files to remove (and of delete files, which only a
    /// compaction names: every data file they could apply to is removed).
    pub removed: &'a HashSet<String>,
    /// Paths of data files to add.
    pub added: &'a HashSet<&'a str>,
    pub policy: ManifestPolicy,
}

/// An entry of a base manifest: (manifest index, entry index).
pub(crate) type EntryAt = (usize, usize);

/// What a rewritten manifest records for an entry of the original.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    /// A survivor, with its original snapshot id and sequence numbers.
    Existing,
    /// Removed by this commit.
    Deleted,
}

/// One manifest of the base snapshot, decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// The same manifest list entry.
    Carry,
    /// A new manifest with these entries (by index), in the original order.
    Rewrite(Vec<(usize, Fate)>),
    /// Not in the new manifest list.
    Drop,
}

/// The outcome of [`plan_manifests`].
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct ManifestPlan {
    /// One per base manifest, in order.
    pub decisions: Vec<Decision>,
    /// Every removed entry (for the snapshot summary).
    pub removed: Vec<EntryAt>,
    /// Removed entries of wholly dead manifests, for deleted-only manifests,
    /// by partition spec id.
    pub deleted_only: BTreeMap<i32, Vec<EntryAt>>,
}

/// Why a commit cannot be planned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PlanError {
    /// An added path is live in the base snapshot.
    AlreadyInTable(String),
    /// Rewriting this manifest (by index) would lose its files' row ids.
    RowIdsLost(usize),
    /// Removed paths not live in the base snapshot, sorted.
    NotLive(Vec<String>),
}

/// The manifests (by index) whose entries planning needs.
pub(crate) fn manifests_to_load(
    manifests: &[ManifestView],
    policy: ManifestPolicy,
    removing: bool,
) -> Vec<usize> {
    if policy == ManifestPolicy::Merging && !removing {
        return vec![];
    }
    // Removing data files may leave position delete files dangling: their
    // manifests are read too.
    let read_deletes = policy == ManifestPolicy::Merging;
    manifests
        .iter()
        .enumerate()
        .filter(|(_, m)| m.may_have_live && (!m.deletes || read_deletes))
        .map(|(i, _)| i)
        .collect()
}

/// Decides every base manifest.
pub(crate) fn plan_manifests(input: &PlanInput) -> Result<ManifestPlan, PlanError> {
    let mut plan = ManifestPlan::default();
    let mut found: HashSet<&str> = HashSet::new();
    let live = live_data_paths(input);
    for (i, view) in input.manifests.iter().enumerate() {
        let merging = input.policy == ManifestPolicy::Merging;
        let carried_delete_manifest = view.deletes && (view.may_have_live || merging);
        let decision =
            if let (true, true, Some(entries)) = (view.deletes, merging, input.loaded.get(&i)) {
                decide_deletes(input, i, entries, live.as_ref(), &mut plan, &mut found)
            } else if carried_delete_manifest {
                Decision::Carry
            } else if !view.may_have_live {
                unlive(view, input.policy)
            } else if let Some(entries) = input.loaded.get(&i) {
                decide_loaded(input, i, view, entries, &mut plan, &mut found)?
            } else {
                Decision::Carry
            };
        plan.decisions.push(decision);
    }
    if found.len() != input.removed.len() {
        let mut missing: Vec<String> = input
            .removed
            .iter()
            .filter(|p| !found.contains(p.as_str()))
            .cloned()
            .collect();
        missing.sort();
        return Err(PlanError::NotLive(missing));
    }
    Ok(plan)
}

/// The live data paths of the base snapshot; `None` when a data manifest
/// that may hold live files was not read.
fn live_data_paths<'a>(input: &'a PlanInput<'a>) -> Option<LiveDataPaths<'a>> {
    let mut paths = vec![];
    for (i, view) in input.manifests.iter().enumerate() {
        if view.deletes || !view.may_have_live {
            continue;
        }
        let entries = input.loaded.get(&i)?;
        paths.extend(entries.iter().filter(|e| e.alive).map(|e| e.path));
    }
    Some(LiveDataPaths::new(paths))
}

/// A delete manifest that was read: its dangling position delete files are
/// `Deleted` (see `dangling_deletes.rs`), and so is a delete file whose path
/// is among the removed ones (a compaction that rewrote every data file it
/// could apply to); without any, it is carried.
fn decide_deletes<'a>(
    input: &PlanInput<'a>,
    index: usize,
    entries: &[EntryView<'a>],
    live: Option<&LiveDataPaths>,
    plan: &mut ManifestPlan,
    found: &mut HashSet<&'a str>,
) -> Decision {
    let Some(live) = live.filter(|_| !input.removed.is_empty()) else {
        return Decision::Carry;
    };
    let mut fates = vec![];
    let mut dropped = 0;
    for (e, entry) in entries.iter().enumerate().filter(|(_, e)| e.alive) {
        let references = entry
            .references
            .as_ref()
            .map(|(lower, upper)| (lower.as_ref(), upper.as_ref()));
        let named = input.removed.contains(entry.path);
        if named {
            found.insert(entry.path);
        }
        if named || (entry.position_deletes && is_dangling(references, live, input.removed)) {
            fates.push((e, Fate::Deleted));
            plan.removed.push((index, e));
            dropped += 1;
        } else {
            fates.push((e, Fate::Existing));
        }
    }
    if dropped == 0 {
        Decision::Carry
    } else {
        Decision::Rewrite(fates)
    }
}

/// A manifest whose counts allow no live file.
fn unlive(view: &ManifestView, policy: ManifestPolicy) -> Decision {
    match policy {
        ManifestPolicy::Append if view.has_deleted => Decision::Carry,
        _ => Decision::Drop,
    }
}

/// A manifest whose entries were read.
fn decide_loaded<'a>(
    input: &PlanInput<'a>,
    index: usize,
    view: &ManifestView,
    entries: &[EntryView<'a>],
    plan: &mut ManifestPlan,
    found: &mut HashSet<&'a str>,
) -> Result<Decision, PlanError> {
    let mut fates = vec![];
    let mut hits = vec![];
    for (e, entry) in entries.iter().enumerate().filter(|(_, e)| e.alive) {
        if input.added.contains(entry.path) {
            return Err(PlanError::AlreadyInTable(entry.path.to_string()));
        }
        if input.removed.contains(entry.path) {
            found.insert(entry.path);
            hits.push((index, e));
            fates.push((e, Fate::Deleted));
        } else {
            fates.push((e, Fate::Existing));
        }
    }
    plan.removed.extend(hits.iter().copied());
    if fates.is_empty() {
        // Counted as live, but holds none.
        return Ok(match input.policy {
            ManifestPolicy::Append => Decision::Carry,
            ManifestPolicy::Merging => Decision::Drop,
        });
    }
    if hits.is_empty() {
        return Ok(Decision::Carry);
    }
    if hits.len() == fates.len() {
        plan.deleted_only
            .entry(view.spec_id)
            .or_default()
            .extend(hits);
        return Ok(Decision::Drop);
    }
    let loses_row_ids = view.keeps_row_ids
        && fates
            .iter()
            .any(|&(e, fate)| fate == Fate::Existing && !entries[e].has_first_row_id);
    if loses_row_ids {
        return Err(PlanError::RowIdsLost(index));
    }
    Ok(Decision::Rewrite(fates))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(spec_id: i32) -> ManifestView {
        ManifestView {
            deletes: false,
            may_have_live: true,
            has_deleted: false,
            spec_id,
            keeps_row_ids: false,
        }
    }

    /// A manifest whose counts say it only records deleted files.
    fn deleted_only() -> ManifestView {
        ManifestView {
            may_have_live: false,
            has_deleted: true,
            ..data(0)
        }
    }

    fn deletes() -> ManifestView {
        ManifestView {
            deletes: true,
            ..data(0)
        }
    }

    fn live(path: &str) -> EntryView<'_> {
        EntryView {
            path,
            alive: true,
            has_first_row_id: false,
            position_deletes: false,
            references: None,
        }
    }

    /// A live position delete file referencing the paths `lower..=upper`.
    fn position_delete<'a>(path: &'a str, lower: &'a str, upper: &'a str) -> EntryView<'a> {
        EntryView {
            position_deletes: true,
            references: Some((Cow::Borrowed(lower), Cow::Borrowed(upper))),
            ..live(path)
        }
    }

    fn dead(path: &str) -> EntryView<'_> {
        EntryView {
            alive: false,
            ..live(path)
        }
    }

    struct Case<'a> {
        manifests: Vec<ManifestView>,
        loaded: HashMap<usize, Vec<EntryView<'a>>>,
        removed: HashSet<String>,
        added: HashSet<&'a str>,
        policy: ManifestPolicy,
    }

    impl<'a> Case<'a> {
        fn new(manifests: Vec<ManifestView>, loaded: Vec<(usize, Vec<EntryView<'a>>)>) -> Self {
            Case {
                manifests,
                loaded: loaded.into_iter().collect(),
                removed: HashSet::new(),
                added: HashSet::new(),
                policy: ManifestPolicy::Merging,
            }
        }

        fn removing(mut self, paths: &[&str]) -> Self {
            self.removed = paths.iter().map(|p| p.to_string()).collect();
            self
        }

        fn adding(mut self, paths: &[&'a str]) -> Self {
            self.added = paths.iter().copied().collect();
            self
        }

        fn policy(mut self, policy: ManifestPolicy) -> Self {
            self.policy = policy;
            self
        }

        fn plan(&self) -> Result<ManifestPlan, PlanError> {
            plan_manifests(&PlanInput {
                manifests: &self.manifests,
                loaded: &self.loaded,
                removed: &self.removed,
                added: &self.added,
                policy: self.policy,
            })
        }
    }

    #[test]
    fn untouched_manifests_are_carried() {
        let case = Case::new(
            vec![data(0), data(0)],
            vec![(0, vec![live("a"), live("b")]), (1, vec![live("c")])],
        )
        .removing(&["c"]);
        let plan = case.plan().unwrap();
        assert_eq!(plan.decisions[0], Decision::Carry);
        // Not read at all: carried as well.
        let plan = Case::new(vec![data(0)], vec![]).plan().unwrap();
        assert_eq!(plan.decisions, vec![Decision::Carry]);
    }

    #[test]
    fn partly_hit_manifest_is_rewritten() {
        let case = Case::new(
            vec![data(0)],
            vec![(0, vec![live("a"), dead("gone"), live("b"), live("c")])],
        )
        .removing(&["b"]);
        let plan = case.plan().unwrap();
        assert_eq!(
            plan.decisions,
            vec![Decision::Rewrite(vec![
                (0, Fate::Existing),
                (2, Fate::Deleted),
                (3, Fate::Existing),
            ])]
        );
        assert_eq!(plan.removed, vec![(0, 2)]);
        assert!(plan.deleted_only.is_empty());
    }

    #[test]
    fn wholly_dead_manifests_go_to_deleted_only_manifests_by_spec() {
        let case = Case::new(
            vec![data(0), data(1), data(0), data(0)],
            vec![
                (0, vec![live("a"), dead("old")]),
                (1, vec![live("b")]),
                (2, vec![live("c")]),
                (3, vec![live("keep")]),
            ],
        )
        .removing(&["a", "b", "c"]);
        let plan = case.plan().unwrap();
        use Decision::*;
        assert_eq!(plan.decisions, vec![Drop, Drop, Drop, Carry]);
        let expected: BTreeMap<i32, Vec<EntryAt>> =
            [(0, vec![(0, 0), (2, 0)]), (1, vec![(1, 0)])].into();
        assert_eq!(plan.deleted_only, expected);
        assert_eq!(plan.removed, vec![(0, 0), (1, 0), (2, 0)]);
    }

    #[test]
    fn manifests_without_live_files_are_dropped() {
        // By their counts (not read), or once read.
        let case = Case::new(
            vec![deleted_only(), data(0), data(0)],
            vec![(1, vec![dead("x")]), (2, vec![live("a")])],
        )
        .removing(&["a"]);
        assert_eq!(
            manifests_to_load(&case.manifests, ManifestPolicy::Merging, true),
            vec![1, 2]
        );
        let plan = case.plan().unwrap();
        assert_eq!(
            plan.decisions,
            vec![Decision::Drop, Decision::Drop, Decision::Drop]
        );
    }

    #[test]
    fn delete_manifests_are_carried() {
        let case = Case::new(vec![deletes(), data(0)], vec![(1, vec![live("a")])]).removing(&["a"]);
        assert_eq!(
            manifests_to_load(&case.manifests, ManifestPolicy::Merging, true),
            vec![0, 1]
        );
        // Not read: carried.
        let plan = case.plan().unwrap();
        assert_eq!(plan.decisions, vec![Decision::Carry, Decision::Drop]);
        // Read, with nothing dangling: carried.
        let case = Case::new(
            vec![deletes(), data(0)],
            vec![
                (0, vec![position_delete("p1", "b", "b")]),
                (1, vec![live("a"), live("b")]),
            ],
        )
        .removing(&["a"]);
        let plan = case.plan().unwrap();
        assert_eq!(plan.decisions[0], Decision::Carry);
        assert_eq!(plan.removed, vec![(1, 0)]);
    }

    #[test]
    fn delete_files_named_by_a_compaction_are_removed() {
        let equality = EntryView { ..live("eq") };
        let case = Case::new(
            vec![deletes(), data(0)],
            vec![
                (0, vec![equality, position_delete("p-b", "b", "b")]),
                (1, vec![live("a"), live("b")]),
            ],
        )
        .removing(&["a", "eq"]);
        let plan = case.plan().unwrap();
        assert_eq!(
            plan.decisions[0],
            Decision::Rewrite(vec![(0, Fate::Deleted), (1, Fate::Existing)])
        );
        assert_eq!(plan.removed, vec![(0, 0), (1, 0)]);
        // A named delete file that is not live is refused like a data file.
        let case = Case::new(
            vec![deletes(), data(0)],
            vec![(0, vec![dead("eq")]), (1, vec![live("a")])],
        )
        .removing(&["a", "eq"]);
        assert_eq!(case.plan(), Err(PlanError::NotLive(vec!["eq".into()])));
    }

    #[test]
    fn position_deletes_of_removed_files_are_dropped() {
        let equality = EntryView { ..live("eq") };
        let unknown = EntryView {
            position_deletes: true,
            ..live("p-unknown")
        };
        let case = Case::new(
            vec![deletes(), data(0)],
            vec![
                (
                    0,
                    vec![
                        position_delete("p-a", "a", "a"),
                        dead("p-old"),
                        position_delete("p-ab", "a", "b"),
                        position_delete("p-c", "c", "c"),
                        equality,
                        unknown,
                    ],
                ),
                (1, vec![live("a"), live("b"), live("c")]),
            ],
        )
        .removing(&["a", "c"]);
        let plan = case.plan().unwrap();
        assert_eq!(
            plan.decisions[0],
            Decision::Rewrite(vec![
                (0, Fate::Deleted),
                (2, Fate::Existing),
                (3, Fate::Deleted),
                (4, Fate::Existing),
                (5, Fate::Existing),
            ])
        );
        assert_eq!(plan.removed, vec![(0, 0), (0, 3), (1, 0), (1, 2)]);
        // A data manifest that was not read hides live paths: nothing is dropped.
        let case = Case::new(
            vec![deletes(), data(0)],
            vec![(0, vec![position_delete("p-a", "a", "a")])],
        );
        let input = PlanInput {
            manifests: &case.manifests,
            loaded: &case.loaded,
            removed: &case.removed,
            added: &case.added,
            policy: case.policy,
        };
        assert!(live_data_paths(&input).is_none());
    }

    #[test]
    fn removed_paths_not_live_are_refused_sorted() {
        let case = Case::new(vec![data(0)], vec![(0, vec![live("a"), dead("b")])])
            .removing(&["z", "a", "b"]);
        assert_eq!(
            case.plan().unwrap_err(),
            PlanError::NotLive(vec!["b".into(), "z".into()])
        );
        // No snapshot at all.
        let case = Case::new(vec![], vec![]).removing(&["a"]);
        assert_eq!(
            case.plan().unwrap_err(),
            PlanError::NotLive(vec!["a".into()])
        );
    }

    #[test]
    fn added_path_already_live_is_refused() {
        let case = Case::new(vec![data(0)], vec![(0, vec![live("a"), live("b")])])
            .removing(&["a"])
            .adding(&["b"]);
        assert_eq!(
            case.plan().unwrap_err(),
            PlanError::AlreadyInTable("b".into())
        );
        // A dead entry with that path is history, not a conflict.
        let case = Case::new(vec![data(0)], vec![(0, vec![live("a"), dead("b")])])
            .removing(&["a"])
            .adding(&["b"]);
        assert!(case.plan().is_ok());
    }

    #[test]
    fn rewrite_that_would_lose_row_ids_is_refused() {
        let v3 = ManifestView {
            keeps_row_ids: true,
            ..data(0)
        };
        let with_id = EntryView {
            has_first_row_id: true,
            ..live("b")
        };
        let case =
            Case::new(vec![data(0), v3], vec![(1, vec![live("a"), live("b")])]).removing(&["a"]);
        assert_eq!(case.plan().unwrap_err(), PlanError::RowIdsLost(1));
        let case = Case::new(vec![v3], vec![(0, vec![live("a"), with_id])]).removing(&["a"]);
        assert!(matches!(
            case.plan().unwrap().decisions[0],
            Decision::Rewrite(_)
        ));
    }

    #[test]
    fn what_is_read() {
        let manifests = vec![data(0), deletes(), deleted_only(), data(1)];
        assert!(manifests_to_load(&manifests, ManifestPolicy::Merging, false).is_empty());
        assert_eq!(
            manifests_to_load(&manifests, ManifestPolicy::Merging, true),
            vec![0, 1, 3]
        );
        // An append reads the live data manifests to refuse duplicates.
        assert_eq!(
            manifests_to_load(&manifests, ManifestPolicy::Append, false),
            vec![0, 3]
        );
    }

    #[test]
    fn fast_append_keeps_manifests_recording_deleted_files() {
        let nothing = ManifestView {
            has_deleted: false,
            ..deleted_only()
        };
        let empty_deletes = ManifestView {
            deletes: true,
            ..nothing
        };
        let case = Case::new(
            vec![
                data(0),
                deleted_only(),
                nothing,
                deletes(),
                empty_deletes,
                data(0),
            ],
            vec![(0, vec![live("a")]), (5, vec![dead("x")])],
        )
        .adding(&["new"])
        .policy(ManifestPolicy::Append);
        let plan = case.plan().unwrap();
        use Decision::*;
        assert_eq!(plan.decisions, vec![Carry, Carry, Drop, Carry, Drop, Carry]);
        let case = case.adding(&["a"]);
        assert_eq!(
            case.plan().unwrap_err(),
            PlanError::AlreadyInTable("a".into())
        );
    }
}
