//! Which data files `rewrite_data_files` rewrites, and in which groups: the
//! rules of Iceberg's bin-pack planner (what Spark's procedure runs), as a
//! pure function over the candidate files so each rule is tested without
//! I/O.
//!
//! A file is a candidate for rewriting when its size is outside
//! `[min-file-size-bytes, max-file-size-bytes]` (by default 75 % and 180 %
//! of the target size), or it has at least `delete-file-threshold` delete
//! files, or the rows its file-scoped position deletes remove are at least
//! `delete-ratio-threshold` of its rows (default 0.3). Candidates are
//! grouped by partition (files of an older partition spec form one group of
//! their own, as their rows may belong to several partitions of the
//! current spec); a group is rewritten when it has several files and
//! either at least `min-input-files` of them or more bytes than the target
//! size, or more bytes than the max size, or a file with too many deletes.
//! `rewrite-all` rewrites every file in one group per partition. Trino's
//! `optimize(file_size_threshold)` rewrites the files below the threshold
//! and those with deletes, a group when it has several files or deletes.
//!
//! A group is also the unit of a conflict: when a concurrent commit
//! changed one of its files, the group is dropped and the others commit.

use std::collections::HashMap;

use datafusion::error::Result;
use iceberg::spec::Struct;
use icemerge_planner::procedures::RewriteOptions;
use icemerge_proto::error::invalid_input;

/// Iceberg's default `min-input-files`.
const DEFAULT_MIN_INPUT_FILES: usize = 5;
/// Iceberg's default `delete-ratio-threshold`.
const DEFAULT_DELETE_RATIO: f64 = 0.3;

/// A live data file the rewrite may read.
#[derive(Debug, Clone)]
pub(crate) struct Candidate {
    pub path: String,
    pub size: u64,
    pub record_count: u64,
    /// Its partition in the current spec; `None` when it was written with
    /// another spec.
    pub partition: Option<Struct>,
    /// Delete files (position and equality) that apply to it.
    pub delete_files: usize,
    /// Rows removed by its position delete files that reference it alone.
    pub file_scoped_deleted: u64,
}

/// The rules, resolved against the table's target file size.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Rules {
    pub target: u64,
    pub min_size: u64,
    pub max_size: u64,
    pub min_input_files: usize,
    pub rewrite_all: bool,
    pub delete_file_threshold: usize,
    pub delete_ratio_threshold: f64,
    /// Trino's `file_size_threshold` (replaces the rules above).
    pub below: Option<u64>,
}

impl Rules {
    /// The rules of `options`, the target size defaulting to the table's
    /// `write.target-file-size-bytes`; inconsistent sizes are refused by
    /// name.
    pub fn resolve(options: &RewriteOptions, table_target: u64, what: &str) -> Result<Rules> {
        let target = options.target_file_size_bytes.unwrap_or(table_target);
        let min_size = options
            .min_file_size_bytes
            .unwrap_or((target as f64 * 0.75) as u64);
        let max_size = options
            .max_file_size_bytes
            .unwrap_or((target as f64 * 1.8) as u64);
        if options.file_size_threshold.is_none() {
            if min_size >= target {
                return Err(invalid_input(format!(
                    "{what}: option 'min-file-size-bytes' ({min_size}) must be below the target \
                     file size ({target}): every new file would be too small"
                )));
            }
            if max_size <= target {
                return Err(invalid_input(format!(
                    "{what}: option 'max-file-size-bytes' ({max_size}) must be above the target \
                     file size ({target}): every new file would be too large"
                )));
            }
        }
        Ok(Rules {
            target,
            min_size,
            max_size,
            min_input_files: options.min_input_files.unwrap_or(DEFAULT_MIN_INPUT_FILES),
            rewrite_all: options.rewrite_all,
            delete_file_threshold: options.delete_file_threshold.unwrap_or(usize::MAX),
            delete_ratio_threshold: options
                .delete_ratio_threshold
                .unwrap_or(DEFAULT_DELETE_RATIO),
            below: options.file_size_threshold,
        })
    }

    fn too_many_deletes(&self, file: &Candidate) -> bool {
        match self.below {
            Some(_) => file.delete_files > 0,
            None => file.delete_files >= self.delete_file_threshold,
        }
    }

    fn too_high_delete_ratio(&self, file: &Candidate) -> bool {
        if self.below.is_some() || file.delete_files == 0 || file.record_count == 0 {
            return false;
        }
        let deleted = file.file_scoped_deleted.min(file.record_count);
        deleted as f64 / file.record_count as f64 >= self.delete_ratio_threshold
    }

    fn has_delete_issues(&self, file: &Candidate) -> bool {
        self.too_many_deletes(file) || self.too_high_delete_ratio(file)
    }

    fn file_selected(&self, file: &Candidate) -> bool {
        if self.rewrite_all {
            return true;
        }
        match self.below {
            Some(below) => file.size < below || file.delete_files > 0,
            None => {
                file.size < self.min_size
                    || file.size > self.max_size
                    || self.has_delete_issues(file)
            }
        }
    }

    fn group_selected(&self, files: &[Candidate]) -> bool {
        if self.rewrite_all {
            return true;
        }
        let bytes: u64 = files.iter().map(|f| f.size).sum();
        let several = files.len() > 1;
        if self.below.is_some() {
            return several || files.iter().any(|f| self.has_delete_issues(f));
        }
        (several && (files.len() >= self.min_input_files || bytes > self.target))
            || bytes > self.max_size
            || files.iter().any(|f| self.has_delete_issues(f))
    }
}

/// Files rewritten together: one partition's chosen files.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FileGroup {
    /// The partition (None: files of older specs).
    pub partition: Option<Struct>,
    /// Paths, sorted.
    pub files: Vec<String>,
    pub bytes: u64,
}

/// The groups the rules rewrite, in a stable order (by first path).
pub(crate) fn plan_groups(candidates: Vec<Candidate>, rules: &Rules) -> Vec<FileGroup> {
    let mut by_partition: HashMap<Option<Struct>, Vec<Candidate>> = HashMap::new();
    for file in candidates {
        if rules.file_selected(&file) {
            by_partition
                .entry(file.partition.clone())
                .or_default()
                .push(file);
        }
    }
    let mut groups: Vec<FileGroup> = by_partition
        .into_iter()
        .filter(|(_, files)| rules.group_selected(files))
        .map(|(partition, files)| {
            let bytes = files.iter().map(|f| f.size).sum();
            let mut files: Vec<String> = files.into_iter().map(|f| f.path).collect();
            files.sort();
            FileGroup {
                partition,
                files,
                bytes,
            }
        })
        .collect();
    groups.sort_by(|a, b| a.files.cmp(&b.files));
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::spec::Literal;

    fn file(path: &str, size: u64, part: Option<i32>) -> Candidate {
        Candidate {
            path: path.to_string(),
            size,
            record_count: 100,
            partition: part.map(|p| Struct::from_iter([Some(Literal::int(p))])),
            delete_files: 0,
            file_scoped_deleted: 0,
        }
    }

    fn rules(options: RewriteOptions) -> Rules {
        Rules::resolve(&options, 1000, "rewrite").unwrap()
    }

    fn paths(groups: &[FileGroup]) -> Vec<Vec<&str>> {
        groups
            .iter()
            .map(|g| g.files.iter().map(String::as_str).collect())
            .collect()
    }

    #[test]
    fn small_files_are_grouped_by_partition_and_need_enough_of_them() {
        let r = rules(RewriteOptions::default());
        assert_eq!((r.min_size, r.max_size), (750, 1800));
        let mut files: Vec<Candidate> = (0..5)
            .map(|i| file(&format!("a{i}"), 100, Some(1)))
            .collect();
        files.extend((0..4).map(|i| file(&format!("b{i}"), 100, Some(2))));
        // A file of the right size stays where it is.
        files.push(file("a9", 900, Some(1)));
        let groups = plan_groups(files.clone(), &r);
        assert_eq!(paths(&groups), vec![vec!["a0", "a1", "a2", "a3", "a4"]]);
        assert_eq!(groups[0].bytes, 500);
        // Fewer input files needed: partition 2 too.
        let r = rules(RewriteOptions {
            min_input_files: Some(2),
            ..Default::default()
        });
        assert_eq!(plan_groups(files.clone(), &r).len(), 2);
        // rewrite-all: every file, the right-sized one included.
        let r = rules(RewriteOptions {
            rewrite_all: true,
            ..Default::default()
        });
        let groups = plan_groups(files, &r);
        assert_eq!(groups.len(), 2);
        assert!(groups[0].files.contains(&"a9".to_string()));
    }

    #[test]
    fn content_and_size_rules() {
        let r = rules(RewriteOptions::default());
        // Two small files holding more than the target: rewritten.
        let g = plan_groups(vec![file("a", 700, None), file("b", 700, None)], &r);
        assert_eq!(paths(&g), vec![vec!["a", "b"]]);
        // One file, too large: split.
        let g = plan_groups(vec![file("a", 5000, None)], &r);
        assert_eq!(paths(&g), vec![vec!["a"]]);
        // One small file alone: nothing to gain.
        assert!(plan_groups(vec![file("a", 10, None)], &r).is_empty());
    }

    #[test]
    fn delete_thresholds() {
        let mut with_deletes = file("a", 900, Some(1));
        with_deletes.delete_files = 2;
        with_deletes.file_scoped_deleted = 10;
        // Right size, 10 % deleted, below both thresholds by default.
        let r = rules(RewriteOptions::default());
        assert!(plan_groups(vec![with_deletes.clone()], &r).is_empty());
        // Two delete files reach a threshold of 2, alone in its group.
        let r = rules(RewriteOptions {
            delete_file_threshold: Some(2),
            ..Default::default()
        });
        assert_eq!(plan_groups(vec![with_deletes.clone()], &r).len(), 1);
        // 10 % deleted reaches a ratio of 0.1.
        let r = rules(RewriteOptions {
            delete_ratio_threshold: Some(0.1),
            ..Default::default()
        });
        assert_eq!(plan_groups(vec![with_deletes.clone()], &r).len(), 1);
        // A threshold of 0 picks every file, as in Iceberg.
        let r = rules(RewriteOptions {
            delete_file_threshold: Some(0),
            ..Default::default()
        });
        assert_eq!(plan_groups(vec![file("b", 900, None)], &r).len(), 1);
    }

    #[test]
    fn trino_threshold() {
        let r = rules(RewriteOptions {
            file_size_threshold: Some(500),
            ..Default::default()
        });
        let mut deleted = file("c", 900, Some(2));
        deleted.delete_files = 1;
        let g = plan_groups(
            vec![
                file("a0", 100, Some(1)),
                file("a1", 100, Some(1)),
                file("a2", 600, Some(1)),
                file("b0", 100, Some(3)),
                deleted,
            ],
            &r,
        );
        assert_eq!(paths(&g), vec![vec!["a0", "a1"], vec!["c"]]);
    }

    #[test]
    fn inconsistent_sizes_are_named() {
        let e = Rules::resolve(
            &RewriteOptions {
                min_file_size_bytes: Some(2000),
                ..Default::default()
            },
            1000,
            "rewrite",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("'min-file-size-bytes' (2000)"), "{e}");
        let e = Rules::resolve(
            &RewriteOptions {
                target_file_size_bytes: Some(5000),
                max_file_size_bytes: Some(4000),
                ..Default::default()
            },
            1000,
            "rewrite",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("'max-file-size-bytes' (4000)"), "{e}");
    }
}
