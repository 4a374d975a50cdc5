//! Table maintenance procedures (`CALL system.<procedure>(...)`, Trino's
//! `ALTER TABLE ... EXECUTE`), parsed and bound by
//! `icemerge_planner::procedures`, run here against the catalog:
//!
//! - `snapshot_ref`: `rollback_to_snapshot`, `set_current_snapshot` (one
//!   metadata commit moving the main branch);
//! - `cherrypick`: `cherrypick_snapshot` (an append snapshot applied to the
//!   current state: fast-forward, or its files appended again);
//! - `expire_snapshots`: snapshots dropped from the metadata, then the
//!   files only they reached deleted;
//! - `remove_orphan_files`: files under the table location that no
//!   metadata names, older than a cutoff, deleted;
//! - `rewrite_data_files` (and Trino's `optimize`): compaction — the data
//!   files Iceberg's bin-pack rules choose (`rewrite_groups`), in groups
//!   per partition, rewritten on the engine with their deletes applied into
//!   files of the target size, bin-packed or sorted, committed as one
//!   `replace` snapshot; a group a concurrent commit changed is dropped;
//! - `rewrite_manifests`: the current snapshot's manifests regrouped by
//!   partition into manifests of the target size, committed as one
//!   `replace` snapshot (no data file read or written);
//! - `reachable`: which files a set of snapshots reaches (manifest lists,
//!   manifests, content files), read a few manifests at a time.
//!
//! Only `rewrite_data_files` runs a plan on the engine; the others read
//! metadata and delete files from the coordinator. Each result is one
//! batch of Spark's columns.

mod cherrypick;
mod expire_snapshots;
mod reachable;
mod remove_orphan_files;
mod rewrite_data_files;
mod rewrite_groups;
mod rewrite_manifests;
mod snapshot_ref;

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::error::Result;
use iceberg::spec::{SnapshotReference, TableMetadata};
use iceberg::table::Table;
use iceberg::TableIdent;
use icemerge_executor::iceberg_err;
use icemerge_planner::procedures::{Procedure, ProcedureCall};
use icemerge_proto::error::{internal, not_found};

use crate::catalog::OpenCatalog;
use crate::session::{Session, StatementOutput};

/// How many files are deleted at once unless `max_concurrent_deletes` says.
const DELETE_CONCURRENCY: usize = 16;

/// Runs `call` on the table `ident`.
pub async fn run_procedure(
    session: &Session,
    ident: &TableIdent,
    call: ProcedureCall,
) -> Result<StatementOutput> {
    let catalog = session.open_catalog();
    let what = format!("{} on {ident}", call.name);
    if !catalog
        .catalog
        .table_exists(ident)
        .await
        .map_err(iceberg_err)?
    {
        return Err(not_found(format!("{what}: table '{ident}' does not exist")));
    }
    match call.procedure {
        Procedure::RollbackToSnapshot { snapshot_id } => {
            snapshot_ref::rollback_to_snapshot(catalog, ident, snapshot_id, &what).await
        }
        Procedure::CherrypickSnapshot { snapshot_id } => {
            cherrypick::cherrypick_snapshot(catalog, ident, snapshot_id, &what).await
        }
        Procedure::SetCurrentSnapshot {
            snapshot_id,
            reference,
        } => {
            snapshot_ref::set_current_snapshot(catalog, ident, snapshot_id, reference, &what).await
        }
        Procedure::ExpireSnapshots {
            older_than,
            retain_last,
            snapshot_ids,
            max_concurrent_deletes,
        } => {
            let options = expire_snapshots::ExpireOptions {
                older_than,
                retain_last,
                snapshot_ids,
                concurrency: max_concurrent_deletes.unwrap_or(DELETE_CONCURRENCY),
            };
            expire_snapshots::expire_snapshots(catalog, ident, options, &what).await
        }
        Procedure::RewriteDataFiles(args) => {
            rewrite_data_files::rewrite_data_files(session, ident, args, &what).await
        }
        Procedure::RewriteManifests { spec_id } => {
            rewrite_manifests::rewrite_manifests(session, ident, spec_id).await
        }
        Procedure::RemoveOrphanFiles {
            older_than,
            location,
            dry_run,
            max_concurrent_deletes,
        } => {
            let options = remove_orphan_files::OrphanOptions {
                older_than,
                location,
                dry_run,
                concurrency: max_concurrent_deletes.unwrap_or(DELETE_CONCURRENCY),
            };
            remove_orphan_files::remove_orphan_files(catalog, ident, options, &what).await
        }
    }
}

async fn load(catalog: &OpenCatalog, ident: &TableIdent) -> Result<Table> {
    catalog.catalog.load_table(ident).await.map_err(iceberg_err)
}

/// Milliseconds since the epoch, now.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// One row of named Int64 columns (NULL where the value is None).
fn long_row(columns: &[(&str, Option<i64>)]) -> StatementOutput {
    let schema = Arc::new(Schema::new(
        columns
            .iter()
            .map(|(name, _)| Field::new(*name, DataType::Int64, true))
            .collect::<Vec<_>>(),
    ));
    let arrays: Vec<ArrayRef> = columns
        .iter()
        .map(|(_, v)| Arc::new(Int64Array::from(vec![*v])) as ArrayRef)
        .collect();
    let batch = RecordBatch::try_new(schema.clone(), arrays).expect("columns match schema");
    StatementOutput::Rows {
        schema,
        batches: vec![batch],
    }
}

/// One string column `name`, a row per value.
fn string_rows(name: &str, values: Vec<String>) -> StatementOutput {
    let schema = Arc::new(Schema::new(vec![Field::new(name, DataType::Utf8, false)]));
    let array: ArrayRef = Arc::new(StringArray::from(values));
    let batch = RecordBatch::try_new(schema.clone(), vec![array]).expect("column matches schema");
    StatementOutput::Rows {
        schema,
        batches: vec![batch],
    }
}

/// The branches and tags of a table, by name. Read from the metadata's JSON
/// form (the spec's `refs`): the Iceberg library keeps them private.
fn table_refs(metadata: &TableMetadata) -> Result<BTreeMap<String, SnapshotReference>> {
    let json = serde_json::to_value(metadata)
        .map_err(|e| internal(format!("table metadata as JSON: {e}")))?;
    match json.get("refs") {
        None | Some(serde_json::Value::Null) => Ok(BTreeMap::new()),
        Some(refs) => serde_json::from_value(refs.clone())
            .map_err(|e| internal(format!("the refs of the table metadata: {e}"))),
    }
}
