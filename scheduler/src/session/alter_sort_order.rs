//! The sort order `ALTER TABLE ... WRITE ORDERED BY` gives a table (the
//! statement also sets `write.distribution-mode`, as Spark does, in the
//! same metadata commit). Its terms are the current schema's columns, by
//! field id: icemerge's writers sort by plain columns
//! (`icemerge_executor::write_order`), so a transform (`bucket(16, id)`) is
//! refused by name rather than recorded and not applied. An empty order
//! (`WRITE UNORDERED`, `WRITE DISTRIBUTED BY PARTITION`) makes the table
//! unsorted.

use datafusion::error::Result;
use iceberg::spec::{NullOrder, SortDirection, SortField, SortOrder, TableMetadata, Transform};
use icemerge_executor::iceberg_err;
use icemerge_planner::alter_table::{SortItem, WriteOrder};
use icemerge_planner::ddl::PartitionTransform;
use icemerge_proto::error::{invalid_input, not_found, unsupported};

/// The table property naming how rows are spread over writers.
pub(super) const DISTRIBUTION_MODE: &str = "write.distribution-mode";

/// The unbound sort order of `write` over `metadata`'s current schema.
pub(super) fn sort_order(
    table: &str,
    metadata: &TableMetadata,
    write: &WriteOrder,
) -> Result<SortOrder> {
    sort_order_of(
        &format!("ALTER TABLE {table} WRITE ORDERED BY"),
        metadata,
        &write.order,
    )
}

/// The unbound sort order of `order` over `metadata`'s current schema;
/// `what` names the clause in errors.
pub(super) fn sort_order_of(
    what: &str,
    metadata: &TableMetadata,
    order: &[SortItem],
) -> Result<SortOrder> {
    let schema = metadata.current_schema();
    let mut builder = SortOrder::builder();
    let mut seen = vec![];
    for item in order {
        let column = &item.term.column;
        if item.term.transform != PartitionTransform::Identity {
            return Err(unsupported(format!(
                "{what}: the {} transform of '{column}' is not \
                 supported: icemerge sorts by columns only; order by '{column}' itself",
                item.term.transform
            )));
        }
        let field = schema
            .field_by_name(column)
            .ok_or_else(|| not_found(format!("{what}: column '{column}' does not exist")))?;
        if !field.field_type.is_primitive() {
            return Err(invalid_input(format!(
                "{what}: column '{column}' is of type {}, which \
                 cannot be sorted by",
                field.field_type
            )));
        }
        if seen.contains(&field.id) {
            return Err(invalid_input(format!(
                "{what}: column '{column}' is named twice"
            )));
        }
        seen.push(field.id);
        builder.with_sort_field(SortField {
            source_id: field.id,
            transform: Transform::Identity,
            direction: if item.descending {
                SortDirection::Descending
            } else {
                SortDirection::Ascending
            },
            null_order: if item.nulls_first {
                NullOrder::First
            } else {
                NullOrder::Last
            },
        });
    }
    builder.build_unbound().map_err(iceberg_err)
}
