//! `IcebergTableProvider`: an Iceberg table as a DataFusion table. A provider
//! pins the snapshot that was current when the table was loaded; its scan
//! plans the files (pruned by the pushed filters) into an `IcebergScanExec`
//! and its `insert_into` plans an `IcebergWriteExec` whose output the
//! coordinator commits.

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::Result;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;
use futures::TryStreamExt;
use iceberg::arrow::schema_to_arrow_schema;

use super::delete_scope::narrow_position_deletes;
use super::snapshot_schema::{promoted_columns, without_columns, SnapshotSchema};
use iceberg::expr::Predicate;
use iceberg::table::Table;
use icemerge_executor::deletes::refuse_deletion_vector;
use icemerge_executor::iceberg_err;
use icemerge_executor::scan_exec::{bin_pack, IcebergScanExec};
use icemerge_executor::write_exec::IcebergWriteExec;
use icemerge_executor::write_order::sort_for_write;

use icemerge_proto::merge_rows::{FILE_COLUMN, POS_COLUMN};

use icemerge_executor::filter_pushdown::to_iceberg_predicate;
use icemerge_proto::error::{internal, invalid_input, not_found, unsupported};

/// One Iceberg table at one snapshot.
#[derive(Debug, Clone)]
pub struct IcebergTableProvider {
    pub name: String,
    pub table: Table,
    pub schema: SchemaRef,
    pub file_io_props: HashMap<String, String>,
    /// The MERGE target: scans emit the row id columns `_file` and `_pos`
    /// when the projection asks for them (last); a projection without them
    /// (an insert-only merge's anti join) is a plain scan marked as the
    /// target's (`IcebergScanExec::merge_target`).
    pub row_ids: bool,
    /// Prunes files (never rows) with this predicate too: a MERGE's dynamic
    /// pruning from its source's key values.
    pub pruning: Option<Predicate>,
    /// Where `pruning` came from, shown after it in EXPLAIN (`from
    /// statistics`, `from probe`).
    pub pruning_origin: Option<&'static str>,
    /// The snapshot read instead of the current one (time travel); such a
    /// table cannot be written.
    pub snapshot_id: Option<i64>,
}

/// An Iceberg schema as the Arrow schema DataFusion plans with (field-id
/// metadata stripped).
fn arrow_schema(schema: &iceberg::spec::Schema) -> Result<SchemaRef> {
    let arrow = schema_to_arrow_schema(schema).map_err(iceberg_err)?;
    let arrow = iceberg::arrow::strip_metadata_from_schema(&arrow).map_err(iceberg_err)?;
    Ok(Arc::new(arrow))
}

impl IcebergTableProvider {
    pub fn try_new(
        name: String,
        table: Table,
        file_io_props: HashMap<String, String>,
    ) -> Result<Self> {
        let schema = arrow_schema(table.metadata().current_schema())?;
        Ok(Self {
            name,
            table,
            schema,
            file_io_props,
            row_ids: false,
            pruning: None,
            pruning_origin: None,
            snapshot_id: None,
        })
    }

    /// The same table as of `snapshot_id` (which must exist), with the
    /// schema that snapshot was written with.
    pub fn at_snapshot(mut self, snapshot_id: i64) -> Result<Self> {
        let metadata = self.table.metadata();
        let snapshot = metadata.snapshot_by_id(snapshot_id).ok_or_else(|| {
            not_found(format!("table {} has no snapshot {snapshot_id}", self.name))
        })?;
        let schema = snapshot.schema(metadata).map_err(iceberg_err)?;
        self.schema = arrow_schema(&schema)?;
        self.snapshot_id = Some(snapshot_id);
        Ok(self)
    }

    /// The same table, its scans pruning data files with `predicate` (files
    /// that cannot hold a row satisfying it are not read).
    pub fn with_pruning(mut self, predicate: Predicate) -> Self {
        self.pruning = Some(predicate);
        self
    }

    /// The same table, saying in EXPLAIN where its pruning predicate came
    /// from.
    pub fn with_pruning_origin(mut self, origin: &'static str) -> Self {
        self.pruning_origin = Some(origin);
        self
    }

    /// The same table with `_file` (Utf8View: every row's view points at
    /// the one copy of its file's path) and `_pos` (Int64) after its
    /// columns.
    pub fn with_row_ids(mut self) -> Self {
        let mut fields: Vec<_> = self.schema.fields().iter().cloned().collect();
        fields.push(Arc::new(arrow::datatypes::Field::new(
            FILE_COLUMN,
            arrow::datatypes::DataType::Utf8View,
            false,
        )));
        fields.push(Arc::new(arrow::datatypes::Field::new(
            POS_COLUMN,
            arrow::datatypes::DataType::Int64,
            false,
        )));
        self.schema = Arc::new(arrow::datatypes::Schema::new(fields));
        self.row_ids = true;
        self
    }

    /// Plans the scan of `columns` with `filters` pushed into file pruning.
    pub async fn plan_scan(
        &self,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
        target_partitions: usize,
    ) -> Result<IcebergScanExec> {
        let merge_target = self.row_ids;
        let row_ids = match (self.row_ids, projection) {
            (true, Some(p)) => {
                let n = self.schema.fields().len();
                let (file, pos) = (p.contains(&(n - 2)), p.contains(&(n - 1)));
                if (file || pos) && (p.len() < 2 || p[p.len() - 2..] != [n - 2, n - 1]) {
                    return Err(internal(format!(
                        "row-id scan of {} must project _file and _pos last, got {p:?}",
                        self.name
                    )));
                }
                file
            }
            (row_ids, _) => row_ids,
        };
        let schema = match projection {
            Some(p) => Arc::new(self.schema.project(p)?),
            None => self.schema.clone(),
        };
        let data_fields = schema.fields().len() - if row_ids { 2 } else { 0 };
        let columns: Vec<String> = schema.fields()[..data_fields]
            .iter()
            .map(|f| f.name().clone())
            .collect();
        let predicate = to_iceberg_predicate(filters);
        let predicate_text = predicate
            .as_ref()
            .map(|p| p.to_string())
            .unwrap_or_default();
        let dynamic_text = self
            .pruning
            .as_ref()
            .map(|p| match self.pruning_origin {
                Some(origin) => format!("{p} from {origin}"),
                None => p.to_string(),
            })
            .unwrap_or_default();
        let predicate = match (predicate, self.pruning.clone()) {
            (Some(p), Some(d)) => Some(p.and(d)),
            (p, d) => p.or(d),
        };
        let metadata = self.table.metadata();
        let snapshot = match self.snapshot_id {
            Some(id) => metadata.snapshot_by_id(id),
            None => metadata.current_snapshot(),
        };
        // The current snapshot is read with the current schema, a pinned
        // one with its own.
        let read_schema = match (self.snapshot_id, snapshot) {
            (Some(_), Some(snapshot)) => snapshot.schema(metadata).map_err(iceberg_err)?,
            _ => metadata.current_schema().clone(),
        };
        let promoted = promoted_columns(metadata, &read_schema);
        let predicate = predicate.and_then(|p| without_columns(&p, &promoted));
        let prunes_only = self.pruning.is_some();
        let pruned_by = predicate.clone();
        let finish = move |exec: IcebergScanExec| {
            let exec = exec
                .with_dynamic_predicate(dynamic_text)
                .with_pruned_by(pruned_by);
            if merge_target {
                exec.as_merge_target(row_ids)
            } else {
                exec
            }
        };
        let Some(snapshot) = snapshot else {
            return Ok(finish(IcebergScanExec::new(
                self.name.clone(),
                schema,
                self.file_io_props.clone(),
                vec![],
                0,
                predicate_text,
                limit,
            )));
        };
        let snapshot_schema = snapshot.schema(metadata).map_err(iceberg_err)?;
        let filter_rows = promoted.is_empty();
        let evolved = SnapshotSchema::differs(read_schema, snapshot_schema);
        let (planned_columns, predicate) = match &evolved {
            Some(evolved) => (
                evolved.columns(&columns),
                predicate.and_then(|p| evolved.predicate(&p)),
            ),
            None => (columns.clone(), predicate),
        };
        let mut builder = self.table.scan().snapshot_id(snapshot.snapshot_id());
        if row_ids {
            // Positions count every row of a file: no row-level filtering.
            builder = builder
                .with_row_group_filtering_enabled(false)
                .with_row_selection_enabled(false);
        }
        builder = if planned_columns.is_empty() {
            builder.select_empty()
        } else {
            builder.select(planned_columns)
        };
        if let Some(p) = predicate {
            builder = builder.with_filter(p);
        }
        let scan = builder.build().map_err(iceberg_err)?;
        let mut tasks: Vec<_> = scan
            .plan_files()
            .await
            .map_err(iceberg_err)?
            .map_ok(move |mut task| {
                if !row_ids && (prunes_only || !filter_rows) {
                    // Dynamic pruning never filters rows, and a promoted
                    // column is filtered by the engine above. A row-id scan
                    // keeps the predicate to skip row groups with; it never
                    // filters rows by it (every row keeps its position).
                    task.predicate = None;
                }
                // Partition structs do not serialize; the reader does not need them
                // because our data files carry every column.
                task.partition = None;
                task.partition_spec = None;
                task.name_mapping = None;
                if let Some(evolved) = &evolved {
                    evolved.read_task(&mut task, &columns);
                }
                task
            })
            .try_collect()
            .await
            .map_err(iceberg_err)?;
        // Deletion vectors are refused by name here, for every scan on
        // both engines, before the narrowing could leave one off the files
        // that are read: a partition with deletion vectors is never read.
        for task in &tasks {
            for delete in &task.deletes {
                refuse_deletion_vector(&self.name, &task.data_file_path, &delete.file_path)?;
            }
        }
        narrow_position_deletes(&self.table, snapshot, &mut tasks).await?;
        let total_files = snapshot
            .summary()
            .additional_properties
            .get("total-data-files")
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(tasks.len() as u64);
        let pruned = total_files.saturating_sub(tasks.len() as u64);
        Ok(finish(IcebergScanExec::new(
            self.name.clone(),
            schema,
            self.file_io_props.clone(),
            bin_pack(tasks, target_partitions),
            pruned,
            predicate_text,
            limit,
        )))
    }
}

#[async_trait]
impl TableProvider for IcebergTableProvider {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let target = state.config().target_partitions();
        // A limit is only safe to apply in the scan when no filter remains above it.
        let limit = if filters.is_empty() { limit } else { None };
        Ok(Arc::new(
            self.plan_scan(projection, filters, limit, target).await?,
        ))
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    async fn insert_into(
        &self,
        _state: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if let Some(id) = self.snapshot_id {
            return Err(invalid_input(format!(
                "table {} as of snapshot {id} cannot be written: time travel reads a past snapshot",
                self.name
            )));
        }
        // OVERWRITE writes as INSERT does; the session commits the files
        // as replacing partitions (`commit::commit_insert_overwrite`).
        if insert_op == InsertOp::Replace {
            return Err(unsupported(format!(
                "{insert_op} into an Iceberg table is not supported; use MERGE"
            )));
        }
        // Each writer task sorts its rows by the table's write order.
        let input = sort_for_write(self.table.metadata(), input);
        Ok(Arc::new(IcebergWriteExec::new(
            self.name.clone(),
            self.table.metadata_ref(),
            self.file_io_props.clone(),
            uuid::Uuid::new_v4().simple().to_string(),
            input,
        )))
    }
}
