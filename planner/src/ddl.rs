//! DDL parsing: turns SQL scripts and `CREATE TABLE` statements into the
//! pieces needed to create Iceberg tables.
//!
//! This module owns:
//! * [`split_statements`] — splitting a script into statements at top-level
//!   `;` (token based, so `;` in strings, comments and quoted identifiers is
//!   kept);
//! * [`parse_create_table`] — parsing `CREATE TABLE` (plain and CTAS) with an
//!   Iceberg-style `PARTITIONED BY (...)` clause of transforms, which
//!   sqlparser cannot parse on its own, and table properties
//!   (`TBLPROPERTIES (...)` / `WITH (...)`);
//! * [`build_schema`] / [`build_partition_spec`] — turning the parsed columns
//!   and partition items into an Iceberg [`Schema`] and
//!   [`UnboundPartitionSpec`].
//!
//! Everything else (executing the DDL, catalogs, `CREATE EXTERNAL TABLE`) is
//! handled elsewhere.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use datafusion::error::Result;
use datafusion::sql::sqlparser::ast::{
    self, ColumnDef, ColumnOption, CreateTableOptions, DataType, ExactNumberInfo, Expr, Function,
    FunctionArg, FunctionArgExpr, FunctionArguments, Ident, ObjectName, ObjectNamePart, Statement,
    TimezoneInfo, Value,
};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::{Location, Token, TokenWithSpan, Tokenizer};
use iceberg::spec::{
    NestedField, PrimitiveType, Schema, Transform, Type, UnboundPartitionField,
    UnboundPartitionSpec,
};
use icemerge_proto::error::invalid_input;

/// First partition field id; Iceberg reserves ids below 1000 for schema fields.
const PARTITION_FIELD_ID_START: i32 = 1000;

/// Keywords that may sit between `CREATE` and `TABLE`.
const CREATE_MODIFIERS: &[Keyword] = &[
    Keyword::OR,
    Keyword::REPLACE,
    Keyword::EXTERNAL,
    Keyword::TEMP,
    Keyword::TEMPORARY,
    Keyword::GLOBAL,
    Keyword::LOCAL,
    Keyword::TRANSIENT,
    Keyword::VOLATILE,
    Keyword::DYNAMIC,
    Keyword::ICEBERG,
    Keyword::UNLOGGED,
];

/// A parsed `CREATE TABLE` statement.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateTable {
    /// Identifier parts, e.g. `["db", "t"]` or `["icemerge", "db", "t"]`;
    /// unquoted identifiers are lower-cased, quoted ones kept as written.
    pub name: Vec<String>,
    /// `IF NOT EXISTS` was given.
    pub if_not_exists: bool,
    /// Column definitions; empty for CTAS without a column list.
    pub columns: Vec<ColumnSpec>,
    /// Items of `PARTITIONED BY (...)`; empty if the clause is absent.
    pub partition_by: Vec<PartitionItem>,
    /// For CTAS: the SQL text of the `SELECT`.
    pub query: Option<String>,
    /// Iceberg table properties from `TBLPROPERTIES (...)` or `WITH (...)`,
    /// e.g. `'write.target-file-size-bytes' = '134217728'`.
    pub properties: Vec<(String, String)>,
}

/// One column of a `CREATE TABLE` column list.
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnSpec {
    /// Column name (lower-cased unless quoted).
    pub name: String,
    /// Iceberg type of the column.
    pub data_type: Type,
    /// `true` for `NOT NULL` columns.
    pub required: bool,
}

/// An Iceberg partition transform as written in `PARTITIONED BY`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionTransform {
    /// `col` or `identity(col)`.
    Identity,
    /// `bucket(n, col)`.
    Bucket(u32),
    /// `truncate(w, col)`.
    Truncate(u32),
    /// `year(col)` / `years(col)`.
    Year,
    /// `month(col)` / `months(col)`.
    Month,
    /// `day(col)` / `days(col)`.
    Day,
    /// `hour(col)` / `hours(col)`.
    Hour,
}

impl PartitionTransform {
    /// The equivalent Iceberg [`Transform`].
    pub fn to_iceberg(self) -> Transform {
        match self {
            Self::Identity => Transform::Identity,
            Self::Bucket(n) => Transform::Bucket(n),
            Self::Truncate(w) => Transform::Truncate(w),
            Self::Year => Transform::Year,
            Self::Month => Transform::Month,
            Self::Day => Transform::Day,
            Self::Hour => Transform::Hour,
        }
    }

    /// Partition field name for `column`, following Spark/PyIceberg naming.
    pub fn field_name(self, column: &str) -> String {
        let suffix = match self {
            Self::Identity => return column.to_string(),
            Self::Bucket(_) => "bucket",
            Self::Truncate(_) => "trunc",
            Self::Year => "year",
            Self::Month => "month",
            Self::Day => "day",
            Self::Hour => "hour",
        };
        format!("{column}_{suffix}")
    }
}

impl fmt::Display for PartitionTransform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Identity => write!(f, "identity"),
            Self::Bucket(n) => write!(f, "bucket({n})"),
            Self::Truncate(w) => write!(f, "truncate({w})"),
            Self::Year => write!(f, "year"),
            Self::Month => write!(f, "month"),
            Self::Day => write!(f, "day"),
            Self::Hour => write!(f, "hour"),
        }
    }
}

/// One item of `PARTITIONED BY (...)`: a transform applied to a column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionItem {
    /// Source column name (lower-cased unless quoted).
    pub column: String,
    /// Transform applied to the column.
    pub transform: PartitionTransform,
}

/// Splits a SQL script into statements at top-level `;`.
///
/// Uses sqlparser's tokenizer, so `;` inside string literals, comments and
/// quoted identifiers does not split. Each statement's source text is
/// returned trimmed; empty and comment-only statements are dropped.
pub fn split_statements(sql: &str) -> Result<Vec<String>> {
    let tokens = tokenize(sql)?;
    let index = LineIndex::new(sql);
    let mut statements = Vec::new();
    let mut start = 0;
    let mut has_code = false;
    for token in &tokens {
        match token.token {
            Token::SemiColon => {
                let end = index.offset(token.span.start);
                push_statement(&mut statements, &sql[start..end], has_code);
                start = index.offset(token.span.end);
                has_code = false;
            }
            Token::Whitespace(_) => {}
            _ => has_code = true,
        }
    }
    push_statement(&mut statements, &sql[start..], has_code);
    Ok(statements)
}

/// Parses `sql` as a `CREATE TABLE` statement.
///
/// Returns `Ok(None)` if the statement is not a `CREATE TABLE` (including
/// `CREATE EXTERNAL TABLE`, which DataFusion handles). Supported forms:
///
/// ```sql
/// CREATE TABLE [IF NOT EXISTS] name (col type [NOT NULL], ...) [PARTITIONED BY (item, ...)]
///     [TBLPROPERTIES ('key' = 'value', ...)]
/// CREATE TABLE [IF NOT EXISTS] name [(col type, ...)] [PARTITIONED BY (item, ...)]
///     [TBLPROPERTIES ('key' = 'value', ...)] AS SELECT ...
/// ```
///
/// where an item is `col`, `identity(col)`, `bucket(n, col)`,
/// `truncate(w, col)` or `year|month|day|hour(col)` (plural forms accepted).
pub fn parse_create_table(sql: &str) -> Result<Option<CreateTable>> {
    let mut tokens = tokenize(sql)?;
    if !is_create_table(&tokens)? {
        return Ok(None);
    }
    let partition_by = match find_partitioned_by(&tokens)? {
        Some(clause) => {
            let items = tokens[clause.lparen + 1..clause.rparen].to_vec();
            tokens.drain(clause.start..=clause.rparen);
            parse_partition_items(items)?
        }
        None => Vec::new(),
    };
    let create = parse_single_create_table(tokens)?;
    convert_create_table(create, partition_by).map(Some)
}

/// Builds an Iceberg schema from `columns`, with field ids `1..=n` in order.
pub fn build_schema(columns: &[ColumnSpec]) -> Result<Schema> {
    check_unique_columns(columns)?;
    let fields = columns.iter().zip(1..).map(|(column, id)| {
        let field = if column.required {
            NestedField::required(id, &column.name, column.data_type.clone())
        } else {
            NestedField::optional(id, &column.name, column.data_type.clone())
        };
        Arc::new(field)
    });
    Schema::builder()
        .with_fields(fields)
        .build()
        .map_err(|e| invalid_input(format!("invalid table schema: {e}")))
}

/// Builds the partition spec for `items` against `schema`.
///
/// Partition field names follow Spark/PyIceberg conventions (`id`,
/// `id_bucket`, `s_trunc`, `ts_day`, ...) and partition field ids start at
/// 1000. The spec is validated by binding it to `schema`.
pub fn build_partition_spec(
    schema: &Schema,
    items: &[PartitionItem],
) -> Result<UnboundPartitionSpec> {
    let fields = items
        .iter()
        .zip(PARTITION_FIELD_ID_START..)
        .map(|(item, field_id)| partition_field(schema, item, field_id))
        .collect::<Result<Vec<_>>>()?;
    let spec = UnboundPartitionSpec::builder()
        .add_partition_fields(fields)
        .map_err(|e| invalid_input(format!("invalid PARTITIONED BY: {e}")))?
        .build();
    spec.clone()
        .bind(schema.clone())
        .map_err(|e| invalid_input(format!("invalid PARTITIONED BY: {e}")))?;
    Ok(spec)
}

// ---------------------------------------------------------------------------
// Tokens and source positions
// ---------------------------------------------------------------------------

fn tokenize(sql: &str) -> Result<Vec<TokenWithSpan>> {
    Tokenizer::new(&GenericDialect {}, sql)
        .tokenize_with_location()
        .map_err(|e| invalid_input(format!("cannot tokenize SQL: {e}")))
}

fn is_keyword(token: &Token, keyword: Keyword) -> bool {
    matches!(token, Token::Word(w) if w.keyword == keyword)
}

/// Index of the first non-whitespace (and non-comment) token at or after `from`.
fn next_significant(tokens: &[TokenWithSpan], from: usize) -> Option<usize> {
    (from..tokens.len()).find(|&i| !matches!(tokens[i].token, Token::Whitespace(_)))
}

fn push_statement(statements: &mut Vec<String>, text: &str, has_code: bool) {
    let text = text.trim();
    if has_code && !text.is_empty() {
        statements.push(text.to_string());
    }
}

/// Maps tokenizer locations (1-based line and character column) to byte offsets.
struct LineIndex<'a> {
    source: &'a str,
    line_starts: Vec<usize>,
}

impl<'a> LineIndex<'a> {
    fn new(source: &'a str) -> Self {
        let line_starts = std::iter::once(0)
            .chain(source.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        Self {
            source,
            line_starts,
        }
    }

    fn offset(&self, location: Location) -> usize {
        let line = usize::try_from(location.line).unwrap_or(usize::MAX);
        let Some(&line_start) = self.line_starts.get(line.saturating_sub(1)) else {
            return self.source.len();
        };
        let column = usize::try_from(location.column).unwrap_or(usize::MAX);
        self.source[line_start..]
            .char_indices()
            .nth(column.saturating_sub(1))
            .map_or(self.source.len(), |(i, _)| line_start + i)
    }
}

// ---------------------------------------------------------------------------
// CREATE TABLE
// ---------------------------------------------------------------------------

/// Whether the tokens start a `CREATE [modifiers] TABLE` statement we own.
fn is_create_table(tokens: &[TokenWithSpan]) -> Result<bool> {
    let mut words = tokens
        .iter()
        .map(|t| &t.token)
        .filter(|t| !matches!(t, Token::Whitespace(_)));
    if !words.next().is_some_and(|t| is_keyword(t, Keyword::CREATE)) {
        return Ok(false);
    }
    let mut modifiers = Vec::new();
    for token in words {
        match token {
            Token::Word(w) if w.keyword == Keyword::TABLE => return check_modifiers(&modifiers),
            Token::Word(w) if CREATE_MODIFIERS.contains(&w.keyword) => {
                modifiers.push(w.value.to_uppercase())
            }
            _ => return Ok(false),
        }
    }
    Ok(false)
}

/// `CREATE EXTERNAL TABLE` is not ours; other modifiers are unsupported.
fn check_modifiers(modifiers: &[String]) -> Result<bool> {
    if modifiers.iter().any(|m| m == "EXTERNAL") {
        return Ok(false);
    }
    if modifiers.is_empty() {
        return Ok(true);
    }
    Err(invalid_input(format!(
        "CREATE {} TABLE is not supported; use CREATE TABLE",
        modifiers.join(" ")
    )))
}

/// Token positions of a `PARTITIONED BY ( ... )` clause.
struct PartitionedBy {
    /// Index of the `PARTITIONED` token.
    start: usize,
    /// Index of the opening parenthesis.
    lparen: usize,
    /// Index of the matching closing parenthesis.
    rparen: usize,
}

/// Finds the top-level `PARTITIONED BY (...)` clause before any `AS SELECT`.
fn find_partitioned_by(tokens: &[TokenWithSpan]) -> Result<Option<PartitionedBy>> {
    let mut depth = 0usize;
    let mut found: Option<PartitionedBy> = None;
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i].token {
            Token::LParen => depth += 1,
            Token::RParen => depth = depth.saturating_sub(1),
            Token::Word(w) if depth == 0 && w.keyword == Keyword::AS => break,
            Token::Word(w) if depth == 0 && w.keyword == Keyword::PARTITIONED => {
                if let Some(clause) = partitioned_by_at(tokens, i)? {
                    if found.is_some() {
                        return Err(invalid_input("PARTITIONED BY may be given only once"));
                    }
                    i = clause.rparen;
                    found = Some(clause);
                }
            }
            _ => {}
        }
        i += 1;
    }
    Ok(found)
}

/// The clause starting at `PARTITIONED` token `start`, or `None` if it is not
/// followed by `BY` (e.g. a table named `partitioned`).
fn partitioned_by_at(tokens: &[TokenWithSpan], start: usize) -> Result<Option<PartitionedBy>> {
    let Some(by) = next_significant(tokens, start + 1) else {
        return Ok(None);
    };
    if !is_keyword(&tokens[by].token, Keyword::BY) {
        return Ok(None);
    }
    let lparen = next_significant(tokens, by + 1)
        .filter(|&i| tokens[i].token == Token::LParen)
        .ok_or_else(|| invalid_input("expected '(' after PARTITIONED BY"))?;
    let rparen = matching_paren(tokens, lparen)?;
    Ok(Some(PartitionedBy {
        start,
        lparen,
        rparen,
    }))
}

fn matching_paren(tokens: &[TokenWithSpan], lparen: usize) -> Result<usize> {
    let mut depth = 0usize;
    for (i, token) in tokens.iter().enumerate().skip(lparen) {
        match token.token {
            Token::LParen => depth += 1,
            Token::RParen => {
                depth -= 1;
                if depth == 0 {
                    return Ok(i);
                }
            }
            _ => {}
        }
    }
    Err(invalid_input(
        "unbalanced parentheses in PARTITIONED BY (...)",
    ))
}

/// Parses the remaining tokens as exactly one `CREATE TABLE` statement.
fn parse_single_create_table(tokens: Vec<TokenWithSpan>) -> Result<ast::CreateTable> {
    let mut statements = Parser::new(&GenericDialect {})
        .with_tokens_with_locations(tokens)
        .parse_statements()
        .map_err(|e| invalid_input(format!("cannot parse CREATE TABLE: {e}")))?;
    if statements.len() != 1 {
        return Err(invalid_input("expected a single CREATE TABLE statement"));
    }
    match statements.pop() {
        Some(Statement::CreateTable(create)) => Ok(create),
        _ => Err(invalid_input("expected a CREATE TABLE statement")),
    }
}

fn convert_create_table(
    create: ast::CreateTable,
    partition_by: Vec<PartitionItem>,
) -> Result<CreateTable> {
    reject_unsupported_clauses(&create)?;
    let name = object_name_parts(&create.name)?;
    let columns = create
        .columns
        .iter()
        .map(column_spec)
        .collect::<Result<Vec<_>>>()?;
    check_unique_columns(&columns)?;
    if columns.is_empty() && create.query.is_none() {
        return Err(invalid_input(format!(
            "CREATE TABLE {} needs a column list or AS SELECT",
            create.name
        )));
    }
    let properties = table_properties(&create.table_options)?;
    Ok(CreateTable {
        name,
        if_not_exists: create.if_not_exists,
        columns,
        partition_by,
        query: create.query.map(|q| q.to_string()),
        properties,
    })
}

/// `TBLPROPERTIES ('k' = 'v', ...)` or `WITH ('k' = 'v', ...)` as pairs;
/// values may be strings, numbers or booleans.
fn table_properties(options: &CreateTableOptions) -> Result<Vec<(String, String)>> {
    let options = match options {
        CreateTableOptions::None => return Ok(vec![]),
        CreateTableOptions::With(o) | CreateTableOptions::TableProperties(o) => o,
        _ => return Err(invalid_input(
            "CREATE TABLE does not support table options; use TBLPROPERTIES ('key' = 'value', ...)",
        )),
    };
    let mut seen = HashSet::new();
    options
        .iter()
        .map(|option| {
            let ast::SqlOption::KeyValue { key, value } = option else {
                return Err(invalid_input(format!(
                    "table property '{option}': expected 'key' = 'value'"
                )));
            };
            let value = match value {
                Expr::Value(v) => match &v.value {
                    ast::Value::SingleQuotedString(s) | ast::Value::DoubleQuotedString(s) => {
                        s.clone()
                    }
                    ast::Value::Number(n, _) => n.to_string(),
                    ast::Value::Boolean(b) => b.to_string(),
                    other => {
                        return Err(invalid_input(format!(
                            "table property '{}': unsupported value {other}",
                            key.value
                        )))
                    }
                },
                other => {
                    return Err(invalid_input(format!(
                        "table property '{}': value must be a literal, got {other}",
                        key.value
                    )))
                }
            };
            if !seen.insert(key.value.clone()) {
                return Err(invalid_input(format!(
                    "table property '{}' is given twice",
                    key.value
                )));
            }
            Ok((key.value.clone(), value))
        })
        .collect()
}

/// Rejects clauses sqlparser accepts but icemerge would otherwise silently ignore.
fn reject_unsupported_clauses(create: &ast::CreateTable) -> Result<()> {
    let unsupported = [
        (!create.constraints.is_empty(), "table constraints"),
        (create.like.is_some(), "LIKE"),
        (create.clone.is_some(), "CLONE"),
        (create.location.is_some(), "LOCATION"),
        (
            create.partition_by.is_some(),
            "PARTITION BY (use PARTITIONED BY (...))",
        ),
        (
            create.cluster_by.is_some() || create.clustered_by.is_some(),
            "CLUSTER BY",
        ),
        (create.order_by.is_some(), "ORDER BY"),
    ];
    match unsupported.iter().find(|(present, _)| *present) {
        Some((_, what)) => Err(invalid_input(format!(
            "CREATE TABLE does not support {what}"
        ))),
        None => Ok(()),
    }
}

/// Normalises an identifier: unquoted → lower case, quoted → as written.
pub(crate) fn normalize_ident(ident: &Ident) -> String {
    match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_lowercase(),
    }
}

fn object_name_parts(name: &ObjectName) -> Result<Vec<String>> {
    name.0
        .iter()
        .map(|part| match part {
            ObjectNamePart::Identifier(ident) => Ok(normalize_ident(ident)),
            ObjectNamePart::Function(_) => {
                Err(invalid_input(format!("unsupported table name '{name}'")))
            }
        })
        .collect()
}

fn check_unique_columns(columns: &[ColumnSpec]) -> Result<()> {
    let mut seen = HashSet::new();
    match columns.iter().find(|c| !seen.insert(c.name.as_str())) {
        Some(duplicate) => Err(invalid_input(format!(
            "duplicate column name '{}' in CREATE TABLE",
            duplicate.name
        ))),
        None => Ok(()),
    }
}

fn column_spec(def: &ColumnDef) -> Result<ColumnSpec> {
    let name = normalize_ident(&def.name);
    let data_type = iceberg_type(&def.data_type, &name)?;
    let required = column_required(def, &name)?;
    Ok(ColumnSpec {
        name,
        data_type,
        required,
    })
}

/// `NOT NULL` makes a column required; `NULL` or nothing makes it optional.
fn column_required(def: &ColumnDef, column: &str) -> Result<bool> {
    let mut required = false;
    for option in &def.options {
        match option.option {
            ColumnOption::NotNull => required = true,
            ColumnOption::Null => required = false,
            ref other => {
                return Err(invalid_input(format!(
                    "unsupported column option '{other}' for column '{column}'"
                )))
            }
        }
    }
    Ok(required)
}

/// Maps a SQL type to an Iceberg primitive type.
pub(crate) fn iceberg_type(data_type: &DataType, column: &str) -> Result<Type> {
    let primitive = match data_type {
        DataType::Boolean | DataType::Bool => PrimitiveType::Boolean,
        DataType::Int(_) | DataType::Integer(_) | DataType::SmallInt(_) | DataType::TinyInt(_) => {
            PrimitiveType::Int
        }
        DataType::BigInt(_) => PrimitiveType::Long,
        DataType::Float(ExactNumberInfo::None) | DataType::Real => PrimitiveType::Float,
        DataType::Double(ExactNumberInfo::None) | DataType::DoublePrecision => {
            PrimitiveType::Double
        }
        DataType::Decimal(info) | DataType::Numeric(info) => decimal_type(info, column)?,
        DataType::String(_)
        | DataType::Varchar(_)
        | DataType::Text
        | DataType::Char(_)
        | DataType::Character(_)
        | DataType::CharVarying(_)
        | DataType::CharacterVarying(_) => PrimitiveType::String,
        DataType::Date => PrimitiveType::Date,
        DataType::Timestamp(None | Some(6), TimezoneInfo::None | TimezoneInfo::WithoutTimeZone)
        | DataType::TimestampNtz(None | Some(6)) => PrimitiveType::Timestamp,
        DataType::Timestamp(None | Some(6), TimezoneInfo::WithTimeZone | TimezoneInfo::Tz) => {
            PrimitiveType::Timestamptz
        }
        other => {
            return Err(invalid_input(format!(
                "unsupported type '{other}' for column '{column}'"
            )))
        }
    };
    Ok(Type::Primitive(primitive))
}

fn decimal_type(info: &ExactNumberInfo, column: &str) -> Result<PrimitiveType> {
    let (precision, scale) = match *info {
        ExactNumberInfo::None => {
            return Err(invalid_input(format!(
                "DECIMAL for column '{column}' needs a precision, e.g. DECIMAL(10, 2)"
            )))
        }
        ExactNumberInfo::Precision(precision) => (precision, 0),
        ExactNumberInfo::PrecisionAndScale(precision, scale) => (precision, scale),
    };
    let valid = (1..=38).contains(&precision) && u64::try_from(scale).is_ok_and(|s| s <= precision);
    if !valid {
        return Err(invalid_input(format!(
            "invalid DECIMAL({precision}, {scale}) for column '{column}': \
             precision must be 1 to 38 and scale 0 to precision"
        )));
    }
    Ok(PrimitiveType::Decimal {
        precision: precision as u32,
        scale: scale as u32,
    })
}

// ---------------------------------------------------------------------------
// PARTITIONED BY
// ---------------------------------------------------------------------------

/// Parses the tokens between the parentheses of `PARTITIONED BY ( ... )`.
fn parse_partition_items(tokens: Vec<TokenWithSpan>) -> Result<Vec<PartitionItem>> {
    if next_significant(&tokens, 0).is_none() {
        return Err(invalid_input("PARTITIONED BY () needs at least one item"));
    }
    let mut parser = Parser::new(&GenericDialect {}).with_tokens_with_locations(tokens);
    let exprs = parser
        .parse_comma_separated(Parser::parse_expr)
        .map_err(|e| invalid_input(format!("cannot parse PARTITIONED BY: {e}")))?;
    let rest = parser.peek_token();
    if rest.token != Token::EOF {
        return Err(invalid_input(format!(
            "cannot parse PARTITIONED BY: unexpected '{}'; \
             expected a comma-separated list of columns and transforms",
            rest.token
        )));
    }
    exprs.iter().map(partition_item).collect()
}

pub(crate) fn partition_item(expr: &Expr) -> Result<PartitionItem> {
    let item = match expr {
        Expr::Identifier(ident) => Some(PartitionItem {
            column: normalize_ident(ident),
            transform: PartitionTransform::Identity,
        }),
        Expr::Function(function) => function_partition_item(function),
        _ => None,
    };
    item.ok_or_else(|| {
        invalid_input(format!(
            "unsupported partition transform '{expr}' in PARTITIONED BY; expected a column, \
             bucket(n, col), truncate(w, col), year/month/day/hour(col)"
        ))
    })
}

/// A transform call such as `bucket(16, id)`; `None` if it is not one.
fn function_partition_item(function: &Function) -> Option<PartitionItem> {
    let args = plain_function_args(function)?;
    let [ObjectNamePart::Identifier(name)] = function.name.0.as_slice() else {
        return None;
    };
    let (transform, column) = match (name.value.to_lowercase().as_str(), args.as_slice()) {
        ("identity", [column]) => (PartitionTransform::Identity, column),
        ("bucket", [n, column]) => (PartitionTransform::Bucket(positive_u32(n)?), column),
        ("truncate", [w, column]) => (PartitionTransform::Truncate(positive_u32(w)?), column),
        ("year" | "years", [column]) => (PartitionTransform::Year, column),
        ("month" | "months", [column]) => (PartitionTransform::Month, column),
        ("day" | "days", [column]) => (PartitionTransform::Day, column),
        ("hour" | "hours", [column]) => (PartitionTransform::Hour, column),
        _ => return None,
    };
    let Expr::Identifier(column) = column else {
        return None;
    };
    Some(PartitionItem {
        column: normalize_ident(column),
        transform,
    })
}

/// The positional arguments of a plain call `f(a, b)` (no DISTINCT, OVER, ...).
fn plain_function_args(function: &Function) -> Option<Vec<&Expr>> {
    let plain = function.over.is_none()
        && function.filter.is_none()
        && function.null_treatment.is_none()
        && function.within_group.is_empty()
        && matches!(function.parameters, FunctionArguments::None);
    let FunctionArguments::List(list) = &function.args else {
        return None;
    };
    if !plain || list.duplicate_treatment.is_some() || !list.clauses.is_empty() {
        return None;
    }
    list.args
        .iter()
        .map(|arg| match arg {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(expr)) => Some(expr),
            _ => None,
        })
        .collect()
}

fn positive_u32(expr: &Expr) -> Option<u32> {
    let Expr::Value(value) = expr else {
        return None;
    };
    let Value::Number(number, false) = &value.value else {
        return None;
    };
    number.to_string().parse::<u32>().ok().filter(|&n| n > 0)
}

fn partition_field(
    schema: &Schema,
    item: &PartitionItem,
    field_id: i32,
) -> Result<UnboundPartitionField> {
    let source = schema.field_by_name(&item.column).ok_or_else(|| {
        invalid_input(format!(
            "PARTITIONED BY references unknown column '{}'",
            item.column
        ))
    })?;
    let transform = item.transform.to_iceberg();
    transform.result_type(&source.field_type).map_err(|_| {
        invalid_input(format!(
            "cannot partition by {} of column '{}': {} does not apply to type {}",
            item.transform, item.column, item.transform, source.field_type
        ))
    })?;
    Ok(UnboundPartitionField {
        source_id: source.id,
        field_id: Some(field_id),
        name: item.transform.field_name(&item.column),
        transform,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use icemerge_proto::error::IcemergeError;

    fn plan_message(err: datafusion::error::DataFusionError) -> String {
        match IcemergeError::find(&err) {
            Some(IcemergeError::InvalidInput(message)) => message.clone(),
            _ => panic!("expected an invalid-input error, got {err:?}"),
        }
    }

    fn create(sql: &str) -> CreateTable {
        parse_create_table(sql)
            .unwrap_or_else(|e| panic!("parse failed for {sql}: {e}"))
            .unwrap_or_else(|| panic!("not recognised as CREATE TABLE: {sql}"))
    }

    fn create_err(sql: &str) -> String {
        plan_message(parse_create_table(sql).expect_err(sql))
    }

    fn item(column: &str, transform: PartitionTransform) -> PartitionItem {
        PartitionItem {
            column: column.to_string(),
            transform,
        }
    }

    fn primitive(p: PrimitiveType) -> Type {
        Type::Primitive(p)
    }

    // --- split_statements -------------------------------------------------

    #[test]
    fn split_simple_script() {
        let statements = split_statements("SELECT 1; SELECT 2;\n\n SELECT 3").unwrap();
        assert_eq!(statements, vec!["SELECT 1", "SELECT 2", "SELECT 3"]);
    }

    #[test]
    fn split_keeps_semicolons_in_strings_identifiers_and_comments() {
        let sql = "INSERT INTO t VALUES ('a;b', 'it''s;');\n\
                   SELECT \"weird;col\" FROM t -- trailing; comment\n;\n\
                   SELECT /* block; comment */ 2";
        let statements = split_statements(sql).unwrap();
        assert_eq!(
            statements,
            vec![
                "INSERT INTO t VALUES ('a;b', 'it''s;')",
                "SELECT \"weird;col\" FROM t -- trailing; comment",
                "SELECT /* block; comment */ 2",
            ]
        );
    }

    #[test]
    fn split_drops_empty_and_comment_only_statements() {
        let sql = ";; -- only a comment;\n ; /* block */ ; SELECT 1 ;  \n -- tail";
        assert_eq!(split_statements(sql).unwrap(), vec!["SELECT 1"]);
        assert!(split_statements("   ").unwrap().is_empty());
    }

    #[test]
    fn split_handles_multibyte_text_and_multiple_lines() {
        let sql = "SELECT 'héllo; wörld' AS x;\nSELECT\n  'ünï'\n  AS y;";
        let statements = split_statements(sql).unwrap();
        assert_eq!(
            statements,
            vec!["SELECT 'héllo; wörld' AS x", "SELECT\n  'ünï'\n  AS y"]
        );
    }

    #[test]
    fn split_reports_tokenizer_errors_as_plan_errors() {
        let message = plan_message(split_statements("SELECT 'unterminated; SELECT 2").unwrap_err());
        assert!(message.starts_with("cannot tokenize SQL:"), "{message}");
        assert!(!message.contains('\n'), "{message}");
    }

    // --- statement recognition ---------------------------------------------

    #[test]
    fn non_create_table_statements_are_not_ours() {
        for sql in [
            "SELECT 1",
            "INSERT INTO t VALUES (1)",
            "CREATE VIEW v AS SELECT 1",
            "CREATE SCHEMA s",
            "CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION '/tmp/t'",
            "CREATE OR REPLACE EXTERNAL TABLE t STORED AS CSV LOCATION '/tmp/t'",
        ] {
            assert_eq!(parse_create_table(sql).unwrap(), None, "{sql}");
        }
    }

    #[test]
    fn or_replace_and_other_modifiers_are_rejected() {
        let message = create_err("CREATE OR REPLACE TABLE t (a INT)");
        assert_eq!(
            message,
            "CREATE OR REPLACE TABLE is not supported; use CREATE TABLE"
        );
        let message = create_err("create temporary table t (a int)");
        assert!(message.contains("CREATE TEMPORARY TABLE is not supported"));
    }

    #[test]
    fn parses_plain_create_table() {
        let table = create(
            "CREATE TABLE IF NOT EXISTS Db.Events (Id BIGINT NOT NULL, \"Name\" STRING NULL, ts TIMESTAMP)",
        );
        assert_eq!(table.name, vec!["db", "events"]);
        assert!(table.if_not_exists);
        assert_eq!(
            table.columns,
            vec![
                ColumnSpec {
                    name: "id".into(),
                    data_type: primitive(PrimitiveType::Long),
                    required: true,
                },
                ColumnSpec {
                    name: "Name".into(),
                    data_type: primitive(PrimitiveType::String),
                    required: false,
                },
                ColumnSpec {
                    name: "ts".into(),
                    data_type: primitive(PrimitiveType::Timestamp),
                    required: false,
                },
            ]
        );
        assert!(table.partition_by.is_empty());
        assert_eq!(table.query, None);
    }

    #[test]
    fn keeps_quoted_name_parts_and_three_part_names() {
        let table = create("CREATE TABLE icemerge.\"MyDb\".T (a INT);");
        assert_eq!(table.name, vec!["icemerge", "MyDb", "t"]);
        assert!(!table.if_not_exists);
    }

    #[test]
    fn table_named_partitioned_is_not_a_clause() {
        let table = create("CREATE TABLE partitioned (a INT)");
        assert_eq!(table.name, vec!["partitioned"]);
        assert!(table.partition_by.is_empty());
    }

    // --- types ----------------------------------------------------------------

    #[test]
    fn maps_each_supported_type() {
        let cases = [
            ("BOOLEAN", PrimitiveType::Boolean),
            ("BOOL", PrimitiveType::Boolean),
            ("INT", PrimitiveType::Int),
            ("INTEGER", PrimitiveType::Int),
            ("SMALLINT", PrimitiveType::Int),
            ("TINYINT", PrimitiveType::Int),
            ("BIGINT", PrimitiveType::Long),
            ("FLOAT", PrimitiveType::Float),
            ("REAL", PrimitiveType::Float),
            ("DOUBLE", PrimitiveType::Double),
            ("DOUBLE PRECISION", PrimitiveType::Double),
            (
                "DECIMAL(10, 2)",
                PrimitiveType::Decimal {
                    precision: 10,
                    scale: 2,
                },
            ),
            (
                "NUMERIC(38, 0)",
                PrimitiveType::Decimal {
                    precision: 38,
                    scale: 0,
                },
            ),
            (
                "DECIMAL(7)",
                PrimitiveType::Decimal {
                    precision: 7,
                    scale: 0,
                },
            ),
            ("STRING", PrimitiveType::String),
            ("VARCHAR", PrimitiveType::String),
            ("VARCHAR(20)", PrimitiveType::String),
            ("TEXT", PrimitiveType::String),
            ("CHAR", PrimitiveType::String),
            ("CHAR(3)", PrimitiveType::String),
            ("DATE", PrimitiveType::Date),
            ("TIMESTAMP", PrimitiveType::Timestamp),
            ("TIMESTAMP WITHOUT TIME ZONE", PrimitiveType::Timestamp),
            ("TIMESTAMPTZ", PrimitiveType::Timestamptz),
            ("TIMESTAMP WITH TIME ZONE", PrimitiveType::Timestamptz),
        ];
        for (sql_type, expected) in cases {
            let table = create(&format!("CREATE TABLE t (c {sql_type})"));
            assert_eq!(
                table.columns[0].data_type,
                primitive(expected),
                "{sql_type}"
            );
        }
    }

    #[test]
    fn rejects_unsupported_types() {
        assert_eq!(
            create_err("CREATE TABLE t (a INT, c JSON)"),
            "unsupported type 'JSON' for column 'c'"
        );
        assert!(create_err("CREATE TABLE t (c INTERVAL)").contains("for column 'c'"));
    }

    #[test]
    fn rejects_bad_decimals() {
        let message = create_err("CREATE TABLE t (amount DECIMAL)");
        assert!(message.contains("needs a precision"), "{message}");
        assert!(message.contains("'amount'"), "{message}");
        let message = create_err("CREATE TABLE t (amount DECIMAL(39, 2))");
        assert!(message.contains("DECIMAL(39, 2)"), "{message}");
        let message = create_err("CREATE TABLE t (amount DECIMAL(5, 6))");
        assert!(message.contains("DECIMAL(5, 6)"), "{message}");
    }

    #[test]
    fn rejects_duplicate_columns() {
        assert_eq!(
            create_err("CREATE TABLE t (a INT, b INT, A BIGINT)"),
            "duplicate column name 'a' in CREATE TABLE"
        );
        // Quoted identifiers keep their case, so these differ.
        assert_eq!(create("CREATE TABLE t (a INT, \"A\" INT)").columns.len(), 2);
    }

    #[test]
    fn rejects_unsupported_column_options_and_clauses() {
        let message = create_err("CREATE TABLE t (a INT DEFAULT 1)");
        assert!(
            message.starts_with("unsupported column option 'DEFAULT 1' for column 'a'"),
            "{message}"
        );
        let message = create_err("CREATE TABLE t (a INT, PRIMARY KEY (a))");
        assert_eq!(message, "CREATE TABLE does not support table constraints");
        let message = create_err("CREATE TABLE t");
        assert_eq!(message, "CREATE TABLE t needs a column list or AS SELECT");
    }

    // --- PARTITIONED BY ----------------------------------------------------

    #[test]
    fn parses_each_partition_transform() {
        let table = create(
            "CREATE TABLE t (id BIGINT, s STRING, ts TIMESTAMP, d DATE) PARTITIONED BY (\
             s, identity(id), bucket(16, id), truncate(4, s), year(ts), years(d), \
             month(ts), months(d), day(ts), days(d), hour(ts), hours(ts))",
        );
        use PartitionTransform::*;
        assert_eq!(
            table.partition_by,
            vec![
                item("s", Identity),
                item("id", Identity),
                item("id", Bucket(16)),
                item("s", Truncate(4)),
                item("ts", Year),
                item("d", Year),
                item("ts", Month),
                item("d", Month),
                item("ts", Day),
                item("d", Day),
                item("ts", Hour),
                item("ts", Hour),
            ]
        );
        assert_eq!(table.columns.len(), 4);
    }

    #[test]
    fn partition_items_are_case_insensitive_and_normalised() {
        let table = create(
            "CREATE TABLE t (\"Id\" INT, ts DATE) PARTITIONED BY (BUCKET(8, \"Id\"), Day(TS))",
        );
        assert_eq!(
            table.partition_by,
            vec![
                item("Id", PartitionTransform::Bucket(8)),
                item("ts", PartitionTransform::Day),
            ]
        );
    }

    #[test]
    fn rejects_unsupported_partition_items() {
        for bad in [
            "foo(id)",
            "bucket(id)",
            "bucket(0, id)",
            "bucket(-1, id)",
            "truncate(s, 4)",
            "t.id",
            "id + 1",
            "year(ts, 2)",
        ] {
            let message = create_err(&format!(
                "CREATE TABLE t (id INT, s STRING, ts DATE) PARTITIONED BY ({bad})"
            ));
            assert_eq!(
                message,
                format!(
                    "unsupported partition transform '{bad}' in PARTITIONED BY; expected a \
                     column, bucket(n, col), truncate(w, col), year/month/day/hour(col)"
                )
            );
        }
    }

    #[test]
    fn rejects_malformed_partitioned_by() {
        let base = "CREATE TABLE t (id INT)";
        assert!(create_err(&format!("{base} PARTITIONED BY ()")).contains("at least one item"));
        assert!(create_err(&format!("{base} PARTITIONED BY id")).contains("expected '('"));
        assert!(create_err(&format!("{base} PARTITIONED BY (id")).contains("unbalanced"));
        assert!(create_err(&format!("{base} PARTITIONED BY (id DATE)"))
            .starts_with("cannot parse PARTITIONED BY"));
        assert!(
            create_err(&format!("{base} PARTITIONED BY (id) PARTITIONED BY (id)"))
                .contains("only once")
        );
    }

    // --- CTAS ---------------------------------------------------------------

    #[test]
    fn parses_ctas_without_partitioning() {
        let table = create("CREATE TABLE db.t AS SELECT a, b FROM src WHERE a > 1");
        assert_eq!(table.name, vec!["db", "t"]);
        assert!(table.columns.is_empty());
        assert!(table.partition_by.is_empty());
        assert_eq!(
            table.query.as_deref(),
            Some("SELECT a, b FROM src WHERE a > 1")
        );
    }

    #[test]
    fn parses_ctas_with_partitioning() {
        let table = create(
            "CREATE TABLE IF NOT EXISTS t PARTITIONED BY (bucket(4, id), day(ts)) \
             AS SELECT id, ts FROM src",
        );
        assert!(table.if_not_exists);
        assert!(table.columns.is_empty());
        assert_eq!(
            table.partition_by,
            vec![
                item("id", PartitionTransform::Bucket(4)),
                item("ts", PartitionTransform::Day),
            ]
        );
        assert_eq!(table.query.as_deref(), Some("SELECT id, ts FROM src"));
    }

    #[test]
    fn parses_ctas_with_columns_and_partitioning_before_as() {
        let table = create(
            "CREATE TABLE t (id INT NOT NULL, v STRING) PARTITIONED BY (id) \
             AS SELECT id, 'partitioned by (x)' AS v FROM src",
        );
        assert_eq!(table.columns.len(), 2);
        assert!(table.columns[0].required);
        assert_eq!(
            table.partition_by,
            vec![item("id", PartitionTransform::Identity)]
        );
        assert_eq!(
            table.query.as_deref(),
            Some("SELECT id, 'partitioned by (x)' AS v FROM src")
        );
    }

    // --- schema and partition spec -----------------------------------------

    fn sample_schema() -> Schema {
        let table = create(
            "CREATE TABLE t (id BIGINT NOT NULL, s STRING, ts TIMESTAMPTZ, d DATE, \
             amount DECIMAL(10, 2), flag BOOLEAN, t2 TIMESTAMP, d2 DATE)",
        );
        build_schema(&table.columns).unwrap()
    }

    #[test]
    fn builds_schema_with_sequential_ids() {
        let schema = sample_schema();
        let fields = schema.as_struct().fields();
        let summary: Vec<(i32, &str, bool)> = fields
            .iter()
            .map(|f| (f.id, f.name.as_str(), f.required))
            .collect();
        assert_eq!(
            summary,
            vec![
                (1, "id", true),
                (2, "s", false),
                (3, "ts", false),
                (4, "d", false),
                (5, "amount", false),
                (6, "flag", false),
                (7, "t2", false),
                (8, "d2", false),
            ]
        );
        assert_eq!(*fields[2].field_type, primitive(PrimitiveType::Timestamptz));
    }

    #[test]
    fn build_schema_rejects_duplicates() {
        let column = ColumnSpec {
            name: "a".into(),
            data_type: primitive(PrimitiveType::Int),
            required: false,
        };
        let message = plan_message(build_schema(&[column.clone(), column]).unwrap_err());
        assert_eq!(message, "duplicate column name 'a' in CREATE TABLE");
    }

    #[test]
    fn builds_and_binds_partition_spec_for_each_transform() {
        use PartitionTransform::*;
        let schema = sample_schema();
        let items = [
            item("s", Identity),
            item("id", Bucket(16)),
            item("amount", Truncate(100)),
            item("d", Year),
            item("ts", Month),
            item("d2", Day),
            item("t2", Hour),
        ];
        let spec = build_partition_spec(&schema, &items).unwrap();
        let fields: Vec<(i32, Option<i32>, &str, Transform)> = spec
            .fields()
            .iter()
            .map(|f| (f.source_id, f.field_id, f.name.as_str(), f.transform))
            .collect();
        assert_eq!(
            fields,
            vec![
                (2, Some(1000), "s", Transform::Identity),
                (1, Some(1001), "id_bucket", Transform::Bucket(16)),
                (5, Some(1002), "amount_trunc", Transform::Truncate(100)),
                (4, Some(1003), "d_year", Transform::Year),
                (3, Some(1004), "ts_month", Transform::Month),
                (8, Some(1005), "d2_day", Transform::Day),
                (7, Some(1006), "t2_hour", Transform::Hour),
            ]
        );
        let bound = spec.bind(schema).unwrap();
        assert_eq!(bound.fields().len(), 7);
        assert_eq!(bound.fields()[1].field_id, 1001);
        assert_eq!(bound.fields()[1].name, "id_bucket");
    }

    #[test]
    fn empty_partition_spec_is_unpartitioned() {
        let schema = sample_schema();
        let spec = build_partition_spec(&schema, &[]).unwrap();
        assert!(spec.fields().is_empty());
        assert!(spec.bind(schema).unwrap().is_unpartitioned());
    }

    #[test]
    fn partition_spec_rejects_unknown_column() {
        let message = plan_message(
            build_partition_spec(&sample_schema(), &[item("x", PartitionTransform::Day)])
                .unwrap_err(),
        );
        assert_eq!(message, "PARTITIONED BY references unknown column 'x'");
    }

    #[test]
    fn partition_spec_rejects_transform_not_valid_for_type() {
        use PartitionTransform::*;
        let schema = sample_schema();
        let cases = [
            (item("s", Year), "cannot partition by year of column 's': year does not apply to type string"),
            (item("d", Hour), "cannot partition by hour of column 'd': hour does not apply to type date"),
            (
                item("flag", Bucket(4)),
                "cannot partition by bucket(4) of column 'flag': bucket(4) does not apply to type boolean",
            ),
            (
                item("ts", Truncate(10)),
                "cannot partition by truncate(10) of column 'ts': truncate(10) does not apply to type timestamptz",
            ),
        ];
        for (bad, expected) in cases {
            let message = plan_message(build_partition_spec(&schema, &[bad]).unwrap_err());
            assert_eq!(message, expected);
        }
    }

    #[test]
    fn partition_spec_rejects_duplicate_partition_fields() {
        let schema = sample_schema();
        let duplicates = [
            // Same partition field name twice.
            [
                item("id", PartitionTransform::Bucket(4)),
                item("id", PartitionTransform::Bucket(8)),
            ],
            // Iceberg treats two time transforms on one column as redundant.
            [
                item("d", PartitionTransform::Year),
                item("d", PartitionTransform::Day),
            ],
        ];
        for items in duplicates {
            let message = plan_message(build_partition_spec(&schema, &items).unwrap_err());
            assert!(message.starts_with("invalid PARTITIONED BY:"), "{message}");
            assert!(!message.contains('\n'), "{message}");
        }
    }

    #[test]
    fn end_to_end_create_table_to_bound_spec() {
        let table = create(
            "CREATE TABLE db.t (id BIGINT NOT NULL, ts TIMESTAMP) PARTITIONED BY (bucket(16, id), days(ts))",
        );
        let schema = build_schema(&table.columns).unwrap();
        let spec = build_partition_spec(&schema, &table.partition_by).unwrap();
        let bound = spec.bind(schema).unwrap();
        let names: Vec<&str> = bound.fields().iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, vec!["id_bucket", "ts_day"]);
    }
}
