//! Parameters of prepared statements: the placeholders of a statement's
//! text (`?` in order, or `$1`, `$2`, ... by number; not both) and their
//! binding to one row of values, written into the text as typed SQL
//! literals so every statement kind (queries, INSERT, MERGE, UPDATE,
//! DELETE, DDL) takes parameters the same way.
//!
//! A value keeps its exact type and value: integers, decimals, dates and
//! timestamps are written as a cast of their exact text to the parameter's
//! type, strings as quoted literals. Types that have no exact literal here
//! (binary, nested, timestamps with a time zone, ...) are refused, naming the
//! parameter and its type.

use arrow::array::{Array, ArrayRef};
use arrow::datatypes::{DataType, TimeUnit};
use arrow::record_batch::RecordBatch;
use arrow::util::display::array_value_to_string;
use datafusion::error::Result;
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
use icemerge_proto::error::invalid_input;

/// The placeholders of a statement, in text order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placeholders {
    /// (byte range in the text, 0-based parameter index).
    spans: Vec<(std::ops::Range<usize>, usize)>,
    /// Parameters the statement takes (the highest index + 1).
    count: usize,
}

impl Placeholders {
    /// Finds the placeholders of `sql`. Mixing `?` and `$n`, or `$0`, is an
    /// error.
    pub fn find(sql: &str) -> Result<Self> {
        let tokens = Tokenizer::new(&GenericDialect {}, sql)
            .tokenize_with_location()
            .map_err(|e| invalid_input(format!("cannot read the statement: {e}")))?;
        let offsets = LineOffsets::new(sql);
        let (mut spans, mut positional, mut numbered) = (vec![], 0usize, false);
        for token in &tokens {
            let Token::Placeholder(text) = &token.token else {
                continue;
            };
            let index = if text == "?" {
                positional += 1;
                positional - 1
            } else if let Some(n) = text.strip_prefix('$').and_then(|n| n.parse::<usize>().ok()) {
                numbered = true;
                n.checked_sub(1).ok_or_else(|| {
                    invalid_input("parameter $0: parameters are numbered from $1".to_string())
                })?
            } else {
                return Err(invalid_input(format!(
                    "unsupported parameter placeholder '{text}': use ? or $1, $2, ..."
                )));
            };
            let start = offsets.byte(token.span.start.line, token.span.start.column);
            let end = offsets.byte(token.span.end.line, token.span.end.column);
            spans.push((start..end, index));
        }
        if numbered && positional > 0 {
            return Err(invalid_input(
                "a statement's parameters are either all ? or all $1, $2, ...: it mixes both"
                    .to_string(),
            ));
        }
        let count = spans.iter().map(|(_, i)| i + 1).max().unwrap_or(0);
        Ok(Self { spans, count })
    }

    /// How many parameters the statement takes.
    pub fn count(&self) -> usize {
        self.count
    }

    /// The statement's text with row `row` of `values` (one column per
    /// parameter, in order) in place of its placeholders.
    pub fn bind(&self, sql: &str, values: &RecordBatch, row: usize) -> Result<String> {
        if values.num_columns() != self.count {
            return Err(invalid_input(format!(
                "the statement takes {} parameter(s); {} were bound",
                self.count,
                values.num_columns()
            )));
        }
        let literals = values
            .columns()
            .iter()
            .enumerate()
            .map(|(i, column)| literal(i, column, row))
            .collect::<Result<Vec<_>>>()?;
        Ok(self.replaced(sql, |index| literals[index].clone()))
    }

    /// The statement's text with its placeholders written `$1`, `$2`, ...
    /// (`?` numbered in order), as DataFusion's planner takes them.
    pub fn numbered(&self, sql: &str) -> String {
        self.replaced(sql, |index| format!("${}", index + 1))
    }

    /// `sql` with each placeholder replaced by `text` of its parameter index.
    fn replaced(&self, sql: &str, text: impl Fn(usize) -> String) -> String {
        let mut out = String::with_capacity(sql.len());
        let mut at = 0;
        for (range, index) in &self.spans {
            out.push_str(&sql[at..range.start]);
            out.push_str(&text(*index));
            at = range.end;
        }
        out.push_str(&sql[at..]);
        out
    }
}

/// Byte offsets of the tokenizer's (line, column) locations, both 1-based,
/// columns counted in characters.
struct LineOffsets<'a> {
    sql: &'a str,
    line_starts: Vec<usize>,
}

impl<'a> LineOffsets<'a> {
    fn new(sql: &'a str) -> Self {
        let mut line_starts = vec![0];
        line_starts.extend(sql.match_indices('\n').map(|(i, _)| i + 1));
        Self { sql, line_starts }
    }

    fn byte(&self, line: u64, column: u64) -> usize {
        let start = self.line_starts[(line as usize - 1).min(self.line_starts.len() - 1)];
        self.sql[start..]
            .char_indices()
            .nth(column as usize - 1)
            .map(|(i, _)| start + i)
            .unwrap_or(self.sql.len())
    }
}

/// Parameter `index`'s value at `row` as an SQL literal of its exact type.
fn literal(index: usize, column: &ArrayRef, row: usize) -> Result<String> {
    let data_type = column.data_type();
    let sql_type = sql_type(data_type).ok_or_else(|| {
        invalid_input(format!(
            "parameter {} has type {data_type}, which cannot be bound: use a boolean, integer, \
             floating point, decimal, string, date or timestamp (without time zone) value",
            index + 1
        ))
    })?;
    if column.is_null(row) {
        return Ok(match data_type {
            DataType::Null => "NULL".to_string(),
            _ => format!("CAST(NULL AS {sql_type})"),
        });
    }
    let text = array_value_to_string(column, row)
        .map_err(|e| invalid_input(format!("parameter {}: {e}", index + 1)))?;
    Ok(match data_type {
        DataType::Boolean => text.to_ascii_uppercase(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => quoted(&text),
        DataType::Int64 => text,
        _ => format!("CAST({} AS {sql_type})", quoted(&text)),
    })
}

/// The SQL type a bound parameter of `data_type` keeps.
fn sql_type(data_type: &DataType) -> Option<String> {
    Some(
        match data_type {
            DataType::Null => "NULL",
            DataType::Boolean => "BOOLEAN",
            DataType::Int8 => "TINYINT",
            DataType::Int16 => "SMALLINT",
            DataType::Int32 => "INT",
            DataType::Int64 => "BIGINT",
            DataType::UInt8 => "TINYINT UNSIGNED",
            DataType::UInt16 => "SMALLINT UNSIGNED",
            DataType::UInt32 => "INT UNSIGNED",
            DataType::UInt64 => "BIGINT UNSIGNED",
            DataType::Float32 => "REAL",
            DataType::Float64 => "DOUBLE",
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "VARCHAR",
            DataType::Date32 => "DATE",
            DataType::Timestamp(TimeUnit::Microsecond | TimeUnit::Nanosecond, None)
            | DataType::Timestamp(TimeUnit::Second | TimeUnit::Millisecond, None) => "TIMESTAMP",
            DataType::Decimal128(precision, scale) => {
                return Some(format!("DECIMAL({precision}, {scale})"))
            }
            _ => return None,
        }
        .to_string(),
    )
}

fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{
        BooleanArray, Date32Array, Decimal128Array, Float64Array, Int32Array, Int64Array,
        StringArray, TimestampMicrosecondArray,
    };
    use arrow::datatypes::{Field, Schema};
    use std::sync::Arc;

    fn batch(columns: Vec<ArrayRef>) -> RecordBatch {
        let fields = columns
            .iter()
            .enumerate()
            .map(|(i, c)| Field::new(format!("p{i}"), c.data_type().clone(), true))
            .collect::<Vec<_>>();
        RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
    }

    #[test]
    fn question_marks_bind_in_order_and_leave_strings_and_comments_alone() {
        let sql = "SELECT '?', x -- why?\nFROM t WHERE a = ? AND b = ?";
        let p = Placeholders::find(sql).unwrap();
        assert_eq!(p.count(), 2);
        let values = batch(vec![
            Arc::new(Int64Array::from(vec![7, 8])),
            Arc::new(StringArray::from(vec!["it's", "x"])),
        ]);
        assert_eq!(
            p.bind(sql, &values, 0).unwrap(),
            "SELECT '?', x -- why?\nFROM t WHERE a = 7 AND b = 'it''s'"
        );
        assert_eq!(
            p.bind(sql, &values, 1).unwrap(),
            "SELECT '?', x -- why?\nFROM t WHERE a = 8 AND b = 'x'"
        );
    }

    #[test]
    fn question_marks_are_numbered_for_the_planner() {
        let sql = "SELECT '?' FROM t WHERE a = ? AND b IN (?, ?)";
        assert_eq!(
            Placeholders::find(sql).unwrap().numbered(sql),
            "SELECT '?' FROM t WHERE a = $1 AND b IN ($2, $3)"
        );
        let sql = "SELECT $2, $1, $2";
        assert_eq!(Placeholders::find(sql).unwrap().numbered(sql), sql);
    }

    #[test]
    fn numbered_placeholders_bind_by_number_and_may_repeat() {
        let sql = "MERGE INTO t USING (SELECT $2 AS id) s ON t.id = s.id \
                   WHEN MATCHED THEN UPDATE SET v = $1 + $1";
        let p = Placeholders::find(sql).unwrap();
        assert_eq!(p.count(), 2);
        let values = batch(vec![
            Arc::new(Int32Array::from(vec![-3])),
            Arc::new(Int64Array::from(vec![42])),
        ]);
        assert_eq!(
            p.bind(sql, &values, 0).unwrap(),
            "MERGE INTO t USING (SELECT 42 AS id) s ON t.id = s.id \
             WHEN MATCHED THEN UPDATE SET v = CAST('-3' AS INT) + CAST('-3' AS INT)"
        );
    }

    #[test]
    fn exact_types_keep_their_values() {
        let sql = "VALUES (?, ?, ?, ?, ?, ?)";
        let p = Placeholders::find(sql).unwrap();
        let values = batch(vec![
            Arc::new(
                Decimal128Array::from(vec![Some(12345)])
                    .with_precision_and_scale(9, 2)
                    .unwrap(),
            ),
            Arc::new(Float64Array::from(vec![0.1])),
            Arc::new(Date32Array::from(vec![19723])),
            Arc::new(TimestampMicrosecondArray::from(vec![1_700_000_000_123_456])),
            Arc::new(BooleanArray::from(vec![true])),
            Arc::new(Int64Array::from(vec![None])),
        ]);
        assert_eq!(
            p.bind(sql, &values, 0).unwrap(),
            "VALUES (CAST('123.45' AS DECIMAL(9, 2)), CAST('0.1' AS DOUBLE), \
             CAST('2024-01-01' AS DATE), CAST('2023-11-14T22:13:20.123456' AS TIMESTAMP), \
             TRUE, CAST(NULL AS BIGINT))"
        );
    }

    #[test]
    fn wrong_counts_mixed_styles_and_unbindable_types_are_refused() {
        let p = Placeholders::find("SELECT ?, ?").unwrap();
        let one = batch(vec![Arc::new(Int64Array::from(vec![1]))]);
        let e = p.bind("SELECT ?, ?", &one, 0).unwrap_err().to_string();
        assert!(e.contains("takes 2 parameter(s); 1 were bound"), "{e}");
        let e = Placeholders::find("SELECT ?, $1").unwrap_err().to_string();
        assert!(e.contains("mixes both"), "{e}");
        let binary = batch(vec![Arc::new(arrow::array::BinaryArray::from(vec![
            b"x".as_ref()
        ]))]);
        let e = Placeholders::find("SELECT ?")
            .unwrap()
            .bind("SELECT ?", &binary, 0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("parameter 1 has type Binary"), "{e}");
        assert_eq!(Placeholders::find("SELECT 1").unwrap().count(), 0);
    }
}
