//! Scanning a snapshot that was written before the table's schema changed.
//!
//! A query reads the current snapshot with the table's current schema (as
//! Spark and Trino do), but iceberg's scan planner binds the selected
//! column names and the filter to the schema the snapshot was written
//! with. After `ALTER TABLE ... ADD / RENAME / ALTER COLUMN` the two
//! differ until the next write, so the scan is planned in the snapshot's
//! names and its tasks then read with the read schema: the reader projects
//! by field id, so a renamed column keeps its values, an added column
//! reads as NULL and a promoted column is widened.
//!
//! iceberg's reader filters rows with the task's predicate in the file's
//! own types, which goes wrong for a promoted column (an int file read as
//! bigint matches nothing): on a table with a promoted column, the scan
//! leaves row filtering to the engine, and file pruning does not use the
//! promoted columns, whose old statistics compare with nothing of the new
//! type ([`promoted_columns`]).

use iceberg::expr::{BinaryExpression, Predicate, Reference, SetExpression, UnaryExpression};
use iceberg::scan::FileScanTask;
use iceberg::spec::{SchemaRef, TableMetadata};

/// How the columns of the read schema are found in the snapshot's schema
/// (both schemas of the same table: a field id names the same column).
pub(crate) struct SnapshotSchema {
    read: SchemaRef,
    snapshot: SchemaRef,
}

impl SnapshotSchema {
    /// `None` when the snapshot was written with the read schema.
    pub(crate) fn differs(read: SchemaRef, snapshot: SchemaRef) -> Option<Self> {
        (read.schema_id() != snapshot.schema_id()).then_some(SnapshotSchema { read, snapshot })
    }

    /// The snapshot's name of the read schema's column `name`; `None` for
    /// a column added after the snapshot.
    fn snapshot_name(&self, name: &str) -> Option<String> {
        let id = self.read.field_by_name(name)?.id;
        self.snapshot.name_by_field_id(id).map(str::to_string)
    }

    /// The columns to ask the planner for: those the snapshot has.
    pub(crate) fn columns(&self, columns: &[String]) -> Vec<String> {
        columns
            .iter()
            .filter_map(|c| self.snapshot_name(c))
            .collect()
    }

    /// `predicate` in the snapshot's names (see [`map_columns`]).
    pub(crate) fn predicate(&self, predicate: &Predicate) -> Option<Predicate> {
        map_columns(predicate, &|name| self.snapshot_name(name))
    }

    /// Points a planned task at the read schema's `columns`.
    pub(crate) fn read_task(&self, task: &mut FileScanTask, columns: &[String]) {
        task.project_field_ids = columns
            .iter()
            .filter_map(|c| self.read.field_by_name(c).map(|f| f.id))
            .collect();
        task.schema = self.read.clone();
    }
}

/// The columns of `read` that had another type in an earlier schema of
/// the table (`ALTER COLUMN ... TYPE`): files written then store the
/// narrower type, and their statistics compare with nothing of the new one.
pub(crate) fn promoted_columns(metadata: &TableMetadata, read: &SchemaRef) -> Vec<String> {
    read.as_struct()
        .fields()
        .iter()
        .filter(|field| {
            metadata.schemas_iter().any(|schema| {
                schema
                    .field_by_id(field.id)
                    .is_some_and(|old| old.field_type != field.field_type)
            })
        })
        .map(|field| field.name.clone())
        .collect()
}

/// `predicate` without its conjuncts on `columns` (see [`map_columns`]).
pub(crate) fn without_columns(predicate: &Predicate, columns: &[String]) -> Option<Predicate> {
    map_columns(predicate, &|name| {
        (!columns.iter().any(|c| c == name)).then(|| name.to_string())
    })
}

/// `predicate` with each column renamed by `rename`; a conjunct on a
/// column `rename` drops (`None`) is dropped. The predicate only prunes,
/// so a weaker one is safe; a whole predicate that cannot be kept is
/// `None`.
fn map_columns(
    predicate: &Predicate,
    rename: &dyn Fn(&str) -> Option<String>,
) -> Option<Predicate> {
    let column = |r: &Reference| rename(r.name()).map(Reference::new);
    Some(match predicate {
        Predicate::AlwaysTrue => Predicate::AlwaysTrue,
        Predicate::AlwaysFalse => Predicate::AlwaysFalse,
        Predicate::And(and) => {
            let [left, right] = and.inputs();
            match (map_columns(left, rename), map_columns(right, rename)) {
                (Some(l), Some(r)) => l.and(r),
                (one, other) => one.or(other)?,
            }
        }
        Predicate::Or(or) => {
            let [left, right] = or.inputs();
            map_columns(left, rename)?.or(map_columns(right, rename)?)
        }
        Predicate::Not(not) => {
            let [inner] = not.inputs();
            !map_columns(inner, rename)?
        }
        Predicate::Unary(e) => Predicate::Unary(UnaryExpression::new(e.op(), column(e.term())?)),
        Predicate::Binary(e) => Predicate::Binary(BinaryExpression::new(
            e.op(),
            column(e.term())?,
            e.literal().clone(),
        )),
        Predicate::Set(e) => Predicate::Set(SetExpression::new(
            e.op(),
            column(e.term())?,
            e.literals().clone(),
        )),
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use iceberg::expr::Reference;
    use iceberg::spec::Schema;
    use iceberg::spec::{Datum, NestedField, PrimitiveType, Type};

    fn schema(id: i32, fields: &[(i32, &str)]) -> SchemaRef {
        Arc::new(
            Schema::builder()
                .with_schema_id(id)
                .with_fields(fields.iter().map(|(i, n)| {
                    NestedField::optional(*i, *n, Type::Primitive(PrimitiveType::Long)).into()
                }))
                .build()
                .unwrap(),
        )
    }

    #[test]
    fn names_and_predicates_follow_field_ids() {
        let snapshot = schema(0, &[(1, "id"), (2, "s")]);
        let read = schema(1, &[(1, "id"), (2, "label"), (3, "n")]);
        assert!(SnapshotSchema::differs(snapshot.clone(), snapshot.clone()).is_none());
        let map = SnapshotSchema::differs(read, snapshot).unwrap();
        let columns: Vec<String> = ["label", "n", "id"].map(String::from).to_vec();
        assert_eq!(map.columns(&columns), ["s", "id"]);
        let on = |c: &str| Reference::new(c).greater_than(Datum::long(5));
        assert_eq!(
            map.predicate(&on("label").and(on("n")))
                .unwrap()
                .to_string(),
            on("s").to_string()
        );
        assert!(map.predicate(&on("label").or(on("n"))).is_none());
        assert!(map.predicate(&!on("n")).is_none());
        let promoted = vec!["v".to_string()];
        assert_eq!(
            without_columns(&on("id").and(on("v")), &promoted)
                .unwrap()
                .to_string(),
            on("id").to_string()
        );
        assert!(without_columns(&on("v"), &promoted).is_none());
    }
}
