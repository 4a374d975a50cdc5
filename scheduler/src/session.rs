//! A `Session` runs SQL statements against the Iceberg catalog on one engine.
//! It owns the DataFusion context (with the Iceberg catalog as its default
//! catalog), dispatches each statement — DDL to the catalog, queries and
//! writes to the engine as one physical plan — and commits writes.

use std::sync::{Arc, Mutex};

use arrow::array::{ArrayRef, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use ballista_core::extension::SessionConfigExt;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::SessionStateBuilder;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::metrics::{MetricValue, MetricsSet};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::parser::{DFParser, Statement as DFStatement};
use datafusion::sql::sqlparser::ast::{ObjectName, ObjectType, Statement};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use iceberg::arrow::arrow_schema_to_schema_auto_assign_ids;
use iceberg::{Catalog, NamespaceIdent, TableCreation, TableIdent};
use icemerge_executor::iceberg_err;
use icemerge_executor::write_exec::IcebergWriteExec;
use icemerge_planner::ddl::{self, CreateTable};
use icemerge_planner::explain;
use icemerge_planner::merge as merge_sql;
use icemerge_planner::merge::ExplainMerge;

use crate::catalog::{open_catalog, CatalogOptions, OpenCatalog};
use crate::catalog_provider::IcebergCatalogProvider;
use crate::cluster::InProcessCluster;
use crate::commit::{commit_append, data_files_from_batches, discard_write};
use crate::engine::{Engine, EngineKind, JobControl, SchedulerTarget};
use crate::merge::{
    collect_fragments, commit_merge, discard_uncommitted, plan_merge, MergeOutcome,
};
use crate::table_functions::{FileKind, ReadFileFunction};

/// The namespace of unqualified table names.
pub const DEFAULT_NAMESPACE: &str = "default";

/// How to open a session.
#[derive(Debug, Clone, Default)]
pub struct SessionOptions {
    pub catalog: CatalogOptions,
    pub engine: EngineKind,
    /// Executors of the in-process cluster (default: available cores).
    pub executors: Option<usize>,
    /// Partitions per stage (default: available cores, at least 2 per executor).
    pub target_partitions: Option<usize>,
}

/// What a statement produced.
#[derive(Debug, Clone)]
pub enum StatementOutput {
    /// Rows (queries, and the row count of INSERT / MERGE).
    Rows {
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
    },
    /// A statement without rows (DDL): what it did.
    Done { message: String },
}

impl StatementOutput {
    /// Total number of rows in a `Rows` output.
    pub fn row_count(&self) -> usize {
        match self {
            StatementOutput::Rows { batches, .. } => batches.iter().map(|b| b.num_rows()).sum(),
            StatementOutput::Done { .. } => 0,
        }
    }
}

/// A SQL session on one catalog and engine.
pub struct Session {
    ctx: SessionContext,
    catalog: OpenCatalog,
    provider: Arc<IcebergCatalogProvider>,
    engine: Engine,
    last_job: Mutex<Option<String>>,
    last_metrics: Mutex<OperatorMetrics>,
    control: JobControl,
}

/// Named counters summed over operators and tasks.
#[derive(Debug, Clone, Default)]
pub struct OperatorMetrics(pub std::collections::BTreeMap<String, usize>);

impl OperatorMetrics {
    /// The total of counter `name` (0 when absent).
    pub fn get(&self, name: &str) -> usize {
        self.0.get(name).copied().unwrap_or(0)
    }

    fn add(&mut self, set: &MetricsSet) {
        for metric in set.iter() {
            if let MetricValue::Count { name, count } = metric.value() {
                *self.0.entry(name.to_string()).or_default() += count.value();
            }
        }
    }

    /// Sums the counters of every operator of an executed plan.
    pub fn from_plan(plan: &dyn ExecutionPlan) -> Self {
        let mut totals = Self::default();
        let mut stack = vec![plan];
        while let Some(node) = stack.pop() {
            if let Some(set) = node.metrics() {
                totals.add(&set);
            }
            stack.extend(node.children().into_iter().map(|c| c.as_ref()));
        }
        totals
    }
}

fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
}

/// The DataFusion settings icemerge runs with, on every engine.
pub fn session_config(target_partitions: usize) -> SessionConfig {
    // Broadcast promotion of joins is off: it is unsafe for outer joins,
    // which MERGE relies on.
    let mut config = SessionConfig::new_with_ballista()
        .with_ballista_broadcast_join_threshold_bytes(0)
        .with_target_partitions(target_partitions)
        .with_information_schema(true)
        .with_default_catalog_and_schema(crate::catalog::DEFAULT_CATALOG_NAME, DEFAULT_NAMESPACE)
        .with_create_default_catalog_and_schema(false);
    let options = config.options_mut();
    options.optimizer.prefer_hash_join = true;
    options.sql_parser.map_string_types_to_utf8view = false;
    options.execution.parquet.schema_force_view_types = false;
    options.sql_parser.enable_ident_normalization = true;
    config
}

impl Session {
    /// Opens the catalog and starts the engine.
    pub async fn open(options: SessionOptions) -> Result<Self> {
        let executors = options.executors.unwrap_or_else(cores).max(1);
        let target_partitions = options
            .target_partitions
            .unwrap_or_else(|| match options.engine {
                EngineKind::Local => cores(),
                EngineKind::Cluster => (2 * executors).max(cores()),
            });
        let mut config = session_config(target_partitions);
        if options.engine == EngineKind::Local {
            // In one process a hash join may build one table for all
            // partitions (DataFusion's defaults), outer joins included;
            // Ballista cannot, so the cluster keeps every join partitioned.
            let defaults = datafusion::config::OptimizerOptions::default();
            let optimizer = &mut config.options_mut().optimizer;
            optimizer.hash_join_single_partition_threshold =
                defaults.hash_join_single_partition_threshold;
            optimizer.hash_join_single_partition_threshold_rows =
                defaults.hash_join_single_partition_threshold_rows;
        }
        let engine = match options.engine {
            EngineKind::Local => Engine::Local,
            EngineKind::Cluster => Engine::Cluster(Arc::new(
                InProcessCluster::start(config.clone(), executors, 2).await?,
            )),
        };
        Self::open_with_engine(&options, config, engine).await
    }

    /// Opens the catalog and runs every plan on an already running Ballista
    /// scheduler (the `icemerge-scheduler` process's own). `options.engine`
    /// and `options.executors` are ignored; partitions per stage default to
    /// twice the available cores (at least 4).
    pub async fn open_on_scheduler(
        options: SessionOptions,
        scheduler: SchedulerTarget,
    ) -> Result<Self> {
        let target_partitions = options
            .target_partitions
            .unwrap_or_else(|| (2 * cores()).max(4));
        let config = session_config(target_partitions);
        Self::open_with_engine(&options, config, Engine::Scheduler(scheduler)).await
    }

    async fn open_with_engine(
        options: &SessionOptions,
        config: SessionConfig,
        engine: Engine,
    ) -> Result<Self> {
        let catalog = open_catalog(&options.catalog).await?;
        let state = SessionStateBuilder::new()
            .with_config(config.clone())
            .with_default_features()
            .build();
        let ctx = SessionContext::new_with_state(state);
        let provider = Arc::new(IcebergCatalogProvider::new(
            catalog.catalog.clone(),
            catalog.file_io_props.clone(),
        ));
        provider.refresh().await?;
        ctx.register_catalog(catalog.name.clone(), provider.clone());
        ctx.register_udtf(
            "read_parquet",
            Arc::new(ReadFileFunction {
                kind: FileKind::Parquet,
                config: config.clone(),
            }),
        );
        ctx.register_udtf(
            "read_csv",
            Arc::new(ReadFileFunction {
                kind: FileKind::Csv,
                config,
            }),
        );
        Ok(Self {
            ctx,
            catalog,
            provider,
            engine,
            last_job: Mutex::new(None),
            control: JobControl::default(),
            last_metrics: Mutex::new(OperatorMetrics::default()),
        })
    }

    /// The DataFusion context (for planning in tests and tools).
    pub fn context(&self) -> &SessionContext {
        &self.ctx
    }

    /// The Iceberg catalog.
    pub fn catalog(&self) -> Arc<dyn Catalog> {
        self.catalog.catalog.clone()
    }

    /// The in-process cluster, when the engine is `cluster`.
    pub fn cluster(&self) -> Option<&InProcessCluster> {
        match &self.engine {
            Engine::Cluster(c) => Some(c),
            Engine::Local | Engine::Scheduler(_) => None,
        }
    }

    /// The Ballista job id of the last statement run on the cluster.
    pub fn last_job_id(&self) -> Option<String> {
        self.last_job.lock().expect("lock").clone()
    }

    /// Runs every statement of `sql` in order; stops at the first error.
    pub async fn execute(&self, sql: &str) -> Result<Vec<StatementOutput>> {
        let mut outputs = vec![];
        for statement in ddl::split_statements(sql)? {
            outputs.push(self.execute_one(&statement).await?);
        }
        Ok(outputs)
    }

    /// Cancels the statement executing on this session (from another task):
    /// its Ballista job is cancelled, so the statement fails, commits nothing
    /// and deletes the files it wrote. Returns the cancelled job's id, None
    /// if no job was running (local engine, or nothing to cancel).
    pub async fn cancel(&self) -> Result<Option<String>> {
        match self.engine.scheduler_url() {
            Some(url) => {
                self.control
                    .cancel(&url, std::time::Duration::from_secs(30))
                    .await
            }
            None => Ok(None),
        }
    }

    /// The Ballista job the executing statement is running now, if any.
    pub fn running_job_id(&self) -> Option<String> {
        self.control.running_job_id()
    }

    /// Runs one statement.
    pub async fn execute_one(&self, sql: &str) -> Result<StatementOutput> {
        let _active = self.control.begin();
        match self.execute_statement(sql).await {
            Ok(out) => Ok(out),
            Err(e) => Err(self.name_missing_namespace(e).await),
        }
    }

    /// "table 'icemerge.ns.t' not found" where `ns` does not exist becomes
    /// "schema (namespace) 'ns' does not exist".
    async fn name_missing_namespace(&self, e: DataFusionError) -> DataFusionError {
        let message = e.to_string();
        let Some(rest) = message.split("table '").nth(1) else {
            return e;
        };
        let Some(name) = rest
            .split("' not found")
            .next()
            .filter(|_| rest.contains("' not found"))
        else {
            return e;
        };
        let parts: Vec<&str> = name.split('.').collect();
        let namespace = match parts.as_slice() {
            [_, ns, _] | [ns, _] => ns.to_string(),
            _ => return e,
        };
        match self
            .catalog
            .catalog
            .namespace_exists(&NamespaceIdent::new(namespace.clone()))
            .await
        {
            Ok(false) => {
                DataFusionError::Plan(format!("schema (namespace) '{namespace}' does not exist"))
            }
            _ => e,
        }
    }

    async fn execute_statement(&self, sql: &str) -> Result<StatementOutput> {
        if let Some(create) = ddl::parse_create_table(sql)? {
            return self.create_table(create).await;
        }
        if let Some((mode, merge_sql)) = merge_sql::strip_explain_merge(sql) {
            let merge = merge_sql::parse_merge(&merge_sql)?.ok_or_else(|| {
                DataFusionError::Plan("EXPLAIN: expected a MERGE statement".into())
            })?;
            return self.run_merge(merge, Some(mode)).await;
        }
        if let Some(merge) = merge_sql::parse_merge(sql)? {
            return self.run_merge(merge, None).await;
        }
        let mut statements = DFParser::parse_sql_with_dialect(sql, &GenericDialect {})
            .map_err(|e| DataFusionError::Plan(format!("SQL syntax error: {e}")))?;
        let statement = match (statements.pop_front(), statements.is_empty()) {
            (Some(s), true) => s,
            _ => {
                return Err(DataFusionError::Plan(
                    "expected exactly one statement".into(),
                ))
            }
        };
        if let DFStatement::Statement(inner) = &statement {
            match inner.as_ref() {
                Statement::CreateSchema {
                    schema_name,
                    if_not_exists,
                    ..
                } => {
                    return self
                        .create_schema(&schema_name.to_string(), *if_not_exists)
                        .await;
                }
                Statement::Drop {
                    object_type: ObjectType::Table,
                    if_exists,
                    names,
                    ..
                } => {
                    return self.drop_tables(names, *if_exists).await;
                }
                Statement::Drop {
                    object_type: ObjectType::Schema,
                    if_exists,
                    names,
                    ..
                } => {
                    return self.drop_schemas(names, *if_exists).await;
                }
                _ => {}
            }
        }
        let plan = self.ctx.state().statement_to_plan(statement).await?;
        self.run_logical(plan).await
    }

    async fn run_logical(&self, plan: LogicalPlan) -> Result<StatementOutput> {
        match &plan {
            LogicalPlan::Ddl(_) | LogicalPlan::Statement(_) => {
                self.ctx.execute_logical_plan(plan).await?.collect().await?;
                return Ok(StatementOutput::Done {
                    message: "OK".into(),
                });
            }
            LogicalPlan::Explain(_) | LogicalPlan::Analyze(_) | LogicalPlan::DescribeTable(_) => {
                let df = self.ctx.execute_logical_plan(plan).await?;
                let schema = Arc::new(df.schema().as_arrow().clone());
                return Ok(StatementOutput::Rows {
                    schema,
                    batches: df.collect().await?,
                });
            }
            _ => {}
        }
        let physical = self.ctx.state().create_physical_plan(&plan).await?;
        if let Some(writer) = physical.as_any().downcast_ref::<IcebergWriteExec>() {
            let rows = self.run_write(writer, physical.clone()).await?;
            return Ok(count_output(rows));
        }
        let schema = physical.schema();
        let run = self.run_plan(physical).await?;
        Ok(StatementOutput::Rows {
            schema,
            batches: run,
        })
    }

    async fn run_plan(&self, plan: Arc<dyn ExecutionPlan>) -> Result<Vec<RecordBatch>> {
        let run = self
            .engine
            .run(&self.ctx, plan.clone(), &self.control)
            .await?;
        let metrics = match (self.engine.ledger(), &run.job_id) {
            (Some(ledger), Some(job)) => {
                let mut totals = OperatorMetrics::default();
                for task in ledger.tasks_of(job) {
                    for set in &task.metrics {
                        totals.add(set);
                    }
                }
                totals
            }
            _ => OperatorMetrics::from_plan(plan.as_ref()),
        };
        *self.last_job.lock().expect("lock") = run.job_id.clone();
        *self.last_metrics.lock().expect("lock") = metrics;
        Ok(run.batches)
    }

    /// Counters summed over every operator and task of the last plan run
    /// (e.g. `files_scanned`, `bytes_scanned`, `rows_written`).
    pub fn last_metrics(&self) -> OperatorMetrics {
        self.last_metrics.lock().expect("lock").clone()
    }

    /// Runs an INSERT's writer plan and commits its files as one snapshot.
    async fn run_write(
        &self,
        writer: &IcebergWriteExec,
        plan: Arc<dyn ExecutionPlan>,
    ) -> Result<u64> {
        let ident = self.table_ident(&writer.table)?;
        let metadata = writer.metadata.clone();
        let write_id = writer.write_id.clone();
        let result = async {
            let batches = self.run_plan(plan).await?;
            let files = data_files_from_batches(&metadata, &batches)?;
            let rows: u64 = files.iter().map(|f| f.record_count()).sum();
            if !files.is_empty() {
                commit_append(&self.catalog, &ident, files).await?;
            }
            Ok(rows)
        }
        .await;
        if result.is_err() {
            discard_write(&metadata, &write_id);
        }
        result
    }

    /// Plans, runs and commits a MERGE (or explains it).
    async fn run_merge(
        &self,
        merge: datafusion::sql::sqlparser::ast::Merge,
        explain: Option<ExplainMerge>,
    ) -> Result<StatementOutput> {
        let target = match &merge.table {
            datafusion::sql::sqlparser::ast::TableFactor::Table { name, .. } => {
                self.object_ident(name)?
            }
            other => {
                return Err(DataFusionError::Plan(format!(
                    "MERGE INTO: the target must be a table, found '{other}'"
                )))
            }
        };
        self.ensure_namespace(target.namespace()).await?;
        if !self
            .catalog
            .catalog
            .table_exists(&target)
            .await
            .map_err(iceberg_err)?
        {
            return Err(DataFusionError::Plan(format!(
                "MERGE INTO: table '{target}' does not exist"
            )));
        }
        let base = self
            .catalog
            .catalog
            .load_table(&target)
            .await
            .map_err(iceberg_err)?;
        let name = format!("{}.{}", target.namespace().to_url_string(), target.name());
        let writers = self.ctx.copied_config().target_partitions();
        let planned = plan_merge(
            &self.ctx,
            merge,
            base,
            name,
            self.catalog.file_io_props.clone(),
            writers,
        )
        .await?;
        let stages = explain::stages(&planned.plan, true);
        match explain {
            Some(ExplainMerge::Text) => {
                return Ok(text_output("plan", explain::render_text(&stages)))
            }
            Some(ExplainMerge::Dot) => {
                return Ok(text_output("plan", explain::render_dot(&stages)))
            }
            _ => {}
        }
        let started = std::time::Instant::now();
        let result = async {
            let batches = self.run_plan(planned.plan.clone()).await?;
            let outcome = collect_fragments(&planned.base, &batches)?;
            let snapshot =
                commit_merge(&self.catalog, &self.catalog.uri, &planned, &outcome).await?;
            Ok::<_, DataFusionError>((outcome, snapshot))
        }
        .await;
        let (outcome, _snapshot) = match result {
            Ok(done) => done,
            Err(e) => {
                discard_uncommitted(&planned, &[]);
                return Err(e);
            }
        };
        discard_uncommitted(&planned, &outcome.added);
        let elapsed = started.elapsed();
        if explain == Some(ExplainMerge::Analyze) {
            return Ok(text_output(
                "plan",
                self.render_analyze(&stages, &outcome, planned.files_pruned, elapsed),
            ));
        }
        Ok(merge_output(
            &outcome,
            self.last_metrics().get("files_scanned") as u64,
        ))
    }

    /// EXPLAIN ANALYZE: the stage graph with figures of the run just made.
    fn render_analyze(
        &self,
        stages: &[explain::Stage],
        outcome: &MergeOutcome,
        files_pruned: u64,
        elapsed: std::time::Duration,
    ) -> String {
        use std::fmt::Write;
        let mut text = explain::render_text(stages);
        let _ = writeln!(
            text,
            "\nPer stage (rows out of the stage's top operator, tasks, time):"
        );
        match (self.engine.ledger(), self.last_job_id()) {
            (Some(ledger), Some(job)) => {
                let tasks = ledger.tasks_of(&job);
                let mut by_stage: std::collections::BTreeMap<usize, Vec<_>> = Default::default();
                for t in tasks {
                    by_stage.entry(t.stage_id).or_default().push(t);
                }
                for (id, tasks) in by_stage {
                    let executors: std::collections::BTreeSet<_> =
                        tasks.iter().map(|t| t.executor_id.clone()).collect();
                    let sum = |name: &str| -> usize {
                        tasks
                            .iter()
                            .flat_map(|t| t.metrics.first())
                            .map(|m| m.sum_by_name(name).map(|v| v.as_usize()).unwrap_or(0))
                            .sum()
                    };
                    let _ = writeln!(
                        text,
                        "  ballista stage {id}: tasks={}, executors={}, rows_in={}, rows_out={}, bytes_shuffled={}, time={}ms",
                        tasks.len(),
                        executors.len(),
                        sum("input_rows"),
                        sum("output_rows"),
                        sum("write_bytes").max(sum("output_bytes")),
                        sum("write_time").max(sum("elapsed_compute")) / 1_000_000,
                    );
                }
            }
            _ => {
                for stage in stages.iter().filter(|s| !s.nodes.is_empty()) {
                    let top = &stage.nodes[0];
                    let metrics = top.metrics();
                    let rows_out = metrics.as_ref().and_then(|m| m.output_rows()).unwrap_or(0);
                    let time = metrics
                        .as_ref()
                        .and_then(|m| m.elapsed_compute())
                        .unwrap_or(0);
                    let rows_in: usize = stage
                        .nodes
                        .last()
                        .and_then(|n| n.metrics())
                        .and_then(|m| m.output_rows())
                        .unwrap_or(0);
                    let _ = writeln!(
                        text,
                        "  stage {}: tasks={}, rows_in={rows_in}, rows_out={rows_out}, compute={}ms",
                        stage.id,
                        stage.tasks,
                        time / 1_000_000
                    );
                }
            }
        }
        let _ = writeln!(
            text,
            "Merge: updated={}, deleted={}, inserted={}, copied={}, files_scanned={}, files_pruned={}, files_rewritten={}, files_removed={}, files_added={}, bytes_read={}, bytes_written={}, wall={}ms",
            outcome.stat("rows_updated"),
            outcome.stat("rows_deleted"),
            outcome.stat("rows_inserted"),
            outcome.stat("rows_copied"),
            self.last_metrics().get("files_scanned"),
            files_pruned,
            self.last_metrics().get("files_rewritten"),
            outcome.stat("files_removed"),
            outcome.stat("files_added"),
            outcome.stat("bytes_read"),
            outcome.stat("bytes_written"),
            elapsed.as_millis()
        );
        text
    }

    fn table_ident(&self, qualified: &str) -> Result<TableIdent> {
        let parts: Vec<&str> = qualified.split('.').collect();
        self.ident_from_parts(&parts.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    /// `[catalog.]namespace.table` or `table` → identifier.
    fn ident_from_parts(&self, parts: &[String]) -> Result<TableIdent> {
        let (namespace, table) = match parts {
            [t] => (DEFAULT_NAMESPACE.to_string(), t.clone()),
            [ns, t] => (ns.clone(), t.clone()),
            [c, ns, t] if *c == self.catalog.name => (ns.clone(), t.clone()),
            [c, _, _] => {
                return Err(DataFusionError::Plan(format!(
                    "unknown catalog '{c}': this session's catalog is '{}'",
                    self.catalog.name
                )))
            }
            _ => {
                return Err(DataFusionError::Plan(format!(
                    "invalid table name '{}'",
                    parts.join(".")
                )))
            }
        };
        let ns = NamespaceIdent::new(namespace);
        Ok(TableIdent::new(ns, table))
    }

    fn object_ident(&self, name: &ObjectName) -> Result<TableIdent> {
        let parts: Vec<String> = name
            .0
            .iter()
            .map(|p| {
                p.as_ident()
                    .map(|i| {
                        if i.quote_style.is_some() {
                            i.value.clone()
                        } else {
                            i.value.to_lowercase()
                        }
                    })
                    .unwrap_or_else(|| p.to_string())
            })
            .collect();
        self.ident_from_parts(&parts)
    }

    async fn ensure_namespace(&self, ns: &NamespaceIdent) -> Result<()> {
        if !self
            .catalog
            .catalog
            .namespace_exists(ns)
            .await
            .map_err(iceberg_err)?
        {
            return Err(DataFusionError::Plan(format!(
                "schema (namespace) '{}' does not exist",
                ns.to_url_string()
            )));
        }
        Ok(())
    }

    async fn create_schema(&self, name: &str, if_not_exists: bool) -> Result<StatementOutput> {
        let name = name.trim_matches('"').to_string();
        let ns = NamespaceIdent::new(name.clone());
        let catalog = &self.catalog.catalog;
        if catalog.namespace_exists(&ns).await.map_err(iceberg_err)? {
            if if_not_exists {
                return Ok(StatementOutput::Done {
                    message: format!("schema {name} already exists"),
                });
            }
            return Err(DataFusionError::Plan(format!(
                "schema (namespace) '{name}' already exists"
            )));
        }
        catalog
            .create_namespace(&ns, Default::default())
            .await
            .map_err(iceberg_err)?;
        self.provider.refresh().await?;
        Ok(StatementOutput::Done {
            message: format!("CREATE SCHEMA {name}"),
        })
    }

    async fn drop_schemas(&self, names: &[ObjectName], if_exists: bool) -> Result<StatementOutput> {
        for name in names {
            let ns = NamespaceIdent::new(name.to_string().trim_matches('"').to_string());
            if !self
                .catalog
                .catalog
                .namespace_exists(&ns)
                .await
                .map_err(iceberg_err)?
            {
                if if_exists {
                    continue;
                }
                return Err(DataFusionError::Plan(format!(
                    "schema (namespace) '{name}' does not exist"
                )));
            }
            self.catalog
                .catalog
                .drop_namespace(&ns)
                .await
                .map_err(iceberg_err)?;
        }
        self.provider.refresh().await?;
        Ok(StatementOutput::Done {
            message: "DROP SCHEMA".into(),
        })
    }

    async fn drop_tables(&self, names: &[ObjectName], if_exists: bool) -> Result<StatementOutput> {
        for name in names {
            let ident = self.object_ident(name)?;
            if !if_exists {
                self.ensure_namespace(ident.namespace()).await?;
            }
            let exists = self
                .catalog
                .catalog
                .table_exists(&ident)
                .await
                .unwrap_or(false);
            if !exists {
                if if_exists {
                    continue;
                }
                return Err(DataFusionError::Plan(format!(
                    "table '{ident}' does not exist"
                )));
            }
            // Like Trino, DROP TABLE removes the data and metadata files too.
            self.catalog
                .catalog
                .purge_table(&ident)
                .await
                .map_err(iceberg_err)?;
        }
        Ok(StatementOutput::Done {
            message: "DROP TABLE".into(),
        })
    }

    async fn create_table(&self, create: CreateTable) -> Result<StatementOutput> {
        let ident = self.ident_from_parts(&create.name)?;
        self.ensure_namespace(ident.namespace()).await?;
        if self
            .catalog
            .catalog
            .table_exists(&ident)
            .await
            .map_err(iceberg_err)?
        {
            if create.if_not_exists {
                return Ok(StatementOutput::Done {
                    message: format!("table {ident} already exists"),
                });
            }
            return Err(DataFusionError::Plan(format!(
                "table '{ident}' already exists"
            )));
        }
        let schema = match (&create.query, create.columns.is_empty()) {
            (_, false) => ddl::build_schema(&create.columns)?,
            (Some(query), true) => {
                let df = self.ctx.sql(query).await?;
                let arrow = df.schema().as_arrow().clone();
                let nullable = Schema::new(
                    arrow
                        .fields()
                        .iter()
                        .map(|f| f.as_ref().clone().with_nullable(true))
                        .collect::<Vec<_>>(),
                );
                arrow_schema_to_schema_auto_assign_ids(&nullable).map_err(|e| {
                    DataFusionError::Plan(format!(
                        "CREATE TABLE {ident} AS: unsupported column type: {e}"
                    ))
                })?
            }
            (None, true) => {
                return Err(DataFusionError::Plan(format!(
                    "CREATE TABLE {ident}: no columns given"
                )));
            }
        };
        let spec = ddl::build_partition_spec(&schema, &create.partition_by)?;
        let properties: std::collections::HashMap<String, String> =
            create.properties.iter().cloned().collect();
        iceberg::spec::TableProperties::try_from(&properties).map_err(|e| {
            DataFusionError::Plan(format!(
                "CREATE TABLE {ident}: invalid table property: {}",
                e.message()
            ))
        })?;
        let creation = TableCreation::builder()
            .name(ident.name().to_string())
            .schema(schema)
            .partition_spec(spec)
            .properties(properties)
            .build();
        self.catalog
            .catalog
            .create_table(ident.namespace(), creation)
            .await
            .map_err(iceberg_err)?;
        let Some(query) = create.query else {
            return Ok(StatementOutput::Done {
                message: format!("CREATE TABLE {ident}"),
            });
        };
        let insert = format!(
            "INSERT INTO {}.{} {query}",
            quote(&ident.namespace().to_url_string()),
            quote(ident.name())
        );
        match Box::pin(self.execute_one(&insert)).await {
            Ok(out) => Ok(out),
            Err(e) => {
                let _ = self.catalog.catalog.drop_table(&ident).await;
                Err(e)
            }
        }
    }
}

fn quote(ident: &str) -> String {
    format!("\"{}\"", ident.replace('"', "\"\""))
}

/// One text column, one row per line.
fn text_output(name: &str, text: String) -> StatementOutput {
    let schema = Arc::new(Schema::new(vec![Field::new(name, DataType::Utf8, false)]));
    let lines: Vec<&str> = text.lines().collect();
    let column: ArrayRef = Arc::new(arrow::array::StringArray::from(lines));
    let batch = RecordBatch::try_new(schema.clone(), vec![column]).expect("text batch");
    StatementOutput::Rows {
        schema,
        batches: vec![batch],
    }
}

/// The MERGE result row: the count, then the per-kind figures.
fn merge_output(outcome: &MergeOutcome, files_scanned: u64) -> StatementOutput {
    let count =
        outcome.stat("rows_updated") + outcome.stat("rows_deleted") + outcome.stat("rows_inserted");
    let figures = [
        ("count", count),
        ("rows_updated", outcome.stat("rows_updated")),
        ("rows_deleted", outcome.stat("rows_deleted")),
        ("rows_inserted", outcome.stat("rows_inserted")),
        ("rows_copied", outcome.stat("rows_copied")),
        ("files_scanned", files_scanned),
        ("files_removed", outcome.stat("files_removed")),
        ("files_added", outcome.stat("files_added")),
        ("bytes_read", outcome.stat("bytes_read")),
        ("bytes_written", outcome.stat("bytes_written")),
    ];
    let schema = Arc::new(Schema::new(
        figures
            .iter()
            .map(|(n, _)| Field::new(*n, DataType::UInt64, false))
            .collect::<Vec<_>>(),
    ));
    let columns: Vec<ArrayRef> = figures
        .iter()
        .map(|(_, v)| Arc::new(UInt64Array::from(vec![*v])) as ArrayRef)
        .collect();
    let batch = RecordBatch::try_new(schema.clone(), columns).expect("merge batch");
    StatementOutput::Rows {
        schema,
        batches: vec![batch],
    }
}

fn count_output(rows: u64) -> StatementOutput {
    let schema = Arc::new(Schema::new(vec![Field::new(
        "count",
        DataType::UInt64,
        false,
    )]));
    let column: ArrayRef = Arc::new(UInt64Array::from(vec![rows]));
    let batch = RecordBatch::try_new(schema.clone(), vec![column]).expect("count batch");
    StatementOutput::Rows {
        schema,
        batches: vec![batch],
    }
}
