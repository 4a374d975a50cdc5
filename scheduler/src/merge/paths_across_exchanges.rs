//! On a cluster, data file paths cross exchanges dictionary-encoded.
//!
//! A merge's rows carry the data file of their target row (`_file`) as a
//! string: in memory the row-id scan shares one buffer per file between a
//! batch's rows, but a shuffle file stores each row's copy of the path
//! (~100 bytes, where the row id's position takes 8), which the shuffle
//! writer compacts, compresses, and the next stage decompresses. Cast to a
//! dictionary before the exchange, a batch's paths are written once, each
//! row a 4-byte key; after the exchange they are cast back to the type the
//! plan had there, so every operator above sees what it saw before. The
//! local engine's exchanges hand batches over in memory and are left alone.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::error::Result;
use datafusion::physical_expr::expressions::CastExpr;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{ExecutionPlan, Partitioning};
use icemerge_proto::merge_rows::FILE_COLUMN;

use super::projected;

/// The type paths cross an exchange as.
fn encoded() -> DataType {
    DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8))
}

/// Whether `field` is a data file path stored as plain strings. (The
/// writer route crosses its exchange as a number, `WriterRouteExpr`.)
fn is_path(field: &Field) -> bool {
    field.name() == FILE_COLUMN
        && matches!(
            field.data_type(),
            DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8
        )
}

/// `plan` with the paths of every hash exchange's rows dictionary-encoded
/// across it (see the module doc).
pub(super) fn paths_as_dictionaries_across_exchanges(
    plan: Arc<dyn ExecutionPlan>,
) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        let Some(exchange) = node.as_any().downcast_ref::<RepartitionExec>() else {
            return Ok(Transformed::no(node));
        };
        let schema = exchange.input().schema();
        if !matches!(exchange.partitioning(), Partitioning::Hash(..))
            || !schema.fields().iter().any(|f| is_path(f))
        {
            return Ok(Transformed::no(node));
        }
        let input = projected(exchange.input().clone(), |field, column| {
            Some(if is_path(field) {
                Arc::new(CastExpr::new(column, encoded(), None))
            } else {
                column
            })
        })?;
        // The projection keeps every column where it was: the exchange's
        // hash expressions still point at theirs (a dictionary hashes as
        // its values do).
        let mut encoded_exchange =
            RepartitionExec::try_new(input, exchange.partitioning().clone())?;
        if exchange.preserve_order() {
            encoded_exchange = encoded_exchange.with_preserve_order();
        }
        let decoded = projected(Arc::new(encoded_exchange), |field, column| {
            Some(match schema.field_with_name(field.name()) {
                Ok(original) if is_path(original) => {
                    Arc::new(CastExpr::new(column, original.data_type().clone(), None))
                }
                _ => column,
            })
        })?;
        Ok(Transformed::yes(decoded))
    })
    .map(|t| t.data)
}
