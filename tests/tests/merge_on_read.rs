//! MERGE in merge-on-read mode and MERGE into tables whose data files carry
//! position delete files, checked against a reference model and read back by
//! icemerge, PyIceberg and DuckDB on the shared SQLite catalog. Several
//! merge-on-read merges in a row (each later one sees only live rows), then
//! the table switched to copy-on-write (by PyIceberg, as another engine
//! would) and merged again: rewritten files drop the rows their deletes
//! removed, and position delete files of rewritten data files leave the
//! table. Runs on both engines.

use std::collections::BTreeMap;

use icemerge_scheduler::Session;
use icemerge_tests::{open_session, query, run_python, ENGINES};
use serde_json::Value;

type Model = BTreeMap<i64, String>;

/// One merge: ids updated, deleted, inserted, and the value written.
type Step<'a> = (&'a [i64], &'a [i64], &'a [i64], &'a str);

fn view(script_action: &str, wh: &str) -> Value {
    run_python(
        "merge_interop.py",
        &[script_action, "--warehouse", wh, "--table", "db.t"],
    )
}

/// The rows of a peer's view as (id, v).
fn peer_rows(out: &Value) -> Model {
    out["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            (
                r["id"].as_i64().unwrap(),
                r["v"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

async fn icemerge_rows(session: &Session) -> Model {
    query(session, "SELECT id, v FROM db.t ORDER BY id")
        .await
        .into_iter()
        .map(|r| (r[0].parse().unwrap(), r[1].clone()))
        .collect()
}

/// Live delete files (content 1) by the data files they reference.
async fn position_delete_files(session: &Session) -> Vec<String> {
    query(
        session,
        "SELECT file_path FROM db.\"t$files\" WHERE content = 1 ORDER BY file_path",
    )
    .await
    .into_iter()
    .map(|r| r[0].clone())
    .collect()
}

async fn check_readers(session: &Session, wh: &str, model: &Model, what: &str) {
    assert_eq!(&icemerge_rows(session).await, model, "icemerge, {what}");
    assert_eq!(
        &peer_rows(&view("pyiceberg", wh)),
        model,
        "PyIceberg, {what}"
    );
    assert_eq!(&peer_rows(&view("duckdb", wh)), model, "DuckDB, {what}");
}

/// Applies to `model` a merge that updates `update` (to `v`), deletes
/// `delete` and inserts `insert` (with `v`) where not matched.
fn apply(model: &mut Model, update: &[i64], delete: &[i64], insert: &[i64], v: &str) {
    for id in update {
        if let Some(slot) = model.get_mut(id) {
            *slot = v.to_string();
        }
    }
    for id in delete {
        model.remove(id);
    }
    for id in insert {
        model.entry(*id).or_insert_with(|| v.to_string());
    }
}

/// A MERGE updating `update`, deleting `delete`, inserting `insert`.
fn merge_sql(update: &[i64], delete: &[i64], insert: &[i64], v: &str) -> String {
    let mut rows = vec![];
    rows.extend(update.iter().map(|id| format!("({id}, 'U')")));
    rows.extend(delete.iter().map(|id| format!("({id}, 'D')")));
    rows.extend(insert.iter().map(|id| format!("({id}, 'I')")));
    format!(
        "MERGE INTO db.t USING (VALUES {}) AS s(id, op) ON t.id = s.id \
         WHEN MATCHED AND s.op = 'D' THEN DELETE \
         WHEN MATCHED AND s.op = 'U' THEN UPDATE SET v = '{v}' \
         WHEN NOT MATCHED AND s.op = 'I' THEN INSERT VALUES (s.id, '{v}')",
        rows.join(", ")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn merge_on_read_then_copy_on_write() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let wh = dir.path().to_str().unwrap();
        let session = open_session(dir.path(), engine).await;
        // Two data files: ids 0-19 ('a') and 20-39 ('b').
        session
            .execute(
                "CREATE SCHEMA db;
                 CREATE TABLE db.t (id BIGINT, v STRING) TBLPROPERTIES ('write.merge.mode' = 'merge-on-read');
                 INSERT INTO db.t SELECT value, 'a' FROM generate_series(0, 19);
                 INSERT INTO db.t SELECT value, 'b' FROM generate_series(20, 39);",
            )
            .await
            .unwrap();
        let mut model: Model = (0..20)
            .map(|i| (i, "a".to_string()))
            .chain((20..40).map(|i| (i, "b".to_string())))
            .collect();

        // Three merge-on-read merges; later ones act on rows earlier ones
        // updated, deleted or inserted.
        let steps: [Step; 3] = [
            (&[1, 2, 25], &[3, 30, 31], &[100, 101], "m1"),
            (&[2, 100, 26], &[1, 4, 101], &[3, 30, 102], "m2"),
            (&[3, 30, 5], &[2, 25, 6], &[31, 1], "m3"),
        ];
        for (i, (update, delete, insert, v)) in steps.iter().enumerate() {
            session
                .execute(&merge_sql(update, delete, insert, v))
                .await
                .unwrap();
            apply(&mut model, update, delete, insert, v);
            check_readers(
                &session,
                wh,
                &model,
                &format!("merge-on-read {i} ({engine:?})"),
            )
            .await;
        }
        let out = view("pyiceberg", wh);
        assert_eq!(out["operation"], "overwrite", "{engine:?}");
        // The two original data files are never rewritten.
        let original: Vec<String> = query(
            &session,
            "SELECT file_path FROM db.\"t$files\" WHERE content = 0 AND record_count = 20",
        )
        .await
        .into_iter()
        .map(|r| r[0].clone())
        .collect();
        assert_eq!(original.len(), 2, "{engine:?}");
        assert!(!position_delete_files(&session).await.is_empty());

        // Copy-on-write from here on, touching only the first file (ids
        // 0-19): its delete files go, the second file's stay.
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
                "copy-on-write",
            ],
        );
        let (update, delete, insert) = (&[7_i64, 8][..], &[9_i64][..], &[200_i64][..]);
        session
            .execute(&merge_sql(update, delete, insert, "c1"))
            .await
            .unwrap();
        apply(&mut model, update, delete, insert, "c1");
        check_readers(&session, wh, &model, &format!("copy-on-write ({engine:?})")).await;
        let referenced: Vec<String> = query(
            &session,
            "SELECT DISTINCT CAST(lower_bounds[CAST(2147483546 AS INT)] AS VARCHAR) FROM db.\"t$files\" WHERE content = 1",
        )
        .await
        .into_iter()
        .map(|r| r[0].trim_matches('"').to_string())
        .collect();
        let live_data: Vec<String> = query(
            &session,
            "SELECT file_path FROM db.\"t$files\" WHERE content = 0",
        )
        .await
        .into_iter()
        .map(|r| r[0].clone())
        .collect();
        assert!(
            !referenced.is_empty(),
            "{engine:?}: the second file's deletes stay"
        );
        for path in &referenced {
            assert!(
                live_data.contains(path),
                "{engine:?}: delete file references {path}, which is not live: {live_data:?}"
            );
        }

        // Touching every live row rewrites every data file that has one:
        // the delete files left are those of data files with no live row
        // (untouched, as in Spark, until compaction), and they delete all of
        // those files' rows.
        let all: Vec<i64> = model.keys().copied().collect();
        session
            .execute(&merge_sql(&all, &[], &[], "c2"))
            .await
            .unwrap();
        apply(&mut model, &all, &[], &[], "c2");
        check_readers(
            &session,
            wh,
            &model,
            &format!("copy-on-write all ({engine:?})"),
        )
        .await;
        let dead_rows = query(
            &session,
            "SELECT COALESCE(sum(record_count), 0) FROM db.\"t$files\" WHERE content = 0 \
             AND sequence_number < (SELECT max(sequence_number) FROM db.\"t$files\")",
        )
        .await;
        let deleted_positions = query(
            &session,
            "SELECT COALESCE(sum(record_count), 0) FROM db.\"t$files\" WHERE content = 1",
        )
        .await;
        assert_eq!(dead_rows, deleted_positions, "{engine:?}");
        let left = position_delete_files(&session).await.len();
        let summary = query(
            &session,
            "SELECT summary['total-delete-files'], CAST(summary['removed-delete-files'] AS BIGINT) > 0 \
             FROM db.\"t$snapshots\" ORDER BY committed_at DESC, snapshot_id LIMIT 1",
        )
        .await;
        assert_eq!(
            summary,
            vec![vec![left.to_string(), "true".to_string()]],
            "{engine:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn merge_on_read_partitioned() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let wh = dir.path().to_str().unwrap();
        let session = open_session(dir.path(), engine).await;
        session
            .execute(
                "CREATE SCHEMA db;
                 CREATE TABLE db.t (id BIGINT, v STRING) PARTITIONED BY (bucket(4, id))
                   TBLPROPERTIES ('write.merge.mode' = 'merge-on-read');
                 INSERT INTO db.t SELECT value, 'a' FROM generate_series(0, 99);",
            )
            .await
            .unwrap();
        let mut model: Model = (0..100).map(|i| (i, "a".to_string())).collect();
        let update: Vec<i64> = (0..100).step_by(7).collect();
        let delete: Vec<i64> = (3..100).step_by(11).collect();
        let insert: Vec<i64> = (150..160).collect();
        let update: Vec<i64> = update.into_iter().filter(|i| !delete.contains(i)).collect();
        session
            .execute(&merge_sql(&update, &delete, &insert, "p1"))
            .await
            .unwrap();
        apply(&mut model, &update, &delete, &insert, "p1");
        check_readers(&session, wh, &model, &format!("partitioned ({engine:?})")).await;
        // Each delete file sits in the partition of the data file it
        // references: a partition filter keeps applying it.
        let filtered = query(
            &session,
            "SELECT count(*) FROM db.t WHERE id BETWEEN 0 AND 99",
        )
        .await;
        let expected = model.keys().filter(|id| **id < 100).count();
        assert_eq!(filtered, vec![vec![expected.to_string()]], "{engine:?}");
        let partitions = query(
            &session,
            "SELECT count(DISTINCT partition) FROM db.\"t$files\" WHERE content = 1",
        )
        .await;
        assert_eq!(partitions, vec![vec!["4"]], "{engine:?}");
    }
}
