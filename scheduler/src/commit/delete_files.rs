//! The delete files a row delta adds, placed in the table: a position
//! delete file written by a MERGE writer carries no partition; it takes the
//! partition (and partition spec) of the data file it references, which
//! must be live in the base snapshot (else the rows it deletes are not
//! there: another commit removed the file, and the row delta is refused).
//! An equality delete file keeps the partition it was written with, in the
//! table's default spec.

use std::collections::{BTreeMap, HashMap};

use datafusion::error::Result;
use iceberg::spec::{DataContentType, DataFile, Manifest, Struct};
use iceberg::TableIdent;

use icemerge_executor::write_order::data_file_builder;
use icemerge_proto::error::{conflict, internal, invalid_input};

/// Gives each position delete file of `deletes` the partition of the data
/// file it references, looked up among the live entries of `data_manifests`
/// (every data manifest of the base snapshot that may hold live files).
/// Equality delete files are placed in `default_spec_id`. The result is
/// grouped by partition spec id.
pub(crate) fn place_delete_files<'a>(
    ident: &TableIdent,
    deletes: Vec<DataFile>,
    default_spec_id: i32,
    data_manifests: impl IntoIterator<Item = &'a Manifest>,
) -> Result<BTreeMap<i32, Vec<DataFile>>> {
    let mut placed: BTreeMap<i32, Vec<DataFile>> = BTreeMap::new();
    if deletes.is_empty() {
        return Ok(placed);
    }
    let mut live: HashMap<&str, (&Struct, i32)> = HashMap::new();
    for manifest in data_manifests {
        let spec_id = manifest.metadata().partition_spec().spec_id();
        for entry in manifest.entries().iter().filter(|e| e.is_alive()) {
            live.insert(entry.file_path(), (entry.data_file().partition(), spec_id));
        }
    }
    for file in deletes {
        match file.content_type() {
            DataContentType::PositionDeletes => {}
            DataContentType::EqualityDeletes => {
                placed.entry(default_spec_id).or_default().push(file);
                continue;
            }
            DataContentType::Data => {
                return Err(invalid_input(format!(
                    "cannot commit to {ident}: added delete file '{}' is a data file",
                    file.file_path()
                )))
            }
        }
        let referenced = file.referenced_data_file().ok_or_else(|| {
            internal(format!(
                "position delete file '{}' names no referenced data file",
                file.file_path()
            ))
        })?;
        let (partition, spec_id) = live.get(referenced.as_str()).ok_or_else(|| {
            conflict(format!(
                "cannot commit to {ident}: data file '{referenced}' is no longer in the table; \
                 its rows cannot be deleted (another commit removed it)"
            ))
        })?;
        let file = in_partition(&file, (*partition).clone(), *spec_id)?;
        placed.entry(*spec_id).or_default().push(file);
    }
    Ok(placed)
}

/// `file` with `partition` in spec `spec_id`.
fn in_partition(file: &DataFile, partition: Struct, spec_id: i32) -> Result<DataFile> {
    data_file_builder(file)
        .partition(partition)
        .partition_spec_id(spec_id)
        .build()
        .map_err(|e| internal(format!("delete file '{}': {e}", file.file_path())))
}
