//! Tables whose data files carry equality delete files (written here with
//! iceberg's Parquet writer, committed as a row delta, as a streaming writer
//! such as Flink would): SELECT does not return the deleted rows, MERGE does
//! not match them, a copy-on-write rewrite leaves them out, and a row
//! inserted again after the delete (a later sequence number) is live. Runs
//! on both engines. Compaction applies them and leaves none.

use std::sync::Arc;

use arrow::array::{Int64Array, RecordBatch};
use iceberg::arrow::schema_to_arrow_schema;
use iceberg::spec::{DataContentType, Schema};
use iceberg::writer::file_writer::{FileWriter, FileWriterBuilder, ParquetWriterBuilder};
use iceberg::TableIdent;
use icemerge_scheduler::catalog::open_catalog;
use icemerge_scheduler::commit::{
    commit_row_delta, CommitContext, CommitOutcome, ConflictFilter, IsolationLevel, RowDeltaCommit,
};
use icemerge_scheduler::CatalogOptions;
use icemerge_scheduler::Session;
use icemerge_tests::{open_session, query, run_python, ENGINES};
use parquet::file::properties::WriterProperties;

/// Commits one equality delete file on column `id` deleting `ids`.
async fn delete_ids(session: &Session, warehouse: &str, ids: &[i64]) {
    let ident = TableIdent::from_strs(["db", "t"]).unwrap();
    let table = session.catalog().load_table(&ident).await.unwrap();
    let schema = table.metadata().current_schema();
    let id_field = schema.field_by_name("id").unwrap().clone();
    let field_id = id_field.id;
    let delete_schema = Arc::new(
        Schema::builder()
            .with_fields(vec![id_field])
            .build()
            .unwrap(),
    );
    let arrow_schema = Arc::new(schema_to_arrow_schema(&delete_schema).unwrap());
    let path = format!(
        "{}/data/eq-deletes-{}.parquet",
        table.metadata().location().trim_end_matches('/'),
        uuid::Uuid::new_v4().simple()
    );
    let output = table.file_io().new_output(&path).unwrap();
    let mut writer = ParquetWriterBuilder::new(WriterProperties::default(), delete_schema)
        .build(output)
        .await
        .unwrap();
    let batch =
        RecordBatch::try_new(arrow_schema, vec![Arc::new(Int64Array::from(ids.to_vec()))]).unwrap();
    writer.write(&batch).await.unwrap();
    let mut builder = writer.close().await.unwrap().pop().unwrap();
    builder
        .content(DataContentType::EqualityDeletes)
        .equality_ids(Some(vec![field_id]))
        .partition_spec_id(table.metadata().default_partition_spec_id());
    let file = builder.build().unwrap();
    let commit = RowDeltaCommit {
        added: vec![],
        added_deletes: vec![file],
        summary: Default::default(),
    };
    let catalog = open_catalog(&CatalogOptions {
        warehouse: warehouse.into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let context = CommitContext::copy_on_write(
        table.metadata().current_snapshot_id(),
        IsolationLevel::Serializable,
        ConflictFilter::WholeTable,
    );
    let outcome = commit_row_delta(&catalog, &table, commit, &context)
        .await
        .unwrap();
    assert!(matches!(outcome, CommitOutcome::Committed { .. }));
}

async fn rows(session: &Session) -> Vec<Vec<String>> {
    query(session, "SELECT id, v FROM db.t ORDER BY id").await
}

fn expected(pairs: &[(i64, &str)]) -> Vec<Vec<String>> {
    pairs
        .iter()
        .map(|(id, v)| vec![id.to_string(), v.to_string()])
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn equality_deletes_are_applied_by_reads_and_merges() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let wh = dir.path().to_str().unwrap();
        let session = open_session(dir.path(), engine).await;
        session
            .execute(
                "CREATE SCHEMA db;
                 CREATE TABLE db.t (id BIGINT, v STRING);
                 INSERT INTO db.t VALUES (1, 'a'), (2, 'a'), (3, 'a');
                 INSERT INTO db.t VALUES (4, 'b'), (5, 'b'), (6, 'b');",
            )
            .await
            .unwrap();
        delete_ids(&session, wh, &[2, 5, 99]).await;
        assert_eq!(
            rows(&session).await,
            expected(&[(1, "a"), (3, "a"), (4, "b"), (6, "b")]),
            "{engine:?}: SELECT applies equality deletes"
        );
        let op = query(
            &session,
            "SELECT operation, summary['added-equality-delete-files'] FROM db.\"t$snapshots\" \
             ORDER BY committed_at DESC, snapshot_id LIMIT 1",
        )
        .await;
        assert_eq!(op, vec![vec!["delete", "1"]], "{engine:?}");

        // Copy-on-write: 2 is not matched (inserted again, later sequence
        // number), 3 is updated, the rewrite of the first file leaves 2 out.
        session
            .execute(
                "MERGE INTO db.t USING (VALUES (2, 'new'), (3, 'u')) AS s(id, v) ON t.id = s.id \
                 WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.v)",
            )
            .await
            .unwrap();
        assert_eq!(
            rows(&session).await,
            expected(&[(1, "a"), (2, "new"), (3, "u"), (4, "b"), (6, "b")]),
            "{engine:?}: copy-on-write"
        );

        // Merge-on-read on top: 5 stays deleted (not matched: inserted),
        // 6 (in a file with equality deletes) gets a position delete.
        run_python(
            "pyiceberg_interop.py",
            &[
                "set-property",
                "--warehouse",
                wh,
                "--table",
                "db.t",
                "--key",
                "write.merge.mode",
                "--value",
                "merge-on-read",
            ],
        );
        session
            .execute(
                "MERGE INTO db.t USING (VALUES (5, 'again'), (6, 'gone')) AS s(id, v) ON t.id = s.id \
                 WHEN MATCHED THEN DELETE WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.v)",
            )
            .await
            .unwrap();
        assert_eq!(
            rows(&session).await,
            expected(&[(1, "a"), (2, "new"), (3, "u"), (4, "b"), (5, "again")]),
            "{engine:?}: merge-on-read"
        );
        let kinds = query(
            &session,
            "SELECT content, count(*) FROM db.\"t$files\" WHERE content > 0 GROUP BY content ORDER BY content",
        )
        .await;
        assert_eq!(kinds, vec![vec!["1", "1"], vec!["2", "1"]], "{engine:?}");
    }
}

/// Compaction of a table with equality delete files: the rows stay as
/// icemerge and PyIceberg read them, and no delete file is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn compaction_applies_and_removes_equality_deletes() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let wh = dir.path().to_str().unwrap();
        let session = open_session(dir.path(), engine).await;
        session
            .execute(
                "CREATE SCHEMA db;
                 CREATE TABLE db.t (id BIGINT, v STRING);
                 INSERT INTO db.t VALUES (1, 'a'), (2, 'a'), (3, 'a');
                 INSERT INTO db.t VALUES (4, 'b'), (5, 'b'), (6, 'b');",
            )
            .await
            .unwrap();
        delete_ids(&session, wh, &[2, 5]).await;
        let live = expected(&[(1, "a"), (3, "a"), (4, "b"), (6, "b")]);
        assert_eq!(rows(&session).await, live, "{engine:?}");
        // Two small files and equality deletes: by Iceberg's rules too few
        // files to rewrite, unless files with deletes are asked for.
        let out = query(&session, "CALL system.rewrite_data_files('db.t')").await;
        assert_eq!(out[0][..2], ["0", "0"], "{engine:?}: {out:?}");
        let out = query(
            &session,
            "CALL system.rewrite_data_files('db.t', options => map('delete-file-threshold', '1'))",
        )
        .await;
        assert_eq!(out[0][..2], ["2", "1"], "{engine:?}: {out:?}");
        assert_eq!(rows(&session).await, live, "{engine:?}");
        assert_eq!(
            query(
                &session,
                "SELECT content, count(*) FROM db.\"t$files\" GROUP BY content"
            )
            .await,
            vec![vec!["0", "1"]],
            "{engine:?}: one data file, no delete file"
        );
        let py = run_python(
            "pyiceberg_interop.py",
            &["read", "--warehouse", wh, "--table", "db.t"],
        );
        let mut ids: Vec<i64> = py["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_i64().unwrap())
            .collect();
        ids.sort();
        assert_eq!(ids, vec![1, 3, 4, 6], "{engine:?}: PyIceberg");
    }
}
