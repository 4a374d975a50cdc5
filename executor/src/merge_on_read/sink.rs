//! The merge-on-read writer of one partition: inserted rows and the new
//! values of updated rows stream into new data files; the row ids of
//! deleted and updated rows are gathered per data file (a target row acted
//! on twice fails the statement); at the end each touched data file gets
//! one position delete file of its positions, sorted. Returns the
//! partition's commit fragment; on any failure removes what it wrote.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::RecordBatch;
use datafusion::error::Result;
use datafusion::execution::SendableRecordBatchStream;
use futures::StreamExt;
use iceberg::io::FileIO;
use iceberg::spec::{serialize_data_file_to_json, DataFile, StructType, TableMetadata};
use icemerge_proto::fragment::{self, Fragment};
use icemerge_proto::merge_rows::MergeOp;

use super::position_delete_writer::PositionDeleteWriter;
use crate::iceberg_err;
use crate::merge_writer::merge_rows::{MergeRowReader, MergeRows};
use crate::merge_writer::metrics::WriterMetrics;
use crate::position_set::PositionSet;
use crate::write_exec::TableFileWriter;

/// Per-partition state of the merge-on-read writer.
pub(super) struct PartitionSink {
    metadata: Arc<TableMetadata>,
    writer: TableFileWriter,
    deletes: PositionDeleteWriter,
    reader: MergeRowReader,
    /// Per touched data file: the positions deleted (BTreeMap: files in
    /// path order).
    positions: BTreeMap<String, PositionSet>,
    /// Delete files written so far (removed on failure).
    delete_files: Vec<String>,
    file_io: FileIO,
    metrics: WriterMetrics,
}

impl PartitionSink {
    /// A sink writing files named with `prefix` (unique per task attempt).
    pub async fn try_new(
        metadata: Arc<TableMetadata>,
        file_io: FileIO,
        prefix: String,
        metrics: WriterMetrics,
    ) -> Result<Self> {
        let writer = TableFileWriter::try_new(&metadata, file_io.clone(), prefix.clone()).await?;
        let reader = MergeRowReader::new(writer.arrow_schema());
        let location = crate::cleanup::data_location(&metadata);
        let deletes = PositionDeleteWriter::try_new(
            file_io.clone(),
            location,
            prefix,
            metadata.properties(),
        )?;
        Ok(Self {
            metadata,
            writer,
            deletes,
            reader,
            positions: BTreeMap::new(),
            delete_files: vec![],
            file_io,
            metrics,
        })
    }

    /// Consumes `input` and returns the encoded commit fragment; on failure,
    /// removes the files this sink wrote.
    pub async fn run(mut self, mut input: SendableRecordBatchStream) -> Result<RecordBatch> {
        let result = self.drain(&mut input).await;
        if result.is_err() {
            self.writer.abort().await;
            for path in &self.delete_files {
                let _ = self.file_io.delete(path).await;
            }
        }
        result.map(|fragments| fragment::encode(&fragments))
    }

    async fn drain(&mut self, input: &mut SendableRecordBatchStream) -> Result<Vec<Fragment>> {
        while let Some(batch) = input.next().await {
            self.accept(batch?).await?;
        }
        self.finish().await
    }

    async fn accept(&mut self, batch: RecordBatch) -> Result<()> {
        let rows = self.reader.read(&batch)?;
        self.gather_row_ids(&rows)?;
        for op in [MergeOp::Insert, MergeOp::Update] {
            if let Some(values) = rows.values_of(op)? {
                let count = values.num_rows();
                self.writer.write(values).await?;
                if op == MergeOp::Insert {
                    self.metrics.inserted.add(count);
                } else {
                    self.metrics.updated.add(count);
                }
            }
        }
        Ok(())
    }

    /// The row ids of deleted and updated rows, per data file; a position
    /// acted on twice is a duplicate match.
    fn gather_row_ids(&mut self, rows: &MergeRows) -> Result<()> {
        for i in 0..rows.ops.len() {
            let op = match rows.op(i) {
                Some(op @ (MergeOp::Delete | MergeOp::Update)) => op,
                _ => continue,
            };
            let (file, pos) = rows.row_id(i)?;
            let per_file = match self.positions.get_mut(file) {
                Some(set) => set,
                None => self.positions.entry(file.to_string()).or_default(),
            };
            if !per_file.insert(pos)? {
                return Err(rows.duplicate_match(i, file, pos));
            }
            if op == MergeOp::Delete {
                self.metrics.deleted.add(1);
            }
        }
        Ok(())
    }

    /// Writes one position delete file per touched data file and returns
    /// the fragment: added data and delete files, counters.
    async fn finish(&mut self) -> Result<Vec<Fragment>> {
        let positions = std::mem::take(&mut self.positions);
        let mut fragments = vec![];
        for (file, set) in positions {
            let sorted: Vec<i64> = set.iter().collect();
            let delete = self.deletes.write(&file, &sorted).await?;
            self.delete_files.push(delete.file_path().to_string());
            self.metrics.delete_files_added.add(1);
            self.metrics
                .bytes_written
                .add(delete.file_size_in_bytes() as usize);
            fragments.push(Fragment::AddedDeleteFile {
                record_count: delete.record_count(),
                delete_file_json: self.json(delete, &StructType::new(vec![]))?,
            });
        }
        let added = self.writer.close().await?;
        self.metrics.files_added.add(added.len());
        self.metrics
            .bytes_written
            .add(added.iter().map(|f| f.file_size_in_bytes() as usize).sum());
        let partition_type = self.metadata.default_partition_type().clone();
        for file in added {
            fragments.push(Fragment::AddedFile {
                record_count: file.record_count(),
                data_file_json: self.json(file, &partition_type)?,
            });
        }
        fragments.extend(self.metrics.stats());
        Ok(fragments)
    }

    fn json(&self, file: DataFile, partition_type: &StructType) -> Result<String> {
        serialize_data_file_to_json(file, partition_type, self.metadata.format_version())
            .map_err(iceberg_err)
    }
}
