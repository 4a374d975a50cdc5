//! The write half of `rewrite_data_files` (`crate::maintenance`): every row
//! of a table at its current snapshot, read with its delete files applied,
//! written as new data files by the table's own writer on the engine (the
//! local one or the cluster). The rows are spread over as many writers as
//! the input's bytes fill files of the target size, so the new files come
//! out near that size, each sorted by the table's write order when it has
//! one. Nothing is committed here; on failure the files
//! written are deleted. `icemerge.test_pause_before_commit` pauses it after
//! the write, as it pauses a MERGE.

use std::sync::Arc;

use datafusion::error::Result;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::{ExecutionPlan, Partitioning};
use iceberg::spec::{DataFile, TableMetadata};
use iceberg::TableIdent;
use icemerge_executor::iceberg_err;
use icemerge_executor::write_exec::IcebergWriteExec;
use icemerge_executor::write_order::sort_for_write;
use icemerge_proto::error::internal;

use crate::catalog::OpenCatalog;
use crate::commit::{data_files_from_batches, discard_write};

use super::commit_pause::pause_before_commit;
use super::Session;

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

    /// Writes every row of `ident` into new data files of
    /// `target_file_size` bytes (the table's `write.target-file-size-bytes`
    /// when None); `input_bytes` is the size of the files read.
    pub(crate) async fn write_table_rows(
        &self,
        ident: &TableIdent,
        target_file_size: Option<u64>,
        input_bytes: u64,
    ) -> Result<RewriteWrite> {
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
        let physical = state.create_physical_plan(&logical).await?;
        let writer = physical
            .as_any()
            .downcast_ref::<IcebergWriteExec>()
            .ok_or_else(|| internal(format!("rewriting {ident}: no table writer was planned")))?;
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
        let write = RewriteWrite {
            files: vec![],
            metadata,
            write_id: writer.write_id.clone(),
        };
        let result = async {
            let batches = self.run_plan_of(plan, "rewrite_data_files").await?;
            data_files_from_batches(&write.metadata, &batches)
        }
        .await;
        let result = match result {
            // The test hook MERGE has too: a commit at a known point.
            Ok(files) => match &self.icemerge_options().test_pause_before_commit {
                Some(dir) => pause_before_commit(dir).await.map(|()| files),
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

    /// Deletes the files of a rewrite that will not be committed.
    pub(crate) fn discard_rewrite(&self, write: &RewriteWrite) {
        discard_write(
            &write.metadata,
            &write.write_id,
            self.engine.scheduler_url().is_some(),
        );
    }
}
