//! How many writers a merge's inserted rows spread over: as many as the
//! source's rows could fill files of the table's target size, so a few
//! inserted rows make one file, not one per writer.

use datafusion::error::Result;
use iceberg::table::Table;
use icemerge_executor::iceberg_err;

/// How many routes inserted rows spread over (the classification's `$1`):
/// as many writers as the source's rows could fill files of the table's
/// target size, at the table's bytes per row; one route per row when the
/// source size is unknown or fills every writer.
pub(super) fn insert_routes(base: &Table, source_rows: Option<u64>, writers: usize) -> Result<f64> {
    const PER_ROW: f64 = 1e12;
    let Some(rows) = source_rows else {
        return Ok(PER_ROW);
    };
    let metadata = base.metadata();
    let target_size = metadata
        .table_properties()
        .map_err(iceberg_err)?
        .write_target_file_size_bytes as f64;
    let summary = metadata
        .current_snapshot()
        .map(|s| s.summary().additional_properties.clone())
        .unwrap_or_default();
    let total = |key: &str| summary.get(key).and_then(|v| v.parse::<f64>().ok());
    let bytes_per_row = match (total("total-files-size"), total("total-records")) {
        (Some(bytes), Some(records)) if records > 0.0 => bytes / records,
        _ => 100.0,
    };
    let files = (rows as f64 * bytes_per_row / target_size.max(1.0)).ceil();
    Ok(if files >= writers as f64 {
        PER_ROW
    } else {
        files.max(1.0)
    })
}
