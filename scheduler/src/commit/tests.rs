use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use arrow::array::{Array, ArrayRef, Int64Array, RecordBatch, StringArray};
use datafusion::parquet::file::properties::WriterProperties;
use futures::TryStreamExt;
use iceberg::arrow::schema_to_arrow_schema;
use iceberg::spec::{DataFileFormat, ManifestStatus, NestedField, PrimitiveType, Schema, Type};
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::writer::base_writer::data_file_writer::DataFileWriterBuilder;
use iceberg::writer::file_writer::location_generator::{
    DefaultFileNameGenerator, DefaultLocationGenerator,
};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};
use iceberg::{NamespaceIdent, TableCreation};
use tempfile::TempDir;

use super::*;
use crate::catalog::{open_catalog, CatalogOptions, OpenCatalog};
use datafusion::error::Result;
use iceberg::spec::{DataFile, ManifestEntryRef, ManifestFile, Operation, Snapshot};
use iceberg::table::Table;
use iceberg::TableIdent;
use std::collections::HashMap;
use std::sync::Arc;
use uuid::Uuid;

struct Fixture {
    _dir: TempDir,
    uri: String,
    open: OpenCatalog,
    ident: TableIdent,
}

impl Fixture {
    async fn new() -> Fixture {
        let dir = TempDir::new().unwrap();
        let warehouse = dir.path().join("wh");
        let open = open_catalog(&CatalogOptions {
            warehouse: warehouse.clone(),
            catalog_uri: None,
            ..Default::default()
        })
        .await
        .unwrap();
        let uri = format!("sqlite://{}/catalog.db?mode=rwc", warehouse.display());
        let namespace = NamespaceIdent::new("ns".to_string());
        open.catalog
            .create_namespace(&namespace, HashMap::new())
            .await
            .unwrap();
        let schema = Schema::builder()
            .with_schema_id(0)
            .with_fields(vec![
                NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
                NestedField::optional(2, "name", Type::Primitive(PrimitiveType::String)).into(),
            ])
            .build()
            .unwrap();
        let creation = TableCreation::builder()
            .name("t".to_string())
            .schema(schema)
            .build();
        open.catalog
            .create_table(&namespace, creation)
            .await
            .unwrap();
        let ident = TableIdent::new(namespace, "t".to_string());
        Fixture {
            _dir: dir,
            uri,
            open,
            ident,
        }
    }

    async fn load(&self) -> Table {
        self.open.catalog.load_table(&self.ident).await.unwrap()
    }

    /// Appends one snapshot with the given files (one manifest).
    async fn append(&self, files: Vec<DataFile>) -> Table {
        let table = self.load().await;
        let tx = Transaction::new(&table);
        let tx = tx.fast_append().add_data_files(files).apply(tx).unwrap();
        tx.commit(self.open.catalog.as_ref()).await.unwrap()
    }

    /// Commits on `base` as a serializable statement over the whole table.
    async fn commit(&self, base: &Table, commit: OverwriteCommit) -> Result<CommitOutcome> {
        let context = CommitContext::copy_on_write(
            base.metadata().current_snapshot_id(),
            IsolationLevel::Serializable,
            ConflictFilter::WholeTable,
        );
        self.commit_with(base, commit, &context).await
    }

    async fn commit_with(
        &self,
        base: &Table,
        commit: OverwriteCommit,
        context: &CommitContext,
    ) -> Result<CommitOutcome> {
        commit_overwrite(&self.open, base, commit, context).await
    }

    async fn catalog_location(&self) -> Option<String> {
        current_metadata_location(&self.uri, &self.open.name, &self.ident)
            .await
            .unwrap()
    }
}

/// Writes one Parquet data file with rows (id, "n<id>").
async fn write_file(table: &Table, ids: &[i64]) -> DataFile {
    let schema = table.metadata().current_schema().clone();
    let arrow_schema = Arc::new(schema_to_arrow_schema(&schema).unwrap());
    let names: Vec<String> = ids.iter().map(|i| format!("n{i}")).collect();
    let batch = RecordBatch::try_new(
        arrow_schema,
        vec![
            Arc::new(Int64Array::from(ids.to_vec())) as ArrayRef,
            Arc::new(StringArray::from(names)) as ArrayRef,
        ],
    )
    .unwrap();
    let parquet = ParquetWriterBuilder::new(WriterProperties::default(), schema);
    let rolling = RollingFileWriterBuilder::new_with_default_file_size(
        parquet,
        table.file_io().clone(),
        DefaultLocationGenerator::new(table.metadata()).unwrap(),
        DefaultFileNameGenerator::new(Uuid::new_v4().to_string(), None, DataFileFormat::Parquet),
    );
    let mut writer = DataFileWriterBuilder::new(rolling)
        .build(None)
        .await
        .unwrap();
    writer.write(batch).await.unwrap();
    let mut files = writer.close().await.unwrap();
    assert_eq!(files.len(), 1);
    files.pop().unwrap()
}

async fn rows(table: &Table) -> Vec<i64> {
    let batches: Vec<RecordBatch> = table
        .scan()
        .build()
        .unwrap()
        .to_arrow()
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let mut ids = vec![];
    for batch in batches {
        let column = batch.column_by_name("id").unwrap();
        let column = column.as_any().downcast_ref::<Int64Array>().unwrap();
        ids.extend((0..column.len()).map(|i| column.value(i)));
    }
    ids.sort();
    ids
}

async fn manifests(table: &Table) -> Vec<(ManifestFile, Vec<ManifestEntryRef>)> {
    let snapshot = table.metadata().current_snapshot().unwrap();
    let list = table.manifest_list_reader(snapshot).load().await.unwrap();
    let mut out = vec![];
    for manifest_file in list.entries() {
        let manifest = manifest_file.load_manifest(table.file_io()).await.unwrap();
        out.push((manifest_file.clone(), manifest.entries().to_vec()));
    }
    out
}

fn metadata_dir(table: &Table) -> PathBuf {
    let location = table.metadata().location().trim_start_matches("file://");
    Path::new(location).join("metadata")
}

fn listing(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect()
}

fn overwrite(added: Vec<DataFile>, removed: &[&DataFile]) -> OverwriteCommit {
    OverwriteCommit {
        added,
        removed: removed.iter().map(|f| f.file_path().to_string()).collect(),
        summary: HashMap::new(),
        operation: Operation::Overwrite,
    }
}

/// Table with three snapshots of one file each: ids 1-2, 3-4, 5-6.
async fn three_files(fx: &Fixture) -> (Table, [DataFile; 3]) {
    let table = fx.load().await;
    let f1 = write_file(&table, &[1, 2]).await;
    let f2 = write_file(&table, &[3, 4]).await;
    let f3 = write_file(&table, &[5, 6]).await;
    fx.append(vec![f1.clone()]).await;
    fx.append(vec![f2.clone()]).await;
    let table = fx.append(vec![f3.clone()]).await;
    (table, [f1, f2, f3])
}

#[tokio::test(flavor = "multi_thread")]
async fn overwrite_commit_removes_and_adds() {
    let fx = Fixture::new().await;
    let (base, [f1, f2, f3]) = three_files(&fx).await;
    let before = manifests(&base).await;
    assert_eq!(before.len(), 3);
    let base_snapshot = base.metadata().current_snapshot().unwrap().clone();
    let new = write_file(&base, &[7, 8]).await;

    let mut commit = overwrite(vec![new.clone()], &[&f2]);
    commit
        .summary
        .insert("icemerge.rows-updated".into(), "2".into());
    let outcome = fx.commit(&base, commit).await.unwrap();
    let CommitOutcome::Committed { snapshot_id, .. } = outcome else {
        panic!("{outcome:?}")
    };

    let table = fx.load().await;
    let snapshot = table.metadata().current_snapshot().unwrap();
    assert_overwrite_snapshot(&table, &base_snapshot, snapshot_id, [&f1, &f3, &new]);

    assert_eq!(rows(&table).await, vec![1, 2, 5, 6, 7, 8]);

    // Manifests: f1's and f3's carried as-is, f2's dropped and f2 recorded
    // as Deleted in a new manifest, the new file Added in another.
    let after = manifests(&table).await;
    assert_overwrite_manifests(&before, &after, &f2, &new, snapshot);

    // The catalog row points at the new metadata file.
    let location = fx.catalog_location().await.unwrap();
    assert_eq!(Some(location.as_str()), table.metadata_location());
    assert_ne!(Some(location.as_str()), base.metadata_location());
    assert_eq!(table.metadata().snapshots().count(), 4);
}

/// The snapshot and summary of `overwrite_commit_removes_and_adds`.
fn assert_overwrite_snapshot(
    table: &Table,
    base_snapshot: &Snapshot,
    snapshot_id: i64,
    [f1, f3, new]: [&DataFile; 3],
) {
    let snapshot = table.metadata().current_snapshot().unwrap();
    assert_eq!(snapshot.snapshot_id(), snapshot_id);
    assert_eq!(snapshot.summary().operation, Operation::Overwrite);
    assert_eq!(
        snapshot.parent_snapshot_id(),
        Some(base_snapshot.snapshot_id())
    );
    assert_eq!(
        snapshot.sequence_number(),
        base_snapshot.sequence_number() + 1
    );
    assert_eq!(
        table.metadata().last_sequence_number(),
        snapshot.sequence_number()
    );
    let props = &snapshot.summary().additional_properties;
    assert_eq!(props.get("added-data-files").map(String::as_str), Some("1"));
    assert_eq!(
        props.get("deleted-data-files").map(String::as_str),
        Some("1")
    );
    assert_eq!(props.get("added-records").map(String::as_str), Some("2"));
    assert_eq!(props.get("deleted-records").map(String::as_str), Some("2"));
    assert_eq!(props.get("total-data-files").map(String::as_str), Some("3"));
    assert_eq!(props.get("total-records").map(String::as_str), Some("6"));
    let total_size = f1.file_size_in_bytes() + f3.file_size_in_bytes() + new.file_size_in_bytes();
    assert_eq!(props.get("total-files-size"), Some(&total_size.to_string()));
    assert_eq!(
        props.get("icemerge.rows-updated").map(String::as_str),
        Some("2")
    );
    assert!(snapshot
        .manifest_list()
        .contains(&format!("/metadata/snap-{snapshot_id}-")));
}

type Manifests = Vec<(ManifestFile, Vec<ManifestEntryRef>)>;

/// The manifests of `overwrite_commit_removes_and_adds`.
fn assert_overwrite_manifests(
    before: &Manifests,
    after: &Manifests,
    f2: &DataFile,
    new: &DataFile,
    snapshot: &Snapshot,
) {
    let snapshot_id = snapshot.snapshot_id();
    let carried: Vec<&ManifestFile> = after
        .iter()
        .map(|(m, _)| m)
        .filter(|m| before.iter().any(|(b, _)| b == *m))
        .collect();
    assert_eq!(carried.len(), 2);
    for (old, entries) in before {
        let path = entries[0].file_path();
        if path == f2.file_path() {
            assert!(!after
                .iter()
                .any(|(m, _)| m.manifest_path == old.manifest_path));
        } else {
            assert!(
                after.iter().any(|(m, _)| m == old),
                "manifest of {path} not carried"
            );
        }
    }
    let new_manifests: Vec<_> = after
        .iter()
        .filter(|(m, _)| m.added_snapshot_id == snapshot_id)
        .collect();
    assert_eq!(new_manifests.len(), 2);
    let f2_seq = before
        .iter()
        .find(|(_, e)| e[0].file_path() == f2.file_path())
        .unwrap()
        .1[0]
        .sequence_number();
    let deleted: Vec<&ManifestEntryRef> = after
        .iter()
        .flat_map(|(_, e)| e)
        .filter(|e| e.status() == ManifestStatus::Deleted)
        .collect();
    assert_eq!(deleted.len(), 1);
    assert_eq!(deleted[0].file_path(), f2.file_path());
    assert_eq!(deleted[0].snapshot_id(), Some(snapshot_id));
    assert_eq!(deleted[0].sequence_number(), f2_seq);
    let added: Vec<&ManifestEntryRef> = after
        .iter()
        .flat_map(|(_, e)| e)
        .filter(|e| e.status() == ManifestStatus::Added && e.snapshot_id() == Some(snapshot_id))
        .collect();
    assert_eq!(added.len(), 1);
    assert_eq!(added[0].file_path(), new.file_path());
    assert_eq!(added[0].sequence_number(), Some(snapshot.sequence_number()));
}

#[tokio::test(flavor = "multi_thread")]
async fn partly_hit_manifest_is_rewritten_with_existing_survivors() {
    let fx = Fixture::new().await;
    let table = fx.load().await;
    let fa = write_file(&table, &[1]).await;
    let fb = write_file(&table, &[2]).await;
    let fc = write_file(&table, &[3]).await;
    let base = fx.append(vec![fa.clone(), fb.clone(), fc.clone()]).await;
    let base_snapshot = base.metadata().current_snapshot().unwrap().clone();
    let before = manifests(&base).await;
    assert_eq!(before.len(), 1);

    let CommitOutcome::Committed { snapshot_id, .. } =
        fx.commit(&base, overwrite(vec![], &[&fb])).await.unwrap()
    else {
        panic!()
    };
    let table = fx.load().await;
    assert_eq!(rows(&table).await, vec![1, 3]);
    let after = manifests(&table).await;
    assert_eq!(after.len(), 1);
    let (manifest, entries) = &after[0];
    assert_eq!(manifest.added_snapshot_id, snapshot_id);
    assert_eq!(manifest.existing_files_count, Some(2));
    assert_eq!(manifest.deleted_files_count, Some(1));
    assert_eq!(
        manifest.min_sequence_number,
        base_snapshot.sequence_number()
    );
    for entry in entries {
        if entry.file_path() == fb.file_path() {
            assert_eq!(entry.status(), ManifestStatus::Deleted);
            assert_eq!(entry.snapshot_id(), Some(snapshot_id));
        } else {
            assert_eq!(entry.status(), ManifestStatus::Existing);
            assert_eq!(entry.snapshot_id(), Some(base_snapshot.snapshot_id()));
        }
        assert_eq!(
            entry.sequence_number(),
            Some(base_snapshot.sequence_number())
        );
        assert_eq!(
            entry.file_sequence_number,
            Some(base_snapshot.sequence_number())
        );
    }

    let table = second_removal_keeps_survivor_history(&fx, &table, &fa, &fc, &base_snapshot).await;
    removing_the_last_then_appending(&fx, &table, &fc).await;
}

/// A second commit removing the rest: Deleted entries of earlier
/// commits are not carried along, the survivors' history is kept.
async fn second_removal_keeps_survivor_history(
    fx: &Fixture,
    table: &Table,
    fa: &DataFile,
    fc: &DataFile,
    base_snapshot: &Snapshot,
) -> Table {
    let CommitOutcome::Committed {
        snapshot_id: second,
        ..
    } = fx.commit(table, overwrite(vec![], &[fa])).await.unwrap()
    else {
        panic!()
    };
    let table = fx.load().await;
    assert_eq!(rows(&table).await, vec![3]);
    let after = manifests(&table).await;
    assert_eq!(after.len(), 1);
    let entries = &after[0].1;
    assert_eq!(entries.len(), 2);
    let fa_entry = entries
        .iter()
        .find(|e| e.file_path() == fa.file_path())
        .unwrap();
    assert_eq!(
        (fa_entry.status(), fa_entry.snapshot_id()),
        (ManifestStatus::Deleted, Some(second))
    );
    let fc_entry = entries
        .iter()
        .find(|e| e.file_path() == fc.file_path())
        .unwrap();
    assert_eq!(
        (fc_entry.status(), fc_entry.snapshot_id()),
        (ManifestStatus::Existing, Some(base_snapshot.snapshot_id()))
    );
    let props = &table
        .metadata()
        .current_snapshot()
        .unwrap()
        .summary()
        .additional_properties;
    assert_eq!(props.get("total-data-files").map(String::as_str), Some("1"));
    assert_eq!(props.get("total-records").map(String::as_str), Some("1"));
    table
}

/// Removing the last file: the deleted-only manifest replaces it;
/// the one after that drops it.
async fn removing_the_last_then_appending(fx: &Fixture, table: &Table, fc: &DataFile) {
    fx.commit(table, overwrite(vec![], &[fc])).await.unwrap();
    let table = fx.load().await;
    assert_eq!(rows(&table).await, Vec::<i64>::new());
    let after = manifests(&table).await;
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].0.existing_files_count, Some(0));
    assert_eq!(after[0].0.added_files_count, Some(0));
    let fd = write_file(&table, &[4]).await;
    let mut append = overwrite(vec![fd], &[]);
    append.operation = Operation::Append;
    fx.commit(&table, append).await.unwrap();
    let table = fx.load().await;
    assert_eq!(rows(&table).await, vec![4]);
    assert_eq!(manifests(&table).await.len(), 1);
    let props = &table
        .metadata()
        .current_snapshot()
        .unwrap()
        .summary()
        .additional_properties;
    assert_eq!(props.get("total-data-files").map(String::as_str), Some("1"));
}

#[tokio::test(flavor = "multi_thread")]
async fn refusals_change_nothing() {
    let fx = Fixture::new().await;
    let (base, [f1, _f2, _f3]) = three_files(&fx).await;
    let dir = metadata_dir(&base);
    let files_before = listing(&dir);
    let location_before = fx.catalog_location().await;
    let new = write_file(&base, &[9]).await;

    // A removed path that is not in the table.
    let mut commit = overwrite(vec![new.clone()], &[]);
    commit
        .removed
        .insert(format!("{}/data/nope.parquet", base.metadata().location()));
    let err = fx.commit(&base, commit).await.unwrap_err().to_string();
    assert!(err.contains("not live"), "{err}");
    assert!(err.contains("nope.parquet"), "{err}");

    // A path both removed and added.
    let err = fx
        .commit(&base, overwrite(vec![f1.clone()], &[&f1]))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("both removed and added"), "{err}");

    // A file already in the table added again (while removing another).
    let err = fx
        .commit(&base, overwrite(vec![f1.clone()], &[&_f2]))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("already in the table"), "{err}");

    // An append that removes.
    let mut commit = overwrite(vec![new.clone()], &[&f1]);
    commit.operation = Operation::Append;
    let err = fx.commit(&base, commit).await.unwrap_err().to_string();
    assert!(err.contains("append cannot remove"), "{err}");

    assert_eq!(fx.catalog_location().await, location_before);
    assert_eq!(listing(&dir), files_before);
    assert_eq!(rows(&fx.load().await).await, vec![1, 2, 3, 4, 5, 6]);
}

/// A commit whose base is stale is rebased when what was committed since
/// touches none of its files: two swaps, the other commit's removal kept.
#[tokio::test(flavor = "multi_thread")]
async fn a_stale_commit_on_other_files_is_rebased() {
    let fx = Fixture::new().await;
    let (stale, [f1, _f2, f3]) = three_files(&fx).await;
    // Another commit moves the table on.
    let CommitOutcome::Committed {
        snapshot_id: other, ..
    } = fx.commit(&stale, overwrite(vec![], &[&f1])).await.unwrap()
    else {
        panic!("the other commit did not commit");
    };
    let new = write_file(&stale, &[9]).await;
    let outcome = fx
        .commit(&stale, overwrite(vec![new.clone()], &[&f3]))
        .await
        .unwrap();
    let CommitOutcome::Committed {
        snapshot_id,
        attempts,
    } = outcome
    else {
        panic!("{outcome:?}");
    };
    assert_eq!(attempts, 2);
    let table = fx.load().await;
    assert_eq!(rows(&table).await, vec![3, 4, 9]);
    let snapshot = table.metadata().current_snapshot().unwrap();
    assert_eq!(snapshot.snapshot_id(), snapshot_id);
    assert_eq!(snapshot.parent_snapshot_id(), Some(other));
    // The lost attempt left no metadata file behind: one per commit.
    let metadata_json = listing(&metadata_dir(&table))
        .iter()
        .filter(|f| f.ends_with(".metadata.json"))
        .count();
    assert_eq!(metadata_json, 1 + table.metadata().snapshots().count());
}

/// A commit whose file was removed meanwhile conflicts, naming the
/// snapshot that removed it, and leaves nothing behind.
#[tokio::test(flavor = "multi_thread")]
async fn a_stale_commit_on_a_removed_file_conflicts_and_is_cleaned_up() {
    let fx = Fixture::new().await;
    let (stale, [f1, _f2, _f3]) = three_files(&fx).await;
    let CommitOutcome::Committed {
        snapshot_id: other, ..
    } = fx.commit(&stale, overwrite(vec![], &[&f1])).await.unwrap()
    else {
        panic!("the other commit did not commit");
    };
    let location = fx.catalog_location().await;
    let dir = metadata_dir(&stale);
    let files_before = listing(&dir);

    let new = write_file(&stale, &[9]).await;
    let outcome = fx
        .commit(&stale, overwrite(vec![new.clone()], &[&f1]))
        .await
        .unwrap();
    let CommitOutcome::Conflict(conflict) = outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(conflict.snapshot_id, Some(other));
    assert_eq!(conflict.table, "ns.t");
    assert_eq!(
        conflict.kind,
        ConflictKind::FileRemoved {
            path: f1.file_path().to_string()
        }
    );
    assert_eq!(
        listing(&dir),
        files_before,
        "the failed commit left files behind"
    );
    assert_eq!(fx.catalog_location().await, location);
    assert_eq!(rows(&fx.load().await).await, vec![3, 4, 5, 6]);
    // The data file is the caller's to delete.
    assert!(Path::new(new.file_path().trim_start_matches("file://")).exists());
}

/// A data file appended meanwhile conflicts under serializable isolation
/// when its column bounds meet the statement's filter, and not otherwise.
#[tokio::test(flavor = "multi_thread")]
async fn appended_files_conflict_by_filter_and_level() {
    use iceberg::expr::Reference;
    use iceberg::spec::Datum;
    let cases = [
        (IsolationLevel::Serializable, 5, true),
        (IsolationLevel::Serializable, 8, false),
        (IsolationLevel::Snapshot, 5, false),
    ];
    for (level, from, conflicts) in cases {
        let fx = Fixture::new().await;
        let (stale, [_f1, _f2, f3]) = three_files(&fx).await;
        // The statement read ids >= `from` (f3 holds 5 and 6) ...
        let filter = Reference::new("id").greater_than_or_equal_to(Datum::long(from));
        let context = CommitContext::copy_on_write(
            stale.metadata().current_snapshot_id(),
            level,
            ConflictFilter::Rows(filter),
        );
        // ... and another writer appends id 7 meanwhile.
        let appended = write_file(&stale, &[7]).await;
        fx.append(vec![appended]).await;
        let new = write_file(&stale, &[9]).await;
        let outcome = fx
            .commit_with(&stale, overwrite(vec![new], &[&f3]), &context)
            .await
            .unwrap();
        let case = format!("{level}, id >= {from}: {outcome:?}");
        match outcome {
            CommitOutcome::Conflict(c) => {
                assert!(conflicts, "{case}");
                assert!(matches!(c.kind, ConflictKind::DataAdded { .. }), "{case}");
            }
            CommitOutcome::Committed { attempts, .. } => {
                assert!(!conflicts, "{case}");
                assert_eq!(attempts, 2, "{case}");
                assert_eq!(rows(&fx.load().await).await, vec![1, 2, 3, 4, 7, 9]);
            }
            CommitOutcome::NothingToCommit => panic!("{case}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn nothing_to_commit() {
    let fx = Fixture::new().await;
    let (base, _) = three_files(&fx).await;
    let dir = metadata_dir(&base);
    let files_before = listing(&dir);
    let location = fx.catalog_location().await;
    let outcome = fx.commit(&base, overwrite(vec![], &[])).await.unwrap();
    assert_eq!(outcome, CommitOutcome::NothingToCommit);
    assert_eq!(fx.catalog_location().await, location);
    assert_eq!(listing(&dir), files_before);
}

#[tokio::test(flavor = "multi_thread")]
async fn first_snapshot_of_an_empty_table() {
    let fx = Fixture::new().await;
    let base = fx.load().await;
    assert!(base.metadata().current_snapshot().is_none());
    let f = write_file(&base, &[1, 2, 3]).await;

    let err = fx
        .commit(&base, overwrite(vec![f.clone()], &[&f]))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("both removed and added"), "{err}");
    let mut commit = overwrite(vec![], &[]);
    commit.removed.insert("file:///nowhere.parquet".into());
    let err = fx.commit(&base, commit).await.unwrap_err().to_string();
    assert!(
        err.contains("not live") && err.contains("no snapshot"),
        "{err}"
    );

    let mut commit = overwrite(vec![f.clone()], &[]);
    commit.operation = Operation::Append;
    let CommitOutcome::Committed { snapshot_id, .. } = fx.commit(&base, commit).await.unwrap()
    else {
        panic!()
    };
    let table = fx.load().await;
    let snapshot = table.metadata().current_snapshot().unwrap();
    assert_eq!(snapshot.snapshot_id(), snapshot_id);
    assert_eq!(snapshot.parent_snapshot_id(), None);
    assert_eq!(snapshot.summary().operation, Operation::Append);
    assert_eq!(
        snapshot
            .summary()
            .additional_properties
            .get("total-records")
            .map(String::as_str),
        Some("3")
    );
    assert_eq!(rows(&table).await, vec![1, 2, 3]);
    // fast_append still works on top of it.
    let g = write_file(&table, &[4]).await;
    let table = fx.append(vec![g]).await;
    assert_eq!(rows(&table).await, vec![1, 2, 3, 4]);
}

/// The summary keys of a snapshot.
fn summary_keys(snapshot: &Snapshot) -> BTreeSet<String> {
    snapshot
        .summary()
        .additional_properties
        .keys()
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn append_writes_what_fast_append_writes() {
    let fx = Fixture::new().await;
    let table = fx.load().await;
    let f1 = write_file(&table, &[1, 2]).await;
    let base = fx.append(vec![f1.clone()]).await;
    let first = base.metadata().current_snapshot().unwrap().clone();
    let f2 = write_file(&base, &[3]).await;

    commit_append(&fx.open, &fx.ident, vec![f2.clone()])
        .await
        .unwrap();
    let table = fx.load().await;
    let snapshot = table.metadata().current_snapshot().unwrap();
    assert_eq!(snapshot.summary().operation, Operation::Append);
    assert_eq!(snapshot.parent_snapshot_id(), Some(first.snapshot_id()));
    assert_eq!(snapshot.sequence_number(), first.sequence_number() + 1);
    assert_eq!(summary_keys(snapshot), summary_keys(&first));
    let props = &snapshot.summary().additional_properties;
    let size = |f: &DataFile| f.file_size_in_bytes().to_string();
    let total_size = (f1.file_size_in_bytes() + f2.file_size_in_bytes()).to_string();
    for (key, value) in [
        ("added-data-files", "1"),
        ("added-records", "1"),
        ("added-files-size", size(&f2).as_str()),
        ("total-data-files", "2"),
        ("total-records", "3"),
        ("total-files-size", total_size.as_str()),
    ] {
        assert_eq!(props.get(key).map(String::as_str), Some(value), "{key}");
    }
    assert_eq!(rows(&table).await, vec![1, 2, 3]);

    // The base manifest carried as it was, the new one after it.
    let before = manifests(&base).await;
    let after = manifests(&table).await;
    assert_eq!(after.len(), 2);
    assert_eq!(after[0].0, before[0].0);
    assert_eq!(after[1].0.added_snapshot_id, snapshot.snapshot_id());
    assert_eq!(after[1].1[0].file_path(), f2.file_path());
    assert_eq!(after[1].1[0].status(), ManifestStatus::Added);
    assert_eq!(
        fx.catalog_location().await.as_deref(),
        table.metadata_location()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn append_builds_on_the_table_at_commit_time() {
    let fx = Fixture::new().await;
    let (stale, [f1, _f2, _f3]) = three_files(&fx).await;
    // Another commit moves the table on after the statement was planned.
    fx.commit(&stale, overwrite(vec![], &[&f1])).await.unwrap();
    let f4 = write_file(&stale, &[7]).await;
    commit_append(&fx.open, &fx.ident, vec![f4]).await.unwrap();
    let table = fx.load().await;
    assert_eq!(rows(&table).await, vec![3, 4, 5, 6, 7]);
    assert_eq!(table.metadata().snapshots().count(), 5);
}

#[tokio::test(flavor = "multi_thread")]
async fn append_keeps_deleted_only_manifests_and_refuses_live_paths() {
    let fx = Fixture::new().await;
    let (base, [f1, f2, _f3]) = three_files(&fx).await;
    // f1's manifest becomes a deleted-only one.
    fx.commit(&base, overwrite(vec![], &[&f1])).await.unwrap();
    let table = fx.load().await;
    let before = manifests(&table).await;
    assert_eq!(before.len(), 3);

    // An append carries every manifest of the base, as fast_append does.
    let f4 = write_file(&table, &[7]).await;
    commit_append(&fx.open, &fx.ident, vec![f4]).await.unwrap();
    let table = fx.load().await;
    let after = manifests(&table).await;
    assert_eq!(after.len(), 4);
    for (manifest, _) in &before {
        assert!(after.iter().any(|(m, _)| m == manifest));
    }

    // A file already live in the table cannot be appended again.
    let dir = metadata_dir(&table);
    let files_before = listing(&dir);
    let location = fx.catalog_location().await;
    let err = commit_append(&fx.open, &fx.ident, vec![f2])
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("already in the table"), "{err}");
    assert_eq!(listing(&dir), files_before);
    assert_eq!(fx.catalog_location().await, location);
    assert_eq!(rows(&fx.load().await).await, vec![3, 4, 5, 6, 7]);
}

#[tokio::test(flavor = "multi_thread")]
async fn append_of_nothing_makes_no_snapshot() {
    let fx = Fixture::new().await;
    let (base, _) = three_files(&fx).await;
    let dir = metadata_dir(&base);
    let files_before = listing(&dir);
    let location = fx.catalog_location().await;
    commit_append(&fx.open, &fx.ident, vec![]).await.unwrap();
    assert_eq!(fx.catalog_location().await, location);
    assert_eq!(fx.load().await.metadata().snapshots().count(), 3);
    assert_eq!(listing(&dir), files_before);
}

/// Appends never conflict: racing ones that lose the swap reload and retry
/// (four racers: each loses at most three times, within the default four
/// retries).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_appends_all_commit() {
    let fx = Fixture::new().await;
    let (base, _) = three_files(&fx).await;
    let mut files = vec![];
    for id in 7..11 {
        files.push(write_file(&base, &[id]).await);
    }
    let appends = files
        .iter()
        .map(|f| commit_append(&fx.open, &fx.ident, vec![f.clone()]));
    for result in futures::future::join_all(appends).await {
        result.unwrap();
    }
    let table = fx.load().await;
    assert_eq!(rows(&table).await, vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    assert_eq!(table.metadata().snapshots().count(), 7);
    // The lost attempts left no metadata behind: one metadata file,
    // manifest list and manifest per committed snapshot.
    let metadata_files = listing(&metadata_dir(&table)).len();
    assert_eq!(metadata_files, 1 + 3 * table.metadata().snapshots().count());
}

/// A manifest rewrite planned on a stale base loses the swap and deletes
/// the manifests, manifest list and metadata file it wrote; the action,
/// run again, rewrites the new head and keeps the file appended meanwhile.
#[tokio::test(flavor = "multi_thread")]
async fn a_manifest_rewrite_that_loses_the_swap_leaves_nothing_behind() {
    use super::manifest_rewrite::{plan_rewrite, produce_rewrite};
    use super::producer::{CatalogRow, Outcome};

    let fx = Fixture::new().await;
    let (stale, _) = three_files(&fx).await;
    assert_eq!(manifests(&stale).await.len(), 3);
    let f4 = write_file(&stale, &[7]).await;
    fx.append(vec![f4]).await;
    let dir = metadata_dir(&stale);
    let before = listing(&dir);
    let location = fx.catalog_location().await;

    let row = CatalogRow {
        uri: &fx.uri,
        catalog_name: &fx.open.name,
    };
    let rewrite = plan_rewrite(&stale, None).await.unwrap().expect("worth it");
    let outcome = produce_rewrite(&row, &stale, rewrite).await.unwrap();
    assert_eq!(outcome, Outcome::Lost);
    assert_eq!(listing(&dir), before, "the lost rewrite left files behind");
    assert_eq!(fx.catalog_location().await, location);

    let counts = commit_manifest_rewrite(&fx.open, &fx.ident, None, None)
        .await
        .unwrap();
    assert_eq!((counts.replaced, counts.added, counts.entries), (4, 1, 4));
    let head = fx.load().await;
    assert_eq!(rows(&head).await, vec![1, 2, 3, 4, 5, 6, 7]);
    let rewritten = manifests(&head).await;
    assert_eq!(rewritten.len(), 1);
    assert!(rewritten[0]
        .1
        .iter()
        .all(|e| e.status() == ManifestStatus::Existing));
    let snapshot = head.metadata().current_snapshot().unwrap();
    assert_eq!(snapshot.summary().operation, Operation::Replace);
    let again = commit_manifest_rewrite(&fx.open, &fx.ident, None, None)
        .await
        .unwrap();
    assert_eq!(again, ManifestRewriteCounts::default());
}
