//! Table maintenance procedures as statements: Spark's
//! `CALL [catalog.]system.<procedure>(args)` and Trino's
//! `ALTER TABLE t EXECUTE <procedure>[(args)]`, parsed from tokens and bound
//! to a [`Procedure`] with typed arguments.
//!
//! Arguments are positional or named (`name => value`, as Spark writes
//! them; positional ones come first). Values: string and number literals,
//! `TRUE` / `FALSE`, `NULL`, `TIMESTAMP '...'`, `map('k', 'v', ...)` and
//! arrays (`array(1, 2)` or `ARRAY[1, 2]`). Binding names what is wrong —
//! an unknown procedure (with the list of known ones), an unknown or
//! repeated argument, a missing required one, a value of the wrong type —
//! before anything touches the table. Timestamps without a zone are UTC.

use std::collections::BTreeMap;

use arrow::array::timezone::Tz;
use arrow::compute::kernels::cast_utils::string_to_datetime;
use datafusion::error::Result;
use datafusion::sql::sqlparser::ast::{Expr, Ident, ObjectName, ObjectNamePart};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
use icemerge_proto::error::{invalid_input, unsupported};

use crate::alter_table::SortItem;
use crate::ddl::{normalize_ident, PartitionItem, PartitionTransform};

/// A literal argument value as written.
#[derive(Debug, Clone, PartialEq)]
pub enum ArgValue {
    Null,
    Bool(bool),
    /// A number literal, as written (with its sign).
    Number(String),
    String(String),
    /// `TIMESTAMP '...'`: the text of the literal.
    Timestamp(String),
    Array(Vec<ArgValue>),
    Map(Vec<(ArgValue, ArgValue)>),
}

impl ArgValue {
    fn describe(&self) -> String {
        match self {
            ArgValue::Null => "NULL".into(),
            ArgValue::Bool(b) => b.to_string(),
            ArgValue::Number(n) => n.clone(),
            ArgValue::String(s) => format!("'{s}'"),
            ArgValue::Timestamp(s) => format!("TIMESTAMP '{s}'"),
            ArgValue::Array(_) => "an array".into(),
            ArgValue::Map(_) => "a map".into(),
        }
    }
}

/// When files or snapshots count as old.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cutoff {
    /// Before this instant (milliseconds since the epoch, UTC).
    At(i64),
    /// Older than this many milliseconds before the procedure runs (Trino's
    /// `retention_threshold`).
    Ago(i64),
}

impl Cutoff {
    /// The instant in milliseconds, given the time the procedure runs.
    pub fn millis(self, now_ms: i64) -> i64 {
        match self {
            Cutoff::At(ms) => ms,
            Cutoff::Ago(ms) => now_ms.saturating_sub(ms),
        }
    }
}

/// A procedure with its bound arguments.
#[derive(Debug, Clone, PartialEq)]
pub enum Procedure {
    /// `rollback_to_snapshot(table, snapshot_id)`.
    RollbackToSnapshot { snapshot_id: i64 },
    /// `cherrypick_snapshot(table, snapshot_id)`.
    CherrypickSnapshot { snapshot_id: i64 },
    /// `set_current_snapshot(table, snapshot_id | ref)`.
    SetCurrentSnapshot {
        snapshot_id: Option<i64>,
        reference: Option<String>,
    },
    /// `expire_snapshots(table, older_than, retain_last, snapshot_ids,
    /// max_concurrent_deletes)`.
    ExpireSnapshots {
        older_than: Option<Cutoff>,
        retain_last: Option<u32>,
        snapshot_ids: Vec<i64>,
        max_concurrent_deletes: Option<usize>,
    },
    /// `rewrite_data_files(table, strategy, sort_order, options, where)`:
    /// the table's live data files (those that may hold a row matching the
    /// filter, when given) chosen by Spark's rules, rewritten with their
    /// deletes applied into files of the target size.
    RewriteDataFiles(RewriteDataFiles),
    /// `rewrite_manifests(table, use_caching, spec_id)` (Trino's
    /// `optimize_manifests`): the manifests of the current snapshot
    /// rewritten, clustered by partition, into manifests of the table's
    /// target size; only those of `spec_id` when given. `use_caching` is
    /// accepted and has no effect (icemerge caches no manifests).
    RewriteManifests { spec_id: Option<i32> },
    /// `remove_orphan_files(table, older_than, location, dry_run,
    /// max_concurrent_deletes)`.
    RemoveOrphanFiles {
        older_than: Option<Cutoff>,
        location: Option<String>,
        dry_run: bool,
        max_concurrent_deletes: Option<usize>,
    },
}

/// A parsed procedure call: which procedure, on which table.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcedureCall {
    /// The procedure's name as icemerge knows it (Spark's).
    pub name: &'static str,
    pub table: ObjectName,
    pub procedure: Procedure,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum ArgType {
    /// A table name in a string ('db.t').
    Table,
    Str,
    Long,
    Bool,
    Timestamp,
    LongArray,
    StringMap,
    /// Trino's duration string: '7d', '12h', '30m', '10s', '500ms'.
    Duration,
}

impl ArgType {
    fn name(self) -> &'static str {
        match self {
            ArgType::Table => "a table name string",
            ArgType::Str => "a string",
            ArgType::Long => "an integer",
            ArgType::Bool => "a boolean",
            ArgType::Timestamp => "a timestamp (TIMESTAMP '...' or a string)",
            ArgType::LongArray => "an array of integers",
            ArgType::StringMap => "a map of strings (map('k', 'v', ...))",
            ArgType::Duration => "a duration string such as '7d', '12h', '30m' or '10s'",
        }
    }
}

struct Param {
    name: &'static str,
    ty: ArgType,
    required: bool,
}

const fn req(name: &'static str, ty: ArgType) -> Param {
    Param {
        name,
        ty,
        required: true,
    }
}

const fn opt(name: &'static str, ty: ArgType) -> Param {
    Param {
        name,
        ty,
        required: false,
    }
}

struct Spec {
    name: &'static str,
    params: &'static [Param],
    /// Why icemerge does not run it yet (None: it does).
    missing: Option<&'static str>,
}

/// Spark's procedures, by name.
const SPARK: &[Spec] = &[
    Spec {
        name: "rollback_to_snapshot",
        params: &[
            req("table", ArgType::Table),
            req("snapshot_id", ArgType::Long),
        ],
        missing: None,
    },
    Spec {
        name: "set_current_snapshot",
        params: &[
            req("table", ArgType::Table),
            opt("snapshot_id", ArgType::Long),
            opt("ref", ArgType::Str),
        ],
        missing: None,
    },
    Spec {
        name: "expire_snapshots",
        params: &[
            req("table", ArgType::Table),
            opt("older_than", ArgType::Timestamp),
            opt("retain_last", ArgType::Long),
            opt("max_concurrent_deletes", ArgType::Long),
            opt("stream_results", ArgType::Bool),
            opt("snapshot_ids", ArgType::LongArray),
        ],
        missing: None,
    },
    Spec {
        name: "remove_orphan_files",
        params: &[
            req("table", ArgType::Table),
            opt("older_than", ArgType::Timestamp),
            opt("location", ArgType::Str),
            opt("dry_run", ArgType::Bool),
            opt("max_concurrent_deletes", ArgType::Long),
        ],
        missing: None,
    },
    Spec {
        name: "cherrypick_snapshot",
        params: &[
            req("table", ArgType::Table),
            req("snapshot_id", ArgType::Long),
        ],
        missing: None,
    },
    Spec {
        name: "rewrite_data_files",
        params: &[
            req("table", ArgType::Table),
            opt("strategy", ArgType::Str),
            opt("sort_order", ArgType::Str),
            opt("options", ArgType::StringMap),
            opt("where", ArgType::Str),
        ],
        missing: None,
    },
    Spec {
        name: "rewrite_manifests",
        params: &[
            req("table", ArgType::Table),
            opt("use_caching", ArgType::Bool),
            opt("spec_id", ArgType::Long),
        ],
        missing: None,
    },
    Spec {
        name: "rewrite_position_delete_files",
        params: &[
            req("table", ArgType::Table),
            opt("options", ArgType::StringMap),
            opt("where", ArgType::Str),
        ],
        missing: Some(
            "rewriting position delete files is not implemented; rewrite_data_files with \
             options => map('delete-file-threshold', '1') applies the delete files of the data \
             files they delete from and removes them",
        ),
    },
];

/// Trino's `ALTER TABLE ... EXECUTE` procedures (the table is the
/// statement's).
const TRINO: &[Spec] = &[
    Spec {
        name: "expire_snapshots",
        params: &[opt("retention_threshold", ArgType::Duration)],
        missing: None,
    },
    Spec {
        name: "remove_orphan_files",
        params: &[opt("retention_threshold", ArgType::Duration)],
        missing: None,
    },
    Spec {
        name: "optimize_manifests",
        params: &[],
        missing: None,
    },
    Spec {
        name: "optimize",
        params: &[opt("file_size_threshold", ArgType::Str)],
        missing: None,
    },
];

/// Trino's default `retention_threshold` (its `iceberg.expire-snapshots.min-retention`
/// and `iceberg.remove-orphan-files.min-retention`): seven days.
/// Trino's default `file_size_threshold` of `optimize`.
const TRINO_DEFAULT_FILE_SIZE_THRESHOLD: u64 = 100 * 1024 * 1024;

const TRINO_DEFAULT_RETENTION_MS: i64 = 7 * 24 * 3600 * 1000;

/// The call when `sql` is a `CALL` or an `ALTER TABLE ... EXECUTE`; None for
/// any other statement.
pub fn parse_procedure_call(sql: &str) -> Result<Option<ProcedureCall>> {
    let tokens: Vec<Token> = match Tokenizer::new(&GenericDialect {}, sql).tokenize() {
        Ok(tokens) => tokens,
        // Not ours to report: the statement's own parser names the error.
        Err(_) => return Ok(None),
    }
    .into_iter()
    .filter(|t| !matches!(t, Token::Whitespace(_) | Token::SemiColon | Token::EOF))
    .collect();
    let mut at = Cursor { tokens, next: 0 };
    if at.keyword(Keyword::CALL) {
        return parse_call(&mut at).map(Some);
    }
    if !(at.keyword(Keyword::ALTER) && at.keyword(Keyword::TABLE)) {
        return Ok(None);
    }
    let Ok(table) = at.object_name("ALTER TABLE") else {
        return Ok(None);
    };
    if !at.keyword(Keyword::EXECUTE) {
        return Ok(None);
    }
    parse_execute(&mut at, table).map(Some)
}

fn parse_call(at: &mut Cursor) -> Result<ProcedureCall> {
    let name = at.object_name("CALL")?;
    let parts: Vec<String> = name.0.iter().map(part_value).collect();
    let procedure = match parts.as_slice() {
        [.., namespace, procedure] if namespace.eq_ignore_ascii_case("system") => {
            procedure.to_lowercase()
        }
        _ => {
            return Err(invalid_input(format!(
                "CALL {name}: procedures live in the 'system' namespace: CALL \
                 [catalog.]system.<procedure>(...); known procedures: {}",
                known(SPARK)
            )))
        }
    };
    let Some(spec) = SPARK.iter().find(|s| s.name == procedure) else {
        return Err(invalid_input(format!(
            "CALL {name}: unknown procedure '{procedure}'; known procedures: {}",
            known(SPARK)
        )));
    };
    let what = format!("CALL system.{}", spec.name);
    let args = at.args(&what)?;
    at.end(&what)?;
    let mut bound = bind(spec, args, &what)?;
    let table = match bound.remove("table") {
        Some(ArgValue::String(s)) => table_name(&s, &what)?,
        _ => unreachable!("table is a required string"),
    };
    let procedure = build(spec.name, &mut bound, &what)?;
    Ok(ProcedureCall {
        name: spec.name,
        table,
        procedure,
    })
}

fn parse_execute(at: &mut Cursor, table: ObjectName) -> Result<ProcedureCall> {
    let procedure = match at.peek() {
        Some(Token::Word(w)) => w.value.to_lowercase(),
        _ => {
            return Err(invalid_input(format!(
                "ALTER TABLE {table} EXECUTE: expected a procedure name; known procedures: {}",
                known(TRINO)
            )))
        }
    };
    at.next += 1;
    let Some(spec) = TRINO.iter().find(|s| s.name == procedure) else {
        return Err(invalid_input(format!(
            "ALTER TABLE {table} EXECUTE: unknown procedure '{procedure}'; known procedures: {}",
            known(TRINO)
        )));
    };
    let what = format!("ALTER TABLE {table} EXECUTE {}", spec.name);
    let args = if at.peek() == Some(&Token::LParen) {
        at.args(&what)?
    } else {
        vec![]
    };
    at.end(&what)?;
    let mut bound = bind(spec, args, &what)?;
    let retention = match bound.remove("retention_threshold") {
        Some(ArgValue::String(s)) => Cutoff::Ago(duration_ms(&s).ok_or_else(|| {
            invalid_input(format!(
                "{what}: argument 'retention_threshold' = '{s}': expected {}",
                ArgType::Duration.name()
            ))
        })?),
        _ => Cutoff::Ago(TRINO_DEFAULT_RETENTION_MS),
    };
    let (name, procedure) = match spec.name {
        // Trino's optimize: the data files below the threshold (default
        // 100MB), and those with deletes, rewritten.
        "optimize" => {
            let threshold = match bound.remove("file_size_threshold") {
                Some(ArgValue::String(s)) => data_size_bytes(&s).ok_or_else(|| {
                    invalid_input(format!(
                        "{what}: argument 'file_size_threshold' = '{s}': expected a data size \
                         such as '100MB' (units B, kB, MB, GB, TB)"
                    ))
                })?,
                _ => TRINO_DEFAULT_FILE_SIZE_THRESHOLD,
            };
            (
                "rewrite_data_files",
                Procedure::RewriteDataFiles(RewriteDataFiles {
                    strategy: RewriteStrategy::BinPack,
                    options: RewriteOptions {
                        file_size_threshold: Some(threshold),
                        ..RewriteOptions::default()
                    },
                    filter: None,
                }),
            )
        }
        "expire_snapshots" => (
            "expire_snapshots",
            Procedure::ExpireSnapshots {
                older_than: Some(retention),
                retain_last: None,
                snapshot_ids: vec![],
                max_concurrent_deletes: None,
            },
        ),
        "remove_orphan_files" => (
            "remove_orphan_files",
            Procedure::RemoveOrphanFiles {
                older_than: Some(retention),
                location: None,
                dry_run: false,
                max_concurrent_deletes: None,
            },
        ),
        "optimize_manifests" => (
            "rewrite_manifests",
            Procedure::RewriteManifests { spec_id: None },
        ),
        other => unreachable!("{other} is refused by bind"),
    };
    Ok(ProcedureCall {
        name,
        table,
        procedure,
    })
}

/// The typed procedure from its bound arguments.
fn build(name: &str, args: &mut BTreeMap<&'static str, ArgValue>, what: &str) -> Result<Procedure> {
    let long = |args: &mut BTreeMap<&'static str, ArgValue>, key: &str| -> Result<Option<i64>> {
        match args.remove(key) {
            Some(ArgValue::Number(n)) => n.parse::<i64>().map(Some).map_err(|_| {
                invalid_input(format!(
                    "{what}: argument '{key}' = {n}: expected {}",
                    ArgType::Long.name()
                ))
            }),
            _ => Ok(None),
        }
    };
    let cutoff = |args: &mut BTreeMap<&'static str, ArgValue>| -> Result<Option<Cutoff>> {
        match args.remove("older_than") {
            Some(ArgValue::Timestamp(s) | ArgValue::String(s)) => {
                Ok(Some(Cutoff::At(timestamp_ms(&s).ok_or_else(|| {
                    invalid_input(format!(
                        "{what}: argument 'older_than' = '{s}' is not a timestamp \
                         (e.g. TIMESTAMP '2024-01-31 12:00:00')"
                    ))
                })?)))
            }
            _ => Ok(None),
        }
    };
    let positive = |value: Option<i64>, key: &str| -> Result<Option<i64>> {
        match value {
            Some(v) if v < 1 => Err(invalid_input(format!(
                "{what}: argument '{key}' = {v}: must be at least 1"
            ))),
            other => Ok(other),
        }
    };
    let string = |args: &mut BTreeMap<&'static str, ArgValue>, key: &str| match args.remove(key) {
        Some(ArgValue::String(s)) => Some(s),
        _ => None,
    };
    let boolean = |args: &mut BTreeMap<&'static str, ArgValue>, key: &str| match args.remove(key) {
        Some(ArgValue::Bool(b)) => Some(b),
        _ => None,
    };
    Ok(match name {
        "rollback_to_snapshot" => Procedure::RollbackToSnapshot {
            snapshot_id: long(args, "snapshot_id")?.expect("required"),
        },
        "cherrypick_snapshot" => Procedure::CherrypickSnapshot {
            snapshot_id: long(args, "snapshot_id")?.expect("required"),
        },
        "set_current_snapshot" => {
            let snapshot_id = long(args, "snapshot_id")?;
            let reference = string(args, "ref");
            if snapshot_id.is_some() == reference.is_some() {
                return Err(invalid_input(format!(
                    "{what}: give exactly one of the arguments 'snapshot_id' and 'ref'"
                )));
            }
            Procedure::SetCurrentSnapshot {
                snapshot_id,
                reference,
            }
        }
        "expire_snapshots" => {
            let older_than = cutoff(args)?;
            let retain_last = positive(long(args, "retain_last")?, "retain_last")?
                .map(|n| u32::try_from(n).unwrap_or(u32::MAX));
            let max_concurrent_deletes = positive(
                long(args, "max_concurrent_deletes")?,
                "max_concurrent_deletes",
            )?
            .map(|n| n as usize);
            let snapshot_ids = match args.remove("snapshot_ids") {
                Some(ArgValue::Array(items)) => items
                    .iter()
                    .map(|item| match item {
                        ArgValue::Number(n) => n.parse::<i64>().ok(),
                        _ => None,
                    })
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| {
                        invalid_input(format!(
                            "{what}: argument 'snapshot_ids': expected {}",
                            ArgType::LongArray.name()
                        ))
                    })?,
                _ => vec![],
            };
            Procedure::ExpireSnapshots {
                older_than,
                retain_last,
                snapshot_ids,
                max_concurrent_deletes,
            }
        }
        "remove_orphan_files" => Procedure::RemoveOrphanFiles {
            older_than: cutoff(args)?,
            location: string(args, "location"),
            dry_run: boolean(args, "dry_run").unwrap_or(false),
            max_concurrent_deletes: positive(
                long(args, "max_concurrent_deletes")?,
                "max_concurrent_deletes",
            )?
            .map(|n| n as usize),
        },
        "rewrite_data_files" => rewrite_options(args, what)?,
        "rewrite_manifests" => {
            // `use_caching` only tunes how Spark reads manifests: accepted,
            // no effect here.
            args.remove("use_caching");
            let spec_id = match long(args, "spec_id")? {
                Some(id) => Some(i32::try_from(id).map_err(|_| {
                    invalid_input(format!(
                        "{what}: argument 'spec_id' = {id}: not a partition spec id"
                    ))
                })?),
                None => None,
            };
            Procedure::RewriteManifests { spec_id }
        }
        other => unreachable!("{other} is refused by bind"),
    })
}

/// `rewrite_data_files`' arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct RewriteDataFiles {
    pub strategy: RewriteStrategy,
    pub options: RewriteOptions,
    /// `where`: only the data files that may hold a matching row.
    pub filter: Option<String>,
}

/// How `rewrite_data_files` orders the rows it writes.
#[derive(Debug, Clone, PartialEq)]
pub enum RewriteStrategy {
    /// `binpack`: rows spread over writers of the target size, each
    /// writer's rows sorted by the table's write order when it has one.
    BinPack,
    /// `sort`: the rows of the rewrite sorted as one sequence, so the files
    /// written hold ranges that do not overlap: by `sort_order` when given,
    /// else by the table's write order.
    Sort { sort_order: Option<Vec<SortItem>> },
}

/// The `options` map of `rewrite_data_files`, as Iceberg's bin-pack
/// planner reads it (the defaults are resolved against the table).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RewriteOptions {
    pub target_file_size_bytes: Option<u64>,
    pub min_file_size_bytes: Option<u64>,
    pub max_file_size_bytes: Option<u64>,
    pub min_input_files: Option<usize>,
    pub rewrite_all: bool,
    pub delete_file_threshold: Option<usize>,
    pub delete_ratio_threshold: Option<f64>,
    /// Trino's `optimize(file_size_threshold)`: the data files smaller than
    /// this, and those with delete files, are the ones rewritten (in place
    /// of the size range and thresholds above).
    pub file_size_threshold: Option<u64>,
}

/// The options of `rewrite_data_files` that icemerge knows.
const REWRITE_OPTIONS: [&str; 7] = [
    "target-file-size-bytes",
    "min-file-size-bytes",
    "max-file-size-bytes",
    "min-input-files",
    "rewrite-all",
    "delete-file-threshold",
    "delete-ratio-threshold",
];

fn rewrite_options(args: &mut BTreeMap<&'static str, ArgValue>, what: &str) -> Result<Procedure> {
    let strategy = match args.remove("strategy") {
        Some(ArgValue::String(strategy)) => Some(strategy),
        _ => None,
    };
    let sort_order = match args.remove("sort_order") {
        Some(ArgValue::String(order)) => Some(parse_sort_order(&order, what)?),
        _ => None,
    };
    let strategy = match strategy.as_deref().map(str::to_lowercase).as_deref() {
        None if sort_order.is_some() => RewriteStrategy::Sort { sort_order },
        None | Some("binpack") => {
            if sort_order.is_some() {
                return Err(invalid_input(format!(
                    "{what}: argument 'sort_order' needs strategy 'sort', not 'binpack'"
                )));
            }
            RewriteStrategy::BinPack
        }
        Some("sort") => RewriteStrategy::Sort { sort_order },
        Some(_) => {
            return Err(invalid_input(format!(
                "{what}: argument 'strategy' = '{}': expected 'binpack' or 'sort'",
                strategy.unwrap_or_default()
            )))
        }
    };
    let filter = match args.remove("where") {
        Some(ArgValue::String(filter)) if filter.trim().is_empty() => {
            return Err(invalid_input(format!("{what}: argument 'where' is empty")))
        }
        Some(ArgValue::String(filter)) => Some(filter),
        _ => None,
    };
    let mut options = RewriteOptions::default();
    if let Some(ArgValue::Map(pairs)) = args.remove("options") {
        for (key, value) in pairs {
            let ArgValue::String(key) = key else {
                return Err(invalid_input(format!(
                    "{what}: argument 'options': keys are strings, found {}",
                    key.describe()
                )));
            };
            let text = match &value {
                ArgValue::String(s) | ArgValue::Number(s) => s.clone(),
                ArgValue::Bool(b) => b.to_string(),
                other => {
                    return Err(invalid_input(format!(
                        "{what}: option '{key}' = {}: expected a string or number",
                        other.describe()
                    )))
                }
            };
            let integer = |text: &str, least: u64| -> Result<u64> {
                text.trim()
                    .parse::<u64>()
                    .ok()
                    .filter(|n| *n >= least)
                    .ok_or_else(|| {
                        invalid_input(format!(
                            "{what}: option '{key}' = '{text}': expected {}",
                            if least == 0 {
                                "an integer >= 0"
                            } else {
                                "a positive integer"
                            }
                        ))
                    })
            };
            match key.as_str() {
                "target-file-size-bytes" => {
                    options.target_file_size_bytes = Some(integer(&text, 1)?)
                }
                "min-file-size-bytes" => options.min_file_size_bytes = Some(integer(&text, 0)?),
                "max-file-size-bytes" => options.max_file_size_bytes = Some(integer(&text, 1)?),
                "min-input-files" => options.min_input_files = Some(integer(&text, 1)? as usize),
                "delete-file-threshold" => {
                    options.delete_file_threshold = Some(integer(&text, 0)? as usize)
                }
                "delete-ratio-threshold" => {
                    let ratio = text
                        .trim()
                        .parse::<f64>()
                        .ok()
                        .filter(|r| *r > 0.0 && *r <= 1.0)
                        .ok_or_else(|| {
                            invalid_input(format!(
                                "{what}: option '{key}' = '{text}': expected a number in (0, 1]"
                            ))
                        })?;
                    options.delete_ratio_threshold = Some(ratio);
                }
                "rewrite-all" => {
                    options.rewrite_all = match text.to_lowercase().as_str() {
                        "true" => true,
                        "false" => false,
                        _ => {
                            return Err(invalid_input(format!(
                                "{what}: option 'rewrite-all' = '{text}': expected true or false"
                            )))
                        }
                    }
                }
                _ => {
                    return Err(invalid_input(format!(
                        "{what}: unknown option '{key}'; the options are: {}",
                        REWRITE_OPTIONS.join(", ")
                    )))
                }
            }
        }
    }
    Ok(Procedure::RewriteDataFiles(RewriteDataFiles {
        strategy,
        options,
        filter,
    }))
}

/// Spark's `sort_order` argument: `col [ASC | DESC] [NULLS FIRST | LAST], ...`
/// over plain columns; `zorder(...)` is refused.
fn parse_sort_order(text: &str, what: &str) -> Result<Vec<SortItem>> {
    let bad = |e: String| {
        invalid_input(format!(
            "{what}: argument 'sort_order' = '{text}': expected columns with \
             [ASC | DESC] [NULLS FIRST | LAST], separated by commas: {e}"
        ))
    };
    if text.trim().to_lowercase().starts_with("zorder") {
        return Err(unsupported(format!(
            "{what}: argument 'sort_order' = '{text}': z-order is not supported; sort by \
             columns"
        )));
    }
    let mut parser = Parser::new(&GenericDialect {})
        .try_with_sql(text)
        .map_err(|e| bad(e.to_string()))?;
    let items = parser
        .parse_comma_separated(Parser::parse_order_by_expr)
        .map_err(|e| bad(e.to_string()))?;
    if parser.peek_token().token != Token::EOF {
        return Err(bad(format!("unexpected '{}'", parser.peek_token().token)));
    }
    items
        .into_iter()
        .map(|item| {
            let column = match &item.expr {
                Expr::Identifier(ident) => normalize_ident(ident),
                other => {
                    return Err(unsupported(format!(
                        "{what}: argument 'sort_order': '{other}' is not a column; \
                         icemerge sorts by columns only"
                    )))
                }
            };
            let descending = item.options.asc == Some(false);
            Ok(SortItem {
                term: PartitionItem {
                    column,
                    transform: PartitionTransform::Identity,
                },
                descending,
                nulls_first: item.options.nulls_first.unwrap_or(!descending),
            })
        })
        .collect()
}

fn known(specs: &[Spec]) -> String {
    specs
        .iter()
        .filter(|s| s.missing.is_none())
        .map(|s| s.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Matches `args` to the parameters of `spec`: positional first, then
/// named; each value checked against its parameter's type. NULL counts as
/// not given.
fn bind(
    spec: &Spec,
    args: Vec<(Option<String>, ArgValue)>,
    what: &str,
) -> Result<BTreeMap<&'static str, ArgValue>> {
    if let Some(why) = spec.missing {
        return Err(unsupported(format!("{what}: not supported: {why}")));
    }
    let names = || {
        spec.params
            .iter()
            .map(|p| p.name)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut bound: BTreeMap<&'static str, ArgValue> = BTreeMap::new();
    let mut named_seen = false;
    for (index, (name, value)) in args.into_iter().enumerate() {
        let param = match name {
            Some(name) => {
                named_seen = true;
                spec.params
                    .iter()
                    .find(|p| p.name.eq_ignore_ascii_case(&name))
                    .ok_or_else(|| {
                        invalid_input(format!(
                            "{what}: unknown argument '{name}'; its arguments are: {}",
                            names()
                        ))
                    })?
            }
            None if named_seen => {
                return Err(invalid_input(format!(
                    "{what}: a positional argument ({}) after a named one",
                    value.describe()
                )))
            }
            None => spec.params.get(index).ok_or_else(|| {
                invalid_input(format!(
                    "{what}: too many arguments: it takes at most {} ({})",
                    spec.params.len(),
                    names()
                ))
            })?,
        };
        if bound.contains_key(param.name) {
            return Err(invalid_input(format!(
                "{what}: argument '{}' is given twice",
                param.name
            )));
        }
        if value == ArgValue::Null {
            continue;
        }
        if !fits(param.ty, &value) {
            return Err(invalid_input(format!(
                "{what}: argument '{}' = {}: expected {}",
                param.name,
                value.describe(),
                param.ty.name()
            )));
        }
        bound.insert(param.name, value);
    }
    if let Some(missing) = spec
        .params
        .iter()
        .find(|p| p.required && !bound.contains_key(p.name))
    {
        return Err(invalid_input(format!(
            "{what}: missing required argument '{}' ({})",
            missing.name,
            missing.ty.name()
        )));
    }
    Ok(bound)
}

fn fits(ty: ArgType, value: &ArgValue) -> bool {
    let is_long = |v: &ArgValue| matches!(v, ArgValue::Number(n) if n.parse::<i64>().is_ok());
    match ty {
        ArgType::Table | ArgType::Str | ArgType::Duration => matches!(value, ArgValue::String(_)),
        ArgType::Long => is_long(value),
        ArgType::Bool => matches!(value, ArgValue::Bool(_)),
        ArgType::Timestamp => matches!(value, ArgValue::Timestamp(_) | ArgValue::String(_)),
        ArgType::LongArray => matches!(value, ArgValue::Array(items) if items.iter().all(is_long)),
        ArgType::StringMap => matches!(value, ArgValue::Map(_)),
    }
}

/// `'db.t'` (Spark passes the table as a string) as a name.
fn table_name(text: &str, what: &str) -> Result<ObjectName> {
    let bad = || {
        invalid_input(format!(
            "{what}: argument 'table' = '{text}' is not a table name"
        ))
    };
    let mut parser = Parser::new(&GenericDialect {})
        .try_with_sql(text)
        .map_err(|_| bad())?;
    let name = parser.parse_object_name(false).map_err(|_| bad())?;
    if parser.peek_token().token != Token::EOF {
        return Err(bad());
    }
    Ok(name)
}

/// A timestamp literal's instant in milliseconds (UTC when it names no
/// zone), any year chrono knows.
fn timestamp_ms(text: &str) -> Option<i64> {
    let utc: Tz = "+00:00".parse().ok()?;
    string_to_datetime(&utc, text.trim())
        .ok()
        .map(|t| t.timestamp_millis())
}

/// Trino's duration: a number and a unit (`ms`, `s`, `m`, `h`, `d`).
/// Trino's data size (`'100MB'`, `'10kB'`, `'1.5GB'`; units of 1024) in
/// bytes.
fn data_size_bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text.find(|c: char| c.is_ascii_alphabetic())?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number.trim().parse().ok()?;
    let unit: f64 = match unit.trim() {
        "B" => 1.0,
        "kB" => 1024.0,
        "MB" => 1024.0 * 1024.0,
        "GB" => 1024.0 * 1024.0 * 1024.0,
        "TB" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    let bytes = number * unit;
    (bytes > 0.0 && bytes.is_finite() && bytes < u64::MAX as f64).then_some(bytes as u64)
}

fn duration_ms(text: &str) -> Option<i64> {
    let text = text.trim();
    let split = text.find(|c: char| c.is_ascii_alphabetic())?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number.trim().parse().ok()?;
    let unit_ms = match unit.trim() {
        "ms" => 1.0,
        "s" => 1000.0,
        "m" => 60_000.0,
        "h" => 3_600_000.0,
        "d" => 86_400_000.0,
        _ => return None,
    };
    (number >= 0.0 && number.is_finite()).then_some((number * unit_ms) as i64)
}

fn part_value(part: &ObjectNamePart) -> String {
    part.as_ident()
        .map(|i| i.value.clone())
        .unwrap_or_else(|| part.to_string())
}

struct Cursor {
    tokens: Vec<Token>,
    next: usize,
}

impl Cursor {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.next)
    }

    fn keyword(&mut self, keyword: Keyword) -> bool {
        let found = matches!(self.peek(), Some(Token::Word(w)) if w.keyword == keyword && w.quote_style.is_none());
        self.next += usize::from(found);
        found
    }

    fn rest(&self) -> String {
        self.tokens[self.next.min(self.tokens.len())..]
            .iter()
            .map(|t| t.to_string())
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn expect(&mut self, token: Token, what: &str) -> Result<()> {
        if self.peek() == Some(&token) {
            self.next += 1;
            Ok(())
        } else {
            Err(invalid_input(format!(
                "{what}: expected '{token}', found '{}'",
                self.rest()
            )))
        }
    }

    fn end(&self, what: &str) -> Result<()> {
        if self.next < self.tokens.len() {
            return Err(invalid_input(format!(
                "{what}: unexpected '{}' at the end of the statement",
                self.rest()
            )));
        }
        Ok(())
    }

    fn object_name(&mut self, what: &str) -> Result<ObjectName> {
        let mut parts = vec![];
        loop {
            let Some(Token::Word(w)) = self.peek() else {
                return Err(invalid_input(format!(
                    "{what}: expected a name, found '{}'",
                    self.rest()
                )));
            };
            parts.push(ObjectNamePart::Identifier(match w.quote_style {
                Some(q) => Ident::with_quote(q, w.value.clone()),
                None => Ident::new(w.value.clone()),
            }));
            self.next += 1;
            if self.peek() != Some(&Token::Period) {
                return Ok(ObjectName(parts));
            }
            self.next += 1;
        }
    }

    /// `( [arg [, arg]*] )`, each `[name =>] value`.
    fn args(&mut self, what: &str) -> Result<Vec<(Option<String>, ArgValue)>> {
        self.expect(Token::LParen, what)?;
        let mut args = vec![];
        if self.peek() == Some(&Token::RParen) {
            self.next += 1;
            return Ok(args);
        }
        loop {
            let named = match (self.peek(), self.tokens.get(self.next + 1)) {
                (Some(Token::Word(w)), Some(Token::RArrow)) => Some(w.value.clone()),
                _ => None,
            };
            if named.is_some() {
                self.next += 2;
            }
            let value = self.value(what)?;
            args.push((named, value));
            match self.peek() {
                Some(Token::Comma) => self.next += 1,
                Some(Token::RParen) => {
                    self.next += 1;
                    return Ok(args);
                }
                _ => {
                    return Err(invalid_input(format!(
                        "{what}: expected ',' or ')' after an argument, found '{}'",
                        self.rest()
                    )))
                }
            }
        }
    }

    fn value(&mut self, what: &str) -> Result<ArgValue> {
        let token = self.peek().cloned();
        let bad = |rest: String| {
            invalid_input(format!(
                "{what}: expected a literal argument value, found '{rest}'"
            ))
        };
        match token {
            Some(Token::SingleQuotedString(s)) => {
                self.next += 1;
                Ok(ArgValue::String(s))
            }
            Some(Token::Number(n, _)) => {
                self.next += 1;
                Ok(ArgValue::Number(n))
            }
            Some(Token::Minus) => match self.tokens.get(self.next + 1) {
                Some(Token::Number(n, _)) => {
                    let n = format!("-{n}");
                    self.next += 2;
                    Ok(ArgValue::Number(n))
                }
                _ => Err(bad(self.rest())),
            },
            Some(Token::LBracket) => {
                self.next += 1;
                let items = self.items(Token::RBracket, what)?;
                Ok(ArgValue::Array(items))
            }
            Some(Token::Word(w)) if w.quote_style.is_none() => {
                self.next += 1;
                match w.value.to_lowercase().as_str() {
                    "true" => Ok(ArgValue::Bool(true)),
                    "false" => Ok(ArgValue::Bool(false)),
                    "null" => Ok(ArgValue::Null),
                    "timestamp" => match self.peek().cloned() {
                        Some(Token::SingleQuotedString(s)) => {
                            self.next += 1;
                            Ok(ArgValue::Timestamp(s))
                        }
                        _ => Err(bad(format!("TIMESTAMP {}", self.rest()))),
                    },
                    "array" => {
                        let close = match self.peek() {
                            Some(Token::LBracket) => Token::RBracket,
                            Some(Token::LParen) => Token::RParen,
                            _ => return Err(bad(format!("ARRAY {}", self.rest()))),
                        };
                        self.next += 1;
                        Ok(ArgValue::Array(self.items(close, what)?))
                    }
                    "map" => {
                        self.expect(Token::LParen, what)?;
                        let items = self.items(Token::RParen, what)?;
                        if items.len() % 2 != 0 {
                            return Err(invalid_input(format!(
                                "{what}: map(...) takes keys and values in pairs"
                            )));
                        }
                        let mut pairs = vec![];
                        let mut items = items.into_iter();
                        while let (Some(k), Some(v)) = (items.next(), items.next()) {
                            pairs.push((k, v));
                        }
                        Ok(ArgValue::Map(pairs))
                    }
                    _ => {
                        self.next -= 1;
                        Err(bad(self.rest()))
                    }
                }
            }
            _ => Err(bad(self.rest())),
        }
    }

    /// Values up to `close` (consumed), comma separated.
    fn items(&mut self, close: Token, what: &str) -> Result<Vec<ArgValue>> {
        let mut items = vec![];
        if self.peek() == Some(&close) {
            self.next += 1;
            return Ok(items);
        }
        loop {
            items.push(self.value(what)?);
            match self.peek() {
                Some(Token::Comma) => self.next += 1,
                Some(t) if *t == close => {
                    self.next += 1;
                    return Ok(items);
                }
                _ => {
                    return Err(invalid_input(format!(
                        "{what}: expected ',' or '{close}', found '{}'",
                        self.rest()
                    )))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(sql: &str) -> ProcedureCall {
        parse_procedure_call(sql).unwrap().unwrap()
    }

    fn err(sql: &str) -> String {
        parse_procedure_call(sql).unwrap_err().to_string()
    }

    #[test]
    fn spark_calls_positional_and_named() {
        let c = call("CALL cat.system.rollback_to_snapshot('db.t', 42);");
        assert_eq!(c.table.to_string(), "db.t");
        assert_eq!(
            c.procedure,
            Procedure::RollbackToSnapshot { snapshot_id: 42 }
        );
        let c = call(
            "call system.expire_snapshots(table => 'db.t', older_than => TIMESTAMP '2024-01-02 00:00:00', \
             retain_last => 3, snapshot_ids => array(1, -2))",
        );
        assert_eq!(
            c.procedure,
            Procedure::ExpireSnapshots {
                older_than: Some(Cutoff::At(1_704_153_600_000)),
                retain_last: Some(3),
                snapshot_ids: vec![1, -2],
                max_concurrent_deletes: None,
            }
        );
        let c = call("CALL system.expire_snapshots('db.t', '2999-01-01T00:00:00+01:00')");
        assert!(matches!(
            c.procedure,
            Procedure::ExpireSnapshots { older_than: Some(Cutoff::At(ms)), .. } if ms == 32_472_140_400_000
        ));
        let c =
            call("CALL system.remove_orphan_files('db.t', dry_run => true, older_than => NULL)");
        assert_eq!(
            c.procedure,
            Procedure::RemoveOrphanFiles {
                older_than: None,
                location: None,
                dry_run: true,
                max_concurrent_deletes: None
            }
        );
        let c = call("CALL system.set_current_snapshot(table => '\"Db\".t', ref => 'b1')");
        assert_eq!(c.table.to_string(), "\"Db\".t");
        assert_eq!(parse_procedure_call("SELECT 1").unwrap(), None);
        assert_eq!(
            parse_procedure_call("ALTER TABLE t SET TBLPROPERTIES ('a' = 'b')").unwrap(),
            None
        );
    }

    #[test]
    fn trino_execute() {
        let c = call("ALTER TABLE db.t EXECUTE expire_snapshots(retention_threshold => '2.5h')");
        assert_eq!(c.name, "expire_snapshots");
        assert_eq!(
            c.procedure,
            Procedure::ExpireSnapshots {
                older_than: Some(Cutoff::Ago(9_000_000)),
                retain_last: None,
                snapshot_ids: vec![],
                max_concurrent_deletes: None
            }
        );
        let c = call("ALTER TABLE db.t EXECUTE remove_orphan_files");
        assert!(matches!(
            c.procedure,
            Procedure::RemoveOrphanFiles {
                older_than: Some(Cutoff::Ago(TRINO_DEFAULT_RETENTION_MS)),
                ..
            }
        ));
        let c = call("ALTER TABLE db.t EXECUTE optimize_manifests");
        assert_eq!(c.name, "rewrite_manifests");
        assert_eq!(c.table.to_string(), "db.t");
        assert_eq!(c.procedure, Procedure::RewriteManifests { spec_id: None });
        let e = err("ALTER TABLE db.t EXECUTE optimize_manifests(retention_threshold => '1d')");
        assert!(e.contains("unknown argument 'retention_threshold'"), "{e}");
        assert!(err("ALTER TABLE db.t EXECUTE vacuum").contains("unknown procedure 'vacuum'"));
        let c = call("ALTER TABLE db.t EXECUTE optimize");
        assert!(
            matches!(&c.procedure, Procedure::RewriteDataFiles(r)
                if r.options.file_size_threshold == Some(100 * 1024 * 1024)),
            "{c:?}"
        );
        let c = call("ALTER TABLE db.t EXECUTE optimize(file_size_threshold => '1.5kB')");
        assert!(
            matches!(&c.procedure, Procedure::RewriteDataFiles(r)
                if r.options.file_size_threshold == Some(1536)),
            "{c:?}"
        );
        let e = err("ALTER TABLE db.t EXECUTE optimize(file_size_threshold => '10 parsecs')");
        assert!(e.contains("file_size_threshold"), "{e}");
        assert!(
            err("ALTER TABLE db.t EXECUTE expire_snapshots(retention_threshold => '7 weeks')")
                .contains("retention_threshold")
        );
    }

    #[test]
    fn bad_calls_are_named() {
        let e = err("CALL system.vacuum('db.t')");
        assert!(
            e.contains("unknown procedure 'vacuum'") && e.contains("expire_snapshots"),
            "{e}"
        );
        assert!(err("CALL db.vacuum('db.t')").contains("'system' namespace"));
        let e = err("CALL system.expire_snapshots('db.t', retain => 1)");
        assert!(
            e.contains("unknown argument 'retain'") && e.contains("retain_last"),
            "{e}"
        );
        let e = err("CALL system.rollback_to_snapshot(table => 'db.t')");
        assert!(e.contains("missing required argument 'snapshot_id'"), "{e}");
        let e = err("CALL system.rollback_to_snapshot('db.t', 'x')");
        assert!(
            e.contains("'snapshot_id' = 'x'") && e.contains("integer"),
            "{e}"
        );
        let e = err("CALL system.expire_snapshots('db.t', older_than => 5)");
        assert!(e.contains("older_than") && e.contains("timestamp"), "{e}");
        let e = err("CALL system.expire_snapshots('db.t', older_than => 'yesterday')");
        assert!(e.contains("not a timestamp"), "{e}");
        let e = err("CALL system.expire_snapshots('db.t', retain_last => 0)");
        assert!(e.contains("at least 1"), "{e}");
        let e = err("CALL system.expire_snapshots(table => 'db.t', 'x')");
        assert!(e.contains("positional argument"), "{e}");
        let e = err("CALL system.expire_snapshots('db.t', table => 'db.u')");
        assert!(e.contains("given twice"), "{e}");
        let e = err("CALL system.set_current_snapshot('db.t')");
        assert!(e.contains("exactly one"), "{e}");
        let c = call("CALL system.cherrypick_snapshot('db.t', 5)");
        assert_eq!(
            c.procedure,
            Procedure::CherrypickSnapshot { snapshot_id: 5 }
        );
        let e = err("CALL system.rewrite_data_files('db.t', options => map('a', '1'))");
        assert!(
            e.contains("unknown option 'a'") && e.contains("min-input-files"),
            "{e}"
        );
        let e = err("CALL system.rewrite_data_files('db.t', strategy => 'zorder')");
        assert!(e.contains("expected 'binpack' or 'sort'"), "{e}");
        let e = err("CALL system.rewrite_data_files('db.t', sort_order => 'zorder(a, b)')");
        assert!(e.contains("z-order is not supported"), "{e}");
        let e = err(
            "CALL system.rewrite_data_files('db.t', strategy => 'binpack', sort_order => 'id')",
        );
        assert!(e.contains("needs strategy 'sort'"), "{e}");
        let e = err("CALL system.rewrite_data_files('db.t', sort_order => 'id DESC,')");
        assert!(e.contains("argument 'sort_order'"), "{e}");
        let e = err("CALL system.rewrite_data_files('db.t', sort_order => 'upper(v)')");
        assert!(e.contains("is not a column"), "{e}");
        let e =
            err("CALL system.rewrite_data_files('db.t', options => map('min-input-files', '0'))");
        assert!(e.contains("positive integer"), "{e}");
        let e = err(
            "CALL system.rewrite_data_files('db.t', options => map('delete-ratio-threshold', '1.5'))",
        );
        assert!(e.contains("(0, 1]"), "{e}");
        let c = call(
            "CALL system.rewrite_data_files(table => 'db.t', strategy => 'binpack', \
             options => map('target-file-size-bytes', '1048576', 'min-input-files', 2, \
             'delete-file-threshold', '0', 'delete-ratio-threshold', '0.5', \
             'min-file-size-bytes', '10', 'max-file-size-bytes', '2000000'))",
        );
        assert_eq!(
            c.procedure,
            Procedure::RewriteDataFiles(RewriteDataFiles {
                strategy: RewriteStrategy::BinPack,
                options: RewriteOptions {
                    target_file_size_bytes: Some(1_048_576),
                    min_file_size_bytes: Some(10),
                    max_file_size_bytes: Some(2_000_000),
                    min_input_files: Some(2),
                    rewrite_all: false,
                    delete_file_threshold: Some(0),
                    delete_ratio_threshold: Some(0.5),
                    file_size_threshold: None,
                },
                filter: None,
            })
        );
        let c = call("CALL system.rewrite_data_files(table => 'db.t', where => 'id > 5')");
        assert!(
            matches!(&c.procedure, Procedure::RewriteDataFiles(r) if r.filter.as_deref() == Some("id > 5")),
            "{c:?}"
        );
        let c = call(
            "CALL system.rewrite_data_files('db.t', sort_order => 'id DESC, \"V\" ASC NULLS LAST, w')",
        );
        let Procedure::RewriteDataFiles(RewriteDataFiles {
            strategy: RewriteStrategy::Sort {
                sort_order: Some(order),
            },
            ..
        }) = &c.procedure
        else {
            panic!("{c:?}")
        };
        let terms: Vec<(&str, bool, bool)> = order
            .iter()
            .map(|i| (i.term.column.as_str(), i.descending, i.nulls_first))
            .collect();
        assert_eq!(
            terms,
            vec![("id", true, false), ("V", false, false), ("w", false, true)]
        );
        let c = call("CALL system.rewrite_data_files('db.t', strategy => 'SORT')");
        assert!(
            matches!(&c.procedure, Procedure::RewriteDataFiles(r) if r.strategy == RewriteStrategy::Sort { sort_order: None }),
            "{c:?}"
        );
        let c = call("CALL system.rewrite_manifests('db.t')");
        assert_eq!(c.procedure, Procedure::RewriteManifests { spec_id: None });
        let c = call(
            "CALL system.rewrite_manifests(table => 'db.t', use_caching => false, spec_id => 1)",
        );
        assert_eq!(
            c.procedure,
            Procedure::RewriteManifests { spec_id: Some(1) }
        );
        let e = err("CALL system.rewrite_manifests('db.t', use_caching => 'yes')");
        assert!(e.contains("'use_caching'") && e.contains("boolean"), "{e}");
        let e = err("CALL system.rewrite_manifests('db.t', target => 1)");
        assert!(e.contains("unknown argument 'target'"), "{e}");
        let e = err("CALL system.rewrite_manifests('db.t', spec_id => 4294967296)");
        assert!(e.contains("spec_id"), "{e}");
        let e = err("CALL system.rollback_to_snapshot('db t', 1)");
        assert!(e.contains("not a table name"), "{e}");
        let e = err("CALL system.rollback_to_snapshot('db.t', 1) extra");
        assert!(e.contains("extra"), "{e}");
    }
}
