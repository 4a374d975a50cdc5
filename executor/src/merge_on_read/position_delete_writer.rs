//! Writing the position delete file of one data file: its deleted positions
//! (sorted) as Parquet rows (`file_path`, `pos`) with Iceberg's reserved
//! field ids. The file records the data file it references as Spark and
//! Iceberg Java do, so readers can skip it for other files:
//! `referenced_data_file`, and `file_path` bounds equal to that path (the
//! statistics are not truncated). Its partition is left empty: the commit
//! gives it the partition of the data file it references.

use std::sync::{Arc, LazyLock};

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use datafusion::error::Result;
use iceberg::arrow::schema_to_arrow_schema;
use iceberg::io::FileIO;
use iceberg::metadata_columns::{delete_file_path_field, delete_file_pos_field};
use iceberg::spec::{DataContentType, DataFile, Schema};
use iceberg::writer::file_writer::{FileWriter, FileWriterBuilder, ParquetWriterBuilder};

use crate::iceberg_err;
use crate::parquet_properties::delete_file_properties;
use icemerge_proto::error::internal;

/// Rows per written batch.
const BATCH_ROWS: usize = 64 * 1024;

/// The Iceberg schema of a position delete file.
static DELETE_SCHEMA: LazyLock<Arc<Schema>> = LazyLock::new(|| {
    Arc::new(
        Schema::builder()
            .with_fields(vec![
                delete_file_path_field().clone(),
                delete_file_pos_field().clone(),
            ])
            .build()
            .expect("the position delete schema is valid"),
    )
});

/// Writes position delete files at `location/<prefix>-deletes-NNNNN.parquet`.
pub(super) struct PositionDeleteWriter {
    file_io: FileIO,
    location: String,
    prefix: String,
    written: usize,
    arrow_schema: arrow::datatypes::SchemaRef,
    parquet: ParquetWriterBuilder,
}

impl PositionDeleteWriter {
    /// A writer of files in directory `location` named with `prefix` (unique
    /// per task attempt).
    /// The table's `write.parquet.*` / `write.delete.parquet.*` settings
    /// apply (`properties`).
    pub fn try_new(
        file_io: FileIO,
        location: String,
        prefix: String,
        properties: &std::collections::HashMap<String, String>,
    ) -> Result<Self> {
        let props = delete_file_properties(&location, properties)?
            .into_builder()
            // Exact file_path bounds: readers match them against data files.
            .set_statistics_truncate_length(None)
            .set_column_index_truncate_length(None)
            .build();
        let arrow_schema = Arc::new(schema_to_arrow_schema(&DELETE_SCHEMA).map_err(iceberg_err)?);
        Ok(Self {
            file_io,
            location,
            prefix,
            written: 0,
            arrow_schema,
            parquet: ParquetWriterBuilder::new(props, DELETE_SCHEMA.clone()),
        })
    }

    /// Writes the delete file of `data_file` deleting `positions` (sorted,
    /// distinct, not empty).
    pub async fn write(&mut self, data_file: &str, positions: &[i64]) -> Result<DataFile> {
        if positions.is_empty() {
            return Err(internal(format!(
                "no positions to delete in data file {data_file}"
            )));
        }
        self.written += 1;
        let path = format!(
            "{}/{}-deletes-{:05}.parquet",
            self.location.trim_end_matches('/'),
            self.prefix,
            self.written
        );
        let output = self.file_io.new_output(&path).map_err(iceberg_err)?;
        let mut writer = self.parquet.build(output).await.map_err(iceberg_err)?;
        for chunk in positions.chunks(BATCH_ROWS) {
            let columns: Vec<ArrayRef> = vec![
                Arc::new(StringArray::from(vec![data_file; chunk.len()])),
                Arc::new(Int64Array::from(chunk.to_vec())),
            ];
            let batch = RecordBatch::try_new(self.arrow_schema.clone(), columns)?;
            writer.write(&batch).await.map_err(iceberg_err)?;
        }
        let mut builders = writer.close().await.map_err(iceberg_err)?;
        let mut builder = builders
            .pop()
            .ok_or_else(|| internal(format!("position delete file {path} was not written")))?;
        builder
            .content(DataContentType::PositionDeletes)
            .referenced_data_file(Some(data_file.to_string()));
        builder
            .build()
            .map_err(|e| internal(format!("position delete file {path}: {e}")))
    }
}
