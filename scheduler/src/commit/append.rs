//! The coordinator's commit of a write: collect the writer tasks' data
//! files, add them to the table in ONE new snapshot, swap the catalog
//! pointer. If anything fails, the files the statement wrote are deleted and
//! the table is left as it was.

use arrow::array::{Array, StringArray};
use arrow::record_batch::RecordBatch;
use datafusion::error::{DataFusionError, Result};
use iceberg::spec::{deserialize_data_file_from_json, DataFile, TableMetadata};
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{Catalog, TableIdent};
use icemerge_executor::cleanup::{data_location, delete_files_with_prefix};
use icemerge_executor::iceberg_err;

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
            .ok_or_else(|| {
                DataFusionError::Internal("writer output without data_file column".into())
            })?;
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

/// Appends `files` to `ident` as one snapshot (operation `append`).
pub async fn commit_append(
    catalog: &dyn Catalog,
    ident: &TableIdent,
    files: Vec<DataFile>,
) -> Result<()> {
    let table = catalog.load_table(ident).await.map_err(iceberg_err)?;
    let tx = Transaction::new(&table);
    let tx = tx
        .fast_append()
        .add_data_files(files)
        .apply(tx)
        .map_err(iceberg_err)?;
    tx.commit(catalog).await.map_err(iceberg_err)?;
    Ok(())
}

/// Deletes every file a statement with `write_id` wrote into the table.
pub fn discard_write(metadata: &TableMetadata, write_id: &str) -> usize {
    delete_files_with_prefix(&data_location(metadata), write_id)
}
