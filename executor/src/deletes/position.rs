//! Position delete files: rows of (`file_path`, `pos`), each deleting the
//! row at position `pos` (0-based) of data file `file_path`.

use std::collections::{HashMap, HashSet};

use arrow::array::{Array, AsArray};
use arrow::datatypes::DataType;
use datafusion::error::Result;
use futures::TryStreamExt;
use iceberg::io::FileIO;
use iceberg::metadata_columns::{
    RESERVED_COL_NAME_DELETE_FILE_PATH, RESERVED_COL_NAME_DELETE_FILE_POS,
    RESERVED_FIELD_ID_DELETE_FILE_PATH, RESERVED_FIELD_ID_DELETE_FILE_POS,
};
use iceberg::scan::FileScanTaskDeleteFile;

use super::parquet_file::{read_columns, Wanted};
use icemerge_proto::error::invalid_input;

/// One position delete file's positions, for the data files asked about.
#[derive(Debug, Default)]
pub struct PositionDeletes {
    /// Sorted positions by data file path.
    by_file: HashMap<String, Vec<i64>>,
}

impl PositionDeletes {
    /// Reads `delete`, keeping the positions of `data_files` only.
    pub(super) async fn load(
        file_io: &FileIO,
        delete: &FileScanTaskDeleteFile,
        data_files: &HashSet<String>,
    ) -> Result<Self> {
        let path = &delete.file_path;
        let wanted = [
            Wanted {
                field_id: RESERVED_FIELD_ID_DELETE_FILE_PATH,
                name: RESERVED_COL_NAME_DELETE_FILE_PATH,
            },
            Wanted {
                field_id: RESERVED_FIELD_ID_DELETE_FILE_POS,
                name: RESERVED_COL_NAME_DELETE_FILE_POS,
            },
        ];
        let mut batches = read_columns(file_io, path, delete.file_size_in_bytes, &wanted).await?;
        let mut by_file: HashMap<String, Vec<i64>> = HashMap::new();
        while let Some(batch) = batches.try_next().await? {
            let files = arrow::compute::cast(batch.column(0), &DataType::Utf8)?;
            let files = files.as_string::<i32>();
            let positions = arrow::compute::cast(batch.column(1), &DataType::Int64)?;
            let positions = positions.as_primitive::<arrow::datatypes::Int64Type>();
            if files.null_count() > 0 || positions.null_count() > 0 {
                return Err(invalid_input(format!(
                    "position delete file {path} has NULL file paths or positions"
                )));
            }
            for (file, pos) in files.iter().zip(positions.values()) {
                let file = file.expect("no NULL file path");
                if !data_files.contains(file) {
                    continue;
                }
                if *pos < 0 {
                    return Err(invalid_input(format!(
                        "position delete file {path} has a negative position {pos} for {file}"
                    )));
                }
                match by_file.get_mut(file) {
                    Some(list) => list.push(*pos),
                    None => {
                        by_file.insert(file.to_string(), vec![*pos]);
                    }
                }
            }
        }
        for list in by_file.values_mut() {
            list.sort_unstable();
            list.dedup();
        }
        Ok(Self { by_file })
    }

    /// The deleted positions of `data_file`, sorted.
    pub fn of(&self, data_file: &str) -> &[i64] {
        self.by_file.get(data_file).map_or(&[], Vec::as_slice)
    }
}
