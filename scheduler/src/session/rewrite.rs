//! The write half of `rewrite_data_files` (`crate::maintenance`): the scan
//! of a table at its current snapshot (every data file, or those a `where`
//! keeps, each with the delete files that apply), narrowed to the files the
//! procedure chose, read with their deletes applied and written as new
//! data files by the table's own writer on the engine (the local one or the
//! cluster). Bin-packing spreads the rows over as many writers as the
//! input's bytes fill files of the target size, each writer's rows sorted
//! by the table's write order when it has one; the sort strategy sorts all
//! rows as one sequence (in parallel, then merged) into one writer that
//! rolls files at the target size, so the files hold ranges that do not
//! overlap. Nothing is committed here; on failure the files written are
//! deleted. `icemerge.test_pause_before_commit` pauses it after the write,
//! as it pauses a MERGE.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::DFSchema;
use datafusion::error::Result;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::{ExecutionPlan, Partitioning};
use iceberg::expr::Predicate;
use iceberg::spec::{DataFile, SortOrder, TableMetadata};
use iceberg::table::Table;
use icemerge_executor::iceberg_err;
use icemerge_executor::scan_exec::IcebergScanExec;
use icemerge_executor::write_exec::IcebergWriteExec;
use icemerge_executor::write_order::{ordering_of, sort_for_write};
use icemerge_planner::procedures::RewriteStrategy;
use icemerge_proto::error::{internal, invalid_input, unsupported};

use crate::catalog::{IcebergTableProvider, OpenCatalog};
use crate::commit::{data_files_from_batches, discard_write};
use crate::merge::with_target_provider;
use icemerge_executor::filter_pushdown::to_iceberg_predicate;

use super::alter_sort_order::sort_order_of;
use super::commit_pause::pause_before_commit;
use super::Session;

/// The scan of a rewrite, planned and not yet narrowed: every data file
/// it may read (those `where` keeps) with the delete files that apply.
pub(crate) struct RewriteScan {
    writer: IcebergWriteExec,
    pub candidates: Vec<ScanCandidate>,
}

/// One data file a rewrite's scan may read.
pub(crate) struct ScanCandidate {
    pub path: String,
    /// Paths of the delete files that apply to it.
    pub deletes: Vec<String>,
}

/// How a rewrite orders the rows it writes.
pub(crate) enum RewriteSort {
    /// Each writer's rows by the table's write order, when it has one.
    PerWriter,
    /// All rows as one sequence, by this order over the current schema.
    Global(SortOrder),
}

/// A rewrite planned and not yet run.
pub(crate) struct PlannedRewrite {
    plan: Arc<dyn ExecutionPlan>,
    write: RewriteWrite,
}

/// The data files a rewrite's scan reads, with their delete files.
fn scan_candidates(plan: &Arc<dyn ExecutionPlan>) -> Vec<ScanCandidate> {
    let mut candidates = vec![];
    let _ = plan.apply(|node| {
        if let Some(scan) = node.as_any().downcast_ref::<IcebergScanExec>() {
            for task in scan.groups.iter().flatten() {
                candidates.push(ScanCandidate {
                    path: task.data_file_path.clone(),
                    deletes: task.deletes.iter().map(|d| d.file_path.clone()).collect(),
                });
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    candidates
}

/// `plan` reading only the data files in `files`.
fn reading_only(
    plan: Arc<dyn ExecutionPlan>,
    files: &HashSet<String>,
) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        Ok(match node.as_any().downcast_ref::<IcebergScanExec>() {
            Some(scan) => {
                Transformed::yes(Arc::new(scan.with_files(|path| files.contains(path)))
                    as Arc<dyn ExecutionPlan>)
            }
            None => Transformed::no(node),
        })
    })
    .map(|t| t.data)
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

    /// Plans the scan of a rewrite of `base`'s rows (at its current
    /// snapshot): of every data file, or of those `pruning` says may hold a
    /// match, each read whole with its deletes applied.
    pub(crate) async fn scan_for_rewrite(
        &self,
        base: &Table,
        pruning: Option<Predicate>,
    ) -> Result<RewriteScan> {
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
            .ok_or_else(|| internal(format!("rewriting {ident}: no table writer was planned")))?
            .clone();
        let candidates = scan_candidates(&writer.input);
        Ok(RewriteScan { writer, candidates })
    }

    /// Plans the rewrite of the data files `files` (of `input_bytes`
    /// bytes) that `scan` may read, into files of `target_file_size` bytes
    /// (the table's `write.target-file-size-bytes` when None), ordered as
    /// `sort` says.
    pub(crate) fn plan_table_rewrite(
        &self,
        scan: RewriteScan,
        files: &HashSet<String>,
        input_bytes: u64,
        target_file_size: Option<u64>,
        sort: RewriteSort,
    ) -> Result<PlannedRewrite> {
        let writer = scan.writer;
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
        // The order is applied after the rows are spread over the writers
        // (a sort below the spread would be lost).
        let input = match writer.input.as_any().downcast_ref::<SortExec>() {
            Some(sort) => sort.input().clone(),
            None => writer.input.clone(),
        };
        let input = reading_only(input, files)?;
        let spread = |input: Arc<dyn ExecutionPlan>| -> Result<Arc<dyn ExecutionPlan>> {
            Ok(if writers == 1 {
                Arc::new(CoalescePartitionsExec::new(input))
            } else {
                Arc::new(RepartitionExec::try_new(
                    input,
                    Partitioning::RoundRobinBatch(writers),
                )?)
            })
        };
        let input = match sort {
            RewriteSort::PerWriter => sort_for_write(&metadata, spread(input)?),
            // Sorted in parallel, merged into one writer that rolls files
            // at the target size: the files hold ranges that do not
            // overlap.
            RewriteSort::Global(order) => {
                let ordering = ordering_of(&order, &metadata).ok_or_else(|| {
                    internal(format!(
                        "rewriting {}: no sort of plain columns",
                        writer.table
                    ))
                })?;
                let sorted: Arc<dyn ExecutionPlan> = Arc::new(
                    SortExec::new(ordering.clone(), spread(input)?)
                        .with_preserve_partitioning(true),
                );
                Arc::new(SortPreservingMergeExec::new(ordering, sorted))
            }
        };
        let plan = Arc::new(IcebergWriteExec::new(
            writer.table.clone(),
            metadata.clone(),
            writer.file_io_props.clone(),
            writer.write_id.clone(),
            input,
        ));
        Ok(PlannedRewrite {
            plan,
            write: RewriteWrite {
                files: vec![],
                metadata,
                write_id: writer.write_id.clone(),
            },
        })
    }

    /// How a rewrite of `metadata`'s table by `strategy` orders its rows:
    /// the sort strategy by its `sort_order` or else the table's write
    /// order, refused by name when there is neither.
    pub(crate) fn rewrite_sort(
        &self,
        metadata: &TableMetadata,
        strategy: &RewriteStrategy,
        what: &str,
    ) -> Result<RewriteSort> {
        match strategy {
            RewriteStrategy::BinPack => Ok(RewriteSort::PerWriter),
            RewriteStrategy::Sort {
                sort_order: Some(items),
            } => Ok(RewriteSort::Global(sort_order_of(
                &format!("{what}: argument 'sort_order'"),
                metadata,
                items,
            )?)),
            RewriteStrategy::Sort { sort_order: None } => {
                let order = metadata.default_sort_order();
                if order.is_unsorted() {
                    return Err(invalid_input(format!(
                        "{what}: strategy 'sort' needs a sort order: the table has none; give \
                         sort_order => '...' or set one with ALTER TABLE ... WRITE ORDERED BY"
                    )));
                }
                if ordering_of(order, metadata).is_none() {
                    return Err(unsupported(format!(
                        "{what}: the table's sort order uses a transform; icemerge sorts by \
                         columns only: give sort_order => '...'"
                    )));
                }
                Ok(RewriteSort::Global(order.as_ref().clone()))
            }
        }
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
