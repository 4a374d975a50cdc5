//! Deterministic data: a table shaped like TPC-DS `web_returns` (24 columns,
//! its names and types, key `(wr_item_sk, wr_order_number)`) and the MERGE
//! sources of every case.
//!
//! Row `v` (0-based) of the target is a pure function of `v`, written as SQL
//! over `generate_series` and run with DataFusion's COPY. Rows are in key
//! order: `wr_item_sk = v / 8` and `wr_order_number` grows with `v % 8`
//! inside an item, so file `f` (rows `[f * per_file, (f + 1) * per_file)`)
//! holds a contiguous key range and its statistics separate it from every
//! other file.
//!
//! A source row is a target row with other values (`salt`); a "new" source
//! row also gets a `wr_order_number` no target row has. Which rows a source
//! takes is decided by integer hashes of `v` that `Sample::contains`
//! evaluates in Rust too, so the floor knows which files a case touches.

use std::path::{Path, PathBuf};

use anyhow::Result;
use icemerge_scheduler::Session;

/// `(name, icemerge DDL type)` of the 24 `web_returns` columns, in order.
pub const COLUMNS: [(&str, &str); 24] = [
    ("wr_returned_date_sk", "INT"),
    ("wr_returned_time_sk", "INT"),
    ("wr_item_sk", "INT"),
    ("wr_refunded_customer_sk", "INT"),
    ("wr_refunded_cdemo_sk", "INT"),
    ("wr_refunded_hdemo_sk", "INT"),
    ("wr_refunded_addr_sk", "INT"),
    ("wr_returning_customer_sk", "INT"),
    ("wr_returning_cdemo_sk", "INT"),
    ("wr_returning_hdemo_sk", "INT"),
    ("wr_returning_addr_sk", "INT"),
    ("wr_web_page_sk", "INT"),
    ("wr_reason_sk", "INT"),
    ("wr_order_number", "BIGINT"),
    ("wr_return_quantity", "INT"),
    ("wr_return_amt", "DECIMAL(7, 2)"),
    ("wr_return_tax", "DECIMAL(7, 2)"),
    ("wr_return_amt_inc_tax", "DECIMAL(7, 2)"),
    ("wr_fee", "DECIMAL(7, 2)"),
    ("wr_return_ship_cost", "DECIMAL(7, 2)"),
    ("wr_refunded_cash", "DECIMAL(7, 2)"),
    ("wr_reversed_charge", "DECIMAL(7, 2)"),
    ("wr_account_credit", "DECIMAL(7, 2)"),
    ("wr_net_loss", "DECIMAL(7, 2)"),
];

/// The MERGE key.
pub const KEYS: [&str; 2] = ["wr_item_sk", "wr_order_number"];

/// Added to `wr_order_number` of a new source row above the target's keys.
const NEW_ORDER_OFFSET: i64 = 4_000_000_000_000;

/// Where the keys of a source's new rows lie.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NewKeys {
    /// `wr_order_number` above every target value: file statistics show that
    /// no target file can match, so pruning skips them all.
    AboveTarget,
    /// `wr_order_number` one step past its target row's, inside the same
    /// item's band: a key no target row has, but inside the key range of
    /// the file that holds the item (the Delta merge benchmark's way), so
    /// pruning cannot skip that file.
    InsideTarget,
}

/// `CREATE TABLE` column list.
pub fn ddl_columns() -> String {
    COLUMNS
        .iter()
        .map(|(n, t)| format!("{n} {t}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The SELECT list of row `v` (an SQL BIGINT expression). `salt` 0 gives the
/// target's values; another salt changes every non-key value; `new_key`
/// gives `wr_order_number` a value no target row of the item has.
fn row_select(v: &str, salt: i64, new_key: Option<NewKeys>) -> String {
    let int = |mult: i64, modulus: i64| format!("CAST(({v} * {mult} + {salt}) % {modulus} AS INT)");
    let nullable = |every: i64, mult: i64, modulus: i64| {
        format!(
            "CASE WHEN {v} % {every} = 0 THEN NULL ELSE {} END",
            int(mult, modulus)
        )
    };
    let dec =
        |mult: i64| format!("CAST((({v} * {mult} + {salt}) % 99999) / 100.0 AS DECIMAL(7, 2))");
    // The 8 rows of an item lie in 8 bands of 1000003 order numbers, one
    // row per band; the next number in the row's band (wrapping inside it)
    // is no target row's.
    let order = match new_key {
        None => format!("({v} % 8) * 1000003 + ({v} * 7919) % 1000003"),
        Some(NewKeys::AboveTarget) => {
            format!("({v} % 8) * 1000003 + ({v} * 7919) % 1000003 + {NEW_ORDER_OFFSET}")
        }
        Some(NewKeys::InsideTarget) => {
            format!("({v} % 8) * 1000003 + ({v} * 7919 + 1) % 1000003")
        }
    };
    let exprs = [
        format!("CAST(2450820 + ({v} * 31 + {salt}) % 2000 AS INT)"),
        int(17, 86400),
        format!("CAST({v} / 8 AS INT)"),
        nullable(29, 7919, 100000),
        nullable(31, 104729, 1920800),
        int(7, 7200),
        int(1009, 50000),
        nullable(37, 6131, 100000),
        int(130363, 1920800),
        int(11, 7200),
        int(1013, 50000),
        int(3, 60),
        int(5, 35),
        order,
        format!("CAST(1 + ({v} * 13 + {salt}) % 100 AS INT)"),
        dec(7717),
        dec(313),
        dec(7723),
        dec(97),
        dec(4001),
        dec(6007),
        dec(5003),
        dec(3001),
        dec(8009),
    ];
    exprs
        .iter()
        .zip(COLUMNS.iter())
        .map(|(e, (n, _))| format!("{e} AS {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Which target rows a source takes: integer tests on `v`, mirrored in Rust.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sample {
    None,
    /// Rows whose hash falls below `per_million` / 1e6.
    Hashed {
        per_million: u64,
        seed: u64,
    },
    /// `count` rows from `start`, every `stride`-th.
    Strided {
        start: u64,
        stride: u64,
        count: u64,
    },
}

const HASH_MULT: [u64; 2] = [2_654_435_761, 40_503];

impl Sample {
    pub fn fraction(fraction: f64, seed: u64) -> Self {
        let per_million = (fraction * 1e6).round() as u64;
        if per_million == 0 {
            Sample::None
        } else {
            Sample::Hashed { per_million, seed }
        }
    }

    /// SQL predicate on `value`.
    fn sql(&self) -> String {
        match *self {
            Sample::None => "false".into(),
            Sample::Hashed { per_million, seed } => format!(
                "(value * {} + {seed}) % 1000000 < {per_million}",
                HASH_MULT[(seed % 2) as usize]
            ),
            Sample::Strided {
                start,
                stride,
                count,
            } => format!(
                "value >= {start} AND value < {} AND (value - {start}) % {stride} = 0",
                start + stride * count
            ),
        }
    }

    pub fn contains(&self, v: u64) -> bool {
        match *self {
            Sample::None => false,
            Sample::Hashed { per_million, seed } => {
                (v * HASH_MULT[(seed % 2) as usize] + seed) % 1_000_000 < per_million
            }
            Sample::Strided {
                start,
                stride,
                count,
            } => v >= start && v < start + stride * count && (v - start).is_multiple_of(stride),
        }
    }

    /// The bounds of `v` this sample can take within `[0, rows)`.
    fn range(&self, rows: u64) -> (u64, u64) {
        match *self {
            Sample::Strided {
                start,
                stride,
                count,
            } => (start, (start + stride * count).min(rows)),
            _ => (0, rows),
        }
    }
}

/// A source: rows matching target rows (updated values) plus new rows.
#[derive(Debug, Clone, Copy)]
pub struct SourceSpec {
    pub matched: Sample,
    pub new: Sample,
    /// Where the new rows' keys lie.
    pub new_keys: NewKeys,
    /// Matched rows keep the target's values (for a no-op update).
    pub identical: bool,
}

/// The target layout: `rows` rows in `files` files of consecutive rows.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    pub rows: u64,
    pub files: u64,
}

impl Layout {
    /// `rows` in `files`, refused when a file would get fewer than 8 rows.
    pub fn checked(rows: u64, files: u64) -> anyhow::Result<Layout> {
        if files == 0 || rows < files * 8 {
            anyhow::bail!("need --files > 0 and at least 8 rows per file");
        }
        Ok(Layout { rows, files })
    }

    pub fn per_file(&self) -> u64 {
        self.rows.div_ceil(self.files)
    }

    pub fn file_range(&self, f: u64) -> (u64, u64) {
        let per = self.per_file();
        (f * per, ((f + 1) * per).min(self.rows))
    }

    /// Indexes of the files that hold at least one row of `sample`.
    pub fn touched_files(&self, sample: &Sample) -> Vec<u64> {
        let (lo, hi) = sample.range(self.rows);
        (0..self.files)
            .filter(|&f| {
                let (a, b) = self.file_range(f);
                (a.max(lo)..b.min(hi)).any(|v| sample.contains(v))
            })
            .collect()
    }

    /// Rows of `sample` within `[0, rows)`.
    pub fn count(&self, sample: &Sample) -> u64 {
        let (lo, hi) = sample.range(self.rows);
        (lo..hi).filter(|&v| sample.contains(v)).count() as u64
    }
}

/// Path of target file `f` in `dir`.
pub fn target_file(dir: &Path, f: u64) -> PathBuf {
    dir.join(format!("part-{f:03}.parquet"))
}

/// `dir/.name`: where a file is written before it is renamed into place
/// (hidden from the peers' `*.parquet` glob).
fn hidden(path: &Path) -> PathBuf {
    let name = path.file_name().expect("file name").to_string_lossy();
    path.with_file_name(format!(".{name}"))
}

const COPY_OPTIONS: &str = "STORED AS PARQUET OPTIONS ('format.compression' 'zstd(1)')";

/// Writes the target files into `dir` (skipped when all already exist).
pub async fn write_target(s: &Session, layout: Layout, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    for f in 0..layout.files {
        let path = target_file(dir, f);
        if path.exists() {
            continue;
        }
        let (lo, hi) = layout.file_range(f);
        let tmp = hidden(&path);
        s.execute_one(&format!(
            "COPY (SELECT {} FROM generate_series({lo}, {}) ORDER BY value) TO '{}' {COPY_OPTIONS}",
            row_select("value", 0, None),
            hi - 1,
            tmp.display()
        ))
        .await?;
        std::fs::rename(&tmp, &path)?;
    }
    Ok(())
}

/// Writes the source of `spec` over target rows `[0, rows)` to `path`
/// (skipped when it exists).
pub async fn write_source(s: &Session, rows: u64, spec: &SourceSpec, path: &Path) -> Result<()> {
    if path.exists() {
        return Ok(());
    }
    let salt = if spec.identical { 0 } else { 1 };
    let (mlo, mhi) = spec.matched.range(rows);
    let (nlo, nhi) = spec.new.range(rows);
    let tmp = hidden(path);
    s.execute_one(&format!(
        "COPY (SELECT {} FROM generate_series({mlo}, {}) WHERE {} \
         UNION ALL SELECT {} FROM generate_series({nlo}, {}) WHERE {}) TO '{}' {COPY_OPTIONS}",
        row_select("value", salt, None),
        mhi.max(mlo + 1) - 1,
        spec.matched.sql(),
        row_select("value", 2, Some(spec.new_keys)),
        nhi.max(nlo + 1) - 1,
        spec.new.sql(),
        tmp.display()
    ))
    .await?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}
