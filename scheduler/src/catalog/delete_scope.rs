//! Which position delete files a scan task's data file reads. iceberg's
//! scan planning lists, for each data file, every position delete file of
//! its partition with a sequence number at least the file's, whatever data
//! files that delete file names. Each delete file's manifest entry knows
//! better: its `referenced_data_file`, else the bounds of its `file_path`
//! column (the range of data paths it names). A task keeps the position
//! delete files whose references may include its data file (and those whose
//! references are unknown), so a merge-on-read table whose every data file
//! has its own delete file reads one delete file per data file, not all of
//! them. Equality delete files are kept as planned: they apply by sequence
//! number, not by path.

use std::collections::HashMap;

use datafusion::error::Result;
use iceberg::scan::FileScanTask;
use iceberg::spec::{DataContentType, ManifestContentType, SnapshotRef};
use iceberg::table::Table;
use icemerge_executor::iceberg_err;
use icemerge_proto::error::io_error;

use super::manifests::load_manifests;
use crate::commit::position_delete_references;

/// The paths a position delete file may reference: an inclusive range, or
/// `None` when its manifest entry does not say.
type References = Option<(String, String)>;

/// Narrows each task's position delete files to those that may reference
/// its data file. Reads the delete manifests of `snapshot` only when some
/// task lists a position delete file.
pub(crate) async fn narrow_position_deletes(
    table: &Table,
    snapshot: &SnapshotRef,
    tasks: &mut [FileScanTask],
) -> Result<()> {
    let lists_positions = |task: &FileScanTask| {
        task.deletes
            .iter()
            .any(|d| d.file_type == DataContentType::PositionDeletes)
    };
    if !tasks.iter().any(lists_positions) {
        return Ok(());
    }
    let references = position_delete_scope(table, snapshot).await?;
    for task in tasks.iter_mut() {
        let data_file = task.data_file_path.as_str();
        task.deletes.retain(|delete| {
            delete.file_type != DataContentType::PositionDeletes
                || may_reference(references.get(&delete.file_path), data_file)
        });
    }
    Ok(())
}

/// Does a position delete file with `references` (`None`: not among the
/// snapshot's delete files, kept to be safe) apply to `data_file`?
fn may_reference(references: Option<&References>, data_file: &str) -> bool {
    match references {
        Some(Some((lower, upper))) => lower.as_str() <= data_file && data_file <= upper.as_str(),
        _ => true,
    }
}

/// Every live position delete file of `snapshot`, with what it may
/// reference.
async fn position_delete_scope(
    table: &Table,
    snapshot: &SnapshotRef,
) -> Result<HashMap<String, References>> {
    let list = table
        .manifest_list_reader(snapshot)
        .load()
        .await
        .map_err(iceberg_err)?;
    let delete_manifests = list
        .entries()
        .iter()
        .filter(|m| m.content == ManifestContentType::Deletes);
    let manifests = load_manifests(table.file_io(), delete_manifests)
        .await
        .map_err(|e| io_error(e.to_string()))?;
    let mut scope = HashMap::new();
    for manifest in &manifests {
        for entry in manifest.entries() {
            if entry.is_alive() && entry.content_type() == DataContentType::PositionDeletes {
                let references = position_delete_references(entry.data_file())
                    .map(|(lower, upper)| (lower.into_owned(), upper.into_owned()));
                scope.insert(entry.file_path().to_string(), references);
            }
        }
    }
    Ok(scope)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(lower: &str, upper: &str) -> References {
        Some((lower.to_string(), upper.to_string()))
    }

    #[test]
    fn a_delete_file_applies_to_the_data_files_it_references() {
        let own = range("d/a.parquet", "d/a.parquet");
        assert!(may_reference(Some(&own), "d/a.parquet"));
        assert!(!may_reference(Some(&own), "d/b.parquet"));
        let span = range("d/b", "d/c~");
        assert!(may_reference(Some(&span), "d/b.parquet"));
        assert!(may_reference(Some(&span), "d/c.parquet"));
        assert!(!may_reference(Some(&span), "d/a.parquet"));
        assert!(!may_reference(Some(&span), "d/d.parquet"));
    }

    #[test]
    fn a_delete_file_whose_references_are_unknown_applies_to_every_file() {
        assert!(may_reference(Some(&None), "d/a.parquet"));
        assert!(may_reference(None, "d/a.parquet"));
    }
}
