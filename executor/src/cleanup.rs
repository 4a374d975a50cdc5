//! Removing the files of a write that will not be committed: a failed task
//! deletes its own files, a failed statement deletes every file carrying its
//! write id. Data files are named `<write id>-<task>-<attempt>-...`.

use std::path::Path;

use iceberg::spec::TableMetadata;

/// Where a table's data files go (`write.data.path`, else `<location>/data`).
pub fn data_location(metadata: &TableMetadata) -> String {
    metadata
        .properties()
        .get("write.data.path")
        .cloned()
        .unwrap_or_else(|| format!("{}/data", metadata.location().trim_end_matches('/')))
}

/// Deletes every file under `data_location` whose name starts with `prefix`.
/// Returns how many were deleted. Only local warehouses are listed; object
/// stores rely on the writer's own list of files.
pub fn delete_files_with_prefix(data_location: &str, prefix: &str) -> usize {
    delete_files_with_prefix_except(data_location, prefix, &[])
}

/// As [`delete_files_with_prefix`], sparing the files at the locations in
/// `keep` (full paths as in the manifest).
pub fn delete_files_with_prefix_except(data_location: &str, prefix: &str, keep: &[&str]) -> usize {
    let Some(root) = local_path(data_location) else {
        return 0;
    };
    let mut deleted = 0;
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if entry.file_name().to_string_lossy().starts_with(prefix)
                && !keep.iter().any(|k| local_path(k) == Some(path.as_path()))
                && std::fs::remove_file(&path).is_ok()
            {
                deleted += 1;
            }
        }
    }
    deleted
}

/// The local path of a `file://` (or bare) location.
pub fn local_path(location: &str) -> Option<&Path> {
    if let Some(rest) = location.strip_prefix("file://") {
        Some(Path::new(rest))
    } else if location.starts_with('/') {
        Some(Path::new(location))
    } else {
        None
    }
}
