//! The delete files of format-v2 tables as icemerge applies them itself:
//! where a read must keep each row's ORIGINAL position in its data file
//! (MERGE's row-id scan, the copy-on-write rewrite), iceberg's Arrow reader
//! cannot be asked to drop deleted rows, so the delete files a
//! `FileScanTask` lists are read here and matched against the rows.
//!
//! iceberg's planner has already chosen which delete files apply to a data
//! file (partition, and sequence numbers: position deletes of the same or a
//! later sequence number, equality deletes of a later one); this module
//! applies exactly those.
//!
//! - `mod.rs`: [`DeleteLoader`] (reads each delete file once per task and
//!   keeps it, however many of the task's files ask for it at once) and
//!   [`DataFileDeletes`] (the deletes of one data file, and which rows of a
//!   batch they leave alive);
//! - `position.rs`: position delete files (`file_path`, `pos`);
//! - `equality.rs`: equality delete files (values of some columns);
//! - `parquet_file.rs`: opening a delete file and finding its columns by
//!   field id.

mod equality;
mod parquet_file;
mod position;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use arrow::array::{Array, ArrayRef, BooleanArray};
use datafusion::error::Result;
use iceberg::io::FileIO;
use iceberg::scan::FileScanTaskDeleteFile;
use iceberg::spec::{DataContentType, SchemaRef};
use tokio::sync::OnceCell;

pub use equality::EqualityDeletes;
pub use position::PositionDeletes;

use icemerge_proto::error::{internal, unsupported};

/// Reads the delete files of one task's data files, each at most once.
pub struct DeleteLoader {
    /// The table, for errors.
    table: String,
    file_io: FileIO,
    /// The table schema equality deletes are read in (field ids, types).
    schema: SchemaRef,
    /// The data files this loader is asked about: position deletes of other
    /// files are not kept.
    data_files: Arc<std::collections::HashSet<String>>,
    /// Each delete file's contents, loaded by the first file that asks;
    /// the others asking meanwhile wait for that load.
    loaded: Mutex<HashMap<String, Arc<OnceCell<Loaded>>>>,
}

#[derive(Clone)]
enum Loaded {
    Positions(Arc<PositionDeletes>),
    Equality(Arc<EqualityDeletes>),
}

impl DeleteLoader {
    /// A loader for `data_files` of `table`, whose schema is `schema`.
    pub fn new(
        table: &str,
        file_io: FileIO,
        schema: SchemaRef,
        data_files: impl IntoIterator<Item = String>,
    ) -> Self {
        Self {
            table: table.to_string(),
            file_io,
            schema,
            data_files: Arc::new(data_files.into_iter().collect()),
            loaded: Mutex::new(HashMap::new()),
        }
    }

    /// The deletes that apply to `data_file`: those of `deletes` (the delete
    /// files its scan task lists).
    pub async fn for_file(
        &self,
        data_file: &str,
        deletes: &[FileScanTaskDeleteFile],
    ) -> Result<DataFileDeletes> {
        let mut out = DataFileDeletes::default();
        let mut positions: Vec<i64> = vec![];
        for delete in deletes {
            match self.load(data_file, delete).await? {
                Loaded::Positions(p) => positions.extend_from_slice(p.of(data_file)),
                Loaded::Equality(e) => out.equality.push(e),
            }
        }
        positions.sort_unstable();
        positions.dedup();
        out.positions = positions;
        Ok(out)
    }

    async fn load(&self, data_file: &str, delete: &FileScanTaskDeleteFile) -> Result<Loaded> {
        let cell = self
            .loaded
            .lock()
            .expect("delete cache lock")
            .entry(delete.file_path.clone())
            .or_default()
            .clone();
        let loaded = cell
            .get_or_try_init(|| async {
                refuse_deletion_vector(&self.table, data_file, &delete.file_path)?;
                Ok::<_, datafusion::error::DataFusionError>(match delete.file_type {
                    DataContentType::PositionDeletes => Loaded::Positions(Arc::new(
                        PositionDeletes::load(&self.file_io, delete, &self.data_files).await?,
                    )),
                    DataContentType::EqualityDeletes => Loaded::Equality(Arc::new(
                        EqualityDeletes::load(&self.file_io, delete, &self.schema).await?,
                    )),
                    DataContentType::Data => {
                        return Err(internal(format!(
                            "data file {} is listed as a delete file of {data_file}",
                            delete.file_path
                        )))
                    }
                })
            })
            .await?;
        Ok(loaded.clone())
    }
}

/// Deletion vectors (format v3) live in Puffin files, which icemerge cannot
/// read: refuse them by name rather than fail on a "Parquet" file.
pub fn refuse_deletion_vector(table: &str, data_file: &str, delete_file: &str) -> Result<()> {
    if delete_file.to_ascii_lowercase().ends_with(".puffin") {
        return Err(unsupported(format!(
            "table {table}: data file {data_file} has a deletion vector ({delete_file}); \
             reading format-version 3 deletion vectors is not supported"
        )));
    }
    Ok(())
}

/// The deletes that apply to one data file.
#[derive(Default, Clone)]
pub struct DataFileDeletes {
    /// Deleted positions, sorted, distinct.
    positions: Vec<i64>,
    equality: Vec<Arc<EqualityDeletes>>,
}

impl DataFileDeletes {
    /// Nothing is deleted.
    pub fn is_empty(&self) -> bool {
        self.positions.is_empty() && self.equality.is_empty()
    }

    /// How many distinct positions below `rows` are deleted by position
    /// (positions a data file of `rows` rows does not have are not counted).
    pub fn positions_below(&self, rows: i64) -> usize {
        self.positions.partition_point(|&p| p < rows)
    }

    /// The field ids whose values equality deletes compare.
    pub fn equality_field_ids(&self) -> Vec<i32> {
        let mut ids: Vec<i32> = self
            .equality
            .iter()
            .flat_map(|e| e.field_ids().iter().copied())
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Which of the `rows` rows at positions `start..start + rows` are
    /// alive; `column` gives the batch's column of an equality field id.
    /// `None`: all of them.
    pub fn live(
        &self,
        start: i64,
        rows: usize,
        column: &dyn Fn(i32) -> Option<ArrayRef>,
    ) -> Result<Option<BooleanArray>> {
        if self.is_empty() {
            return Ok(None);
        }
        let mut live = vec![true; rows];
        let end = start + rows as i64;
        let first = self.positions.partition_point(|&p| p < start);
        for &pos in self.positions[first..].iter().take_while(|&&p| p < end) {
            live[(pos - start) as usize] = false;
        }
        for deletes in &self.equality {
            let columns = deletes
                .field_ids()
                .iter()
                .map(|&id| {
                    column(id).ok_or_else(|| {
                        internal(format!("equality delete column {id} was not read"))
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            let deleted = deletes.matches(&columns)?;
            for (i, slot) in live.iter_mut().enumerate() {
                if deleted.value(i) && !deleted.is_null(i) {
                    *slot = false;
                }
            }
        }
        Ok(Some(BooleanArray::from(live)))
    }
}
