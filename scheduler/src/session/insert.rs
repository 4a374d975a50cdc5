//! `INSERT INTO` (and the load of `CREATE TABLE AS`): the writer plan runs
//! on the engine, its data files are committed as ONE `append` snapshot;
//! `INSERT OVERWRITE`: as ONE `overwrite` snapshot replacing the partitions
//! written (the whole table when unpartitioned), against the table as
//! planned; on failure every file the statement wrote is deleted.

use std::sync::Arc;

use datafusion::error::Result;
use datafusion::physical_plan::ExecutionPlan;
use iceberg::table::Table;
use icemerge_executor::write_exec::IcebergWriteExec;

use crate::commit::{
    commit_append, commit_insert_overwrite, data_files_from_batches, discard_write,
};

use super::Session;

impl Session {
    /// Runs an INSERT's writer plan and commits its files as one snapshot
    /// (with `overwrite`, the table as planned: replacing what they
    /// overwrite); returns the number of rows written.
    pub(super) async fn run_insert(
        &self,
        writer: &IcebergWriteExec,
        plan: Arc<dyn ExecutionPlan>,
        overwrite: Option<&Table>,
    ) -> Result<u64> {
        let ident = self.table_ident(&writer.table)?;
        let metadata = writer.metadata.clone();
        let write_id = writer.write_id.clone();
        let result = async {
            let batches = self.run_plan_of(plan, "insert").await?;
            let files = data_files_from_batches(&metadata, &batches)?;
            let rows: u64 = files.iter().map(|f| f.record_count()).sum();
            match overwrite {
                Some(base) => {
                    commit_insert_overwrite(&self.catalog, base, files).await?;
                }
                None if !files.is_empty() => commit_append(&self.catalog, &ident, files).await?,
                None => {}
            }
            Ok(rows)
        }
        .await;
        if result.is_err() {
            discard_write(&metadata, &write_id, self.engine.scheduler_url().is_some());
        }
        result
    }
}
