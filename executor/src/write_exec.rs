//! `IcebergWriteExec`: writes its input as Parquet data files of one Iceberg
//! table (fanned out by partition for partitioned tables) and emits one row
//! per data file written: the file's manifest entry as JSON, for the
//! coordinator to commit. Nothing is visible to readers until that commit.
//!
//! File names carry the statement's write id, the task partition and a fresh
//! id per execution, so a re-run task attempt never overwrites another's file.
//! A task that fails deletes the files it wrote. Rows that come in the
//! table's write order (`write_order.rs`) make files that record it.

use std::any::Any;
use std::fmt;
use std::sync::{Arc, LazyLock};

use arrow::array::{ArrayRef, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::error::Result;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{Distribution, EquivalenceProperties, OrderingRequirements};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, Partitioning,
    PlanProperties,
};
use futures::StreamExt;
use iceberg::arrow::{schema_to_arrow_schema, RecordBatchPartitionSplitter};
use iceberg::io::FileIO;
use iceberg::spec::{serialize_data_file_to_json, DataFile, DataFileFormat, TableMetadata};
use iceberg::writer::base_writer::data_file_writer::DataFileWriterBuilder;
use iceberg::writer::file_writer::location_generator::{
    DefaultFileNameGenerator, DefaultLocationGenerator,
};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::partitioning::fanout_writer::FanoutWriter;
use iceberg::writer::partitioning::PartitioningWriter;
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};

use crate::file_io::{file_io_from_props, StorageProps};
use crate::iceberg_err;
use crate::parquet_properties::data_file_properties;
use crate::write_order::{sorted_input_order_id, with_sort_order_id, write_ordering};
use icemerge_proto::error::internal;

/// Schema of the writer's output: one row per data file written.
pub static WRITE_RESULT_SCHEMA: LazyLock<SchemaRef> = LazyLock::new(|| {
    Arc::new(Schema::new(vec![Field::new(
        "data_file",
        DataType::Utf8,
        false,
    )]))
});

/// Writes its input partitions as data files of `table`.
#[derive(Debug, Clone)]
pub struct IcebergWriteExec {
    pub table: String,
    pub metadata: Arc<TableMetadata>,
    pub file_io_props: StorageProps,
    pub write_id: String,
    pub input: Arc<dyn ExecutionPlan>,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl IcebergWriteExec {
    pub fn new(
        table: String,
        metadata: Arc<TableMetadata>,
        file_io_props: impl Into<StorageProps>,
        write_id: String,
        input: Arc<dyn ExecutionPlan>,
    ) -> Self {
        let partitions = input.output_partitioning().partition_count();
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(WRITE_RESULT_SCHEMA.clone()),
            Partitioning::UnknownPartitioning(partitions),
            EmissionType::Final,
            Boundedness::Bounded,
        ));
        Self {
            table,
            metadata,
            file_io_props: file_io_props.into(),
            write_id,
            input,
            properties,
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }
}

impl DisplayAs for IcebergWriteExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let spec = self.metadata.default_partition_spec();
        write!(f, "IcebergWriteExec: table={}", self.table)?;
        if !spec.is_unpartitioned() {
            let fields: Vec<String> = spec
                .fields()
                .iter()
                .map(|p| format!("{}={}", p.name, p.transform))
                .collect();
            write!(f, ", partitioned_by=[{}]", fields.join(", "))?;
        }
        Ok(())
    }
}

impl ExecutionPlan for IcebergWriteExec {
    fn name(&self) -> &str {
        "IcebergWriteExec"
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn required_input_distribution(&self) -> Vec<Distribution> {
        vec![Distribution::UnspecifiedDistribution]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    /// The table's write order, within each task (`write_order.rs`).
    fn required_input_ordering(&self) -> Vec<Option<OrderingRequirements>> {
        vec![write_ordering(&self.metadata).map(|(_, ordering)| ordering.into())]
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let input = children
            .pop()
            .ok_or_else(|| internal("IcebergWriteExec needs one child"))?;
        Ok(Arc::new(IcebergWriteExec::new(
            self.table.clone(),
            self.metadata.clone(),
            self.file_io_props.clone(),
            self.write_id.clone(),
            input,
        )))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let sort_order_id = sorted_input_order_id(&self.metadata, &self.input);
        let input = self.input.execute(partition, context)?;
        let metadata = self.metadata.clone();
        let file_io = file_io_from_props(&self.file_io_props);
        let prefix = crate::cleanup::task_file_prefix(&self.write_id, partition);
        let rows_written = MetricBuilder::new(&self.metrics).counter("rows_written", partition);
        let files_written = MetricBuilder::new(&self.metrics).counter("files_written", partition);
        let bytes_written = MetricBuilder::new(&self.metrics).counter("bytes_written", partition);
        let output_rows = MetricBuilder::new(&self.metrics).output_rows(partition);
        let stream = futures::stream::once(async move {
            let mut writer = TableFileWriter::try_new(&metadata, file_io, prefix).await?;
            let result = async {
                let mut input = input;
                while let Some(batch) = input.next().await {
                    let batch = batch?;
                    rows_written.add(batch.num_rows());
                    writer.write(batch).await?;
                }
                writer.close().await
            }
            .await;
            let files = match result {
                Ok(files) => files,
                Err(e) => {
                    writer.abort().await;
                    return Err(e);
                }
            };
            let files = match sort_order_id {
                Some(id) => files
                    .iter()
                    .map(|f| with_sort_order_id(f, metadata.default_partition_spec_id(), id))
                    .collect::<Result<Vec<_>>>()?,
                None => files,
            };
            files_written.add(files.len());
            bytes_written.add(files.iter().map(|f| f.file_size_in_bytes() as usize).sum());
            let partition_type = metadata.default_partition_type().clone();
            let json = files
                .into_iter()
                .map(|f| serialize_data_file_to_json(f, &partition_type, metadata.format_version()))
                .collect::<iceberg::Result<Vec<_>>>()
                .map_err(iceberg_err)?;
            output_rows.add(json.len());
            let column: ArrayRef = Arc::new(StringArray::from(json));
            Ok(RecordBatch::try_new(
                WRITE_RESULT_SCHEMA.clone(),
                vec![column],
            )?)
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            WRITE_RESULT_SCHEMA.clone(),
            stream,
        )))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

type DataWriterBuilder =
    DataFileWriterBuilder<ParquetWriterBuilder, DefaultLocationGenerator, DefaultFileNameGenerator>;

/// A data-file writer for one table: partitioned (fan-out by partition key)
/// or not. Converts incoming batches to the table's Arrow schema.
pub struct TableFileWriter {
    arrow_schema: SchemaRef,
    data_location: String,
    prefix: String,
    splitter: Option<RecordBatchPartitionSplitter>,
    fanout: Option<FanoutWriter<DataWriterBuilder>>,
    single: Option<<DataWriterBuilder as IcebergWriterBuilder>::R>,
}

/// The most rows a [`TableFileWriter`] hands its file writer at once: the
/// file writer checks the file's size against the table's
/// `write.target-file-size-bytes` before each write, so a file ends within
/// this many rows of its target whatever the session's batch size.
pub const ROWS_PER_WRITE: usize = 8192;

impl TableFileWriter {
    /// Writer for `metadata`'s current schema and default partition spec.
    /// `prefix` must be unique per task attempt.
    pub async fn try_new(
        metadata: &TableMetadata,
        file_io: FileIO,
        prefix: String,
    ) -> Result<Self> {
        let schema = metadata.current_schema().clone();
        let arrow_schema = Arc::new(schema_to_arrow_schema(&schema).map_err(iceberg_err)?);
        let target_size = metadata
            .table_properties()
            .map(|p| p.write_target_file_size_bytes)
            .map_err(iceberg_err)?;
        // The table's `write.parquet.*` settings (dictionary pages capped
        // at 64 KiB unless it sets them: see `parquet_properties`).
        let table = metadata.location().to_string();
        let props = data_file_properties(&table, metadata.properties())?;
        let parquet = ParquetWriterBuilder::new(props, schema.clone());
        let rolling = RollingFileWriterBuilder::new(
            parquet,
            target_size,
            file_io.clone(),
            DefaultLocationGenerator::new(metadata).map_err(iceberg_err)?,
            DefaultFileNameGenerator::new(prefix.clone(), None, DataFileFormat::Parquet),
        );
        let builder = DataFileWriterBuilder::new(rolling);
        let spec = metadata.default_partition_spec();
        let (splitter, fanout, single) = if spec.is_unpartitioned() {
            (
                None,
                None,
                Some(builder.build(None).await.map_err(iceberg_err)?),
            )
        } else {
            let splitter = RecordBatchPartitionSplitter::try_new_with_computed_values(
                schema.clone(),
                spec.clone(),
            )
            .map_err(iceberg_err)?;
            (Some(splitter), Some(FanoutWriter::new(builder)), None)
        };
        Ok(Self {
            arrow_schema,
            data_location: crate::cleanup::data_location(metadata),
            prefix,
            splitter,
            fanout,
            single,
        })
    }

    /// The table's Arrow schema (with Parquet field ids), which `write` expects.
    pub fn arrow_schema(&self) -> &SchemaRef {
        &self.arrow_schema
    }

    /// Writes one batch whose columns are the table's columns, in order,
    /// at most [`ROWS_PER_WRITE`] rows at a time.
    pub async fn write(&mut self, batch: RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let batch = crate::scan_exec::conform(&self.arrow_schema, batch)?;
        let mut offset = 0;
        while offset < batch.num_rows() {
            let rows = ROWS_PER_WRITE.min(batch.num_rows() - offset);
            self.write_rows(batch.slice(offset, rows)).await?;
            offset += rows;
        }
        Ok(())
    }

    async fn write_rows(&mut self, batch: RecordBatch) -> Result<()> {
        if let (Some(splitter), Some(fanout)) = (&self.splitter, &mut self.fanout) {
            for (key, part) in splitter.split(&batch).map_err(iceberg_err)? {
                fanout.write(key, part).await.map_err(iceberg_err)?;
            }
        } else if let Some(single) = &mut self.single {
            single.write(batch).await.map_err(iceberg_err)?;
        }
        Ok(())
    }

    /// Finishes every open file and returns the data files written.
    pub async fn close(&mut self) -> Result<Vec<DataFile>> {
        if let Some(fanout) = self.fanout.take() {
            return fanout.close().await.map_err(iceberg_err);
        }
        if let Some(mut single) = self.single.take() {
            return single.close().await.map_err(iceberg_err);
        }
        Ok(vec![])
    }

    /// Best effort removal of whatever this writer put in the warehouse.
    pub async fn abort(&mut self) {
        self.fanout = None;
        self.single = None;
        crate::cleanup::delete_files_with_prefix(&self.data_location, &self.prefix);
    }
}
