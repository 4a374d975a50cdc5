//! Binding a `MERGE INTO` statement: which table is the target, which
//! relation the source, and how each joined row is classified. The
//! classification (stage C of the merge) is expressed as one SQL query over
//! the target's row-id relation joined to the source, which DataFusion plans
//! into a hash join (keys from the ON equalities, the rest as join filter)
//! followed by projections:
//!
//! - `__icemerge_op`: 1 insert, 2 delete, 3 update (0 = no clause acts; such
//!   rows are filtered out), from the FIRST clause, in statement order, whose
//!   kind and condition hold;
//! - `_file`, `_pos`: the target row id (NULL for inserts);
//! - `__icemerge_key`: the target row's ON-key values (a struct), for error
//!   messages;
//! - `__icemerge_route`: the writer partition key (the data file; random for
//!   inserts);
//! - the new value of every target column (unassigned columns keep the
//!   target's value; inserts get NULL for columns they do not name).
//!
//! Those are the merge rows the writer reads: their column names and
//! operation codes are `icemerge_proto::merge_rows`.
//!
//! An insert-only merge joins the source LEFT ANTI the target instead: it
//! reads the target's ON columns alone, its rows carry no row id and no key.

use std::collections::HashSet;
use std::ops::ControlFlow;

use datafusion::error::{DataFusionError, Result};
use datafusion::sql::sqlparser::ast::{
    visit_expressions, AssignmentTarget, BinaryOperator, Expr, Ident, Merge, MergeAction,
    MergeClauseKind, MergeInsertKind, ObjectName, Statement, TableFactor,
};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
use icemerge_proto::error::{internal, invalid_input};
use icemerge_proto::merge_rows::{
    MergeOp, FILE_COLUMN, KEY_COLUMN, OP_COLUMN, POS_COLUMN, ROUTE_COLUMN,
};

/// Marker the target relation's presence is tested with.
const SOURCE_MARK: &str = "__icemerge_src";
const STAR_MARK: &str = "__icemerge_all";
/// The operation of a joined row no clause acts on (filtered out).
const NO_OP: i8 = 0;

/// Which statement a row-level change is. UPDATE and DELETE are planned as
/// the MERGE they are equivalent to (see `crate::update_delete`), through
/// the same stages, writers and commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowLevelKind {
    Merge,
    Update,
    Delete,
}

impl RowLevelKind {
    /// How errors name the statement: `MERGE INTO`, `UPDATE`, `DELETE FROM`.
    pub fn statement(self) -> &'static str {
        match self {
            RowLevelKind::Merge => "MERGE INTO",
            RowLevelKind::Update => "UPDATE",
            RowLevelKind::Delete => "DELETE FROM",
        }
    }

    /// The statement's keyword in lower case (job names, EXPLAIN).
    pub fn keyword(self) -> &'static str {
        match self {
            RowLevelKind::Merge => "merge",
            RowLevelKind::Update => "update",
            RowLevelKind::Delete => "delete",
        }
    }

    /// The table property choosing the statement's write mode.
    pub fn mode_property(self) -> &'static str {
        match self {
            RowLevelKind::Merge => crate::write_mode::MERGE_MODE,
            RowLevelKind::Update => crate::write_mode::UPDATE_MODE,
            RowLevelKind::Delete => crate::write_mode::DELETE_MODE,
        }
    }
}

/// A row-level statement ready to bind: the MERGE it is, and for UPDATE and
/// DELETE their WHERE (which filters, and so prunes, the target scan).
#[derive(Debug, Clone)]
pub struct RowLevelStatement {
    pub kind: RowLevelKind,
    pub merge: Merge,
    pub target_filter: Option<Expr>,
    /// `MERGE WITH SCHEMA EVOLUTION INTO`: source columns the target lacks
    /// are added to it (and target columns widened to the source's type
    /// where Iceberg allows it) in the merge's own commit, so that
    /// `UPDATE SET *` and `INSERT *` carry them.
    pub schema_evolution: bool,
}

/// A MERGE statement, bound far enough to plan it.
#[derive(Debug, Clone)]
pub struct BoundMerge {
    /// The statement it came from (MERGE, UPDATE or DELETE).
    pub kind: RowLevelKind,
    /// UPDATE's and DELETE's WHERE: only target rows satisfying it are read
    /// into the classification (no source is joined).
    pub target_filter: Option<Expr>,
    /// Target table name parts as written.
    pub target: Vec<String>,
    /// The name the statement refers to the target by.
    pub target_alias: String,
    /// Kinds of the clauses, in order (for EXPLAIN and validation).
    pub clauses: Vec<ClauseSummary>,
    /// Join type implied by the clauses: INNER, RIGHT (source-preserving),
    /// LEFT (target-preserving) or FULL.
    pub join_type: &'static str,
    /// True when only NOT MATCHED ... INSERT clauses exist.
    pub insert_only: bool,
    /// The original statement.
    pub merge: Merge,
}

impl BoundMerge {
    /// A WHEN NOT MATCHED BY SOURCE clause acts on the target rows no
    /// source row matches: every target row must be read and joined
    /// (nothing pruned, none left out before the join).
    pub fn needs_every_target_row(&self) -> bool {
        self.merge
            .clauses
            .iter()
            .any(|c| c.clause_kind == MergeClauseKind::NotMatchedBySource)
    }

    /// Whether the statement can insert rows: a MERGE with a NOT MATCHED
    /// clause.
    pub fn inserts(&self) -> bool {
        self.merge
            .clauses
            .iter()
            .any(|c| inserts_rows(&c.clause_kind))
    }

    /// The MERGE as it runs when no target row can match (the target scan
    /// reads no file, every one pruned by the source's keys): its NOT
    /// MATCHED clauses alone, an insert-only merge. None for a MERGE that
    /// is insert-only already, has no NOT MATCHED clause, or acts on the
    /// target rows no source row matches (NOT MATCHED BY SOURCE), and for
    /// UPDATE and DELETE.
    pub fn inserts_alone(&self) -> Option<BoundMerge> {
        if self.kind != RowLevelKind::Merge || self.insert_only || self.needs_every_target_row() {
            return None;
        }
        let mut merge = self.merge.clone();
        merge.clauses.retain(|c| inserts_rows(&c.clause_kind));
        if merge.clauses.is_empty() {
            return None;
        }
        Some(BoundMerge {
            join_type: "RIGHT",
            insert_only: true,
            merge,
            ..self.clone()
        })
    }
}

/// Whether a clause of `kind` inserts rows (WHEN NOT MATCHED [BY TARGET]).
fn inserts_rows(kind: &MergeClauseKind) -> bool {
    matches!(
        kind,
        MergeClauseKind::NotMatched | MergeClauseKind::NotMatchedByTarget
    )
}

/// One WHEN clause, as EXPLAIN shows it.
#[derive(Debug, Clone)]
pub struct ClauseSummary {
    pub kind: &'static str,
    pub action: &'static str,
}

/// How an `EXPLAIN ... MERGE` wants its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExplainMerge {
    /// `EXPLAIN ANALYZE`: run the merge, then show the stage graph with
    /// the figures of the run.
    pub analyze: bool,
    pub format: ExplainFormat,
}

/// The rendering of an EXPLAIN of a MERGE (`(FORMAT ...)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExplainFormat {
    /// The stage graph as text (the default, `FORMAT TEXT`).
    Text,
    /// Graphviz DOT (`FORMAT GRAPHVIZ` or `FORMAT DOT`).
    Graphviz,
    /// One JSON document (`FORMAT JSON`).
    Json,
    /// An SVG picture (`FORMAT SVG`).
    Svg,
}

impl ExplainFormat {
    fn parse(name: &str) -> Result<Self> {
        match name {
            "TEXT" => Ok(Self::Text),
            "GRAPHVIZ" | "DOT" => Ok(Self::Graphviz),
            "JSON" => Ok(Self::Json),
            "SVG" => Ok(Self::Svg),
            other => Err(invalid_input(format!(
                "EXPLAIN: unknown FORMAT '{other}'; expected TEXT, GRAPHVIZ, JSON or SVG"
            ))),
        }
    }
}

/// Splits `EXPLAIN [ANALYZE] [(FORMAT TEXT|GRAPHVIZ|JSON|SVG)] MERGE ...`
/// (or `UPDATE ...`, `DELETE ...`) into the mode and the statement's text;
/// `None` when `sql` is not an EXPLAIN of one of those. An option list that is not one `FORMAT` of those is an
/// error naming it.
pub fn strip_explain_merge(sql: &str) -> Result<Option<(ExplainMerge, String)>> {
    Ok(split_explain(sql)?
        .filter(|e| e.row_level)
        .map(|e| (e.mode, e.statement)))
}

/// Splits `EXPLAIN [ANALYZE] (FORMAT ...) <statement>` of any other
/// statement (a query, an INSERT) into the mode and the statement's text;
/// `None` without an option list (`EXPLAIN SELECT ...` stays DataFusion's
/// EXPLAIN) and for MERGE, UPDATE and DELETE (`strip_explain_merge`).
pub fn strip_explain_with_format(sql: &str) -> Result<Option<(ExplainMerge, String)>> {
    Ok(split_explain(sql)?
        .filter(|e| !e.row_level && e.options)
        .map(|e| (e.mode, e.statement)))
}

/// An EXPLAIN split into its parts.
struct SplitExplain {
    mode: ExplainMerge,
    /// An option list `( ... )` was given.
    options: bool,
    /// The statement is a MERGE, UPDATE or DELETE.
    row_level: bool,
    statement: String,
}

fn split_explain(sql: &str) -> Result<Option<SplitExplain>> {
    let Ok(tokens) = Tokenizer::new(&GenericDialect {}, sql).tokenize() else {
        return Ok(None);
    };
    let significant: Vec<usize> = (0..tokens.len())
        .filter(|&i| !matches!(tokens[i], Token::Whitespace(_)))
        .collect();
    let word = |k: usize| match significant.get(k).map(|&i| &tokens[i]) {
        Some(Token::Word(w)) => w.value.to_uppercase(),
        Some(Token::LParen) => "(".into(),
        Some(Token::RParen) => ")".into(),
        Some(other) => other.to_string(),
        None => String::new(),
    };
    if word(0) != "EXPLAIN" {
        return Ok(None);
    }
    let mut k = 1;
    let mut mode = ExplainMerge {
        analyze: false,
        format: ExplainFormat::Text,
    };
    if word(k) == "ANALYZE" {
        mode.analyze = true;
        k += 1;
    }
    let mut options = None;
    if word(k) == "(" {
        let close = (k..significant.len()).find(|&i| word(i) == ")");
        let Some(close) = close else {
            return Ok(None);
        };
        options = Some((k + 1..close).map(word).collect::<Vec<_>>());
        k = close + 1;
    }
    // `EXPLAIN (SELECT ...) ...` explains a parenthesized query: no options.
    if options
        .as_ref()
        .and_then(|o| o.first())
        .is_some_and(|first| matches!(first.as_str(), "SELECT" | "WITH" | "VALUES" | "("))
    {
        return Ok(None);
    }
    let row_level = matches!(word(k).as_str(), "MERGE" | "UPDATE" | "DELETE");
    if !row_level && options.is_none() {
        return Ok(None);
    }
    let Some(&start) = significant.get(k) else {
        return Ok(None);
    };
    if let Some(options) = &options {
        match options.as_slice() {
            [format, name] if format == "FORMAT" => mode.format = ExplainFormat::parse(name)?,
            _ => return Err(unsupported_explain_option(options)),
        }
    }
    Ok(Some(SplitExplain {
        mode,
        options: options.is_some(),
        row_level,
        statement: tokens[start..].iter().map(|t| t.to_string()).collect(),
    }))
}

/// The error for an EXPLAIN option list that is not one `FORMAT`.
fn unsupported_explain_option(options: &[String]) -> DataFusionError {
    invalid_input(format!(
        "EXPLAIN: unsupported option ({}); expected (FORMAT TEXT|GRAPHVIZ|JSON|SVG)",
        options.join(" ")
    ))
}

/// Parses a `MERGE`, `UPDATE` or `DELETE` statement (MERGE accepting
/// `UPDATE SET *` and `INSERT *`); `None` for any other statement.
pub fn parse_row_level(sql: &str) -> Result<Option<RowLevelStatement>> {
    if let Some(statement) = crate::update_delete::parse_update_or_delete(sql)? {
        return Ok(Some(statement));
    }
    let (schema_evolution, sql) = strip_schema_evolution(sql)?;
    Ok(parse_merge(&sql)?.map(|merge| RowLevelStatement {
        kind: RowLevelKind::Merge,
        merge,
        target_filter: None,
        schema_evolution,
    }))
}

/// `MERGE WITH SCHEMA EVOLUTION INTO ...` (Spark's syntax) → whether the
/// clause was there, and the statement without it.
fn strip_schema_evolution(sql: &str) -> Result<(bool, String)> {
    let tokens = Tokenizer::new(&GenericDialect {}, sql)
        .tokenize()
        .map_err(|e| invalid_input(format!("SQL syntax error: {e}")))?;
    let significant: Vec<usize> = (0..tokens.len())
        .filter(|&i| !matches!(tokens[i], Token::Whitespace(_)))
        .take(5)
        .collect();
    let words = ["MERGE", "WITH", "SCHEMA", "EVOLUTION", "INTO"];
    let matches = significant.len() == words.len()
        && significant.iter().zip(words).all(
            |(&i, w)| matches!(&tokens[i], Token::Word(word) if word.quote_style.is_none() && word.value.eq_ignore_ascii_case(w)),
        );
    if !matches {
        return Ok((false, sql.to_string()));
    }
    let (from, to) = (significant[1], significant[4]);
    let kept: String = tokens
        .iter()
        .enumerate()
        .filter(|(i, _)| *i < from || *i >= to)
        .map(|(_, t)| t.to_string())
        .collect();
    Ok((true, kept))
}

/// Whether some clause of `merge` is `UPDATE SET *` or `INSERT *` (the
/// clauses that carry every column, and so the columns schema evolution
/// adds).
pub fn carries_every_column(merge: &Merge) -> bool {
    merge.clauses.iter().any(|clause| match &clause.action {
        MergeAction::Update(update) => update.assignments.iter().any(|a| {
            matches!(&a.target, AssignmentTarget::ColumnName(name)
                if name_parts(name).last().is_some_and(|c| c == STAR_MARK))
        }),
        MergeAction::Insert(insert) => matches!(insert.kind, MergeInsertKind::Row),
        MergeAction::Delete { .. } => false,
    })
}

/// Parses a `MERGE` statement (accepting `UPDATE SET *` and `INSERT *`).
pub(crate) fn parse_merge(sql: &str) -> Result<Option<Merge>> {
    let rewritten = rewrite_stars(sql)?;
    let Some(first) = first_keyword(&rewritten) else {
        return Ok(None);
    };
    if !first.eq_ignore_ascii_case("merge") {
        return Ok(None);
    }
    let statements = Parser::parse_sql(&GenericDialect {}, &rewritten)
        .map_err(|e| invalid_input(format!("SQL syntax error in MERGE: {e}")))?;
    match statements.into_iter().next() {
        Some(Statement::Merge(merge)) => Ok(Some(merge)),
        _ => Ok(None),
    }
}

pub(crate) fn first_keyword(sql: &str) -> Option<String> {
    let tokens = Tokenizer::new(&GenericDialect {}, sql).tokenize().ok()?;
    tokens.into_iter().find_map(|t| match t {
        Token::Word(w) => Some(w.value),
        Token::Whitespace(_) => None,
        _ => Some(String::new()),
    })
}

/// `UPDATE SET *` → `UPDATE SET __icemerge_all = __icemerge_all`, `INSERT *` → `INSERT ROW`.
fn rewrite_stars(sql: &str) -> Result<String> {
    let tokens = Tokenizer::new(&GenericDialect {}, sql)
        .tokenize()
        .map_err(|e| invalid_input(format!("SQL syntax error: {e}")))?;
    let significant: Vec<usize> = (0..tokens.len())
        .filter(|&i| !matches!(tokens[i], Token::Whitespace(_)))
        .collect();
    let is_word = |i: usize, w: &str| matches!(&tokens[i], Token::Word(word) if word.value.eq_ignore_ascii_case(w));
    let mut replace: Vec<(usize, String)> = vec![];
    for (k, &i) in significant.iter().enumerate() {
        if !matches!(tokens[i], Token::Mul) || k == 0 {
            continue;
        }
        let prev = significant[k - 1];
        if is_word(prev, "SET") && k >= 2 && is_word(significant[k - 2], "UPDATE") {
            replace.push((i, format!("{STAR_MARK} = {STAR_MARK}")));
        } else if is_word(prev, "INSERT") {
            replace.push((i, "ROW".to_string()));
        }
    }
    if replace.is_empty() {
        return Ok(sql.to_string());
    }
    let mut out = String::new();
    for (i, t) in tokens.iter().enumerate() {
        match replace.iter().find(|(j, _)| *j == i) {
            Some((_, text)) => out.push_str(text),
            None => out.push_str(&t.to_string()),
        }
    }
    Ok(out)
}

pub fn ident_value(i: &Ident) -> String {
    if i.quote_style.is_some() {
        i.value.clone()
    } else {
        i.value.to_lowercase()
    }
}

fn name_parts(name: &ObjectName) -> Vec<String> {
    name.0
        .iter()
        .map(|p| {
            p.as_ident()
                .map(ident_value)
                .unwrap_or_else(|| p.to_string())
        })
        .collect()
}

/// Binds the statement's shape (not yet its expressions).
pub fn bind_merge(statement: RowLevelStatement) -> Result<BoundMerge> {
    let RowLevelStatement {
        kind,
        merge,
        target_filter,
        schema_evolution: _,
    } = statement;
    let (target, target_alias) = match &merge.table {
        TableFactor::Table {
            name,
            alias,
            args: None,
            ..
        } => {
            let parts = name_parts(name);
            let alias = alias
                .as_ref()
                .map(|a| ident_value(&a.name))
                .unwrap_or_else(|| parts.last().cloned().unwrap_or_default());
            (parts, alias)
        }
        other => {
            return Err(invalid_input(format!(
                "MERGE INTO: the target must be a table, found '{other}'"
            )))
        }
    };
    if merge.clauses.is_empty() {
        return Err(invalid_input("MERGE needs at least one WHEN clause"));
    }
    let mut clauses = vec![];
    let (mut matched, mut not_matched, mut by_source) = (false, false, false);
    for clause in &merge.clauses {
        let kind = match clause.clause_kind {
            MergeClauseKind::Matched => {
                matched = true;
                "WHEN MATCHED"
            }
            MergeClauseKind::NotMatched | MergeClauseKind::NotMatchedByTarget => {
                not_matched = true;
                "WHEN NOT MATCHED"
            }
            MergeClauseKind::NotMatchedBySource => {
                by_source = true;
                "WHEN NOT MATCHED BY SOURCE"
            }
        };
        let action = match &clause.action {
            MergeAction::Insert(_) => "INSERT",
            MergeAction::Update(u) => {
                if u.update_predicate.is_some() || u.delete_predicate.is_some() {
                    return Err(invalid_input("MERGE: UPDATE ... WHERE / DELETE WHERE is not supported; use WHEN MATCHED AND <condition>"));
                }
                "UPDATE"
            }
            MergeAction::Delete { .. } => "DELETE",
        };
        if let MergeAction::Insert(insert) = &clause.action {
            if insert.insert_predicate.is_some() {
                return Err(invalid_input("MERGE: INSERT ... WHERE is not supported; use WHEN NOT MATCHED AND <condition>"));
            }
        }
        clauses.push(ClauseSummary { kind, action });
    }
    let join_type = match (not_matched, by_source) {
        (false, false) => "INNER",
        (true, false) => "RIGHT",
        (false, true) => "LEFT",
        (true, true) => "FULL",
    };
    Ok(BoundMerge {
        kind,
        target_filter,
        target,
        target_alias,
        clauses,
        join_type,
        insert_only: !matched && !by_source,
        merge,
    })
}

/// The source relation's name in the statement and its SQL.
pub fn source_sql(merge: &Merge) -> Result<(String, String)> {
    let source = &merge.source;
    let alias = match source {
        TableFactor::Table { name, alias, args, .. } => match (alias, args) {
            (Some(a), _) => ident_value(&a.name),
            (None, None) => name_parts(name).last().cloned().unwrap_or_default(),
            (None, Some(_)) => {
                return Err(invalid_input(format!(
                    "MERGE USING {source}: a table function source needs an alias, e.g. USING {source} AS s"
                )))
            }
        },
        TableFactor::Derived { alias: Some(a), .. } => ident_value(&a.name),
        TableFactor::Derived { alias: None, .. } => {
            return Err(invalid_input("MERGE USING (subquery): the subquery needs an alias, e.g. USING (SELECT ...) AS s"))
        }
        other => return Err(invalid_input(format!("MERGE USING: unsupported source '{other}'"))),
    };
    Ok((alias, source.to_string()))
}

fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// One WHEN clause as a CASE branch: when it acts, its operation, and the
/// new value of every target column (and which of them the clause assigns).
struct Branch {
    clause: String,
    condition: String,
    op: MergeOp,
    values: Vec<String>,
    assigned: Vec<bool>,
}

/// Binds every clause to a CASE branch over the target and source aliases.
fn build_branches(bound: &BoundMerge, columns: &[String]) -> Result<Branches> {
    let merge = &bound.merge;
    let t = quote(&bound.target_alias);
    let (source_alias, source) = source_sql(merge)?;
    let s = quote(&source_alias);
    if source_alias == bound.target_alias {
        return Err(invalid_input(format!(
            "MERGE: target and source are both named '{source_alias}'; give one an alias"
        )));
    }
    let matched = format!("({t}.{FILE_COLUMN} IS NOT NULL AND {s}.{SOURCE_MARK} IS NOT NULL)");
    // An insert-only merge keeps just the source rows no target row
    // matches (an anti join, `classify_sql`): every row it sees is one.
    let not_matched = if bound.insert_only {
        "TRUE".to_string()
    } else {
        format!("({t}.{FILE_COLUMN} IS NULL)")
    };
    let by_source = format!("({s}.{SOURCE_MARK} IS NULL)");

    let column_set: HashSet<&str> = columns.iter().map(String::as_str).collect();
    let mut branches: Vec<Branch> = vec![];
    for (index, clause) in merge.clauses.iter().enumerate() {
        let guard = match clause.clause_kind {
            // UPDATE and DELETE join no source: every row read acts.
            _ if bound.kind != RowLevelKind::Merge => "TRUE",
            MergeClauseKind::Matched => matched.as_str(),
            MergeClauseKind::NotMatched | MergeClauseKind::NotMatchedByTarget => {
                not_matched.as_str()
            }
            MergeClauseKind::NotMatchedBySource => by_source.as_str(),
        };
        let condition = match &clause.predicate {
            Some(p) => format!("{guard} AND ({p})"),
            None => guard.to_string(),
        };
        let clause_name = match bound.kind {
            RowLevelKind::Merge => {
                format!("MERGE clause {} (WHEN {})", index + 1, clause.clause_kind)
            }
            other => other.keyword().to_uppercase(),
        };
        if matches!(
            clause.clause_kind,
            MergeClauseKind::NotMatched | MergeClauseKind::NotMatchedByTarget
        ) {
            refuse_target_references(&clause_name, clause, &bound.target_alias)?;
        }
        let set = match bound.kind {
            RowLevelKind::Merge => "UPDATE SET",
            _ => "SET",
        };
        let keep: Vec<String> = columns
            .iter()
            .map(|c| format!("{t}.{}", quote(c)))
            .collect();
        let (op, values) = match &clause.action {
            // A deleted row needs only its row id: no target column is
            // read for it (so a delete-only merge scans just the ON keys).
            MergeAction::Delete { .. } => {
                (MergeOp::Delete, vec!["NULL".to_string(); columns.len()])
            }
            MergeAction::Update(update) => {
                let mut values = keep;
                let mut assigned = HashSet::new();
                for assignment in &update.assignments {
                    let AssignmentTarget::ColumnName(name) = &assignment.target else {
                        return Err(invalid_input(format!(
                            "{clause_name}: tuple assignments are not supported"
                        )));
                    };
                    let column = name_parts(name).last().cloned().unwrap_or_default();
                    if column == STAR_MARK {
                        if matches!(clause.clause_kind, MergeClauseKind::NotMatchedBySource) {
                            return Err(invalid_input(format!(
                                "{clause_name}: UPDATE SET * needs a source row"
                            )));
                        }
                        for (i, c) in columns.iter().enumerate() {
                            values[i] = format!("{s}.{}", quote(c));
                        }
                        continue;
                    }
                    let Some(i) = columns.iter().position(|c| *c == column) else {
                        return Err(invalid_input(format!(
                            "{clause_name}: {set} references unknown column '{column}' of the target"
                        )));
                    };
                    if !assigned.insert(column.clone()) {
                        return Err(invalid_input(format!(
                            "{clause_name}: column '{column}' is assigned more than once"
                        )));
                    }
                    values[i] = format!("({})", assignment.value);
                }
                (MergeOp::Update, values)
            }
            MergeAction::Insert(insert) => {
                let mut values: Vec<String> = columns.iter().map(|_| "NULL".to_string()).collect();
                match &insert.kind {
                    MergeInsertKind::Row => {
                        for (i, c) in columns.iter().enumerate() {
                            values[i] = format!("{s}.{}", quote(c));
                        }
                    }
                    MergeInsertKind::Values(v) => {
                        let [row] = v.rows.as_slice() else {
                            return Err(invalid_input(format!(
                                "{clause_name}: INSERT VALUES takes exactly one row"
                            )));
                        };
                        let names: Vec<String> = if insert.columns.is_empty() {
                            columns.to_vec()
                        } else {
                            insert
                                .columns
                                .iter()
                                .map(|n| name_parts(n).last().cloned().unwrap_or_default())
                                .collect()
                        };
                        if names.len() != row.len() {
                            return Err(invalid_input(format!(
                                "{clause_name}: INSERT names {} column(s) but gives {} value(s)",
                                names.len(),
                                row.len()
                            )));
                        }
                        let mut seen = HashSet::new();
                        for (name, value) in names.iter().zip(row) {
                            if !column_set.contains(name.as_str()) {
                                return Err(invalid_input(format!(
                                    "{clause_name}: INSERT references unknown column '{name}' of the target"
                                )));
                            }
                            if !seen.insert(name.clone()) {
                                return Err(invalid_input(format!(
                                    "{clause_name}: INSERT names column '{name}' more than once"
                                )));
                            }
                            let i = columns
                                .iter()
                                .position(|c| c == name)
                                .expect("known column");
                            values[i] = format!("({value})");
                        }
                    }
                }
                (MergeOp::Insert, values)
            }
        };
        let defaults: Vec<String> = match op {
            MergeOp::Insert => columns.iter().map(|_| "NULL".to_string()).collect(),
            _ => columns
                .iter()
                .map(|c| format!("{t}.{}", quote(c)))
                .collect(),
        };
        let assigned = values.iter().zip(&defaults).map(|(v, d)| v != d).collect();
        branches.push(Branch {
            clause: clause_name,
            condition,
            op,
            values,
            assigned,
        });
    }
    Ok(Branches {
        t,
        s,
        source,
        branches,
    })
}

/// A WHEN NOT MATCHED clause acts on a source row that no target row
/// matches: its condition and its INSERT values see the source alone, as
/// in Spark and Trino. A `t.col` of the target there is refused.
fn refuse_target_references(
    clause_name: &str,
    clause: &datafusion::sql::sqlparser::ast::MergeClause,
    target_alias: &str,
) -> Result<()> {
    let mut exprs: Vec<&Expr> = clause.predicate.iter().collect();
    if let MergeAction::Insert(insert) = &clause.action {
        if let MergeInsertKind::Values(values) = &insert.kind {
            exprs.extend(values.rows.iter().flatten());
        }
    }
    for expr in exprs {
        let found = visit_expressions(expr, |e: &Expr| match e {
            Expr::CompoundIdentifier(parts)
                if parts.len() >= 2 && ident_value(&parts[0]) == target_alias =>
            {
                ControlFlow::Break(e.to_string())
            }
            _ => ControlFlow::Continue(()),
        });
        if let ControlFlow::Break(reference) = found {
            return Err(invalid_input(format!(
                "{clause_name}: '{reference}' refers to the target, which a WHEN NOT MATCHED \
                 clause has no row of; its condition and INSERT values may use source columns only"
            )));
        }
    }
    Ok(())
}

/// The clauses as CASE branches, with the relation names they use.
struct Branches {
    /// Quoted target alias.
    t: String,
    /// Quoted source alias.
    s: String,
    /// The source relation's SQL.
    source: String,
    branches: Vec<Branch>,
}

/// A query whose columns are the values the clauses assign, one column per
/// assignment, and what each column is. Planning it gives the types of the
/// assigned values, to check against the target's column types before
/// anything runs.
pub struct AssignmentProbe {
    pub sql: String,
    /// Per probe column: (clause description, target column).
    pub assignments: Vec<(String, String)>,
}

/// The assignment probe of `bound`; `None` when no clause assigns a value.
pub fn assignment_probe(
    bound: &BoundMerge,
    target_relation: &str,
    columns: &[String],
) -> Result<Option<AssignmentProbe>> {
    let Branches {
        t,
        s,
        source,
        branches,
    } = build_branches(bound, columns)?;
    let mut select = vec![];
    let mut what = vec![];
    for branch in &branches {
        for (i, column) in columns.iter().enumerate() {
            if branch.assigned[i] {
                select.push(format!(
                    "{} AS __icemerge_probe_{}",
                    branch.values[i],
                    select.len()
                ));
                what.push((branch.clause.clone(), column.clone()));
            }
        }
    }
    if select.is_empty() {
        return Ok(None);
    }
    Ok(Some(AssignmentProbe {
        sql: format!(
            "SELECT {} FROM {target_relation} AS {t} CROSS JOIN (SELECT *, TRUE AS {SOURCE_MARK} FROM {source}) AS {s}",
            select.join(", ")
        ),
        assignments: what,
    }))
}

/// The classification query (see the module doc). `target_relation` is the
/// SQL name of the target's row-id relation (table columns + `_file`, `_pos`).
///
/// Inserted rows have no data file; they spread over `$1` routes (a
/// parameter, bound once the source's size is known) by a hash of their
/// values (`icemerge_insert_route`, registered by the session): few
/// inserted rows go to few writers, and so make few files, and a re-run
/// task routes every row as its first run did.
pub fn classify_sql(
    bound: &BoundMerge,
    target_relation: &str,
    columns: &[String],
    prefilter: TargetPrefilter,
) -> Result<String> {
    let merge = &bound.merge;
    let Branches {
        t,
        s,
        source,
        branches,
    } = build_branches(bound, columns)?;

    let case = |pick: &dyn Fn(&Branch) -> String, otherwise: &str| {
        let mut sql = String::from("CASE");
        for branch in &branches {
            sql.push_str(&format!(" WHEN {} THEN {}", branch.condition, pick(branch)));
        }
        sql.push_str(&format!(" ELSE {otherwise} END"));
        sql
    };
    // An insert-only merge reads no target row: its rows have no row id,
    // and no key is reported (a duplicate match needs a matched clause).
    let insert_only = bound.kind == RowLevelKind::Merge && bound.insert_only;
    let (file, pos, key) = if insert_only {
        (
            "CAST(NULL AS VARCHAR)".to_string(),
            "CAST(NULL AS BIGINT)".to_string(),
            "CAST(NULL AS VARCHAR)".to_string(),
        )
    } else {
        (
            format!("{t}.{FILE_COLUMN}"),
            format!("{t}.{POS_COLUMN}"),
            key_expr(&merge.on, &bound.target_alias, columns),
        )
    };
    let mut select = vec![
        format!(
            "CAST({} AS TINYINT) AS {OP_COLUMN}",
            case(&|b| (b.op as i8).to_string(), &NO_OP.to_string())
        ),
        format!("{file} AS {FILE_COLUMN}"),
        format!("{pos} AS {POS_COLUMN}"),
        format!("{key} AS {KEY_COLUMN}"),
    ];
    for (i, c) in columns.iter().enumerate() {
        select.push(format!(
            "{} AS {}",
            case(&|b| b.values[i].clone(), "NULL"),
            quote(c)
        ));
    }
    // The route spreads inserts (no data file) over the writers: a hash of
    // the inserted values, the same on every run of a task.
    let values: Vec<String> = columns.iter().map(|c| quote(c)).collect();
    let spread = format!(
        "icemerge_insert_route(CAST($1 AS DOUBLE), {})",
        values.join(", ")
    );
    let outer: Vec<String> = [
        OP_COLUMN.to_string(),
        FILE_COLUMN.to_string(),
        POS_COLUMN.to_string(),
        KEY_COLUMN.to_string(),
        if insert_only {
            format!("{spread} AS {ROUTE_COLUMN}")
        } else {
            format!("COALESCE({FILE_COLUMN}, {spread}) AS {ROUTE_COLUMN}")
        },
    ]
    .into_iter()
    .chain(columns.iter().map(|c| quote(c)))
    .collect();
    // The target rows the join reads: every row the scan reads, or only
    // those some source row matches (a semi join that builds on the
    // source's ON columns alone).
    let target = match prefilter {
        TargetPrefilter::None => target_relation.to_string(),
        TargetPrefilter::MatchedRows if bound.needs_every_target_row() => {
            return Err(internal(
                "MERGE: the target cannot be narrowed to the rows the source matches: \
                 a NOT MATCHED BY SOURCE clause needs every target row",
            ))
        }
        TargetPrefilter::MatchedRows => format!(
            "(SELECT * FROM {target_relation} AS {t} WHERE EXISTS (SELECT 1 FROM {source} WHERE {}))",
            merge.on
        ),
    };
    let rows = if insert_only {
        // The source rows no target row matches: the target side of the
        // join carries the ON columns only, no row ids.
        format!(
            "(SELECT *, TRUE AS {SOURCE_MARK} FROM {source}) AS {s} LEFT ANTI JOIN {target} AS {t} ON {}",
            merge.on
        )
    } else if bound.kind == RowLevelKind::Merge {
        // The source comes first: a hash join builds on its first input
        // unless statistics show that one is the larger, and a MERGE's
        // source is usually far smaller than its target.
        let source_first = match bound.join_type {
            "RIGHT" => "LEFT",
            "LEFT" => "RIGHT",
            same => same,
        };
        format!(
            "(SELECT *, TRUE AS {SOURCE_MARK} FROM {source}) AS {s} {source_first} JOIN {target} AS {t} ON {}",
            merge.on
        )
    } else {
        // UPDATE / DELETE: the target rows their WHERE selects, no join.
        let filter = bound
            .target_filter
            .as_ref()
            .map(|f| format!(" WHERE {f}"))
            .unwrap_or_default();
        format!("(SELECT * FROM {target_relation} AS {t}{filter}) AS {t}")
    };
    Ok(format!(
        "SELECT {} FROM (SELECT {} FROM {rows}) AS __icemerge_rows WHERE {OP_COLUMN} <> {NO_OP}",
        outer.join(", "),
        select.join(", "),
    ))
}

/// Which target rows the classification query joins to the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetPrefilter {
    /// Every row the target scan reads.
    None,
    /// Only those some source row matches on ON (an EXISTS over the source,
    /// which reads the source a second time: for a deterministic source);
    /// refused when a NOT MATCHED BY SOURCE clause needs every target row.
    MatchedRows,
}

/// `named_struct('id', t.id, ...)` over the target columns compared by
/// equality in ON: the key values as they are, formatted only when an
/// error names a row (`icemerge_executor::merge_writer::merge_rows`).
fn key_expr(on: &Expr, target_alias: &str, columns: &[String]) -> String {
    let mut keys = vec![];
    collect_target_keys(on, target_alias, columns, &mut keys);
    keys.dedup();
    if keys.is_empty() {
        return "CAST(NULL AS VARCHAR)".to_string();
    }
    let parts: Vec<String> = keys
        .iter()
        .map(|k| {
            format!(
                "'{}', {}.{}",
                k.replace('\'', "''"),
                quote(target_alias),
                quote(k)
            )
        })
        .collect();
    format!("named_struct({})", parts.join(", "))
}

fn collect_target_keys(expr: &Expr, target_alias: &str, columns: &[String], out: &mut Vec<String>) {
    for conjunct in conjuncts(expr) {
        if let Expr::BinaryOp {
            left,
            op: BinaryOperator::Eq,
            right,
        } = conjunct
        {
            for side in [left, right] {
                out.extend(target_column(side, target_alias, columns));
            }
        }
    }
}

/// The top-level conjuncts of a condition (through AND and parentheses).
pub(crate) fn conjuncts(expr: &Expr) -> Vec<&Expr> {
    match expr {
        Expr::BinaryOp {
            left,
            op: BinaryOperator::And,
            right,
        } => {
            let mut out = conjuncts(left);
            out.extend(conjuncts(right));
            out
        }
        Expr::Nested(inner) => conjuncts(inner),
        other => vec![other],
    }
}

/// `t.col` naming a column of the target.
pub(crate) fn target_column(expr: &Expr, target_alias: &str, columns: &[String]) -> Option<String> {
    match expr {
        Expr::CompoundIdentifier(parts)
            if parts.len() == 2 && ident_value(&parts[0]) == target_alias =>
        {
            let column = ident_value(&parts[1]);
            columns.contains(&column).then_some(column)
        }
        Expr::Nested(inner) => target_column(inner, target_alias, columns),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explain_merge_modes() {
        let mode = |sql: &str| strip_explain_merge(sql).unwrap().map(|(m, _)| m);
        let m = |analyze, format| Some(ExplainMerge { analyze, format });
        assert_eq!(mode("EXPLAIN MERGE INTO t"), m(false, ExplainFormat::Text));
        assert_eq!(
            mode("explain analyze (format json) merge into t"),
            m(true, ExplainFormat::Json)
        );
        assert_eq!(
            mode("EXPLAIN (FORMAT GRAPHVIZ) MERGE INTO t"),
            m(false, ExplainFormat::Graphviz)
        );
        assert_eq!(
            mode("EXPLAIN ANALYZE (FORMAT SVG) MERGE INTO t"),
            m(true, ExplainFormat::Svg)
        );
        assert_eq!(mode("EXPLAIN SELECT 1"), None);
        assert_eq!(mode("EXPLAIN (FORMAT JSON) SELECT 1"), None);
        let other = |sql: &str| strip_explain_with_format(sql).unwrap();
        assert_eq!(
            other("EXPLAIN ANALYZE (FORMAT SVG) SELECT 1"),
            Some((
                ExplainMerge {
                    analyze: true,
                    format: ExplainFormat::Svg
                },
                "SELECT 1".to_string()
            ))
        );
        assert_eq!(
            other("EXPLAIN (FORMAT JSON) INSERT INTO t VALUES (1)").map(|(m, _)| m.format),
            Some(ExplainFormat::Json)
        );
        assert_eq!(other("EXPLAIN SELECT 1"), None);
        assert_eq!(other("EXPLAIN (FORMAT JSON) MERGE INTO t"), None);
        assert!(strip_explain_with_format("EXPLAIN (FORMAT XML) SELECT 1").is_err());
        assert_eq!(other("EXPLAIN (SELECT 1) UNION (SELECT 2)"), None);
        assert_eq!(other("EXPLAIN (FORMAT JSON)"), None);
        let (_, rest) = strip_explain_merge("EXPLAIN  (FORMAT DOT) MERGE INTO t USING s")
            .unwrap()
            .unwrap();
        assert_eq!(rest, "MERGE INTO t USING s");
        for bad in [
            "EXPLAIN (FORMAT XML) MERGE INTO t",
            "EXPLAIN (COSTS OFF) MERGE INTO t",
        ] {
            let err = strip_explain_merge(bad).unwrap_err();
            assert_eq!(
                icemerge_proto::error::IcemergeError::kind_of(&err),
                Some(icemerge_proto::error::ErrorKind::InvalidInput),
                "{bad}: {err}"
            );
        }
    }

    fn bound(sql: &str) -> BoundMerge {
        bind_merge(parse_row_level(sql).unwrap().expect("a MERGE")).unwrap()
    }

    #[test]
    fn join_type_follows_the_clauses() {
        let m = bound("MERGE INTO db.t USING s ON t.id = s.id WHEN MATCHED THEN DELETE");
        assert_eq!(
            (m.join_type, m.insert_only, m.target_alias.as_str()),
            ("INNER", false, "t")
        );
        let m = bound("MERGE INTO db.t AS x USING s ON x.id = s.id WHEN NOT MATCHED THEN INSERT *");
        assert_eq!(
            (m.join_type, m.insert_only, m.target_alias.as_str()),
            ("RIGHT", true, "x")
        );
        let m = bound("MERGE INTO t USING s ON t.id = s.id WHEN NOT MATCHED BY SOURCE THEN DELETE");
        assert_eq!(m.join_type, "LEFT");
        let m = bound(
            "MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN UPDATE SET * \
             WHEN NOT MATCHED THEN INSERT * WHEN NOT MATCHED BY SOURCE THEN DELETE",
        );
        assert_eq!(m.join_type, "FULL");
        assert_eq!(m.clauses.len(), 3);
    }

    #[test]
    fn inserts_alone_keeps_the_not_matched_clauses_of_a_merge_that_has_them() {
        let m = bound(
            "MERGE INTO t USING s ON t.id = s.id WHEN MATCHED AND s.op = 'd' THEN DELETE \
             WHEN NOT MATCHED AND s.v > 0 THEN INSERT * WHEN MATCHED THEN UPDATE SET * \
             WHEN NOT MATCHED THEN INSERT (id) VALUES (s.id)",
        );
        let alone = m.inserts_alone().expect("two NOT MATCHED clauses");
        assert_eq!((alone.join_type, alone.insert_only), ("RIGHT", true));
        let kinds: Vec<_> = alone.merge.clauses.iter().map(|c| c.clause_kind).collect();
        assert_eq!(
            kinds,
            [MergeClauseKind::NotMatched, MergeClauseKind::NotMatched]
        );
        assert_eq!(
            alone.merge.clauses[0]
                .predicate
                .as_ref()
                .map(|p| p.to_string()),
            Some("s.v > 0".to_string())
        );
        for none in [
            "MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN DELETE",
            "MERGE INTO t USING s ON t.id = s.id WHEN NOT MATCHED THEN INSERT *",
            "MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN DELETE \
             WHEN NOT MATCHED THEN INSERT * WHEN NOT MATCHED BY SOURCE THEN DELETE",
        ] {
            assert!(bound(none).inserts_alone().is_none(), "{none}");
        }
    }

    #[test]
    fn with_schema_evolution_is_read_and_stripped() {
        let sql = "merge with Schema EVOLUTION into db.t USING s ON t.id = s.id \
                   WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *";
        let statement = parse_row_level(sql).unwrap().expect("a MERGE");
        assert!(statement.schema_evolution);
        assert!(carries_every_column(&statement.merge));
        assert_eq!(bound(sql).target, vec!["db", "t"]);
        let plain = parse_row_level("MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN DELETE")
            .unwrap()
            .unwrap();
        assert!(!plain.schema_evolution);
        assert!(!carries_every_column(&plain.merge));
        let named = parse_row_level(
            "MERGE WITH SCHEMA EVOLUTION INTO t USING s ON t.id = s.id \
             WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT (id) VALUES (s.id)",
        )
        .unwrap()
        .unwrap();
        assert!(named.schema_evolution && !carries_every_column(&named.merge));
        // Only right after MERGE: a table named "with" is not the clause.
        let err = parse_row_level(
            "MERGE WITH SCHEMA INTO t USING s ON t.id = s.id WHEN MATCHED THEN DELETE",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("syntax error"), "{err}");
    }

    #[test]
    fn not_a_merge_is_none() {
        assert!(parse_row_level("SELECT 1").unwrap().is_none());
    }

    #[test]
    fn classify_sql_orders_clauses_and_fills_columns() {
        let m = bound(
            "MERGE INTO db.t USING src AS s ON t.id = s.id \
             WHEN MATCHED AND s.v IS NULL THEN DELETE \
             WHEN MATCHED THEN UPDATE SET v = s.v \
             WHEN NOT MATCHED THEN INSERT (id) VALUES (s.id)",
        );
        let sql = classify_sql(
            &m,
            "target_rel",
            &["id".into(), "v".into()],
            TargetPrefilter::None,
        )
        .unwrap();
        let delete = sql.find("THEN 2").unwrap();
        let update = sql.find("THEN 3").unwrap();
        let insert = sql.find("THEN 1").unwrap();
        assert!(delete < update && update < insert, "{sql}");
        assert!(sql.contains(") AS \"s\" LEFT JOIN target_rel"), "{sql}");
        assert!(
            sql.contains("named_struct('id', \"t\".\"id\") AS __icemerge_key"),
            "{sql}"
        );
    }

    #[test]
    fn unknown_columns_and_bad_inserts_are_named() {
        let m = bound("MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN UPDATE SET nope = 1");
        let err = classify_sql(&m, "r", &["id".into()], TargetPrefilter::None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown column 'nope'"), "{err}");
        let m = bound(
            "MERGE INTO t USING s ON t.id = s.id WHEN NOT MATCHED THEN INSERT (id, v) VALUES (1)",
        );
        let err = classify_sql(&m, "r", &["id".into(), "v".into()], TargetPrefilter::None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("2 column(s) but gives 1 value(s)"), "{err}");
    }
}
