//! Output formatting: renders a statement's output as an aligned table
//! (comfy-table), a JSON array of objects, or CSV with a header, and writes
//! the status lines (row-count footers, DDL messages) of table mode.

use std::io::Write;

use anyhow::Result;
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;
use arrow::json::writer::JsonArray;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use comfy_table::{CellAlignment, ContentArrangement, Table};
use icemerge_scheduler::StatementOutput;

/// How rows are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    /// An aligned table with a `(N rows)` footer.
    #[default]
    Table,
    /// One JSON array of objects per statement.
    Json,
    /// CSV with a header line.
    Csv,
}

/// The comfy-table preset of the table format: `+---+` borders, a `-` line
/// under the header, no lines between rows.
const TABLE_PRESET: &str = "||--+-++|    ++++++";

/// The text shown for NULL values in table mode.
const NULL_TEXT: &str = "NULL";

/// Prints statement outputs in one format.
#[derive(Debug, Clone, Copy)]
pub struct Printer {
    pub format: Format,
    /// No status lines (footers, DDL messages).
    pub quiet: bool,
}

impl Printer {
    /// Writes one statement's output to `out`.
    /// A one-document output (EXPLAIN's JSON or SVG) is written as the
    /// document itself in every format, so it can be piped to a file or a
    /// JSON tool.
    pub fn write(&self, out: &mut dyn Write, output: &StatementOutput) -> Result<()> {
        if let Some(document) = output.as_document() {
            writeln!(out, "{}", document.trim_end())?;
            return Ok(());
        }
        match output {
            StatementOutput::Rows { schema, batches } => match self.format {
                Format::Table => {
                    writeln!(out, "{}", render_table(schema, batches)?)?;
                    if !self.quiet {
                        writeln!(out, "{}", row_footer(output.row_count()))?;
                    }
                }
                Format::Json => write_json(out, batches)?,
                Format::Csv => write_csv(out, schema, batches)?,
            },
            StatementOutput::Done { message } => {
                if self.format == Format::Table && !self.quiet {
                    writeln!(out, "{message}")?;
                }
            }
        }
        Ok(())
    }
}

/// `(1 row)`, `(3 rows)`.
pub fn row_footer(rows: usize) -> String {
    if rows == 1 {
        "(1 row)".to_string()
    } else {
        format!("({rows} rows)")
    }
}

/// Renders rows as an aligned table (no trailing newline); numbers are
/// right-aligned, NULL is shown as `NULL`.
pub fn render_table(schema: &SchemaRef, batches: &[RecordBatch]) -> Result<String, ArrowError> {
    let mut table = Table::new();
    table
        .load_preset(TABLE_PRESET)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(
            schema
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect::<Vec<_>>(),
        );
    let options = FormatOptions::new().with_null(NULL_TEXT);
    for batch in batches {
        let formatters = batch
            .columns()
            .iter()
            .map(|column| ArrayFormatter::try_new(column.as_ref(), &options))
            .collect::<Result<Vec<_>, _>>()?;
        for row in 0..batch.num_rows() {
            let cells = formatters
                .iter()
                .map(|f| f.value(row).try_to_string())
                .collect::<Result<Vec<_>, _>>()?;
            table.add_row(cells);
        }
    }
    for (index, field) in schema.fields().iter().enumerate() {
        if field.data_type().is_numeric() {
            if let Some(column) = table.column_mut(index) {
                column.set_cell_alignment(CellAlignment::Right);
            }
        }
    }
    Ok(table.to_string())
}

/// Writes rows as one JSON array of objects (NULLs written as `null`) and a
/// newline.
pub fn write_json(out: &mut dyn Write, batches: &[RecordBatch]) -> Result<()> {
    let mut writer = arrow::json::WriterBuilder::new()
        .with_explicit_nulls(true)
        .build::<_, JsonArray>(&mut *out);
    for batch in batches {
        writer.write(batch)?;
    }
    writer.finish()?;
    drop(writer);
    writeln!(out)?;
    Ok(())
}

/// Writes rows as CSV with a header line (also when there are no rows);
/// NULL is an empty field.
pub fn write_csv(out: &mut dyn Write, schema: &SchemaRef, batches: &[RecordBatch]) -> Result<()> {
    let mut writer = arrow::csv::WriterBuilder::new()
        .with_header(true)
        .build(&mut *out);
    if batches.is_empty() {
        writer.write(&RecordBatch::new_empty(schema.clone()))?;
    }
    for batch in batches {
        writer.write(batch)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Float64Array, Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn sample() -> (SchemaRef, Vec<RecordBatch>) {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
            Field::new("score", DataType::Float64, true),
        ]));
        let first = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(vec![1, 20])) as ArrayRef,
                Arc::new(StringArray::from(vec![Some("alice"), None])),
                Arc::new(Float64Array::from(vec![Some(1.5), Some(-3.25)])),
            ],
        )
        .unwrap();
        let second = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(vec![300])) as ArrayRef,
                Arc::new(StringArray::from(vec![Some("bo, \"b\"")])),
                Arc::new(Float64Array::from(vec![None])),
            ],
        )
        .unwrap();
        (schema, vec![first, second])
    }

    fn print(format: Format, quiet: bool, output: &StatementOutput) -> String {
        let mut out = Vec::new();
        Printer { format, quiet }.write(&mut out, output).unwrap();
        String::from_utf8(out).unwrap()
    }

    fn rows() -> StatementOutput {
        let (schema, batches) = sample();
        StatementOutput::Rows { schema, batches }
    }

    #[test]
    fn table_format() {
        let expected = "\
+-----+---------+-------+
|  id | name    | score |
+-----+---------+-------+
|   1 | alice   |   1.5 |
|  20 | NULL    | -3.25 |
| 300 | bo, \"b\" |  NULL |
+-----+---------+-------+
(3 rows)
";
        assert_eq!(print(Format::Table, false, &rows()), expected);
    }

    #[test]
    fn table_format_quiet_has_no_footer() {
        let printed = print(Format::Table, true, &rows());
        assert!(
            printed.ends_with("+-----+---------+-------+\n"),
            "{printed}"
        );
        assert!(!printed.contains("rows)"));
    }

    #[test]
    fn table_with_no_rows() {
        let (schema, _) = sample();
        let output = StatementOutput::Rows {
            schema,
            batches: vec![],
        };
        let expected = "\
+----+------+-------+
| id | name | score |
+----+------+-------+
+----+------+-------+
(0 rows)
";
        assert_eq!(print(Format::Table, false, &output), expected);
    }

    #[test]
    fn one_row_footer() {
        assert_eq!(row_footer(1), "(1 row)");
        assert_eq!(row_footer(0), "(0 rows)");
    }

    #[test]
    fn csv_format() {
        let expected = "\
id,name,score
1,alice,1.5
20,,-3.25
300,\"bo, \"\"b\"\"\",
";
        assert_eq!(print(Format::Csv, false, &rows()), expected);
    }

    #[test]
    fn csv_with_no_rows_has_header() {
        let (schema, _) = sample();
        let output = StatementOutput::Rows {
            schema,
            batches: vec![],
        };
        assert_eq!(print(Format::Csv, false, &output), "id,name,score\n");
    }

    #[test]
    fn json_format() {
        let expected = concat!(
            r#"[{"id":1,"name":"alice","score":1.5},"#,
            r#"{"id":20,"name":null,"score":-3.25},"#,
            r#"{"id":300,"name":"bo, \"b\"","score":null}]"#,
            "\n"
        );
        assert_eq!(print(Format::Json, false, &rows()), expected);
    }

    #[test]
    fn json_with_no_rows() {
        let (schema, _) = sample();
        let output = StatementOutput::Rows {
            schema,
            batches: vec![],
        };
        assert_eq!(print(Format::Json, false, &output), "[]\n");
    }

    #[test]
    fn done_message_only_in_table_mode() {
        let done = StatementOutput::Done {
            message: "CREATE TABLE default.t".into(),
        };
        assert_eq!(
            print(Format::Table, false, &done),
            "CREATE TABLE default.t\n"
        );
        assert_eq!(print(Format::Table, true, &done), "");
        assert_eq!(print(Format::Json, false, &done), "");
        assert_eq!(print(Format::Csv, false, &done), "");
    }

    #[test]
    fn a_document_is_printed_as_it_is_in_every_format() {
        let json = "{\n  \"version\": 1\n}";
        let output = StatementOutput::document("plan_json", json);
        for format in [Format::Table, Format::Json, Format::Csv] {
            assert_eq!(print(format, false, &output), format!("{json}\n"));
        }
    }
}
