//! Property test of MERGE INTO, UPDATE and DELETE against a reference model.
//!
//! Each case builds a random target table (0–3 INSERTs, so 0–3 data files
//! or more when partitioned; unpartitioned or partitioned by bucket, identity
//! or truncate, so that updates move rows between partitions; unique non-NULL
//! ids; `write.merge.mode`, `write.update.mode` and `write.delete.mode` all
//! copy-on-write or all merge-on-read), then runs 1–3 statements in a row,
//! mostly MERGEs, each with a random source (0–6 rows given as VALUES, NULL
//! ids allowed, duplicate ids likely) and a random list of 1–4 WHEN clauses,
//! and sometimes an `UPDATE db.t SET v|s = ... [WHERE ...]` or a `DELETE FROM
//! db.t [WHERE ...]` whose WHERE sees only the target row. After each it
//! compares the table and the counts of the result row with a plain Rust
//! model of MERGE semantics (in merge-on-read, later statements run on data
//! files that carry the position deletes of earlier ones):
//!
//! - ON `t.id = src.id`, NULL never matching;
//! - for each (target, source) pair that matches, the FIRST `WHEN MATCHED`
//!   clause whose condition holds acts (a NULL condition is false);
//! - a source row without any matching target row goes to the `WHEN NOT
//!   MATCHED` clauses, a target row without any matching source row to the
//!   `WHEN NOT MATCHED BY SOURCE` clauses;
//! - a target row for which two or more source rows make a MATCHED clause
//!   act is an error ("matched more than one source row") and the table,
//!   including its snapshots, is left unchanged;
//! - UPDATE and DELETE act on every target row whose WHERE holds (a NULL
//!   WHERE is false), as a MERGE with one `WHEN MATCHED` clause would.
//!
//! A failing case prints every statement it ran, so it can be replayed in the
//! CLI. `PROPTEST_CASES=n` overrides the number of cases of both tests.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::time::Instant;

use icemerge_scheduler::{EngineKind, Session, StatementOutput};
use icemerge_tests::{open_session, rows_as_strings};
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestCaseError, TestError, TestRunner};

// ---------------------------------------------------------------------------
// The case
// ---------------------------------------------------------------------------

/// A row of `db.t (id BIGINT, v INT, s STRING)`, or of the source.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Row {
    id: Option<i64>,
    v: Option<i64>,
    s: Option<String>,
}

/// Clause conditions. Which ones a clause may use depends on its kind: NOT
/// MATCHED sees only the source row, NOT MATCHED BY SOURCE only the target row.
#[derive(Clone, Copy, Debug)]
enum Cond {
    SrcVGt5,
    SrcSNotNull,
    SrcIdLt4,
    SrcSEqB,
    TgtVIsNull,
    TgtSEqA,
    TgtVGt5,
    TgtIdLt4,
    TgtVLtSrcV,
    TgtSEqSrcS,
}

const SOURCE_CONDS: [Cond; 4] = [
    Cond::SrcVGt5,
    Cond::SrcSNotNull,
    Cond::SrcIdLt4,
    Cond::SrcSEqB,
];
const TARGET_CONDS: [Cond; 4] = [
    Cond::TgtVIsNull,
    Cond::TgtSEqA,
    Cond::TgtVGt5,
    Cond::TgtIdLt4,
];
const BOTH_CONDS: [Cond; 2] = [Cond::TgtVLtSrcV, Cond::TgtSEqSrcS];

/// New value of `v` in a MATCHED update (or, `TgtVPlus1` and `Null`, in an
/// UPDATE statement).
#[derive(Clone, Copy, Debug)]
enum VExpr {
    SrcV,
    TgtVPlus1,
    SrcVPlusTgtV,
    Null,
}

/// New value of `s` in a MATCHED update (or, `LitZ` and `TgtSConcatX`, in an
/// UPDATE statement).
#[derive(Clone, Copy, Debug)]
enum SExpr {
    SrcS,
    LitZ,
    TgtSConcatX,
    Null,
}

#[derive(Clone, Copy, Debug)]
enum MatchedAction {
    SetV(VExpr),
    SetS(SExpr),
    Delete,
}

#[derive(Clone, Copy, Debug)]
enum NotMatchedAction {
    /// `INSERT (id, v, s) VALUES (src.id, src.v, src.s)`
    InsertAll,
    /// `INSERT (id, v) VALUES (src.id, src.v + 1)`
    InsertIdVPlus1,
}

#[derive(Clone, Copy, Debug)]
enum BySourceAction {
    SetV0,
    Delete,
}

#[derive(Clone, Copy, Debug)]
enum Clause {
    Matched(Option<Cond>, MatchedAction),
    NotMatched(Option<Cond>, NotMatchedAction),
    BySource(Option<Cond>, BySourceAction),
}

/// One MERGE of a case.
#[derive(Clone, Debug)]
struct Merge {
    source: Vec<Row>,
    /// When `source` is empty: give it as a relation the optimizer can prove
    /// empty (`WHERE 1 = 0`) rather than one it cannot (`WHERE random() < 0`).
    foldable_empty_source: bool,
    clauses: Vec<Clause>,
}

/// The SET of an UPDATE statement: its expression sees only the target row.
#[derive(Clone, Copy, Debug)]
enum UpdateSet {
    V(VExpr),
    S(SExpr),
}

/// One statement of a case.
#[derive(Clone, Debug)]
enum Step {
    Merge(Merge),
    /// `UPDATE db.t SET ... [WHERE cond]`, `cond` one of `TARGET_CONDS`.
    Update(Option<Cond>, UpdateSet),
    /// `DELETE FROM db.t [WHERE cond]`, `cond` one of `TARGET_CONDS`.
    Delete(Option<Cond>),
    /// An `ALTER TABLE` that leaves the rows as they are: later statements
    /// then read files of several schemas.
    Alter(Alter),
}

#[derive(Clone, Copy, Debug)]
enum Alter {
    /// `ADD COLUMN c<step> STRING`: NULL in every row.
    AddColumn,
    /// `ALTER COLUMN v TYPE BIGINT` (a no-op after the first).
    WidenV,
}

#[derive(Clone, Debug)]
struct Case {
    /// One INSERT statement (so one data file) per inner vector; never empty.
    inserts: Vec<Vec<Row>>,
    /// The statements, run in order.
    steps: Vec<Step>,
    /// The target's `PARTITIONED BY` clause (empty: unpartitioned).
    partitioning: &'static str,
    /// The target's `write.merge.mode`, `write.update.mode` and
    /// `write.delete.mode`.
    mode: &'static str,
}

/// The write modes drawn.
const MODES: [&str; 2] = ["copy-on-write", "merge-on-read"];

/// Target layouts: unpartitioned, and partitioned so that updates of `v` or
/// `s` move rows between partitions (NULL partition values included).
const PARTITIONINGS: [&str; 4] = [
    "",
    " PARTITIONED BY (bucket(2, id))",
    " PARTITIONED BY (s)",
    " PARTITIONED BY (truncate(1, s), bucket(3, v))",
];

// ---------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------

const ID_DOMAIN: std::ops::Range<i64> = 0..6;

fn small_string() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["a", "b", "c"]).prop_map(str::to_string)
}

fn row(null_id_weight: f64) -> impl Strategy<Value = Row> {
    (
        prop::option::weighted(1.0 - null_id_weight, ID_DOMAIN),
        prop::option::weighted(0.8, 0i64..10),
        prop::option::weighted(0.8, small_string()),
    )
        .prop_map(|(id, v, s)| Row { id, v, s })
}

/// 0–3 non-empty INSERTs; non-NULL ids unique over the whole table (a row
/// repeating an earlier id is dropped).
fn target() -> impl Strategy<Value = Vec<Vec<Row>>> {
    prop::collection::vec(prop::collection::vec(row(0.1), 1..=4), 0..=3).prop_map(|inserts| {
        let mut seen = HashSet::new();
        inserts
            .into_iter()
            .map(|rows| {
                rows.into_iter()
                    .filter(|r| r.id.is_none_or(|id| seen.insert(id)))
                    .collect::<Vec<_>>()
            })
            .filter(|rows| !rows.is_empty())
            .collect()
    })
}

fn source() -> impl Strategy<Value = Vec<Row>> {
    prop::collection::vec(row(0.15), 0..=6)
}

fn cond_from(choices: Vec<Cond>) -> impl Strategy<Value = Option<Cond>> {
    prop::option::weighted(0.5, prop::sample::select(choices))
}

fn clause() -> impl Strategy<Value = Clause> {
    let matched_conds: Vec<Cond> = SOURCE_CONDS
        .iter()
        .chain(&TARGET_CONDS)
        .chain(&BOTH_CONDS)
        .copied()
        .collect();
    let v_expr = prop_oneof![
        Just(VExpr::SrcV),
        Just(VExpr::TgtVPlus1),
        Just(VExpr::SrcVPlusTgtV),
        Just(VExpr::Null),
    ];
    let s_expr = prop_oneof![
        Just(SExpr::SrcS),
        Just(SExpr::LitZ),
        Just(SExpr::TgtSConcatX),
        Just(SExpr::Null),
    ];
    let matched_action = prop_oneof![
        v_expr.prop_map(MatchedAction::SetV),
        s_expr.prop_map(MatchedAction::SetS),
        Just(MatchedAction::Delete),
    ];
    let not_matched_action = prop_oneof![
        Just(NotMatchedAction::InsertAll),
        Just(NotMatchedAction::InsertIdVPlus1),
    ];
    let by_source_action = prop_oneof![Just(BySourceAction::SetV0), Just(BySourceAction::Delete)];
    prop_oneof![
        (cond_from(matched_conds), matched_action).prop_map(|(c, a)| Clause::Matched(c, a)),
        (cond_from(SOURCE_CONDS.to_vec()), not_matched_action)
            .prop_map(|(c, a)| Clause::NotMatched(c, a)),
        (cond_from(TARGET_CONDS.to_vec()), by_source_action)
            .prop_map(|(c, a)| Clause::BySource(c, a)),
    ]
}

fn merge() -> impl Strategy<Value = Merge> {
    (
        source(),
        any::<bool>(),
        prop::collection::vec(clause(), 1..=4),
    )
        .prop_map(|(source, foldable_empty_source, clauses)| Merge {
            source,
            foldable_empty_source,
            clauses,
        })
}

fn update_set() -> impl Strategy<Value = UpdateSet> {
    prop_oneof![
        Just(UpdateSet::V(VExpr::TgtVPlus1)),
        Just(UpdateSet::V(VExpr::Null)),
        Just(UpdateSet::S(SExpr::LitZ)),
        Just(UpdateSet::S(SExpr::TgtSConcatX)),
    ]
}

/// A MERGE most often, else an UPDATE or a DELETE.
fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => merge().prop_map(Step::Merge),
        1 => (cond_from(TARGET_CONDS.to_vec()), update_set())
            .prop_map(|(c, set)| Step::Update(c, set)),
        1 => cond_from(TARGET_CONDS.to_vec()).prop_map(Step::Delete),
        1 => prop_oneof![Just(Alter::AddColumn), Just(Alter::WidenV)].prop_map(Step::Alter),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    (
        target(),
        prop::collection::vec(step(), 1..=3),
        prop::sample::select(PARTITIONINGS.to_vec()),
        prop::sample::select(MODES.to_vec()),
    )
        .prop_map(|(inserts, steps, partitioning, mode)| Case {
            inserts,
            steps,
            partitioning,
            mode,
        })
}

// ---------------------------------------------------------------------------
// SQL
// ---------------------------------------------------------------------------

fn sql_bigint(x: Option<i64>) -> String {
    x.map_or("CAST(NULL AS BIGINT)".into(), |x| x.to_string())
}

fn sql_int(x: Option<i64>) -> String {
    x.map_or("CAST(NULL AS INT)".into(), |x| x.to_string())
}

fn sql_string(x: &Option<String>) -> String {
    x.as_ref()
        .map_or("CAST(NULL AS VARCHAR)".into(), |x| format!("'{x}'"))
}

fn sql_values(rows: &[Row]) -> String {
    rows.iter()
        .map(|r| {
            format!(
                "({}, {}, {})",
                sql_bigint(r.id),
                sql_int(r.v),
                sql_string(&r.s)
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn cond_sql(c: Cond) -> &'static str {
    match c {
        Cond::SrcVGt5 => "src.v > 5",
        Cond::SrcSNotNull => "src.s IS NOT NULL",
        Cond::SrcIdLt4 => "src.id < 4",
        Cond::SrcSEqB => "src.s = 'b'",
        Cond::TgtVIsNull => "t.v IS NULL",
        Cond::TgtSEqA => "t.s = 'a'",
        Cond::TgtVGt5 => "t.v > 5",
        Cond::TgtIdLt4 => "t.id < 4",
        Cond::TgtVLtSrcV => "t.v < src.v",
        Cond::TgtSEqSrcS => "t.s = src.s",
    }
}

fn v_expr_sql(e: VExpr) -> &'static str {
    match e {
        VExpr::SrcV => "src.v",
        VExpr::TgtVPlus1 => "t.v + 1",
        VExpr::SrcVPlusTgtV => "src.v + t.v",
        VExpr::Null => "NULL",
    }
}

fn s_expr_sql(e: SExpr) -> &'static str {
    match e {
        SExpr::SrcS => "src.s",
        SExpr::LitZ => "'z'",
        SExpr::TgtSConcatX => "t.s || 'x'",
        SExpr::Null => "NULL",
    }
}

fn clause_sql(clause: &Clause) -> String {
    let (kind, cond, action) = match clause {
        Clause::Matched(c, a) => (
            "MATCHED",
            c,
            match a {
                MatchedAction::SetV(e) => format!("UPDATE SET v = {}", v_expr_sql(*e)),
                MatchedAction::SetS(e) => format!("UPDATE SET s = {}", s_expr_sql(*e)),
                MatchedAction::Delete => "DELETE".into(),
            },
        ),
        Clause::NotMatched(c, a) => (
            "NOT MATCHED",
            c,
            match a {
                NotMatchedAction::InsertAll => "INSERT (id, v, s) VALUES (src.id, src.v, src.s)",
                NotMatchedAction::InsertIdVPlus1 => "INSERT (id, v) VALUES (src.id, src.v + 1)",
            }
            .into(),
        ),
        Clause::BySource(c, a) => (
            "NOT MATCHED BY SOURCE",
            c,
            match a {
                BySourceAction::SetV0 => "UPDATE SET v = 0",
                BySourceAction::Delete => "DELETE",
            }
            .into(),
        ),
    };
    match cond {
        Some(c) => format!("WHEN {kind} AND {} THEN {action}", cond_sql(*c)),
        None => format!("WHEN {kind} THEN {action}"),
    }
}

/// An empty source relation of the source's shape.
const EMPTY_SOURCE: &str = "SELECT * FROM (VALUES (CAST(NULL AS BIGINT), CAST(NULL AS INT), \
     CAST(NULL AS VARCHAR))) AS e(id, v, s)";

fn merge_sql(case: &Merge) -> String {
    let source = if case.source.is_empty() {
        // `random() < 0` is always false but, unlike `1 = 0`, not folded away
        // by the optimizer (see `empty_source_the_optimizer_can_see`).
        let filter = match case.foldable_empty_source {
            true => "1 = 0",
            false => "random() < 0",
        };
        format!("({EMPTY_SOURCE} WHERE {filter}) AS src")
    } else {
        format!("(VALUES {}) AS src(id, v, s)", sql_values(&case.source))
    };
    let mut sql = format!("MERGE INTO db.t AS t USING {source} ON t.id = src.id");
    for clause in &case.clauses {
        sql.push('\n');
        sql.push_str(&clause_sql(clause));
    }
    sql
}

/// ` WHERE cond`, or nothing. The conditions name the target `t`, the
/// default alias of `db.t`.
fn where_sql(cond: &Option<Cond>) -> String {
    cond.map_or(String::new(), |c| format!(" WHERE {}", cond_sql(c)))
}

/// The SQL of `step`, the `index`-th of its case.
fn step_sql(step: &Step, index: usize) -> String {
    match step {
        Step::Alter(Alter::AddColumn) => format!("ALTER TABLE db.t ADD COLUMN c{index} STRING"),
        Step::Alter(Alter::WidenV) => "ALTER TABLE db.t ALTER COLUMN v TYPE BIGINT".into(),
        Step::Merge(merge) => merge_sql(merge),
        Step::Update(cond, set) => {
            let set = match set {
                UpdateSet::V(e) => format!("v = {}", v_expr_sql(*e)),
                UpdateSet::S(e) => format!("s = {}", s_expr_sql(*e)),
            };
            format!("UPDATE db.t SET {set}{}", where_sql(cond))
        }
        Step::Delete(cond) => format!("DELETE FROM db.t{}", where_sql(cond)),
    }
}

// ---------------------------------------------------------------------------
// The reference model
// ---------------------------------------------------------------------------

/// SQL three-valued `a op b` over nullable operands.
fn cmp<T: PartialOrd>(a: Option<T>, b: Option<T>, op: fn(&T, &T) -> bool) -> Option<bool> {
    Some(op(&a?, &b?))
}

/// The condition's value for a (target, source) pair; `None` is SQL NULL.
/// A side that is absent (NOT MATCHED / BY SOURCE) is never referenced, by
/// construction of the strategies.
fn eval(c: Cond, t: Option<&Row>, s: Option<&Row>) -> Option<bool> {
    let t = || t.expect("condition references the target");
    let s = || s.expect("condition references the source");
    match c {
        Cond::SrcVGt5 => cmp(s().v, Some(5), i64::gt),
        Cond::SrcSNotNull => Some(s().s.is_some()),
        Cond::SrcIdLt4 => cmp(s().id, Some(4), i64::lt),
        Cond::SrcSEqB => cmp(s().s.as_deref(), Some("b"), |a, b| a == b),
        Cond::TgtVIsNull => Some(t().v.is_none()),
        Cond::TgtSEqA => cmp(t().s.as_deref(), Some("a"), |a, b| a == b),
        Cond::TgtVGt5 => cmp(t().v, Some(5), i64::gt),
        Cond::TgtIdLt4 => cmp(t().id, Some(4), i64::lt),
        Cond::TgtVLtSrcV => cmp(t().v, s().v, i64::lt),
        Cond::TgtSEqSrcS => cmp(t().s.as_deref(), s().s.as_deref(), |a, b| a == b),
    }
}

fn holds(c: &Option<Cond>, t: Option<&Row>, s: Option<&Row>) -> bool {
    c.is_none_or(|c| eval(c, t, s) == Some(true))
}

fn add(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    Some(a? + b?)
}

#[derive(Debug, Default, PartialEq, Eq)]
struct Counts {
    updated: usize,
    deleted: usize,
    inserted: usize,
}

enum ModelResult {
    Ok {
        rows: Vec<Row>,
        counts: Counts,
    },
    /// The target row (its id) that more than one source row acts on.
    DuplicateMatch {
        id: i64,
    },
    /// A statement that changes no row and makes no snapshot (ALTER).
    Unchanged,
}

/// The target row `t` with `v` set to `e` (`s`: the source row, absent for
/// an UPDATE statement, whose expressions never reference it).
fn set_v(e: VExpr, t: &Row, s: Option<&Row>) -> Row {
    let s = || s.expect("expression references the source");
    let v = match e {
        VExpr::SrcV => s().v,
        VExpr::TgtVPlus1 => add(t.v, Some(1)),
        VExpr::SrcVPlusTgtV => add(s().v, t.v),
        VExpr::Null => None,
    };
    Row { v, ..t.clone() }
}

/// The target row `t` with `s` set to `e`; as [`set_v`].
fn set_s(e: SExpr, t: &Row, s: Option<&Row>) -> Row {
    let new_s = match e {
        SExpr::SrcS => s.expect("expression references the source").s.clone(),
        SExpr::LitZ => Some("z".to_string()),
        SExpr::TgtSConcatX => t.s.as_ref().map(|x| format!("{x}x")),
        SExpr::Null => None,
    };
    Row {
        s: new_s,
        ..t.clone()
    }
}

fn model(target: &[Row], source: &[Row], clauses: &[Clause]) -> ModelResult {
    let matches = |t: &Row, s: &Row| t.id.is_some() && t.id == s.id;
    let mut rows = vec![];
    let mut counts = Counts::default();
    for t in target {
        let matching: Vec<&Row> = source.iter().filter(|s| matches(t, s)).collect();
        if matching.is_empty() {
            let action = clauses.iter().find_map(|c| match c {
                Clause::BySource(cond, a) if holds(cond, Some(t), None) => Some(*a),
                _ => None,
            });
            match action {
                None => rows.push(t.clone()),
                Some(BySourceAction::Delete) => counts.deleted += 1,
                Some(BySourceAction::SetV0) => {
                    counts.updated += 1;
                    rows.push(Row {
                        v: Some(0),
                        ..t.clone()
                    });
                }
            }
            continue;
        }
        // Each matching source row picks its first acting MATCHED clause.
        let acting: Vec<(&Row, MatchedAction)> = matching
            .iter()
            .filter_map(|s| {
                clauses.iter().find_map(|c| match c {
                    Clause::Matched(cond, a) if holds(cond, Some(t), Some(s)) => Some((*s, *a)),
                    _ => None,
                })
            })
            .collect();
        match acting.as_slice() {
            [] => rows.push(t.clone()),
            [(s, action)] => match action {
                MatchedAction::Delete => counts.deleted += 1,
                MatchedAction::SetV(e) => {
                    counts.updated += 1;
                    rows.push(set_v(*e, t, Some(s)));
                }
                MatchedAction::SetS(e) => {
                    counts.updated += 1;
                    rows.push(set_s(*e, t, Some(s)));
                }
            },
            _ => {
                return ModelResult::DuplicateMatch {
                    id: t.id.expect("a matched target row has an id"),
                }
            }
        }
    }
    for s in source {
        if target.iter().any(|t| matches(t, s)) {
            continue;
        }
        let action = clauses.iter().find_map(|c| match c {
            Clause::NotMatched(cond, a) if holds(cond, None, Some(s)) => Some(*a),
            _ => None,
        });
        match action {
            None => {}
            Some(NotMatchedAction::InsertAll) => {
                counts.inserted += 1;
                rows.push(s.clone());
            }
            Some(NotMatchedAction::InsertIdVPlus1) => {
                counts.inserted += 1;
                rows.push(Row {
                    id: s.id,
                    v: add(s.v, Some(1)),
                    s: None,
                });
            }
        }
    }
    ModelResult::Ok { rows, counts }
}

/// `UPDATE db.t SET set WHERE cond` (`set`: `None` for `DELETE FROM db.t
/// WHERE cond`): every target row whose `cond` holds is updated (deleted),
/// the others are kept. Never an error.
fn model_update_delete(target: &[Row], cond: &Option<Cond>, set: Option<UpdateSet>) -> ModelResult {
    let mut rows = vec![];
    let mut counts = Counts::default();
    for t in target {
        if !holds(cond, Some(t), None) {
            rows.push(t.clone());
            continue;
        }
        match set {
            None => counts.deleted += 1,
            Some(UpdateSet::V(e)) => {
                counts.updated += 1;
                rows.push(set_v(e, t, None));
            }
            Some(UpdateSet::S(e)) => {
                counts.updated += 1;
                rows.push(set_s(e, t, None));
            }
        }
    }
    ModelResult::Ok { rows, counts }
}

/// The model's outcome of `step` on a table whose rows are `target`.
fn model_step(target: &[Row], step: &Step) -> ModelResult {
    match step {
        Step::Merge(merge) => model(target, &merge.source, &merge.clauses),
        Step::Update(cond, set) => model_update_delete(target, cond, Some(*set)),
        Step::Delete(cond) => model_update_delete(target, cond, None),
        Step::Alter(_) => ModelResult::Unchanged,
    }
}

// ---------------------------------------------------------------------------
// Running a case
// ---------------------------------------------------------------------------

fn null_or<T: ToString>(x: &Option<T>) -> String {
    x.as_ref().map_or("NULL".into(), |x| x.to_string())
}

/// The rows as `SELECT id, v, s` prints them, sorted.
fn printed(rows: &[Row]) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = rows
        .iter()
        .map(|r| vec![null_or(&r.id), null_or(&r.v), null_or(&r.s)])
        .collect();
    out.sort();
    out
}

/// Runs statements on one session, remembering them for the failure report.
struct Runner<'a> {
    engine: EngineKind,
    session: &'a Session,
    log: Vec<String>,
}

impl Runner<'_> {
    async fn try_run(&mut self, sql: &str) -> Result<Vec<Vec<String>>, String> {
        self.log.push(sql.to_string());
        match self.session.execute_one(sql).await {
            Ok(StatementOutput::Rows { batches, .. }) => Ok(rows_as_strings(&batches)),
            Ok(StatementOutput::Done { .. }) => Ok(vec![]),
            Err(e) => Err(e.to_string()),
        }
    }

    async fn run(&mut self, sql: &str) -> Result<Vec<Vec<String>>, String> {
        match self.try_run(sql).await {
            Ok(rows) => Ok(rows),
            Err(e) => Err(self.fail(&format!("statement failed: {e}"))),
        }
    }

    async fn table(&mut self) -> Result<Vec<Vec<String>>, String> {
        let mut rows = self.run("SELECT id, v, s FROM db.t").await?;
        rows.sort();
        Ok(rows)
    }

    async fn snapshots(&mut self) -> Result<Vec<Vec<String>>, String> {
        self.run("SELECT count(*) FROM db.\"t$snapshots\"").await
    }

    /// The failure report: what went wrong and every statement run so far.
    fn fail(&self, what: &str) -> String {
        let mut msg = format!("{:?} engine: {what}\n-- statements run:\n", self.engine);
        for sql in &self.log {
            let _ = writeln!(msg, "{sql};");
        }
        msg
    }
}

async fn check_case(engine: EngineKind, case: &Case) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let session = open_session(dir.path(), engine).await;
    let mut r = Runner {
        engine,
        session: &session,
        log: vec![],
    };
    r.run("CREATE SCHEMA db").await?;
    r.run(&format!(
        "CREATE TABLE db.t (id BIGINT, v INT, s STRING){} TBLPROPERTIES ('write.merge.mode' = \
         '{mode}', 'write.update.mode' = '{mode}', 'write.delete.mode' = '{mode}')",
        case.partitioning,
        mode = case.mode
    ))
    .await?;
    for rows in &case.inserts {
        r.run(&format!("INSERT INTO db.t VALUES {}", sql_values(rows)))
            .await?;
    }
    let mut target: Vec<Row> = case.inserts.iter().flatten().cloned().collect();
    let before = r.table().await?;
    if before != printed(&target) {
        return Err(r.fail(&format!(
            "the table before the first statement is {before:?}, expected {:?}",
            printed(&target)
        )));
    }
    for (index, step) in case.steps.iter().enumerate() {
        if let Some(rows) = check_step(&mut r, &target, step, index).await? {
            target = rows;
        }
    }
    Ok(())
}

/// Runs `step` on the table, whose rows are `target`, and checks it
/// against the model: the table's rows afterwards (`None`: unchanged).
async fn check_step(
    r: &mut Runner<'_>,
    target: &[Row],
    step: &Step,
    index: usize,
) -> Result<Option<Vec<Row>>, String> {
    let before = r.table().await?;
    let snapshots_before = r.snapshots().await?;
    let sql = step_sql(step, index);
    let kind = match step {
        Step::Merge(_) => "MERGE",
        Step::Update(..) => "UPDATE",
        Step::Delete(_) => "DELETE",
        Step::Alter(_) => "ALTER TABLE",
    };
    let outcome = r.try_run(&sql).await;
    match model_step(target, step) {
        ModelResult::Unchanged => {
            if let Err(e) = outcome {
                return Err(r.fail(&format!("the {kind} failed: {e}")));
            }
            let after = r.table().await?;
            let snapshots_after = r.snapshots().await?;
            if after != before || snapshots_after != snapshots_before {
                return Err(r.fail(&format!(
                    "the {kind} changed the rows or the snapshots: {after:?} \
                     ({snapshots_after:?} snapshots), was {before:?} ({snapshots_before:?})"
                )));
            }
            Ok(None)
        }
        ModelResult::DuplicateMatch { id } => {
            match outcome {
                Ok(rows) => {
                    return Err(r.fail(&format!(
                        "the MERGE should fail (target row id={id} matched by more than one \
                         acting source row) but returned {rows:?}"
                    )))
                }
                Err(e) if e.contains("matched more than one source row") => {}
                Err(e) => {
                    return Err(r.fail(&format!(
                        "the MERGE should fail with 'matched more than one source row' \
                         (target row id={id}) but failed with: {e}"
                    )))
                }
            }
            let after = r.table().await?;
            if after != before {
                return Err(r.fail(&format!(
                    "the failed MERGE changed the table: {after:?}, was {before:?}"
                )));
            }
            let snapshots_after = r.snapshots().await?;
            if snapshots_after != snapshots_before {
                return Err(r.fail(&format!(
                    "the failed MERGE changed the snapshot count: {snapshots_after:?}, was \
                     {snapshots_before:?}"
                )));
            }
            Ok(None)
        }
        ModelResult::Ok { rows, counts } => {
            let result = match outcome {
                Ok(result) => result,
                Err(e) => return Err(r.fail(&format!("the {kind} failed: {e}"))),
            };
            let expected_counts = vec![
                (counts.updated + counts.deleted + counts.inserted).to_string(),
                counts.updated.to_string(),
                counts.deleted.to_string(),
                counts.inserted.to_string(),
            ];
            let got_counts: Option<Vec<String>> = match result.as_slice() {
                [row] if row.len() >= 4 => Some(row[..4].to_vec()),
                _ => None,
            };
            if got_counts.as_ref() != Some(&expected_counts) {
                return Err(r.fail(&format!(
                    "{kind} result row {result:?}; expected count, rows_updated, rows_deleted, \
                     rows_inserted = {expected_counts:?}"
                )));
            }
            let after = r.table().await?;
            if after != printed(&rows) {
                return Err(r.fail(&format!(
                    "after the {kind} the table is\n  {after:?}\nexpected (model)\n  {:?}",
                    printed(&rows)
                )));
            }
            Ok(Some(rows))
        }
    }
}

fn run_property(engine: EngineKind, default_cases: u32) {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(default_cases);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let config = ProptestConfig {
        cases,
        // Every case opens a session on a fresh warehouse: keep shrinking bounded.
        max_shrink_iters: 200,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let mut runner = TestRunner::new(config);
    let start = Instant::now();
    let result = runner.run(&case(), |case| {
        runtime
            .block_on(check_case(engine, &case))
            .map_err(TestCaseError::fail)
    });
    eprintln!(
        "merge_property {engine:?}: {cases} case(s) in {:.1}s",
        start.elapsed().as_secs_f64()
    );
    match result {
        Ok(()) => {}
        Err(TestError::Fail(reason, case)) => {
            panic!("MERGE, UPDATE, DELETE or ALTER disagrees with the model\n{reason}\nminimal case: {case:#?}")
        }
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn merge_matches_model_local() {
    run_property(EngineKind::Local, 24);
}

#[test]
fn merge_matches_model_cluster() {
    run_property(EngineKind::Cluster, 6);
}

// ---------------------------------------------------------------------------
// The model itself, on the hand-checked examples of 10/11_merge_*.slt
// ---------------------------------------------------------------------------

#[test]
fn model_follows_the_documented_examples() {
    let r = |id: i64, v: Option<i64>, s: &str| Row {
        id: Some(id),
        v,
        s: Some(s.to_string()),
    };
    let target = vec![r(1, Some(1), "a"), r(2, Some(2), "b"), r(3, None, "c")];
    // Two source rows acting on id 2: an error.
    let source = vec![r(2, Some(10), "x"), r(2, Some(20), "y")];
    let update = [Clause::Matched(None, MatchedAction::SetV(VExpr::SrcV))];
    assert!(matches!(
        model(&target, &source, &update),
        ModelResult::DuplicateMatch { id: 2 }
    ));
    // ... but not when only one of them makes a clause act.
    let guarded = [Clause::Matched(
        Some(Cond::SrcVGt5),
        MatchedAction::SetV(VExpr::SrcV),
    )];
    let source = vec![r(2, Some(1), "x"), r(2, Some(20), "y")];
    let ModelResult::Ok { rows, counts } = model(&target, &source, &guarded) else {
        panic!("one acting source row is no error")
    };
    assert_eq!(
        counts,
        Counts {
            updated: 1,
            deleted: 0,
            inserted: 0
        }
    );
    assert_eq!(rows[1], r(2, Some(20), "b"));
    // NULL ids never match; NULL conditions are false; NULL + 1 is NULL.
    let source = vec![
        Row {
            id: None,
            v: None,
            s: None,
        },
        r(3, Some(9), "q"),
    ];
    let clauses = [
        Clause::Matched(Some(Cond::TgtVLtSrcV), MatchedAction::Delete),
        Clause::Matched(None, MatchedAction::SetV(VExpr::TgtVPlus1)),
        Clause::NotMatched(None, NotMatchedAction::InsertIdVPlus1),
        Clause::BySource(Some(Cond::TgtSEqA), BySourceAction::Delete),
    ];
    let ModelResult::Ok { rows, counts } = model(&target, &source, &clauses) else {
        panic!("no duplicate")
    };
    assert_eq!(
        counts,
        Counts {
            updated: 1,
            deleted: 1,
            inserted: 1
        }
    );
    assert_eq!(
        printed(&rows),
        vec![
            vec!["2", "2", "b"],
            vec!["3", "NULL", "c"],
            vec!["NULL", "NULL", "NULL"],
        ]
    );
}

/// UPDATE and DELETE: a NULL WHERE is false, NULL + 1 and NULL || 'x' are
/// NULL.
#[test]
fn update_delete_model() {
    let r = |id: i64, v: Option<i64>, s: Option<&str>| Row {
        id: Some(id),
        v,
        s: s.map(str::to_string),
    };
    let target = vec![
        r(1, Some(7), None),
        r(2, None, Some("a")),
        r(3, Some(2), Some("b")),
    ];
    let run = |step: Step| match model_step(&target, &step) {
        ModelResult::Ok { rows, counts } => (printed(&rows), counts),
        ModelResult::DuplicateMatch { .. } => panic!("UPDATE and DELETE never fail"),
        ModelResult::Unchanged => panic!("UPDATE and DELETE are modelled row by row"),
    };
    let (rows, counts) = run(Step::Update(
        Some(Cond::TgtVGt5),
        UpdateSet::S(SExpr::TgtSConcatX),
    ));
    assert_eq!(
        counts,
        Counts {
            updated: 1,
            deleted: 0,
            inserted: 0
        }
    );
    assert_eq!(
        rows,
        vec![
            vec!["1", "7", "NULL"],
            vec!["2", "NULL", "a"],
            vec!["3", "2", "b"],
        ]
    );
    let (rows, counts) = run(Step::Update(None, UpdateSet::V(VExpr::TgtVPlus1)));
    assert_eq!(counts.updated, 3);
    assert_eq!(
        rows,
        vec![
            vec!["1", "8", "NULL"],
            vec!["2", "NULL", "a"],
            vec!["3", "3", "b"],
        ]
    );
    let (rows, counts) = run(Step::Delete(Some(Cond::TgtSEqA)));
    assert_eq!(
        counts,
        Counts {
            updated: 0,
            deleted: 1,
            inserted: 0
        }
    );
    assert_eq!(rows, vec![vec!["1", "7", "NULL"], vec!["3", "2", "b"]]);
    let (rows, counts) = run(Step::Delete(None));
    assert_eq!((rows.len(), counts.deleted), (0, 3));
}

// ---------------------------------------------------------------------------
// Found by the property test
// ---------------------------------------------------------------------------

/// Regression (fixed in "MERGE: judge the ON equality on the bound plan"): a
/// source the optimizer can prove empty (`WHERE 1 = 0`, `LIMIT 0`) made
/// DataFusion drop the join, and the ON-equality check, which then looked
/// for a hash join in the physical plan, refused the MERGE with "has no
/// equality between a target column and a source expression" though ON was
/// `t.id = src.id`. Such a MERGE is a no-op, except for NOT MATCHED BY
/// SOURCE clauses, which act on every target row.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn empty_source_the_optimizer_can_see() {
    let sources = [
        "(SELECT * FROM (VALUES (1, 5, 'x')) AS e(id, v, s) WHERE 1 = 0) AS src",
        "(SELECT * FROM (VALUES (1, 5, 'x')) AS e(id, v, s) LIMIT 0) AS src",
    ];
    let clauses = [
        ("WHEN MATCHED THEN DELETE", ["0", "0", "0", "0"]),
        (
            "WHEN NOT MATCHED THEN INSERT (id, v, s) VALUES (src.id, src.v, src.s)",
            ["0", "0", "0", "0"],
        ),
        (
            "WHEN MATCHED THEN DELETE WHEN NOT MATCHED BY SOURCE THEN UPDATE SET v = 0",
            ["1", "1", "0", "0"],
        ),
    ];
    for engine in icemerge_tests::ENGINES {
        for target_rows in [false, true] {
            for source in sources {
                for (clause, counts) in clauses {
                    let dir = tempfile::tempdir().unwrap();
                    let session = open_session(dir.path(), engine).await;
                    session
                        .execute("CREATE SCHEMA db; CREATE TABLE db.t (id BIGINT, v INT, s STRING)")
                        .await
                        .unwrap();
                    if target_rows {
                        session
                            .execute("INSERT INTO db.t VALUES (1, 1, 'a')")
                            .await
                            .unwrap();
                    }
                    let sql =
                        format!("MERGE INTO db.t AS t USING {source} ON t.id = src.id {clause}");
                    let rows = match session.execute_one(&sql).await {
                        Ok(StatementOutput::Rows { batches, .. }) => rows_as_strings(&batches),
                        other => panic!("{engine:?}: {sql}: {other:?}"),
                    };
                    let expected = if target_rows {
                        counts
                    } else {
                        ["0", "0", "0", "0"]
                    };
                    assert_eq!(rows[0][..4], expected, "{engine:?}: {sql}");
                }
            }
        }
    }
}
