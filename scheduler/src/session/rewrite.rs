//! The write half of `rewrite_data_files` (`crate::maintenance`): every row
//! of a table at its current snapshot, read with its delete files applied,
//! written as new data files by the table's own writer on the engine (the
//! local one or the cluster). The rows are spread over as many writers as
//! the input's bytes fill files of the target size, so the new files come
//! out near that size, each sorted by the table's write order when it has
//! one. Nothing is committed here; on failure the files
//! written are deleted. `icemerge.test_pause_before_commit` pauses it after
//! the write, as it pauses a MERGE.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::DFSchema;
use datafusion::error::Result;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::{ExecutionPlan, Partitioning};
use iceberg::expr::Predicate;
use iceberg::spec::{DataFile, TableMetadata};
use iceberg::table::Table;
use icemerge_executor::iceberg_err;
use icemerge_executor::scan_exec::IcebergScanExec;
use icemerge_executor::write_exec::IcebergWriteExec;
use icemerge_executor::write_order::sort_for_write;
use icemerge_proto::error::{internal, invalid_input};

use crate::catalog::filter_pushdown::to_iceberg_predicate;
use crate::catalog::{IcebergTableProvider, OpenCatalog};
use crate::commit::{data_files_from_batches, discard_write};
use crate::merge::with_target_provider;

use super::commit_pause::pause_before_commit;
use super::Session;

/// A rewrite planned and not yet run: the data files its scan reads
/// (whole, deletes applied), and whether any of them has delete files.
pub(crate) struct PlannedRewrite {
    plan: Arc<dyn ExecutionPlan>,
    pub read: HashSet<String>,
    pub with_deletes: bool,
    pub input_bytes: u64,
    write: RewriteWrite,
}

/// The data files a rewrite's scan reads, and whether any carries deletes.
fn files_read(plan: &Arc<dyn ExecutionPlan>) -> (HashSet<String>, bool) {
    let mut read = HashSet::new();
    let mut with_deletes = false;
    let _ = plan.apply(|node| {
        if let Some(scan) = node.as_any().downcast_ref::<IcebergScanExec>() {
            for task in scan.groups.iter().flatten() {
                read.insert(task.data_file_path.clone());
                with_deletes |= !task.deletes.is_empty();
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    (read, with_deletes)
}

/// The files a rewrite wrote, and what deletes them again.
pub(crate) struct RewriteWrite {
    pub files: Vec<DataFile>,
    metadata: Arc<TableMetadata>,
    write_id: String,
}

impl Session {
    /// The catalog this session runs on.
    pub(crate) fn open_catalog(&self) -> &OpenCatalog {
        &self.catalog
    }

    /// The Iceberg predicate of a `where` argument over `base`'s columns:
    /// the files that may hold a matching row are the ones rewritten.
    pub(crate) fn file_filter(&self, base: &Table, filter: &str, what: &str) -> Result<Predicate> {
        let provider = self.table_provider(base)?;
        let schema = DFSchema::try_from(provider.schema.as_ref().clone())?;
        let expr = self
            .ctx
            .state()
            .create_logical_expr(filter, &schema)
            .map_err(|e| invalid_input(format!("{what}: argument 'where' = '{filter}': {e}")))?;
        to_iceberg_predicate(&[expr]).ok_or_else(|| {
            invalid_input(format!(
                "{what}: argument 'where' = '{filter}' cannot select data files: use \
                 comparisons of columns with constants, IN, IS [NOT] NULL, AND, OR, NOT"
            ))
        })
    }

    /// Plans the rewrite of `base`'s rows (at its current snapshot): of
    /// every data file, or of those `pruning` says may hold a match, each
    /// file read whole with its deletes applied, spread over writers of
    /// `target_file_size` bytes (the table's `write.target-file-size-bytes`
    /// when None); `sizes` are the data files' sizes.
    pub(crate) async fn plan_table_rewrite(
        &self,
        base: &Table,
        target_file_size: Option<u64>,
        sizes: &HashMap<String, u64>,
        pruning: Option<Predicate>,
    ) -> Result<PlannedRewrite> {
        let ident = base.identifier();
        let name = ident
            .namespace()
            .iter()
            .chain(std::iter::once(&ident.name().to_string()))
            .map(|part| format!("\"{}\"", part.replace('"', "\"\"")))
            .collect::<Vec<_>>()
            .join(".");
        let sql = format!("INSERT INTO {name} SELECT * FROM {name}");
        let state = self.ctx.state();
        let logical = state.create_logical_plan(&sql).await?;
        // The rows read are those of the snapshot the commit is checked
        // against, of the files `pruning` keeps.
        let provider = self.table_provider(base)?;
        let provider = match pruning {
            Some(predicate) => provider.with_pruning(predicate),
            None => provider,
        };
        let logical = with_target_provider(logical, ident.name(), Arc::new(provider))?;
        let physical = state.create_physical_plan(&logical).await?;
        let writer = physical
            .as_any()
            .downcast_ref::<IcebergWriteExec>()
            .ok_or_else(|| internal(format!("rewriting {ident}: no table writer was planned")))?;
        let (read, with_deletes) = files_read(&writer.input);
        let input_bytes: u64 = read.iter().filter_map(|path| sizes.get(path)).sum();
        let mut metadata = writer.metadata.clone();
        if let Some(bytes) = target_file_size {
            let mut properties = metadata.properties().clone();
            properties.insert(
                "write.target-file-size-bytes".to_string(),
                bytes.to_string(),
            );
            let changed = (*metadata)
                .clone()
                .into_builder(None)
                .set_properties(properties)
                .map_err(iceberg_err)?
                .build()
                .map_err(iceberg_err)?
                .metadata;
            metadata = Arc::new(changed);
        }
        let target = metadata
            .table_properties()
            .map_err(iceberg_err)?
            .write_target_file_size_bytes as u64;
        let writers = input_bytes.div_ceil(target.max(1)).max(1) as usize;
        // The table's write order is applied after the rows are spread
        // over the writers (a sort below the spread would be lost).
        let input = match writer.input.as_any().downcast_ref::<SortExec>() {
            Some(sort) => sort.input().clone(),
            None => writer.input.clone(),
        };
        let input: Arc<dyn ExecutionPlan> = if writers == 1 {
            Arc::new(CoalescePartitionsExec::new(input))
        } else {
            Arc::new(RepartitionExec::try_new(
                input,
                Partitioning::RoundRobinBatch(writers),
            )?)
        };
        let input = sort_for_write(&metadata, input);
        let plan = Arc::new(IcebergWriteExec::new(
            writer.table.clone(),
            metadata.clone(),
            writer.file_io_props.clone(),
            writer.write_id.clone(),
            input,
        ));
        Ok(PlannedRewrite {
            plan,
            read,
            with_deletes,
            input_bytes,
            write: RewriteWrite {
                files: vec![],
                metadata,
                write_id: writer.write_id.clone(),
            },
        })
    }

    /// Runs a planned rewrite; nothing is committed. On failure the files
    /// written are deleted.
    pub(crate) async fn run_table_rewrite(&self, planned: PlannedRewrite) -> Result<RewriteWrite> {
        let write = planned.write;
        let result = async {
            let batches = self.run_plan_of(planned.plan, "rewrite_data_files").await?;
            data_files_from_batches(&write.metadata, &batches)
        }
        .await;
        let result = match result {
            // The test hook MERGE has too: a commit at a known point.
            Ok(files) => match &self.icemerge_options().test_pause_before_commit {
                Some(dir) => pause_before_commit(dir, &|| self.control.is_cancel_requested())
                    .await
                    .and_then(|()| self.control.check())
                    .map(|()| files),
                None => Ok(files),
            },
            Err(e) => Err(e),
        };
        match result {
            Ok(files) => Ok(RewriteWrite { files, ..write }),
            Err(e) => {
                self.discard_rewrite(&write);
                Err(e)
            }
        }
    }

    /// `base` as a DataFusion table, at its current snapshot.
    fn table_provider(&self, base: &Table) -> Result<IcebergTableProvider> {
        let ident = base.identifier();
        IcebergTableProvider::try_new(
            format!("{}.{}", ident.namespace().to_url_string(), ident.name()),
            base.clone(),
            self.open_catalog().file_io_props.clone(),
        )
    }

    /// Deletes the files of a rewrite that will not be committed.
    pub(crate) fn discard_rewrite(&self, write: &RewriteWrite) {
        discard_write(
            &write.metadata,
            &write.write_id,
            self.engine.scheduler_url().is_some(),
        );
    }
}
