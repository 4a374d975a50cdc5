//! Metadata-only DELETE: when the WHERE clause (no subquery, every conjunct
//! an Iceberg predicate) provably holds for every row of every data file it
//! can match — a whole partition, or files whose column bounds and null
//! counts prove it — and none of those files has delete files, the DELETE
//! drops the files from the table in one `delete` snapshot without reading
//! or writing any data file, as Iceberg's own engines do. Otherwise the
//! DELETE runs through the stage graph.

use std::collections::{HashMap, HashSet};

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::error::Result;
use datafusion::logical_expr::{Expr, LogicalPlan};
use iceberg::expr::{Bind, BoundPredicate, Predicate, PredicateOperator};
use iceberg::spec::{DataFile, Datum, ManifestStatus, PrimitiveType, Type};
use iceberg::table::Table;
use icemerge_executor::iceberg_err;
use icemerge_executor::merge_writer::TargetFiles;
use icemerge_proto::error::io_error;

use crate::catalog::manifests::{data_manifests, load_manifests};
use icemerge_executor::filter_pushdown::to_exact_iceberg_predicate;

/// The data files a metadata-only DELETE drops: path and record count.
#[derive(Debug, Clone, Default)]
pub struct MetadataDelete {
    pub files: Vec<(String, u64)>,
}

impl MetadataDelete {
    pub fn rows(&self) -> u64 {
        self.files.iter().map(|(_, rows)| rows).sum()
    }
}

/// The DELETE's WHERE as an exact Iceberg predicate: `AlwaysTrue` without
/// one; `None` when it has a subquery or a conjunct Iceberg cannot express.
/// `logical` is the DELETE's classification plan over `relation`.
pub(super) fn exact_delete_predicate(logical: &LogicalPlan, relation: &str) -> Option<Predicate> {
    let mut filter: Option<Option<Expr>> = None;
    let mut scans = 0;
    let _ = logical.apply(|node| {
        match node {
            LogicalPlan::Filter(f) if reads(&f.input, relation) => {
                filter = Some(Some(f.predicate.clone()));
            }
            LogicalPlan::TableScan(scan) if scan.table_name.table() == relation => scans += 1,
            _ => {}
        }
        Ok(TreeNodeRecursion::Continue)
    });
    if scans != 1 {
        return None;
    }
    match filter {
        None => Some(Predicate::AlwaysTrue),
        Some(Some(predicate)) => {
            let has_subquery = predicate
                .exists(|e| {
                    Ok(matches!(
                        e,
                        Expr::ScalarSubquery(_) | Expr::Exists(_) | Expr::InSubquery(_)
                    ))
                })
                .unwrap_or(true);
            if has_subquery {
                return None;
            }
            to_exact_iceberg_predicate(&predicate)
        }
        Some(None) => None,
    }
}

/// Whether `plan` is the scan of `relation` (under aliases).
fn reads(plan: &LogicalPlan, relation: &str) -> bool {
    match plan {
        LogicalPlan::TableScan(scan) => scan.table_name.table() == relation,
        LogicalPlan::SubqueryAlias(alias) => reads(&alias.input, relation),
        _ => false,
    }
}

/// The metadata-only DELETE of `targets` (the files the scan would read,
/// pruned by `predicate`), or `None` when a file may hold a row the
/// predicate does not match, or has delete files.
pub(super) async fn metadata_only_delete(
    base: &Table,
    targets: &TargetFiles,
    predicate: &Predicate,
) -> Result<Option<MetadataDelete>> {
    if targets.rows.is_empty() || !targets.deletes.is_empty() {
        return Ok(None);
    }
    let metadata = base.metadata();
    let Some(snapshot) = metadata.current_snapshot() else {
        return Ok(None);
    };
    let bound = predicate
        .bind(metadata.current_schema().clone(), true)
        .map_err(iceberg_err)?;
    let data_manifests = data_manifests(base, snapshot).await.map_err(iceberg_err)?;
    let manifests = load_manifests(base.file_io(), &data_manifests)
        .await
        .map_err(|e| io_error(e.to_string()))?;
    let wanted: HashSet<&str> = targets.rows.keys().map(String::as_str).collect();
    let mut files = HashMap::new();
    for manifest in &manifests {
        for entry in manifest.entries() {
            let file = entry.data_file();
            if entry.status() == ManifestStatus::Deleted || !wanted.contains(file.file_path()) {
                continue;
            }
            if !always_true(&bound, file) {
                return Ok(None);
            }
            files.insert(file.file_path().to_string(), file.record_count());
        }
    }
    if files.len() != wanted.len() {
        return Ok(None);
    }
    let mut files: Vec<(String, u64)> = files.into_iter().collect();
    files.sort();
    Ok(Some(MetadataDelete { files }))
}

/// Whether `predicate` holds for every row of `file`, as its statistics
/// prove (false whenever they do not).
fn always_true(predicate: &BoundPredicate, file: &DataFile) -> bool {
    match predicate {
        BoundPredicate::AlwaysTrue => true,
        BoundPredicate::AlwaysFalse => false,
        BoundPredicate::And(and) => and.inputs().iter().all(|p| always_true(p, file)),
        BoundPredicate::Or(or) => or.inputs().iter().any(|p| always_true(p, file)),
        BoundPredicate::Not(_) => false,
        BoundPredicate::Unary(e) => {
            let field = e.term().field();
            let nulls = file.null_value_counts().get(&field.id).copied();
            match e.op() {
                PredicateOperator::IsNull => nulls == Some(file.record_count()),
                PredicateOperator::NotNull => nulls == Some(0),
                _ => false,
            }
        }
        BoundPredicate::Binary(e) => {
            let field = e.term().field();
            let Some((lower, upper)) = bounds(file, field.id, &field.field_type) else {
                return false;
            };
            let literal = e.literal();
            match e.op() {
                PredicateOperator::LessThan => upper < literal,
                PredicateOperator::LessThanOrEq => upper <= literal,
                PredicateOperator::GreaterThan => lower > literal,
                PredicateOperator::GreaterThanOrEq => lower >= literal,
                PredicateOperator::Eq => lower == literal && upper == literal,
                PredicateOperator::NotEq => literal < lower || literal > upper,
                _ => false,
            }
        }
        BoundPredicate::Set(e) => {
            let field = e.term().field();
            let Some((lower, upper)) = bounds(file, field.id, &field.field_type) else {
                return false;
            };
            match e.op() {
                PredicateOperator::In => lower == upper && e.literals().contains(lower),
                _ => false,
            }
        }
    }
}

/// The column's lower and upper bounds when they cover every row: no NULL
/// (and, for floating point columns, no NaN) in the file.
fn bounds<'a>(file: &'a DataFile, id: i32, field_type: &Type) -> Option<(&'a Datum, &'a Datum)> {
    if file.null_value_counts().get(&id) != Some(&0) {
        return None;
    }
    let floating = matches!(
        field_type,
        Type::Primitive(PrimitiveType::Float | PrimitiveType::Double)
    );
    if floating && file.nan_value_counts().get(&id) != Some(&0) {
        return None;
    }
    Some((file.lower_bounds().get(&id)?, file.upper_bounds().get(&id)?))
}
