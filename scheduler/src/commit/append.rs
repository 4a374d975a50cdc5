//! The append action (INSERT, CREATE TABLE AS): the writer tasks' data files
//! become one `append` snapshot on top of the table as it is at commit time.
//! Appends never conflict, so a commit that loses the catalog swap to
//! another writer reloads the table and produces again, up to the table's
//! `commit.retry.*` settings. If the statement fails, the caller deletes
//! every file it wrote ([`discard_write`]).

use arrow::array::{Array, StringArray};
use arrow::record_batch::RecordBatch;
use datafusion::error::Result;
use iceberg::spec::{deserialize_data_file_from_json, DataFile, Operation, TableMetadata};
use iceberg::TableIdent;
use icemerge_executor::cleanup::{
    data_location, delete_files_with_prefix, delete_files_with_prefix_now_and_later,
};
use icemerge_executor::iceberg_err;

use super::plan::ManifestPolicy;
use super::producer::{produce, CatalogRow, Outcome, SnapshotChanges};
use super::retry::Retries;
use crate::catalog::OpenCatalog;
use icemerge_proto::error::{conflict, internal, unsupported};

/// Reads the data files out of `IcebergWriteExec` output batches.
pub fn data_files_from_batches(
    metadata: &TableMetadata,
    batches: &[RecordBatch],
) -> Result<Vec<DataFile>> {
    let spec = metadata.default_partition_spec();
    let partition_type = metadata.default_partition_type();
    let schema = metadata.current_schema();
    let mut files = vec![];
    for batch in batches {
        let column = batch
            .column_by_name("data_file")
            .and_then(|c| c.as_any().downcast_ref::<StringArray>())
            .ok_or_else(|| internal("writer output without data_file column"))?;
        for i in 0..column.len() {
            let file = deserialize_data_file_from_json(
                column.value(i),
                spec.spec_id(),
                partition_type,
                schema,
            )
            .map_err(iceberg_err)?;
            files.push(file);
        }
    }
    Ok(files)
}

/// Appends `files` to `ident` as one snapshot (operation `append`), built on
/// the table as the catalog has it now.
pub async fn commit_append(
    catalog: &OpenCatalog,
    ident: &TableIdent,
    files: Vec<DataFile>,
) -> Result<()> {
    let row = CatalogRow {
        uri: &catalog.uri,
        catalog_name: &catalog.name,
    };
    let mut retries: Option<Retries> = None;
    loop {
        let table = catalog
            .catalog
            .load_table(ident)
            .await
            .map_err(iceberg_err)?;
        let properties = table.metadata().table_properties().map_err(iceberg_err)?;
        if properties.encryption_key_id.is_some() {
            return Err(unsupported(format!(
                "commit to {ident}: encrypted tables are not supported"
            )));
        }
        let retries = retries.get_or_insert_with(|| Retries::of(&properties));
        let outcome = produce(&row, &table, append(files.clone())).await?;
        if outcome != Outcome::Lost {
            return Ok(());
        }
        if !retries.wait().await {
            return Err(conflict(format!(
                "concurrent commit to {ident}: other writers committed first {} times in a row; \
                 nothing was committed",
                retries.lost
            )));
        }
    }
}

fn append(files: Vec<DataFile>) -> SnapshotChanges {
    SnapshotChanges {
        operation: Operation::Append,
        added: files,
        added_deletes: vec![],
        removed: Default::default(),
        properties: Default::default(),
        policy: ManifestPolicy::Append,
    }
}

/// Deletes every file a statement with `write_id` wrote into the table;
/// with `tasks_may_linger` (the statement failed on a cluster whose
/// executors may still be finishing its tasks) also again over the next
/// half minute.
pub fn discard_write(metadata: &TableMetadata, write_id: &str, tasks_may_linger: bool) -> usize {
    let location = data_location(metadata);
    if tasks_may_linger {
        delete_files_with_prefix_now_and_later(&location, write_id)
    } else {
        delete_files_with_prefix(&location, write_id)
    }
}
