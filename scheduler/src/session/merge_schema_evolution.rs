//! `MERGE WITH SCHEMA EVOLUTION INTO` (Spark's syntax): when a clause
//! carries every column (`UPDATE SET *`, `INSERT *`), the source columns the
//! target lacks are added to it (optional, at the end, in the source's
//! order) and target columns whose source type is one of Iceberg's
//! promotions of theirs (int → bigint, float → double, a wider decimal) are
//! widened. The merge is planned and written against the evolved schema,
//! which its own commit adds to the table (`commit::with_current_schema`):
//! a merge that fails or changes no row leaves the schema as it was.
//! Columns are matched by name, ignoring case, as Spark does.

use arrow::datatypes::{Field, Schema as ArrowSchema};
use datafusion::error::Result;
use iceberg::arrow::arrow_schema_to_schema_auto_assign_ids;
use iceberg::spec::{Schema, TableMetadata, Type};
use iceberg::table::Table;
use icemerge_planner::alter_table::{ColumnChange, NewColumn, TableChange};
use icemerge_planner::merge::{carries_every_column, source_sql, RowLevelStatement};
use icemerge_proto::error::invalid_input;

use super::alter_schema::{evolve_schema, is_promotion};
use super::Session;
use crate::commit::{metadata_with_current_schema, with_current_schema};

impl Session {
    /// The table a merge is planned on: `base`, or for `MERGE WITH SCHEMA
    /// EVOLUTION` whose source brings columns, `base` with the evolved
    /// schema current (in memory) and the id of the schema it evolved.
    pub(super) async fn evolve_merge_target(
        &self,
        base: Table,
        statement: &RowLevelStatement,
        table: &str,
    ) -> Result<(Table, Option<i32>)> {
        if !statement.schema_evolution || !carries_every_column(&statement.merge) {
            return Ok((base, None));
        }
        let (_, source) = source_sql(&statement.merge)?;
        let plan = self
            .ctx
            .state()
            .create_logical_plan(&format!("SELECT * FROM {source}"))
            .await?;
        let fields: Vec<Field> = plan
            .schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        let changes = schema_changes(table, base.metadata().current_schema(), &fields)?;
        let from = base.metadata().current_schema_id();
        let Some(schema) = evolved_schema(table, base.metadata(), &changes)? else {
            return Ok((base, None));
        };
        Ok((with_current_schema(&base, schema)?, Some(from)))
    }
}

/// The column changes that make the target hold every source column.
fn schema_changes(table: &str, target: &Schema, source: &[Field]) -> Result<Vec<TableChange>> {
    let mut added = vec![];
    let mut changes = vec![];
    for field in source {
        let name = field.name();
        let existing = target
            .as_struct()
            .fields()
            .iter()
            .find(|f| f.name.eq_ignore_ascii_case(name));
        match existing {
            Some(column) => {
                // A source type that is no promotion of the column's is left
                // to the merge's assignment checks.
                let Ok(to) = iceberg_type(field) else {
                    continue;
                };
                if *column.field_type != to && is_promotion(&column.field_type, &to) {
                    changes.push(TableChange::AlterColumn {
                        column: column.name.clone(),
                        change: ColumnChange::Type(to),
                    });
                }
            }
            None => {
                let data_type = iceberg_type(field).map_err(|why| {
                    invalid_input(format!(
                        "MERGE WITH SCHEMA EVOLUTION INTO {table}: source column '{name}' of \
                         type {} cannot be added to the table: {why}",
                        field.data_type()
                    ))
                })?;
                added.push(NewColumn {
                    name: name.clone(),
                    data_type,
                    comment: None,
                });
            }
        }
    }
    if !added.is_empty() {
        changes.push(TableChange::AddColumns(added));
    }
    Ok(changes)
}

/// The Iceberg type of a source column that schema evolution may add: a
/// primitive type (nested columns are added with ALTER TABLE first).
fn iceberg_type(field: &Field) -> std::result::Result<Type, String> {
    let one = ArrowSchema::new(vec![field.clone().with_nullable(true)]);
    let schema = arrow_schema_to_schema_auto_assign_ids(&one).map_err(|e| e.to_string())?;
    let data_type = schema.as_struct().fields()[0].field_type.as_ref().clone();
    match data_type {
        Type::Primitive(_) => Ok(data_type),
        other => Err(format!(
            "it is {other}, and schema evolution adds primitive columns only; add it with \
             ALTER TABLE ... ADD COLUMN first"
        )),
    }
}

/// `metadata`'s schema with `changes` applied in order (each checked as
/// ALTER TABLE checks it); `None` when they change nothing.
fn evolved_schema(
    table: &str,
    metadata: &TableMetadata,
    changes: &[TableChange],
) -> Result<Option<Schema>> {
    let mut current = metadata.clone();
    let mut evolved = None;
    for change in changes {
        let Some(schema) = evolve_schema(table, &current, change)? else {
            continue;
        };
        current = metadata_with_current_schema(&current, schema.clone())?;
        evolved = Some(schema);
    }
    Ok(evolved)
}
