//! Dynamic pruning of a MERGE's target scan (stage A) by its source's keys.
//!
//! Before the target scan is planned, the source side of the classification
//! plan (the same logical subtree the join will read, with the same pinned
//! tables) gives its row count and, per ON key `t.col = <source
//! expression>`, the min and max of the expression and, when there are at
//! most [`DISTINCT_LIMIT`] of them, its distinct values. They become a
//! predicate on the target's key columns that iceberg's planner prunes data
//! files with (partition values and column bounds); rows are never filtered
//! by it. The row count bounds the rows the merge can insert.
//!
//! The source is not read for them when its files' statistics know them
//! (`source_bounds.rs`: an Iceberg table's manifests, Parquet footers): when
//! every key is a bare integer column of an unfiltered scan and the source
//! has more than [`DISTINCT_LIMIT`] rows (or one key value), the range comes
//! from those statistics and the job is the one read of the source. Otherwise (an expression as key, a filtered
//! subquery, VALUES, few rows) the source is probed by queries before the
//! job.
//!
//! Skipped when a `WHEN NOT MATCHED BY SOURCE` clause needs every target row
//! (no probe then) and when the source is not deterministic (a second read
//! could see other keys).

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::{DataType, Schema};
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::ScalarValue;
use datafusion::dataframe::DataFrame;
use datafusion::datasource::provider_as_source;
use datafusion::error::Result;
use datafusion::functions_aggregate::expr_fn::{count, max, min};
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{col, lit, SessionContext};
use iceberg::expr::Predicate;
use icemerge_executor::merge_writer::TargetFiles;
use icemerge_executor::scan_exec::IcebergScanExec;
use icemerge_planner::source_keys::SourceKeyProbe;

use super::source_bounds::keys_from_file_statistics;
use crate::catalog::IcebergTableProvider;
use icemerge_executor::filter_pushdown::to_iceberg_predicate;
use icemerge_proto::error::internal;

/// At most this many distinct source values of a key are listed one by one;
/// beyond it the key prunes by its min / max range.
pub const DISTINCT_LIMIT: usize = 64;

/// What the probe learned about the source.
#[derive(Debug, Clone)]
pub struct SourceKeys {
    /// Rows of the source (an upper bound of the rows the merge inserts).
    pub rows: u64,
    /// Predicate on the target's columns that every matching target row
    /// satisfies; `None` when no key could be used.
    pub predicate: Option<Predicate>,
    /// Where they came from, as EXPLAIN says after the predicate.
    pub origin: &'static str,
}

impl SourceKeys {
    /// The keys of a source of `rows` rows none of which can match (no
    /// row, or every key NULL), learned from `origin`.
    pub(super) fn matching_nothing(rows: u64, origin: &'static str) -> Self {
        SourceKeys {
            rows,
            predicate: Some(Predicate::AlwaysFalse),
            origin,
        }
    }
}

/// [`SourceKeys::origin`] of keys read from the source plan's statistics.
pub const FROM_STATISTICS: &str = "statistics";
/// [`SourceKeys::origin`] of keys the source was queried for.
pub const FROM_PROBE: &str = "probe";

/// Runs `probe` over `source` (the source side of the merge's join).
/// `None` when the source is not deterministic.
pub async fn probe_source_keys(
    ctx: &SessionContext,
    source: LogicalPlan,
    probe: &SourceKeyProbe,
    target: &Schema,
) -> Result<Option<SourceKeys>> {
    if is_volatile(&source)? {
        return Ok(None);
    }
    let frame = DataFrame::new(ctx.state(), source);
    let keys = probe
        .expressions
        .iter()
        .map(|e| frame.parse_sql_expr(e))
        .collect::<Result<Vec<_>>>()?;
    if let Some(keys) = keys_from_file_statistics(&frame, probe, &keys, target).await? {
        return Ok(Some(keys));
    }
    let mut aggregates = vec![count(lit(1)).alias("__rows")];
    for (i, key) in keys.iter().enumerate() {
        aggregates.push(min(key.clone()).alias(format!("__min_{i}")));
        aggregates.push(max(key.clone()).alias(format!("__max_{i}")));
    }
    let ranges = frame
        .clone()
        .aggregate(vec![], aggregates)?
        .collect()
        .await?;
    let Some(ranges) = ranges.iter().find(|b| b.num_rows() > 0) else {
        return Ok(None);
    };
    let rows = match ScalarValue::try_from_array(ranges.column(0), 0)? {
        ScalarValue::Int64(Some(n)) => n.max(0) as u64,
        _ => 0,
    };
    let mut conjuncts = vec![];
    for (i, (column, key)) in probe.columns.iter().zip(&keys).enumerate() {
        let low = ScalarValue::try_from_array(ranges.column(1 + 2 * i), 0)?;
        let high = ScalarValue::try_from_array(ranges.column(2 + 2 * i), 0)?;
        if low.is_null() {
            // Every source key is NULL: no target row can match.
            return Ok(Some(SourceKeys::matching_nothing(rows, FROM_PROBE)));
        }
        let target_type = target.field_with_name(column)?.data_type();
        let (Some(low), Some(high)) = (
            as_target_value(low, target_type),
            as_target_value(high, target_type),
        ) else {
            continue;
        };
        let values = if low == high {
            vec![low.clone()]
        } else {
            distinct_values(&frame, key.clone(), target_type).await?
        };
        conjuncts.push(if !values.is_empty() && values.len() <= DISTINCT_LIMIT {
            let column = col(datafusion::common::Column::from_name(column));
            values
                .into_iter()
                .map(|v| column.clone().eq(lit(v)))
                .reduce(Expr::or)
                .expect("at least one value")
        } else {
            key_in_range(column, low, high)
        });
    }
    Ok(Some(SourceKeys {
        rows,
        predicate: to_iceberg_predicate(&conjuncts),
        origin: FROM_PROBE,
    }))
}

/// Up to `DISTINCT_LIMIT + 1` distinct non-NULL values of `key` as target
/// values, ascending; empty when one of them does not convert.
async fn distinct_values(
    frame: &DataFrame,
    key: Expr,
    target_type: &DataType,
) -> Result<Vec<ScalarValue>> {
    let batches = frame
        .clone()
        .filter(key.clone().is_not_null())?
        .select(vec![key.alias("__key")])?
        .distinct()?
        .limit(0, Some(DISTINCT_LIMIT + 1))?
        .collect()
        .await?;
    let mut values = vec![];
    for batch in &batches {
        for row in 0..batch.num_rows() {
            let value = ScalarValue::try_from_array(batch.column(0), row)?;
            match as_target_value(value, target_type) {
                Some(v) => values.push(v),
                None => return Ok(vec![]),
            }
        }
    }
    // In order, so that the predicate reads the same on every run.
    values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    Ok(values)
}

/// `column = low` when the two bounds are one value, else `column >= low
/// AND column <= high`.
pub(super) fn key_in_range(column: &str, low: ScalarValue, high: ScalarValue) -> Expr {
    let column = col(datafusion::common::Column::from_name(column));
    if low == high {
        column.eq(lit(low))
    } else {
        column.clone().gt_eq(lit(low)).and(column.lt_eq(lit(high)))
    }
}

/// A source key value as a value of the target column's type, when the two
/// types compare the same way (same type, integers, strings); `None`
/// otherwise or when it does not fit.
pub(super) fn as_target_value(value: ScalarValue, target: &DataType) -> Option<ScalarValue> {
    let from = value.data_type();
    let comparable = &from == target
        || (from.is_integer() && target.is_integer())
        || (is_string(&from) && is_string(target));
    if !comparable {
        return None;
    }
    value.cast_to(target).ok().filter(|v| !v.is_null())
}

fn is_string(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

/// Whether any expression of `plan` is volatile (e.g. `random()`).
pub(super) fn is_volatile(plan: &LogicalPlan) -> Result<bool> {
    let mut volatile = false;
    plan.apply(|node| {
        node.apply_expressions(|e| {
            volatile |= e.is_volatile();
            Ok(if volatile {
                TreeNodeRecursion::Stop
            } else {
                TreeNodeRecursion::Continue
            })
        })?;
        Ok(if volatile {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    })?;
    Ok(volatile)
}

/// The source side of the merge's join (the first join of the plan; the
/// source is its left input, `icemerge_planner::merge::classify_sql`).
pub(super) fn join_source(plan: &LogicalPlan) -> Result<LogicalPlan> {
    let mut source = None;
    plan.apply(|node| {
        if let LogicalPlan::Join(join) = node {
            source = Some(join.left.as_ref().clone());
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    source.ok_or_else(|| internal("MERGE plan without a join"))
}

/// `plan` with the scan of `relation` reading through `provider` instead.
pub(crate) fn with_target_provider(
    plan: LogicalPlan,
    relation: &str,
    provider: Arc<IcebergTableProvider>,
) -> Result<LogicalPlan> {
    plan.transform_up(|node| match node {
        LogicalPlan::TableScan(mut scan) if scan.table_name.table() == relation => {
            scan.source = provider_as_source(provider.clone());
            Ok(Transformed::yes(LogicalPlan::TableScan(scan)))
        }
        other => Ok(Transformed::no(other)),
    })
    .map(|t| t.data)
}

/// What the plan's scan of the target reads.
pub(super) struct ScannedTargets {
    /// The record count and delete files of every data file it reads.
    pub files: TargetFiles,
    /// The path of every data file it reads.
    pub paths: Vec<String>,
    /// How many data files it pruned.
    pub pruned: u64,
    /// The predicate that pruned them (None: nothing pruned by predicate).
    pub pruned_by: Option<Predicate>,
}

/// The files the plan's scan of the target reads (with their record
/// counts and delete files) and what pruned the others.
pub(super) fn target_files(plan: &Arc<dyn ExecutionPlan>) -> ScannedTargets {
    let mut rows = HashMap::new();
    let mut deletes = HashMap::new();
    let mut paths = vec![];
    let mut pruned = 0;
    let mut pruned_by = None;
    let mut scans = 0;
    let _ = plan.apply(|node| {
        if let Some(scan) = node.as_any().downcast_ref::<IcebergScanExec>() {
            if scan.merge_target {
                scans += 1;
                pruned += scan.files_pruned;
                pruned_by = scan.pruned_by.clone();
                for task in scan.groups.iter().flatten() {
                    paths.push(task.data_file_path.clone());
                    if let Some(n) = task.record_count {
                        rows.insert(task.data_file_path.clone(), n);
                    }
                    if !task.deletes.is_empty() {
                        deletes.insert(task.data_file_path.clone(), task.deletes.clone());
                    }
                }
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    if scans != 1 {
        // Not one scan with one predicate: depend on the whole table.
        pruned_by = None;
    }
    ScannedTargets {
        files: TargetFiles {
            rows: Arc::new(rows),
            deletes: Arc::new(deletes),
        },
        paths,
        pruned,
        pruned_by,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_convert_only_between_comparable_types() {
        assert_eq!(
            as_target_value(ScalarValue::Int32(Some(7)), &DataType::Int64),
            Some(ScalarValue::Int64(Some(7)))
        );
        assert_eq!(
            as_target_value(ScalarValue::Int64(Some(i64::MAX)), &DataType::Int32),
            None
        );
        assert_eq!(
            as_target_value(ScalarValue::Float64(Some(1.5)), &DataType::Int64),
            None
        );
        assert_eq!(
            as_target_value(ScalarValue::Utf8(Some("a".into())), &DataType::Utf8),
            Some(ScalarValue::Utf8(Some("a".into())))
        );
    }
}
