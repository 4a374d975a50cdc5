//! The schema an `ALTER TABLE ... ADD / DROP / RENAME / ALTER COLUMN`
//! gives a table, checked against its metadata as Iceberg's schema update
//! checks it: columns keep their field ids (files already written are read
//! by id, so a renamed column keeps its values and a dropped one is never
//! read again), new columns get fresh ids and are optional, and a type may
//! change only by Iceberg's promotions (int → bigint, float → double,
//! decimal precision widening at the same scale).

use std::sync::Arc;

use datafusion::error::Result;
use iceberg::spec::{NestedField, NestedFieldRef, PrimitiveType, Schema, TableMetadata, Type};
use icemerge_planner::alter_table::{ColumnChange, NewColumn, TableChange};
use icemerge_proto::error::{already_exists, invalid_input, not_found};

/// The new schema, or `None` when the change leaves the schema as it is
/// (e.g. `DROP COLUMN IF EXISTS` of a missing column). `change` must be a
/// column change.
pub(super) fn evolve_schema(
    table: &str,
    metadata: &TableMetadata,
    change: &TableChange,
) -> Result<Option<Schema>> {
    let schema = metadata.current_schema();
    let mut fields: Vec<NestedFieldRef> = schema.as_struct().fields().to_vec();
    let position =
        |fields: &[NestedFieldRef], name: &str| fields.iter().position(|f| f.name == name);
    let missing = |name: &str| {
        not_found(format!(
            "ALTER TABLE {table}: column '{name}' does not exist (columns: {})",
            schema
                .as_struct()
                .fields()
                .iter()
                .map(|f| f.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    };
    match change {
        TableChange::AddColumns(columns) => {
            let mut next_id = metadata.last_column_id();
            for NewColumn {
                name,
                data_type,
                comment,
            } in columns
            {
                if position(&fields, name).is_some() {
                    return Err(already_exists(format!(
                        "ALTER TABLE {table} ADD COLUMN: column '{name}' already exists"
                    )));
                }
                next_id += 1;
                let field = NestedField::optional(next_id, name, data_type.clone());
                fields.push(Arc::new(match comment {
                    Some(doc) => field.with_doc(doc),
                    None => field,
                }));
            }
        }
        TableChange::DropColumns { columns, if_exists } => {
            for name in columns {
                let Some(at) = position(&fields, name) else {
                    if *if_exists {
                        continue;
                    }
                    return Err(missing(name));
                };
                check_droppable(table, metadata, &fields[at])?;
                fields.remove(at);
            }
            if fields.is_empty() {
                return Err(invalid_input(format!(
                    "ALTER TABLE {table} DROP COLUMN: a table must keep at least one column"
                )));
            }
            if fields.len() == schema.as_struct().fields().len() {
                return Ok(None);
            }
        }
        TableChange::RenameColumn { from, to } => {
            let at = position(&fields, from).ok_or_else(|| missing(from))?;
            if from == to {
                return Ok(None);
            }
            if position(&fields, to).is_some() {
                return Err(already_exists(format!(
                    "ALTER TABLE {table} RENAME COLUMN {from} TO {to}: column '{to}' already exists"
                )));
            }
            let mut field = fields[at].as_ref().clone();
            field.name = to.clone();
            fields[at] = Arc::new(field);
        }
        TableChange::AlterColumn { column, change } => {
            let at = position(&fields, column).ok_or_else(|| missing(column))?;
            let mut field = fields[at].as_ref().clone();
            match change {
                ColumnChange::Type(to) => {
                    if *field.field_type == *to {
                        return Ok(None);
                    }
                    check_promotion(table, column, &field.field_type, to)?;
                    field.field_type = Box::new(to.clone());
                }
                ColumnChange::DropNotNull => {
                    if !field.required {
                        return Ok(None);
                    }
                    if schema.identifier_field_ids().any(|id| id == field.id) {
                        return Err(invalid_input(format!(
                            "ALTER TABLE {table} ALTER COLUMN {column} DROP NOT NULL: the column \
                             is an identifier field of the table and must stay required"
                        )));
                    }
                    field.required = false;
                }
                ColumnChange::Comment(doc) => field.doc = Some(doc.clone()),
            }
            fields[at] = Arc::new(field);
        }
        other => {
            return Err(invalid_input(format!(
                "ALTER TABLE {table}: {other:?} is not a change of the schema"
            )))
        }
    }
    let identifiers: Vec<i32> = schema.identifier_field_ids().collect();
    Schema::builder()
        .with_fields(fields)
        .with_identifier_field_ids(identifiers)
        .build()
        .map(Some)
        .map_err(|e| invalid_input(format!("ALTER TABLE {table}: invalid schema: {e}")))
}

/// A column may be dropped unless a partition spec (current or of files
/// already written), the sort order or the identifier fields use it.
fn check_droppable(table: &str, metadata: &TableMetadata, field: &NestedField) -> Result<()> {
    let name = &field.name;
    // The current spec first, then the earlier ones in order.
    let mut specs: Vec<_> = metadata.partition_specs_iter().collect();
    specs.sort_by_key(|spec| {
        (
            spec.spec_id() != metadata.default_partition_spec_id(),
            spec.spec_id(),
        )
    });
    for spec in specs {
        if let Some(partition) = spec.fields().iter().find(|p| p.source_id == field.id) {
            let current = spec.spec_id() == metadata.default_partition_spec_id();
            return Err(invalid_input(format!(
                "ALTER TABLE {table} DROP COLUMN {name}: the column is the source of partition \
                 field '{}' of {} partition spec {}{}",
                partition.name,
                if current {
                    "the current"
                } else {
                    "the earlier"
                },
                spec.spec_id(),
                if current {
                    "; drop the partition field first (ALTER TABLE ... DROP PARTITION FIELD)"
                } else {
                    ": files written with that spec still need it"
                }
            )));
        }
    }
    let sorted = metadata
        .sort_orders_iter()
        .any(|order| order.fields.iter().any(|f| f.source_id == field.id));
    if sorted {
        return Err(invalid_input(format!(
            "ALTER TABLE {table} DROP COLUMN {name}: the column is used by a sort order of the table"
        )));
    }
    if metadata
        .current_schema()
        .identifier_field_ids()
        .any(|id| id == field.id)
    {
        return Err(invalid_input(format!(
            "ALTER TABLE {table} DROP COLUMN {name}: the column is an identifier field of the table"
        )));
    }
    Ok(())
}

/// Iceberg's allowed type promotions.
fn check_promotion(table: &str, column: &str, from: &Type, to: &Type) -> Result<()> {
    if is_promotion(from, to) {
        return Ok(());
    }
    Err(invalid_input(format!(
        "ALTER TABLE {table} ALTER COLUMN {column}: cannot change the type from {from} to {to}; \
         Iceberg allows int to bigint, float to double and widening a decimal's precision at \
         the same scale"
    )))
}

/// Whether `from` may become `to` by one of Iceberg's type promotions.
pub(super) fn is_promotion(from: &Type, to: &Type) -> bool {
    use PrimitiveType::{Decimal, Double, Float, Int, Long};
    match (from, to) {
        (Type::Primitive(from), Type::Primitive(to)) => match (from, to) {
            (Int, Long) | (Float, Double) => true,
            (
                Decimal {
                    precision: p1,
                    scale: s1,
                },
                Decimal {
                    precision: p2,
                    scale: s2,
                },
            ) => s1 == s2 && p2 >= p1,
            _ => false,
        },
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::spec::{
        FormatVersion, SortOrder, TableMetadataBuilder, Transform, UnboundPartitionSpec,
    };

    fn metadata() -> TableMetadata {
        let schema = Schema::builder()
            .with_fields(vec![
                NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
                NestedField::optional(2, "v", Type::Primitive(PrimitiveType::Int)).into(),
                NestedField::optional(
                    3,
                    "d",
                    Type::Primitive(PrimitiveType::Decimal {
                        precision: 10,
                        scale: 2,
                    }),
                )
                .into(),
                NestedField::required(4, "s", Type::Primitive(PrimitiveType::String)).into(),
            ])
            .build()
            .unwrap();
        let spec = UnboundPartitionSpec::builder()
            .add_partition_field(1, "id_bucket", Transform::Bucket(4))
            .unwrap()
            .build();
        TableMetadataBuilder::new(
            schema,
            spec,
            SortOrder::unsorted_order(),
            "memory:///t".into(),
            FormatVersion::V2,
            Default::default(),
        )
        .unwrap()
        .build()
        .unwrap()
        .metadata
    }

    fn evolve(change: TableChange) -> Result<Option<Schema>> {
        evolve_schema("db.t", &metadata(), &change)
    }

    fn names(schema: &Schema) -> Vec<(i32, String)> {
        schema
            .as_struct()
            .fields()
            .iter()
            .map(|f| (f.id, f.name.clone()))
            .collect()
    }

    #[test]
    fn columns_keep_their_ids() {
        let added = evolve(TableChange::AddColumns(vec![NewColumn {
            name: "n".into(),
            data_type: Type::Primitive(PrimitiveType::String),
            comment: Some("new".into()),
        }]))
        .unwrap()
        .unwrap();
        let n = added.field_by_name("n").unwrap();
        assert_eq!(
            (n.id, n.required, n.doc.as_deref()),
            (5, false, Some("new"))
        );
        let renamed = evolve(TableChange::RenameColumn {
            from: "v".into(),
            to: "w".into(),
        })
        .unwrap()
        .unwrap();
        assert_eq!(
            names(&renamed),
            [(1, "id"), (2, "w"), (3, "d"), (4, "s")].map(|(i, n)| (i, n.to_string()))
        );
        let dropped = evolve(TableChange::DropColumns {
            columns: vec!["v".into()],
            if_exists: false,
        })
        .unwrap()
        .unwrap();
        assert_eq!(
            names(&dropped),
            [(1, "id"), (3, "d"), (4, "s")].map(|(i, n)| (i, n.to_string()))
        );
        let optional = evolve(TableChange::AlterColumn {
            column: "s".into(),
            change: ColumnChange::DropNotNull,
        })
        .unwrap()
        .unwrap();
        assert!(!optional.field_by_name("s").unwrap().required);
    }

    #[test]
    fn promotions_follow_iceberg() {
        let alter = |column: &str, to: PrimitiveType| {
            evolve(TableChange::AlterColumn {
                column: column.into(),
                change: ColumnChange::Type(Type::Primitive(to)),
            })
        };
        let widened = alter("v", PrimitiveType::Long).unwrap().unwrap();
        assert_eq!(
            *widened.field_by_name("v").unwrap().field_type,
            Type::Primitive(PrimitiveType::Long)
        );
        assert!(alter(
            "d",
            PrimitiveType::Decimal {
                precision: 12,
                scale: 2
            }
        )
        .unwrap()
        .is_some());
        for (column, to) in [
            ("id", PrimitiveType::Int),
            ("v", PrimitiveType::String),
            (
                "d",
                PrimitiveType::Decimal {
                    precision: 12,
                    scale: 3,
                },
            ),
            (
                "d",
                PrimitiveType::Decimal {
                    precision: 9,
                    scale: 2,
                },
            ),
        ] {
            let err = alter(column, to).unwrap_err().to_string();
            assert!(err.contains("cannot change the type"), "{err}");
        }
        assert!(alter("v", PrimitiveType::Int).unwrap().is_none());
    }

    #[test]
    fn bad_changes_are_named() {
        let err = |change| evolve(change).unwrap_err().to_string();
        assert!(err(TableChange::DropColumns {
            columns: vec!["id".into()],
            if_exists: false
        })
        .contains("partition field 'id_bucket'"));
        assert!(err(TableChange::DropColumns {
            columns: vec!["x".into()],
            if_exists: false
        })
        .contains("column 'x' does not exist"));
        assert!(evolve(TableChange::DropColumns {
            columns: vec!["x".into()],
            if_exists: true
        })
        .unwrap()
        .is_none());
        assert!(err(TableChange::RenameColumn {
            from: "v".into(),
            to: "s".into()
        })
        .contains("'s' already exists"));
        assert!(err(TableChange::AddColumns(vec![NewColumn {
            name: "v".into(),
            data_type: Type::Primitive(PrimitiveType::Int),
            comment: None
        }]))
        .contains("'v' already exists"));
    }
}
