//! Which row groups of a data file can hold rows a predicate accepts, from
//! the row groups' column statistics in the Parquet footer, and how to
//! read only those while still counting each row's position in the file.
//!
//! Used by MERGE's row-id scan (`scan_exec`): its rows must carry their
//! ORIGINAL positions, so it cannot let iceberg's reader skip row groups on
//! its own. Here the footer is read once, each row group judged against
//! the predicates (Iceberg predicates bound to the table schema, matched to
//! the file's columns by field id), and the kept row groups are grouped
//! into runs of consecutive ones. A run is read as a byte range of the
//! file (`FileScanTask::start` / `length`, which iceberg's reader turns back
//! into exactly those row groups: it assigns a row group to the range
//! holding its midpoint, counting sizes from the 4-byte magic, as
//! [`RowGroupRun`] does), and its first row's position is the sum of the row
//! counts before it.
//!
//! The judgement is conservative: a row group is dropped only when its
//! statistics prove that no row of it satisfies some predicate. Missing or
//! unconvertible statistics, floating-point columns, nested columns and
//! files without field ids keep every row group.

use std::cmp::Ordering;
use std::ops::Range;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, UInt64Array};
use arrow::datatypes::{i256, Schema};
use bytes::Bytes;
use datafusion::common::ScalarValue;
use datafusion::error::Result;
use datafusion::physical_plan::metrics::Count;
use iceberg::arrow::ArrowFileReader;
use iceberg::expr::{BoundPredicate, BoundReference, PredicateOperator};
use iceberg::io::{FileIO, FileMetadata, FileRead};
use iceberg::spec::{Datum, PrimitiveLiteral, PrimitiveType};
use parquet::arrow::arrow_reader::statistics::StatisticsConverter;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::arrow::PARQUET_FIELD_ID_META_KEY;
use parquet::file::metadata::ParquetMetaData;

use crate::iceberg_err;
use icemerge_proto::error::io_error;

/// Consecutive row groups read as one byte range of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowGroupRun {
    /// Position in the file of the run's first row.
    pub first_row: i64,
    /// The byte range that selects exactly these row groups.
    pub start: u64,
    pub length: u64,
}

/// What to read of one data file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowGroupSelection {
    /// Every row group (nothing was pruned, or nothing to prune with).
    All,
    /// These runs only; empty when no row group can match.
    Runs {
        runs: Vec<RowGroupRun>,
        /// Row groups left out.
        pruned: usize,
    },
}

/// The row groups of `path` that can satisfy every one of `predicates`.
/// Reads the file's footer (its bytes added to `bytes`).
pub async fn select_row_groups(
    file_io: &FileIO,
    path: &str,
    size: u64,
    predicates: &[&BoundPredicate],
    bytes: &Count,
) -> Result<RowGroupSelection> {
    if predicates.is_empty() {
        return Ok(RowGroupSelection::All);
    }
    let input = file_io.new_input(path).map_err(iceberg_err)?;
    let counted = CountingRead {
        inner: input.reader().await.map_err(iceberg_err)?,
        bytes: bytes.clone(),
    };
    let mut reader = ArrowFileReader::new(FileMetadata { size }, Box::new(counted));
    let footer = ArrowReaderMetadata::load_async(&mut reader, ArrowReaderOptions::new())
        .await
        .map_err(|e| io_error(format!("reading the footer of {path}: {e}")))?;
    let stats = FileStatistics {
        metadata: footer.metadata().as_ref(),
        schema: footer.schema().as_ref(),
    };
    let row_groups = footer.metadata().num_row_groups();
    let keep: Vec<bool> = (0..row_groups)
        .map(|rg| predicates.iter().all(|p| stats.might_match(p, rg)))
        .collect();
    Ok(runs(footer.metadata(), &keep))
}

/// The runs of consecutive kept row groups (`keep[i]` for row group `i`).
fn runs(metadata: &ParquetMetaData, keep: &[bool]) -> RowGroupSelection {
    if keep.iter().all(|k| *k) {
        return RowGroupSelection::All;
    }
    let mut runs: Vec<RowGroupRun> = vec![];
    let (mut offset, mut first_row) = (4u64, 0i64);
    let mut previous_kept = false;
    for (rg, kept) in metadata.row_groups().iter().zip(keep) {
        let size = rg.compressed_size().max(0) as u64;
        if *kept && rg.num_rows() > 0 {
            match runs.last_mut() {
                Some(run) if previous_kept => run.length += size,
                _ => runs.push(RowGroupRun {
                    first_row,
                    start: offset,
                    length: size,
                }),
            }
        }
        previous_kept = *kept && rg.num_rows() > 0;
        offset += size;
        first_row += rg.num_rows();
    }
    let pruned = keep.iter().filter(|k| !**k).count();
    RowGroupSelection::Runs { runs, pruned }
}

/// The footer's statistics, by Iceberg field id.
struct FileStatistics<'a> {
    metadata: &'a ParquetMetaData,
    /// The file's Arrow schema, whose fields carry their field ids.
    schema: &'a Schema,
}

/// One column's statistics in one row group.
struct ColumnStatistics {
    min: Option<ScalarValue>,
    max: Option<ScalarValue>,
    nulls: Option<u64>,
    rows: u64,
}

impl FileStatistics<'_> {
    /// Whether row group `rg` can hold a row that satisfies `predicate`.
    fn might_match(&self, predicate: &BoundPredicate, rg: usize) -> bool {
        match predicate {
            BoundPredicate::AlwaysTrue => true,
            BoundPredicate::AlwaysFalse => false,
            BoundPredicate::And(e) => e.inputs().iter().all(|p| self.might_match(p, rg)),
            BoundPredicate::Or(e) => e.inputs().iter().any(|p| self.might_match(p, rg)),
            // A negation is judged by what it negates only with exact
            // statistics, which min / max are not: keep the row group.
            BoundPredicate::Not(_) => true,
            BoundPredicate::Unary(e) => {
                let Some(stats) = self.column(e.term(), rg) else {
                    return true;
                };
                match (e.op(), stats.nulls) {
                    (PredicateOperator::IsNull, Some(nulls)) => nulls > 0,
                    (PredicateOperator::NotNull, Some(nulls)) => nulls < stats.rows,
                    _ => true,
                }
            }
            BoundPredicate::Binary(e) => {
                let Some(value) = scalar(e.literal()) else {
                    return true;
                };
                let Some(stats) = self.column(e.term(), rg) else {
                    return true;
                };
                stats.might_compare(e.op(), &value)
            }
            BoundPredicate::Set(e) => {
                if e.op() != PredicateOperator::In {
                    return true;
                }
                let Some(stats) = self.column(e.term(), rg) else {
                    return true;
                };
                e.literals().iter().any(|datum| match scalar(datum) {
                    Some(value) => stats.might_compare(PredicateOperator::Eq, &value),
                    None => true,
                })
            }
        }
    }

    /// The statistics of `term`'s column in row group `rg`, when the file
    /// has the column (by field id, top level) and is not floating point.
    fn column(&self, term: &BoundReference, rg: usize) -> Option<ColumnStatistics> {
        let id = term.field().id.to_string();
        let field = self
            .schema
            .fields()
            .iter()
            .find(|f| f.metadata().get(PARQUET_FIELD_ID_META_KEY) == Some(&id))?;
        if field.data_type().is_floating() || field.data_type().is_nested() {
            return None;
        }
        let converter = StatisticsConverter::try_new(
            field.name(),
            self.schema,
            self.metadata.file_metadata().schema_descr(),
        )
        .ok()?
        .with_missing_null_counts_as_zero(false);
        let group = [self.metadata.row_group(rg)];
        let value = |array: parquet::errors::Result<ArrayRef>| -> Option<ScalarValue> {
            let array = array.ok()?;
            (array.len() == 1 && array.is_valid(0))
                .then(|| ScalarValue::try_from_array(&array, 0).ok())
                .flatten()
        };
        let nulls: Option<UInt64Array> = converter.row_group_null_counts(group).ok();
        Some(ColumnStatistics {
            min: value(converter.row_group_mins(group)),
            max: value(converter.row_group_maxes(group)),
            nulls: nulls
                .filter(|n| n.len() == 1 && n.is_valid(0))
                .map(|n| n.value(0)),
            rows: self.metadata.row_group(rg).num_rows().max(0) as u64,
        })
    }
}

impl ColumnStatistics {
    /// Whether some value in `[min, max]` can stand in `op` to `value`.
    fn might_compare(&self, op: PredicateOperator, value: &ScalarValue) -> bool {
        if self.nulls == Some(self.rows) {
            return false; // only NULLs: no comparison holds
        }
        let order = |bound: &Option<ScalarValue>| -> Option<Ordering> {
            let bound = bound.as_ref()?;
            let bound = if bound.data_type() == value.data_type() {
                bound.clone()
            } else {
                bound.cast_to(&value.data_type()).ok()?
            };
            bound.partial_cmp(value)
        };
        let (min, max) = (order(&self.min), order(&self.max));
        use Ordering::*;
        match op {
            PredicateOperator::Eq => min != Some(Greater) && max != Some(Less),
            PredicateOperator::LessThan => !matches!(min, Some(Greater | Equal)),
            PredicateOperator::LessThanOrEq => min != Some(Greater),
            PredicateOperator::GreaterThan => !matches!(max, Some(Less | Equal)),
            PredicateOperator::GreaterThanOrEq => max != Some(Less),
            _ => true,
        }
    }
}

/// An Iceberg value as the Arrow value its column reads as; `None` for
/// types not judged here (floating point, binary, uuid, time).
fn scalar(datum: &Datum) -> Option<ScalarValue> {
    use PrimitiveLiteral as L;
    use PrimitiveType as T;
    Some(match (datum.data_type(), datum.literal()) {
        (T::Boolean, L::Boolean(v)) => ScalarValue::Boolean(Some(*v)),
        (T::Int, L::Int(v)) => ScalarValue::Int32(Some(*v)),
        (T::Long, L::Long(v)) => ScalarValue::Int64(Some(*v)),
        (T::Date, L::Int(v)) => ScalarValue::Date32(Some(*v)),
        (T::Timestamp, L::Long(v)) => ScalarValue::TimestampMicrosecond(Some(*v), None),
        (T::Timestamptz, L::Long(v)) => {
            ScalarValue::TimestampMicrosecond(Some(*v), Some(Arc::from("+00:00")))
        }
        (T::String, L::String(v)) => ScalarValue::Utf8(Some(v.clone())),
        (T::Decimal { precision, scale }, L::Int128(v)) => {
            let precision = u8::try_from(*precision).ok()?;
            let scale = i8::try_from(*scale).ok()?;
            if precision <= 38 {
                ScalarValue::Decimal128(Some(*v), precision, scale)
            } else {
                ScalarValue::Decimal256(Some(i256::from_i128(*v)), precision, scale)
            }
        }
        _ => return None,
    })
}

/// A file read that adds the bytes it reads to a scan's counter.
struct CountingRead {
    inner: Box<dyn FileRead>,
    bytes: Count,
}

#[async_trait::async_trait]
impl FileRead for CountingRead {
    async fn read(&self, range: Range<u64>) -> iceberg::Result<Bytes> {
        let read = self.inner.read(range).await?;
        self.bytes.add(read.len());
        Ok(read)
    }
}

#[cfg(test)]
mod tests;
