//! The order table writers sort rows in: the table's default sort order
//! (`ALTER TABLE ... WRITE ORDERED BY`) when it sorts by plain columns of
//! the current schema. `sort_for_write` puts a sort of each writer task's
//! rows under a writer (spilling under the memory budget like any sort),
//! and a writer whose input comes in that order records the order's id in
//! the data files it writes (`sort_order_id`), as Iceberg's writers do;
//! files written in any other order record none.

use std::sync::Arc;

use arrow::compute::SortOptions;
use datafusion::error::Result;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};
use iceberg::spec::{
    DataFile, DataFileBuilder, NullOrder, SortDirection, SortOrder, TableMetadata, Transform,
};

use icemerge_proto::error::internal;

/// The sort a writer of `metadata`'s table applies to rows whose columns are
/// the current schema's, in order; `None` when the table is unsorted or its
/// order uses a transform.
pub fn write_ordering(metadata: &TableMetadata) -> Option<(i64, LexOrdering)> {
    let order = metadata.default_sort_order();
    if order.is_unsorted() {
        return None;
    }
    ordering_of(order, metadata).map(|ordering| (order.order_id, ordering))
}

/// `order` as a sort of rows whose columns are `metadata`'s current
/// schema's, in order; `None` when it is empty or uses a transform.
pub fn ordering_of(order: &SortOrder, metadata: &TableMetadata) -> Option<LexOrdering> {
    let fields = metadata.current_schema().as_struct().fields();
    let mut exprs = vec![];
    for field in &order.fields {
        if field.transform != Transform::Identity {
            return None;
        }
        let index = fields.iter().position(|f| f.id == field.source_id)?;
        exprs.push(PhysicalSortExpr::new(
            Arc::new(Column::new(&fields[index].name, index)),
            SortOptions {
                descending: field.direction == SortDirection::Descending,
                nulls_first: field.null_order == NullOrder::First,
            },
        ));
    }
    LexOrdering::new(exprs)
}

/// `input` (rows with the table's columns, in order) sorted within each
/// partition by the table's write order; `input` itself when unsorted.
pub fn sort_for_write(
    metadata: &TableMetadata,
    input: Arc<dyn ExecutionPlan>,
) -> Arc<dyn ExecutionPlan> {
    match write_ordering(metadata) {
        Some((_, ordering)) => {
            Arc::new(SortExec::new(ordering, input).with_preserve_partitioning(true))
        }
        None => input,
    }
}

/// The sort order id a writer over `input` records in its files: the
/// table's write order's, when `input` is known to come in that order.
pub fn sorted_input_order_id(
    metadata: &TableMetadata,
    input: &Arc<dyn ExecutionPlan>,
) -> Option<i32> {
    let (id, ordering) = write_ordering(metadata)?;
    let satisfied = input
        .equivalence_properties()
        .ordering_satisfy(ordering)
        .unwrap_or(false);
    satisfied.then_some(id as i32)
}

/// A builder holding every field of `file` but its partition spec id (which
/// `DataFile` does not expose), to change some of them.
pub fn data_file_builder(file: &DataFile) -> DataFileBuilder {
    let mut builder = DataFileBuilder::default();
    builder
        .content(file.content_type())
        .file_path(file.file_path().to_string())
        .file_format(file.file_format())
        .partition(file.partition().clone())
        .record_count(file.record_count())
        .file_size_in_bytes(file.file_size_in_bytes())
        .column_sizes(file.column_sizes().clone())
        .value_counts(file.value_counts().clone())
        .null_value_counts(file.null_value_counts().clone())
        .nan_value_counts(file.nan_value_counts().clone())
        .lower_bounds(file.lower_bounds().clone())
        .upper_bounds(file.upper_bounds().clone())
        .key_metadata(file.key_metadata().map(<[u8]>::to_vec))
        .split_offsets(file.split_offsets().map(<[i64]>::to_vec))
        .equality_ids(file.equality_ids())
        .first_row_id(file.first_row_id())
        .referenced_data_file(file.referenced_data_file())
        .content_offset(file.content_offset())
        .content_size_in_bytes(file.content_size_in_bytes());
    if let Some(id) = file.sort_order_id() {
        builder.sort_order_id(id);
    }
    builder
}

/// `file` (of partition spec `spec_id`) recording that its rows are in sort
/// order `id`.
pub fn with_sort_order_id(file: &DataFile, spec_id: i32, id: i32) -> Result<DataFile> {
    data_file_builder(file)
        .partition_spec_id(spec_id)
        .sort_order_id(id)
        .build()
        .map_err(|e| internal(format!("data file '{}': {e}", file.file_path())))
}
