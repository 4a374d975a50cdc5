//! The source's ON-key ranges known without reading its rows, for dynamic
//! pruning (`dynamic_pruning.rs`): an Iceberg table source has record counts
//! and column bounds in its manifests; a source of Parquet files
//! (`read_parquet`, an external table) has exact row counts and per-column
//! min / max in its footers, which DataFusion gives as its physical plan's
//! statistics. Either gives the range of every key that is a bare integer
//! column of the source, so the merge's job is the one read of the source.
//! `None` when they cannot: a computed key, a filtered source, a file
//! without bounds for a key, or at most [`DISTINCT_LIMIT`] rows over a range
//! of keys (a small source is cheap to probe, which lists its keys one by
//! one); a small source of one key value (a one-row upsert) or of no row
//! needs no probe either.

use arrow::datatypes::Schema;
use datafusion::common::stats::Precision;
use datafusion::common::{Column, ScalarValue};
use datafusion::dataframe::DataFrame;
use datafusion::datasource::source_as_provider;
use datafusion::error::Result;
use datafusion::logical_expr::{Expr, LogicalPlan, TableScan};
use iceberg::spec::{DataContentType, Datum, PrimitiveLiteral, PrimitiveType};
use icemerge_executor::filter_pushdown::to_iceberg_predicate;
use icemerge_executor::iceberg_err;
use icemerge_planner::source_keys::SourceKeyProbe;
use icemerge_proto::error::io_error;

use super::dynamic_pruning::{
    as_target_value, key_in_range, SourceKeys, DISTINCT_LIMIT, FROM_STATISTICS,
};
use crate::catalog::manifests::{data_manifests, load_manifests, MANIFEST_READ_CONCURRENCY};
use crate::catalog::IcebergTableProvider;

/// The keys of `frame` (the source) from its files' statistics: when every
/// key is a column an unfiltered table scan under `frame` reads unchanged,
/// an Iceberg table's manifests, any other table's (Parquet files')
/// physical-plan statistics. `None` when the keys are not such columns:
/// the source is then neither planned nor read here.
pub(super) async fn keys_from_file_statistics(
    frame: &DataFrame,
    probe: &SourceKeyProbe,
    keys: &[Expr],
    target: &Schema,
) -> Result<Option<SourceKeys>> {
    let mut scan = None;
    let mut scanned = vec![];
    for key in keys {
        let Expr::Column(column) = key else {
            return Ok(None);
        };
        let Some((key_scan, key)) = scanned_column(frame.logical_plan(), column) else {
            return Ok(None);
        };
        // Aliases and projections have one input: every key reaches the
        // same scan.
        scan = Some(key_scan);
        scanned.push(key);
    }
    let Some(scan) = scan else {
        return Ok(None);
    };
    let provider = source_as_provider(&scan.source)?;
    match provider.as_any().downcast_ref::<IcebergTableProvider>() {
        Some(table) => keys_from_manifests(table, &scanned, probe, target).await,
        None => keys_from_statistics(frame, &scanned, probe, target).await,
    }
}

/// A key as the source's column and the scanned table's.
struct ScannedKey {
    /// Index of the column in the source's schema.
    source_index: usize,
    /// Name of the column in the scanned table.
    table_column: String,
}

/// The keys of an Iceberg table source from the bounds its snapshot's
/// manifests record for every live data file, the files' record counts
/// summed as its rows (an upper bound when delete files remove some).
async fn keys_from_manifests(
    provider: &IcebergTableProvider,
    keys: &[ScannedKey],
    probe: &SourceKeyProbe,
    target: &Schema,
) -> Result<Option<SourceKeys>> {
    let table = &provider.table;
    let metadata = table.metadata();
    let snapshot = match provider.snapshot_id {
        Some(id) => metadata.snapshot_by_id(id),
        None => metadata.current_snapshot(),
    };
    let Some(snapshot) = snapshot else {
        return Ok(None);
    };
    // Names resolve as the scan resolves them: the current schema for the
    // current snapshot (a column renamed since it was written keeps its
    // field id), a pinned snapshot's own schema for it.
    let schema = match provider.snapshot_id {
        Some(_) => snapshot.schema(metadata).map_err(iceberg_err)?,
        None => metadata.current_schema().clone(),
    };
    let mut field_ids = vec![];
    for key in keys {
        let Some(field) = schema.field_by_name(&key.table_column) else {
            return Ok(None);
        };
        field_ids.push(field.id);
    }
    let manifest_files = data_manifests(table, snapshot).await.map_err(iceberg_err)?;
    let mut rows = 0u64;
    // Per key: the lowest lower bound and the highest upper bound so far;
    // `None` while every file read holds only NULL keys.
    let mut ranges: Vec<Option<(i64, i64)>> = vec![None; field_ids.len()];
    for chunk in manifest_files.chunks(MANIFEST_READ_CONCURRENCY) {
        let manifests = load_manifests(table.file_io(), chunk)
            .await
            .map_err(|e| io_error(format!("source {}: {e}", provider.name)))?;
        for manifest in manifests {
            for entry in manifest.entries().iter().filter(|e| e.is_alive()) {
                let file = entry.data_file();
                if file.content_type() != DataContentType::Data {
                    continue;
                }
                rows += file.record_count();
                for (range, id) in ranges.iter_mut().zip(&field_ids) {
                    let bounds = (file.lower_bounds().get(id), file.upper_bounds().get(id));
                    let (low, high) = match bounds {
                        (Some(low), Some(high)) => match (integer(low), integer(high)) {
                            (Some(low), Some(high)) => (low, high),
                            _ => return Ok(None),
                        },
                        // Every key of the file is NULL: none can match.
                        _ if file.null_value_counts().get(id) == Some(&file.record_count()) => {
                            continue
                        }
                        _ => return Ok(None),
                    };
                    *range = Some(match *range {
                        Some((l, h)) => (l.min(low), h.max(high)),
                        None => (low, high),
                    });
                }
            }
        }
    }
    let mut bounds = vec![];
    for range in ranges {
        match range {
            Some((low, high)) => bounds.push((ScalarValue::from(low), ScalarValue::from(high))),
            // No row, or no key that is not NULL: nothing can match.
            None => return Ok(Some(SourceKeys::matching_nothing(rows, FROM_STATISTICS))),
        }
    }
    keys_in_ranges(rows, &probe.columns, bounds, target)
}

/// The keys of `frame` from the statistics of its physical plan: its exact
/// row count and, for every key, its exact min and max (a scan of Parquet
/// files).
async fn keys_from_statistics(
    frame: &DataFrame,
    keys: &[ScannedKey],
    probe: &SourceKeyProbe,
    target: &Schema,
) -> Result<Option<SourceKeys>> {
    let plan = frame.clone().create_physical_plan().await?;
    let statistics = plan.partition_statistics(None)?;
    let Precision::Exact(rows) = statistics.num_rows else {
        return Ok(None);
    };
    if rows == 0 {
        return Ok(Some(SourceKeys::matching_nothing(0, FROM_STATISTICS)));
    }
    let mut bounds = vec![];
    for key in keys {
        let index = key.source_index;
        let Some(column) = statistics.column_statistics.get(index) else {
            return Ok(None);
        };
        let (Precision::Exact(low), Precision::Exact(high)) =
            (&column.min_value, &column.max_value)
        else {
            return Ok(None);
        };
        if !low.data_type().is_integer() || !high.data_type().is_integer() {
            return Ok(None);
        }
        bounds.push((low.clone(), high.clone()));
    }
    keys_in_ranges(rows as u64, &probe.columns, bounds, target)
}

/// `target_columns[i] BETWEEN bounds[i]` for every key (`=` when the two
/// bounds are one value), as [`SourceKeys`]; `None` when a bound does not
/// fit its target column's type, or when a source of at most
/// [`DISTINCT_LIMIT`] rows has a range of keys (a probe lists them one by
/// one, which prunes more).
fn keys_in_ranges(
    rows: u64,
    target_columns: &[String],
    bounds: Vec<(ScalarValue, ScalarValue)>,
    target: &Schema,
) -> Result<Option<SourceKeys>> {
    if rows <= DISTINCT_LIMIT as u64 && bounds.iter().any(|(low, high)| low != high) {
        return Ok(None);
    }
    let mut conjuncts = vec![];
    for (name, (low, high)) in target_columns.iter().zip(bounds) {
        let target_type = target.field_with_name(name)?.data_type();
        let (Some(low), Some(high)) = (
            as_target_value(low, target_type),
            as_target_value(high, target_type),
        ) else {
            return Ok(None);
        };
        conjuncts.push(key_in_range(name, low, high));
    }
    Ok(Some(SourceKeys {
        rows,
        predicate: to_iceberg_predicate(&conjuncts),
        origin: FROM_STATISTICS,
    }))
}

/// The table scan under `plan` that `column` of `plan` reads unchanged
/// (through subquery aliases and projections of columns), and the column
/// as a [`ScannedKey`]; `None` when a filter, a limit, a join or a
/// computed expression lies between.
fn scanned_column<'a>(
    plan: &'a LogicalPlan,
    column: &Column,
) -> Option<(&'a TableScan, ScannedKey)> {
    let source_index = plan.schema().index_of_column(column).ok()?;
    let mut index = source_index;
    let mut node = plan;
    loop {
        match node {
            LogicalPlan::SubqueryAlias(alias) => node = alias.input.as_ref(),
            LogicalPlan::Projection(projection) => {
                let Expr::Column(inner) = projection.expr.get(index)?.clone().unalias_nested().data
                else {
                    return None;
                };
                node = projection.input.as_ref();
                index = node.schema().index_of_column(&inner).ok()?;
            }
            LogicalPlan::TableScan(scan) if scan.filters.is_empty() && scan.fetch.is_none() => {
                let table_column = scan.projected_schema.field(index).name().clone();
                return Some((
                    scan,
                    ScannedKey {
                        source_index,
                        table_column,
                    },
                ));
            }
            _ => return None,
        }
    }
}

/// An integer bound (`int`, `long`) as an i64.
fn integer(bound: &Datum) -> Option<i64> {
    if !matches!(bound.data_type(), PrimitiveType::Int | PrimitiveType::Long) {
        return None;
    }
    match bound.literal() {
        PrimitiveLiteral::Int(v) => Some(i64::from(*v)),
        PrimitiveLiteral::Long(v) => Some(*v),
        _ => None,
    }
}
