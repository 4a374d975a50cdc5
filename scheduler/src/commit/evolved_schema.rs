//! A statement that adds a schema to the table in its own commit
//! (`MERGE WITH SCHEMA EVOLUTION`): it is planned and written against the
//! table with that schema made current in memory ([`with_current_schema`]),
//! and the snapshot's metadata file carries the schema, so the new columns
//! and the rows that fill them appear together or not at all. After a lost
//! swap the schema is made current again on the new head when the head
//! still has the schema the statement started from ([`carry_schema`]);
//! otherwise the schema moved and the statement conflicts.

use datafusion::error::Result;
use iceberg::spec::{Schema, TableMetadata};
use iceberg::table::Table;
use iceberg::Runtime;
use icemerge_executor::iceberg_err;

/// `table` with `schema` added to its metadata as the current schema; its
/// metadata location stays the loaded one (the compare-and-swap expects it).
pub fn with_current_schema(table: &Table, schema: Schema) -> Result<Table> {
    let metadata = metadata_with_current_schema(table.metadata(), schema)?;
    let builder = Table::builder()
        .file_io(table.file_io().clone())
        .identifier(table.identifier().clone())
        .metadata(metadata)
        .readonly(table.readonly())
        .runtime(Runtime::try_current().map_err(iceberg_err)?);
    match table.metadata_location() {
        Some(location) => builder.metadata_location(location),
        None => builder,
    }
    .build()
    .map_err(iceberg_err)
}

/// `metadata` with `schema` added as the current schema, in memory (no
/// metadata file, no log entry).
pub fn metadata_with_current_schema(
    metadata: &TableMetadata,
    schema: Schema,
) -> Result<TableMetadata> {
    Ok(metadata
        .clone()
        .into_builder(None)
        .add_current_schema(schema)
        .and_then(|builder| builder.build())
        .map_err(iceberg_err)?
        .metadata)
}

/// The reloaded `head` with `planned`'s current schema made current again,
/// when the head's current schema is still `from` (the one the statement
/// evolved); `None` when another writer changed the schema meanwhile.
pub(super) fn carry_schema(planned: &Table, head: Table, from: i32) -> Result<Option<Table>> {
    if head.metadata().current_schema_id() != from {
        return Ok(None);
    }
    let schema = planned.metadata().current_schema().as_ref().clone();
    with_current_schema(&head, schema).map(Some)
}
