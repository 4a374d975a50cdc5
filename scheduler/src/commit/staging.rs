//! The identity of the snapshot being produced and the files it writes:
//! names for them, and the list that is deleted if the commit fails.

use datafusion::error::DataFusionError;
use iceberg::io::FileIO;
use iceberg::spec::{FormatVersion, TableMetadata};
use iceberg::table::Table;
use iceberg::TableIdent;
use icemerge_proto::error::io_error;
use uuid::Uuid;

/// One commit attempt's new snapshot and everything it has written.
pub(crate) struct Staging {
    pub ident: TableIdent,
    pub file_io: FileIO,
    pub format_version: FormatVersion,
    pub snapshot_id: i64,
    /// `<table location>/metadata`.
    metadata_dir: String,
    commit_uuid: Uuid,
    manifests: usize,
    /// Every file this commit wrote or started writing.
    written: Vec<String>,
}

impl Staging {
    pub(crate) fn new(base: &Table) -> Self {
        let metadata = base.metadata();
        Staging {
            ident: base.identifier().clone(),
            file_io: base.file_io().clone(),
            format_version: metadata.format_version(),
            snapshot_id: new_snapshot_id(metadata),
            metadata_dir: format!("{}/metadata", metadata.location().trim_end_matches('/')),
            commit_uuid: Uuid::new_v4(),
            manifests: 0,
            written: vec![],
        }
    }

    /// The path of the next new manifest, recorded as written.
    pub(crate) fn next_manifest_path(&mut self) -> String {
        let path = format!(
            "{}/{}-m{}.avro",
            self.metadata_dir, self.commit_uuid, self.manifests
        );
        self.manifests += 1;
        self.record(path)
    }

    /// The path of the manifest list, recorded as written.
    pub(crate) fn manifest_list_path(&mut self) -> String {
        let path = format!(
            "{}/snap-{}-{}.avro",
            self.metadata_dir, self.snapshot_id, self.commit_uuid
        );
        self.record(path)
    }

    /// Records `path` as written (before it is written) and returns it.
    pub(crate) fn record(&mut self, path: String) -> String {
        self.written.push(path.clone());
        path
    }

    /// Maps an iceberg error of step `what` to the commit's error.
    pub(crate) fn err(&self, what: &str) -> impl Fn(iceberg::Error) -> DataFusionError {
        commit_err(&self.ident, what)
    }

    /// Deletes `path`, written by this commit and no longer part of it,
    /// and forgets it (best effort: a file left behind is an orphan, not
    /// part of the table).
    pub(crate) async fn discard(&mut self, path: &str) {
        self.written.retain(|p| p != path);
        delete_files(&self.file_io, &[path.to_string()]).await;
    }

    /// The files written so far, now the caller's to keep or delete.
    pub(crate) fn into_written(self) -> Vec<String> {
        self.written
    }
}

/// Maps an iceberg error of step `what` of a commit to `ident`.
pub(crate) fn commit_err(
    ident: &TableIdent,
    what: &str,
) -> impl Fn(iceberg::Error) -> DataFusionError {
    let what = what.to_string();
    let ident = ident.clone();
    move |e| io_error(format!("commit to {ident}: {what}: {e}"))
}

/// Best-effort deletion of what a failed commit wrote.
pub(crate) async fn delete_files(file_io: &FileIO, paths: &[String]) {
    for path in paths {
        if let Err(e) = file_io.delete(path).await {
            tracing::debug!("could not delete {path} after a failed commit: {e}");
        }
    }
}

/// A random positive snapshot id not used by the table.
fn new_snapshot_id(metadata: &TableMetadata) -> i64 {
    loop {
        let (high, low) = Uuid::new_v4().as_u64_pair();
        let id = ((high ^ low) & (i64::MAX as u64)) as i64;
        if id != 0 && metadata.snapshot_by_id(id).is_none() {
            return id;
        }
    }
}
