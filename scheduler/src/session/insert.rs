//! `INSERT INTO` (and the load of `CREATE TABLE AS`): the writer plan runs
//! on the engine, its data files are committed as ONE `append` snapshot;
//! on failure every file the statement wrote is deleted.

use std::sync::Arc;

use datafusion::error::Result;
use datafusion::physical_plan::ExecutionPlan;
use icemerge_executor::write_exec::IcebergWriteExec;

use crate::commit::{commit_append, data_files_from_batches, discard_write};

use super::Session;

impl Session {
    /// Runs an INSERT's writer plan and commits its files as one snapshot;
    /// returns the number of rows written.
    pub(super) async fn run_insert(
        &self,
        writer: &IcebergWriteExec,
        plan: Arc<dyn ExecutionPlan>,
    ) -> Result<u64> {
        let ident = self.table_ident(&writer.table)?;
        let metadata = writer.metadata.clone();
        let write_id = writer.write_id.clone();
        let result = async {
            let batches = self.run_plan_of(plan, "insert").await?;
            let files = data_files_from_batches(&metadata, &batches)?;
            let rows: u64 = files.iter().map(|f| f.record_count()).sum();
            if !files.is_empty() {
                commit_append(&self.catalog, &ident, files).await?;
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
