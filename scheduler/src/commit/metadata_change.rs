//! Metadata-only commits: a change to a table's metadata that writes no
//! manifest (ALTER TABLE of the schema, partition spec or sort order;
//! snapshot expiry, rollback). The change is a function of the table as
//! the catalog has it, so a lost compare-and-swap reloads the table and
//! applies the change again — its checks then run against what the other
//! writer committed — within the table's `commit.retry.*` settings.

use std::str::FromStr;

use datafusion::error::Result;
use iceberg::spec::{TableMetadata, TableMetadataBuilder};
use iceberg::table::Table;
use iceberg::{MetadataLocation, TableIdent};
use icemerge_executor::iceberg_err;
use icemerge_proto::error::{conflict, internal};

use super::producer::{publish, CatalogRow, Outcome, Staged};
use super::retry::Retries;
use crate::catalog::OpenCatalog;

/// Commits `change` to `ident`: `change` gets the current table and a
/// builder on its metadata, and returns the builder with its updates (or
/// an error naming what is wrong, and nothing is written). Returns the
/// committed metadata.
pub async fn commit_metadata_change<F>(
    catalog: &OpenCatalog,
    ident: &TableIdent,
    mut change: F,
) -> Result<TableMetadata>
where
    F: FnMut(&Table, TableMetadataBuilder) -> Result<TableMetadataBuilder>,
{
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
        let expected = table
            .metadata_location()
            .ok_or_else(|| internal(format!("table {ident} has no metadata location")))?
            .to_string();
        let builder = table
            .metadata()
            .clone()
            .into_builder(Some(expected.clone()));
        let metadata = change(&table, builder)?
            .build()
            .map_err(iceberg_err)?
            .metadata;
        let location = MetadataLocation::from_str(&expected)
            .map_err(iceberg_err)?
            .with_next_version()
            .with_new_metadata(&metadata);
        metadata
            .write_to(table.file_io(), &location)
            .await
            .map_err(iceberg_err)?;
        let staged = Staged {
            snapshot_id: metadata.current_snapshot_id().unwrap_or(-1),
            metadata_location: location.to_string(),
            written: vec![location.to_string()],
        };
        let outcome = publish(&row, ident, table.file_io(), &expected, staged).await?;
        if outcome != Outcome::Lost {
            return Ok(metadata);
        }
        let properties = table.metadata().table_properties().map_err(iceberg_err)?;
        let retries = retries.get_or_insert_with(|| Retries::of(&properties));
        if !retries.wait().await {
            return Err(conflict(format!(
                "concurrent commit to {ident}: other writers committed first {} times in a row; \
                 the table's metadata was not changed",
                retries.lost
            )));
        }
    }
}
