//! The Flight SQL metadata calls over the coordinator's catalog, for JDBC /
//! ADBC tools that browse before they query: `GetCatalogs` (the one
//! catalog), `GetDbSchemas` (its namespaces), `GetTables` (their tables,
//! with each table's Arrow schema as SELECT reads it when asked) and
//! `GetTableTypes`.
//!
//! Iceberg tables are of type `TABLE`; tables a session registered itself
//! (`CREATE EXTERNAL TABLE`) are `LOCAL TEMPORARY`, as JDBC names tables
//! that live only in a session. The name patterns are SQL `LIKE` patterns
//! (`%`, `_`); a table's schema is loaded only when its names match.

use arrow::array::{BooleanArray, StringArray};
use arrow::compute::kernels::comparison::like;
use arrow::record_batch::RecordBatch;
use arrow_flight::sql::{CommandGetCatalogs, CommandGetDbSchemas, CommandGetTables};
use datafusion::catalog::CatalogProvider;
use datafusion::error::Result;

use crate::session::Session;

/// The type of an Iceberg table.
pub const TABLE: &str = "TABLE";
/// The type of a table the session registered itself.
pub const SESSION_TABLE: &str = "LOCAL TEMPORARY";

/// `GetCatalogs`: the session's catalog.
pub fn catalogs(session: &Session, command: CommandGetCatalogs) -> Result<RecordBatch> {
    let mut builder = command.into_builder();
    builder.append(session.catalog_name());
    builder.build().map_err(flight_err)
}

/// `GetDbSchemas`: the catalog's schemas matching the command's filters.
pub async fn db_schemas(session: &Session, command: CommandGetDbSchemas) -> Result<RecordBatch> {
    let provider = session.catalog_provider();
    provider.refresh().await?;
    let mut builder = command.into_builder();
    for schema in provider.schema_names() {
        builder.append(session.catalog_name(), schema);
    }
    builder.build().map_err(flight_err)
}

/// `GetTables`: the tables matching the command's filters, each with its
/// schema when the command includes schemas.
pub async fn tables(session: &Session, command: CommandGetTables) -> Result<RecordBatch> {
    let catalog = session.catalog_name();
    if command.catalog.as_deref().is_some_and(|c| c != catalog) {
        return command.into_builder().build().map_err(flight_err);
    }
    let provider = session.catalog_provider();
    provider.refresh().await?;
    let schemas = matching(
        provider.schema_names(),
        command.db_schema_filter_pattern.as_deref(),
    )?;
    let table_pattern = command.table_name_filter_pattern.clone();
    let types = command.table_types.clone();
    let include_schema = command.include_schema;
    let mut builder = command.into_builder();
    for schema in schemas {
        let listed = provider.tables(&schema).await?;
        let (names, local): (Vec<_>, Vec<_>) = listed.into_iter().unzip();
        let matched = like_mask(&names, table_pattern.as_deref())?;
        for ((name, local), matched) in names.iter().zip(local).zip(matched) {
            let table_type = if local { SESSION_TABLE } else { TABLE };
            if !matched || !(types.is_empty() || types.iter().any(|t| t == table_type)) {
                continue;
            }
            let table_schema = match include_schema {
                false => arrow::datatypes::Schema::empty(),
                true => match provider.schema(&schema) {
                    Some(tables) => match tables.table(name).await? {
                        Some(table) => table.schema().as_ref().clone(),
                        // Dropped since it was listed.
                        None => continue,
                    },
                    None => continue,
                },
            };
            builder
                .append(catalog, &schema, name, table_type, &table_schema)
                .map_err(flight_err)?;
        }
    }
    builder.build().map_err(flight_err)
}

/// `GetTableTypes`: the types `GetTables` reports.
pub fn table_types(command: arrow_flight::sql::CommandGetTableTypes) -> Result<RecordBatch> {
    let mut builder = command.into_builder();
    builder.append(TABLE);
    builder.append(SESSION_TABLE);
    builder.build().map_err(flight_err)
}

fn flight_err(e: arrow_flight::error::FlightError) -> datafusion::error::DataFusionError {
    icemerge_proto::error::internal(format!("listing the catalog: {e}"))
}

/// The names matching a `LIKE` pattern (all without one).
fn matching(names: Vec<String>, pattern: Option<&str>) -> Result<Vec<String>> {
    let mask = like_mask(&names, pattern)?;
    Ok(names
        .into_iter()
        .zip(mask)
        .filter_map(|(n, m)| m.then_some(n))
        .collect())
}

fn like_mask(names: &[String], pattern: Option<&str>) -> Result<Vec<bool>> {
    let Some(pattern) = pattern else {
        return Ok(vec![true; names.len()]);
    };
    let array = StringArray::from_iter_values(names);
    let mask: BooleanArray = like(&array, &StringArray::new_scalar(pattern))?;
    Ok(mask.iter().map(|m| m == Some(true)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_patterns_match_names() {
        let names = vec!["orders".to_string(), "order_lines".into(), "users".into()];
        assert_eq!(
            matching(names.clone(), Some("order%")).unwrap(),
            vec!["orders", "order_lines"]
        );
        assert_eq!(
            matching(names.clone(), Some("_sers")).unwrap(),
            vec!["users"]
        );
        assert_eq!(matching(names.clone(), None).unwrap().len(), 3);
        assert!(matching(names, Some("nothing")).unwrap().is_empty());
    }
}
