//! Partition evolution: the partition spec an `ALTER TABLE ... ADD / DROP /
//! REPLACE PARTITION FIELD` makes the table's default, as Iceberg's spec
//! update builds it. Fields that stay keep their ids; a new field reuses
//! the id of an equal field (same source column and transform) of an
//! earlier spec, else gets a fresh one; on a format v1 table a dropped
//! field becomes a `void` transform (v1 specs cannot lose fields). Files
//! already written keep the spec they were written with; new files use the
//! new one.

use datafusion::error::Result;
use iceberg::spec::{
    FormatVersion, PartitionField, TableMetadata, Transform, UnboundPartitionField,
    UnboundPartitionSpec,
};
use icemerge_planner::alter_table::{PartitionFieldRef, TableChange};
use icemerge_planner::ddl::{PartitionItem, PartitionTransform};
use icemerge_proto::error::{already_exists, invalid_input, not_found};

/// The new default spec. `change` must be a partition field change.
pub(super) fn evolve_spec(
    table: &str,
    metadata: &TableMetadata,
    change: &TableChange,
) -> Result<UnboundPartitionSpec> {
    let spec = metadata.default_partition_spec();
    let mut fields: Vec<UnboundPartitionField> = spec
        .fields()
        .iter()
        .map(|f| UnboundPartitionField {
            source_id: f.source_id,
            field_id: Some(f.field_id),
            name: f.name.clone(),
            transform: f.transform,
        })
        .collect();
    let v1 = metadata.format_version() == FormatVersion::V1;
    let evolution = Evolution { table, metadata };
    match change {
        TableChange::AddPartitionField { field, name } => {
            fields.push(evolution.new_field(&fields, field, name.as_deref())?);
        }
        TableChange::DropPartitionField(reference) => {
            let at = evolution.find(spec.fields(), reference)?;
            drop_field(&mut fields, at, v1);
        }
        TableChange::ReplacePartitionField { from, to, name } => {
            let at = evolution.find(spec.fields(), from)?;
            drop_field(&mut fields, at, v1);
            fields.push(evolution.new_field(&fields, to, name.as_deref())?);
        }
        other => {
            return Err(invalid_input(format!(
                "ALTER TABLE {table}: {other:?} is not a change of the partition spec"
            )))
        }
    }
    UnboundPartitionSpec::builder()
        .add_partition_fields(fields)
        .map(|builder| builder.build())
        .map_err(|e| invalid_input(format!("ALTER TABLE {table}: invalid partition spec: {e}")))
}

fn drop_field(fields: &mut Vec<UnboundPartitionField>, at: usize, v1: bool) {
    if v1 {
        fields[at].transform = Transform::Void;
    } else {
        fields.remove(at);
    }
}

struct Evolution<'a> {
    table: &'a str,
    metadata: &'a TableMetadata,
}

impl Evolution<'_> {
    fn source_id(&self, column: &str) -> Result<i32> {
        self.metadata
            .current_schema()
            .field_by_name(column)
            .map(|f| f.id)
            .ok_or_else(|| {
                not_found(format!(
                    "ALTER TABLE {}: partition source column '{column}' does not exist",
                    self.table
                ))
            })
    }

    /// The field `reference` names in the current spec.
    fn find(&self, fields: &[PartitionField], reference: &PartitionFieldRef) -> Result<usize> {
        let live = |f: &&PartitionField| f.transform != Transform::Void;
        let found = match reference {
            PartitionFieldRef::Name(name) => {
                let by_name = fields.iter().position(|f| live(&f) && &f.name == name);
                let by_identity = || {
                    let id = self.metadata.current_schema().field_by_name(name)?.id;
                    fields
                        .iter()
                        .position(|f| f.source_id == id && f.transform == Transform::Identity)
                };
                by_name.or_else(by_identity)
            }
            PartitionFieldRef::Transform(item) => {
                let id = self.source_id(&item.column)?;
                let transform = item.transform.to_iceberg();
                fields
                    .iter()
                    .position(|f| f.source_id == id && f.transform == transform)
            }
        };
        found.ok_or_else(|| {
            let what = match reference {
                PartitionFieldRef::Name(name) => name.clone(),
                PartitionFieldRef::Transform(item) => describe(item),
            };
            let have: Vec<String> = fields
                .iter()
                .filter(live)
                .map(|f| format!("{} ({})", f.name, f.transform))
                .collect();
            not_found(format!(
                "ALTER TABLE {}: the table has no partition field {what} (its fields: {})",
                self.table,
                if have.is_empty() {
                    "none, it is unpartitioned".to_string()
                } else {
                    have.join(", ")
                }
            ))
        })
    }

    /// The field `item` adds, after checking it against `fields`.
    fn new_field(
        &self,
        fields: &[UnboundPartitionField],
        item: &PartitionItem,
        name: Option<&str>,
    ) -> Result<UnboundPartitionField> {
        let table = self.table;
        let source_id = self.source_id(&item.column)?;
        let transform = item.transform.to_iceberg();
        let name = name
            .map(str::to_string)
            .unwrap_or_else(|| default_name(item));
        let live = fields.iter().filter(|f| f.transform != Transform::Void);
        for field in live {
            if field.source_id == source_id && field.transform == transform {
                return Err(already_exists(format!(
                    "ALTER TABLE {table}: the table is already partitioned by {} (field '{}')",
                    describe(item),
                    field.name
                )));
            }
            if field.source_id == source_id && is_time(field.transform) && is_time(transform) {
                return Err(invalid_input(format!(
                    "ALTER TABLE {table}: {} is redundant with partition field '{}' ({}) on the \
                     same column",
                    describe(item),
                    field.name,
                    field.transform
                )));
            }
        }
        if fields.iter().any(|f| f.name == name) {
            return Err(already_exists(format!(
                "ALTER TABLE {table}: a partition field named '{name}' already exists"
            )));
        }
        Ok(UnboundPartitionField {
            source_id,
            field_id: None,
            name,
            transform,
        })
    }
}

fn is_time(transform: Transform) -> bool {
    matches!(
        transform,
        Transform::Year | Transform::Month | Transform::Day | Transform::Hour
    )
}

/// Iceberg's names for fields added by a spec update (`id_bucket_16`,
/// `name_trunc_4`, `ts_day`, the column for identity).
fn default_name(item: &PartitionItem) -> String {
    let column = &item.column;
    match item.transform {
        PartitionTransform::Bucket(n) => format!("{column}_bucket_{n}"),
        PartitionTransform::Truncate(w) => format!("{column}_trunc_{w}"),
        other => other.field_name(column),
    }
}

fn describe(item: &PartitionItem) -> String {
    match item.transform {
        PartitionTransform::Identity => item.column.clone(),
        PartitionTransform::Bucket(n) => format!("bucket({n}, {})", item.column),
        PartitionTransform::Truncate(w) => format!("truncate({w}, {})", item.column),
        other => format!("{other}({})", item.column),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::spec::{
        NestedField, PrimitiveType, Schema, SortOrder, TableMetadataBuilder, Type,
    };

    fn metadata(version: FormatVersion) -> TableMetadata {
        let schema = Schema::builder()
            .with_fields(vec![
                NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
                NestedField::optional(2, "ts", Type::Primitive(PrimitiveType::Timestamp)).into(),
                NestedField::optional(3, "region", Type::Primitive(PrimitiveType::String)).into(),
            ])
            .build()
            .unwrap();
        let spec = UnboundPartitionSpec::builder()
            .add_partition_field(3, "region", Transform::Identity)
            .unwrap()
            .add_partition_field(2, "ts_day", Transform::Day)
            .unwrap()
            .build();
        TableMetadataBuilder::new(
            schema,
            spec,
            SortOrder::unsorted_order(),
            "memory:///t".into(),
            version,
            Default::default(),
        )
        .unwrap()
        .build()
        .unwrap()
        .metadata
    }

    fn item(column: &str, transform: PartitionTransform) -> PartitionItem {
        PartitionItem {
            column: column.into(),
            transform,
        }
    }

    fn fields(spec: &UnboundPartitionSpec) -> Vec<(String, Transform, Option<i32>)> {
        spec.fields()
            .iter()
            .map(|f| (f.name.clone(), f.transform, f.field_id))
            .collect()
    }

    #[test]
    fn add_drop_and_replace() {
        let m = metadata(FormatVersion::V2);
        let added = evolve_spec(
            "t",
            &m,
            &TableChange::AddPartitionField {
                field: item("id", PartitionTransform::Bucket(8)),
                name: None,
            },
        )
        .unwrap();
        assert_eq!(
            fields(&added)[2],
            ("id_bucket_8".into(), Transform::Bucket(8), None)
        );
        let dropped = evolve_spec(
            "t",
            &m,
            &TableChange::DropPartitionField(PartitionFieldRef::Name("region".into())),
        )
        .unwrap();
        assert_eq!(
            fields(&dropped),
            vec![("ts_day".to_string(), Transform::Day, Some(1001))]
        );
        let replaced = evolve_spec(
            "t",
            &m,
            &TableChange::ReplacePartitionField {
                from: PartitionFieldRef::Transform(item("ts", PartitionTransform::Day)),
                to: item("ts", PartitionTransform::Hour),
                name: Some("hour".into()),
            },
        )
        .unwrap();
        assert_eq!(
            fields(&replaced),
            vec![
                ("region".to_string(), Transform::Identity, Some(1000)),
                ("hour".to_string(), Transform::Hour, None)
            ]
        );
        let v1 = evolve_spec(
            "t",
            &metadata(FormatVersion::V1),
            &TableChange::DropPartitionField(PartitionFieldRef::Name("ts_day".into())),
        )
        .unwrap();
        assert_eq!(
            fields(&v1)[1],
            ("ts_day".into(), Transform::Void, Some(1001))
        );
    }

    #[test]
    fn bad_changes_are_named() {
        let m = metadata(FormatVersion::V2);
        let err = |change: TableChange| evolve_spec("t", &m, &change).unwrap_err().to_string();
        assert!(err(TableChange::AddPartitionField {
            field: item("ts", PartitionTransform::Hour),
            name: None
        })
        .contains("redundant"));
        assert!(err(TableChange::AddPartitionField {
            field: item("region", PartitionTransform::Identity),
            name: Some("r".into())
        })
        .contains("already partitioned by region"));
        assert!(err(TableChange::AddPartitionField {
            field: item("nope", PartitionTransform::Identity),
            name: None
        })
        .contains("'nope' does not exist"));
        assert!(err(TableChange::DropPartitionField(PartitionFieldRef::Name(
            "id".into()
        )))
        .contains("no partition field id (its fields: region (identity), ts_day (day))"));
    }
}
