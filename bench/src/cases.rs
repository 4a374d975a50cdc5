//! The merge cases: those of the Delta merge benchmark (insert-only with one
//! and with two NOT MATCHED clauses, delete-only, upserts over a grid of
//! matched / not-matched fractions), a no-op-heavy upsert, a "concentrated"
//! upsert whose matched keys all lie in one data file, and the one-row merge
//! into a one-file table that measures an engine's fixed cost.
//!
//! Each case knows its source, its MERGE statement and the nearest
//! `peers.py` case.

use crate::data::{Layout, NewKeys, Sample, SourceSpec, COLUMNS, KEYS};

/// What the MERGE does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `WHEN NOT MATCHED THEN INSERT *`.
    InsertOnly,
    /// Two NOT MATCHED clauses, the first with a condition.
    MultipleInsertOnly,
    /// `WHEN MATCHED THEN DELETE`.
    DeleteOnly,
    /// Update every non-key column, insert the rest.
    Upsert,
    /// Upsert whose update condition is false for every matched row.
    NoopUpsert,
}

/// Source rows taken by the concentrated upsert (matched, new): the same at
/// every scale.
pub const CONCENTRATED_SOURCE: (u64, u64) = (10_000, 1_000);

/// Rows of the one-file table of the fixed-cost case.
pub const FIXED_COST_ROWS: u64 = 1_000;

#[derive(Debug, Clone)]
pub struct Case {
    /// Short name (what `--cases` selects: the exact name, or a prefix of it
    /// followed by `*`).
    pub name: String,
    pub kind: Kind,
    /// Fractions of target rows, for the table (matched, not matched).
    pub fractions: (f64, f64),
    pub source: SourceSpec,
    /// The target is the small one-file table.
    pub fixed_cost: bool,
    /// Notes on how the peers' case differs.
    pub peer_note: &'static str,
}

impl Case {
    fn fractions(name: &str, kind: Kind, matched: f64, not_matched: f64) -> Self {
        Case {
            name: name.to_string(),
            kind,
            fractions: (matched, not_matched),
            source: SourceSpec {
                matched: Sample::fraction(matched, 0),
                new: Sample::fraction(not_matched, 1),
                // Insert-only sources take keys inside the target's key
                // range, as the Delta merge benchmark's do: the target scan
                // cannot prune every file. The upserts' new keys lie above
                // it (their matched keys reach every file anyway).
                new_keys: match kind {
                    Kind::InsertOnly | Kind::MultipleInsertOnly => NewKeys::InsideTarget,
                    _ => NewKeys::AboveTarget,
                },
                identical: kind == Kind::NoopUpsert,
            },
            fixed_cost: false,
            peer_note: match kind {
                Kind::MultipleInsertOnly => "peers run one unconditional NOT MATCHED clause",
                _ => "",
            },
        }
    }

    /// The layout this case merges into.
    pub fn layout(&self, main: Layout) -> Layout {
        if self.fixed_cost {
            Layout {
                rows: FIXED_COST_ROWS,
                files: 1,
            }
        } else {
            main
        }
    }

    /// The `peers.py --case` value.
    pub fn peer_case(&self) -> &'static str {
        match self.kind {
            Kind::InsertOnly | Kind::MultipleInsertOnly => "insert",
            Kind::DeleteOnly => "delete",
            Kind::Upsert => "upsert",
            Kind::NoopUpsert => "noop_upsert",
        }
    }

    /// Whether PyIceberg can run it (its `upsert` only).
    pub fn pyiceberg_supported(&self) -> bool {
        self.kind == Kind::Upsert
    }

    /// The MERGE statement into `table` from the Parquet file `source`.
    pub fn merge_sql(&self, table: &str, source: &str) -> String {
        let on = KEYS
            .iter()
            .map(|k| format!("t.{k} = s.{k}"))
            .collect::<Vec<_>>()
            .join(" AND ");
        let sets = COLUMNS
            .iter()
            .filter(|(n, _)| !KEYS.contains(n))
            .map(|(n, _)| format!("{n} = s.{n}"))
            .collect::<Vec<_>>()
            .join(", ");
        let clauses = match self.kind {
            Kind::InsertOnly => "WHEN NOT MATCHED THEN INSERT *".to_string(),
            Kind::MultipleInsertOnly => "WHEN NOT MATCHED AND s.wr_item_sk % 2 = 0 THEN INSERT * \
                 WHEN NOT MATCHED THEN INSERT *"
                .to_string(),
            Kind::DeleteOnly => "WHEN MATCHED THEN DELETE".to_string(),
            Kind::Upsert => {
                format!("WHEN MATCHED THEN UPDATE SET {sets} WHEN NOT MATCHED THEN INSERT *")
            }
            Kind::NoopUpsert => format!(
                "WHEN MATCHED AND t.wr_returned_date_sk <> s.wr_returned_date_sk \
                 THEN UPDATE SET {sets} WHEN NOT MATCHED THEN INSERT *"
            ),
        };
        format!("MERGE INTO {table} AS t USING read_parquet('{source}') AS s ON {on} {clauses}")
    }
}

/// Every case for a target of `layout`.
pub fn all(layout: Layout) -> Vec<Case> {
    let mut cases = vec![];
    for f in [0.05, 0.5, 1.0] {
        cases.push(Case::fractions(
            &format!("insert_only_{f:?}"),
            Kind::InsertOnly,
            0.0,
            f,
        ));
    }
    for f in [0.05, 0.5, 1.0] {
        cases.push(Case::fractions(
            &format!("multi_insert_only_{f:?}"),
            Kind::MultipleInsertOnly,
            0.0,
            f,
        ));
    }
    cases.push(Case::fractions(
        "delete_only_0.05",
        Kind::DeleteOnly,
        0.05,
        0.0,
    ));
    for (m, n) in [
        (0.0, 0.1),
        (0.01, 0.1),
        (0.1, 0.1),
        (0.5, 0.001),
        (0.99, 0.001),
        (1.0, 0.001),
        (0.1, 0.0),
    ] {
        cases.push(Case::fractions(
            &format!("upsert_{m:?}_{n:?}"),
            Kind::Upsert,
            m,
            n,
        ));
    }
    cases.push(Case::fractions(
        "noop_upsert_1.0_0.05",
        Kind::NoopUpsert,
        1.0,
        0.05,
    ));

    // Matched and new keys all within the key range of the middle file.
    let file = layout.files / 2;
    let (lo, hi) = layout.file_range(file);
    let (matched, new) = CONCENTRATED_SOURCE;
    let span = hi - lo;
    let stride = (span / matched).max(1);
    cases.push(Case {
        name: "concentrated_upsert".into(),
        kind: Kind::Upsert,
        fractions: (
            matched as f64 / layout.rows as f64,
            new as f64 / layout.rows as f64,
        ),
        source: SourceSpec {
            matched: Sample::Strided {
                start: lo,
                stride,
                count: matched.min(span),
            },
            new: Sample::Strided {
                start: lo + 1,
                stride: (span / new).max(1),
                count: new.min(span - 1),
            },
            new_keys: NewKeys::AboveTarget,
            identical: false,
        },
        fixed_cost: false,
        peer_note: "",
    });

    cases.push(Case {
        name: "fixed_cost_one_row".into(),
        kind: Kind::Upsert,
        fractions: (1.0 / FIXED_COST_ROWS as f64, 0.0),
        source: SourceSpec {
            matched: Sample::Strided {
                start: FIXED_COST_ROWS / 2,
                stride: 1,
                count: 1,
            },
            new: Sample::None,
            new_keys: NewKeys::AboveTarget,
            identical: false,
        },
        fixed_cost: true,
        peer_note: "",
    });
    cases
}
