//! Interop of MERGE's copy-on-write snapshots with two independent Iceberg
//! readers on the shared SQLite catalog: PyIceberg (rows, snapshot operation,
//! manifest entries, live files) and DuckDB's iceberg extension (rows, read
//! from the table's current metadata JSON). Runs on both engines.

use std::collections::BTreeSet;

use icemerge_tests::{open_session, query, run_python, ENGINES};
use serde_json::{json, Value};

/// One manifest entry as PyIceberg's `inspect.entries()` reports it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    status: i64,
    file_path: String,
    snapshot_id: i64,
    sequence_number: i64,
}

const EXISTING: i64 = 0;
const ADDED: i64 = 1;
const DELETED: i64 = 2;

fn pyiceberg(wh: &str) -> Value {
    run_python(
        "merge_interop.py",
        &["pyiceberg", "--warehouse", wh, "--table", "db.t"],
    )
}

fn duckdb(wh: &str) -> Value {
    run_python(
        "merge_interop.py",
        &["duckdb", "--warehouse", wh, "--table", "db.t"],
    )
}

fn entries(out: &Value) -> Vec<Entry> {
    let mut v: Vec<Entry> = out["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| {
            assert_eq!(e["content"], json!(0), "only data files expected: {e}");
            Entry {
                status: e["status"].as_i64().unwrap(),
                file_path: e["file_path"].as_str().unwrap().to_string(),
                snapshot_id: e["snapshot_id"].as_i64().unwrap(),
                sequence_number: e["sequence_number"].as_i64().unwrap(),
            }
        })
        .collect();
    v.sort();
    v
}

fn live_files(out: &Value) -> BTreeSet<String> {
    out["files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|f| f.as_str().unwrap().to_string())
        .collect()
}

fn row(id: i64, name: Option<&str>, amount: Option<&str>) -> Value {
    json!({"id": id, "name": name, "amount": amount})
}

/// The rows of ids 1..=9 after the first MERGE (id 2 updated, 5 deleted,
/// 10 inserted), as both peers print them.
fn rows_after_first_merge() -> Vec<Value> {
    vec![
        row(1, Some("one"), Some("1.00")),
        row(2, Some("two"), Some("2.50")),
        row(3, Some("three"), Some("3.00")),
        row(4, Some("four"), Some("4.00")),
        row(6, Some("six"), Some("6.00")),
        row(7, Some("seven"), Some("7.00")),
        row(8, Some("eight"), Some("8.00")),
        row(9, Some("nine"), None),
        row(10, Some("ten"), Some("10.00")),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pyiceberg_and_duckdb_read_merge_snapshots() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let wh = dir.path().to_str().unwrap();
        let session = open_session(dir.path(), engine).await;
        session
            .execute(
                "CREATE SCHEMA db;
                 CREATE TABLE db.t (id BIGINT, name STRING, amount DECIMAL(10,2));
                 INSERT INTO db.t VALUES (1, 'one', 1.00), (2, 'two', 2.00), (3, 'three', 3.00);
                 INSERT INTO db.t VALUES (4, 'four', 4.00), (5, 'five', 5.00), (6, 'six', 6.00);
                 INSERT INTO db.t VALUES (7, 'seven', 7.00), (8, 'eight', 8.00), (9, 'nine', NULL);",
            )
            .await
            .unwrap();

        // Before any MERGE: three appends, one data file each, all ADDED by
        // their own snapshot with sequence numbers 1, 2, 3.
        let before = pyiceberg(wh);
        assert_eq!(before["operation"], json!("append"), "{engine:?}");
        let appended = entries(&before);
        assert_eq!(appended.len(), 3, "{engine:?}: {appended:?}");
        assert!(
            appended.iter().all(|e| e.status == ADDED),
            "{engine:?}: {appended:?}"
        );
        let by_seq = |seq: i64| -> Entry {
            appended
                .iter()
                .find(|e| e.sequence_number == seq)
                .unwrap_or_else(|| panic!("{engine:?}: no entry of sequence {seq}: {appended:?}"))
                .clone()
        };
        let (file_1_3, file_4_6, file_7_9) = (by_seq(1), by_seq(2), by_seq(3));
        let snapshots: BTreeSet<_> = appended.iter().map(|e| e.snapshot_id).collect();
        assert_eq!(snapshots.len(), 3, "{engine:?}: one snapshot per INSERT");
        assert_eq!(
            live_files(&before),
            appended.iter().map(|e| e.file_path.clone()).collect(),
            "{engine:?}"
        );

        // MERGE 1: update id 2, delete id 5 (conditional matched delete),
        // insert id 10. Touches the files of ids 1-3 and 4-6 only, and only
        // those are scanned: the source's keys (2, 5, 10) prune the third.
        let out = query(
            &session,
            "MERGE INTO db.t USING (VALUES (2, 'two', 2.50), (5, NULL, NULL), (10, 'ten', 10.00)) AS s(id, name, amount)
             ON t.id = s.id
             WHEN MATCHED AND s.name IS NULL THEN DELETE
             WHEN MATCHED THEN UPDATE SET name = s.name, amount = s.amount
             WHEN NOT MATCHED THEN INSERT *",
        )
        .await;
        // count, updated, deleted, inserted, copied, files_scanned, files_removed
        assert_eq!(
            &out[0][..7],
            &["3", "1", "1", "1", "4", "2", "2"],
            "{engine:?}: merge metrics {out:?}"
        );

        let py = pyiceberg(wh);
        assert_eq!(
            py["rows"],
            json!(rows_after_first_merge()),
            "{engine:?}: PyIceberg rows"
        );
        assert_eq!(py["operation"], json!("overwrite"), "{engine:?}");
        let merge1 = py["snapshot_id"].as_i64().unwrap();
        assert!(
            !snapshots.contains(&merge1),
            "{engine:?}: MERGE made a new snapshot"
        );
        let ents = entries(&py);

        // The untouched file's manifest is carried as is: its entry keeps
        // status ADDED, the original append's snapshot id and sequence number.
        let untouched: Vec<_> = ents
            .iter()
            .filter(|e| e.file_path == file_7_9.file_path)
            .collect();
        assert_eq!(
            untouched,
            vec![&file_7_9],
            "{engine:?}: carried entry of ids 7-9"
        );

        // The two rewritten files: DELETED by the MERGE snapshot, keeping
        // their original data sequence numbers (spec: sequence number
        // inheritance for deleted entries).
        let mut deleted: Vec<_> = ents
            .iter()
            .filter(|e| e.status == DELETED)
            .cloned()
            .collect();
        deleted.sort_by_key(|e| e.sequence_number);
        assert_eq!(
            deleted,
            vec![
                Entry {
                    status: DELETED,
                    snapshot_id: merge1,
                    ..file_1_3.clone()
                },
                Entry {
                    status: DELETED,
                    snapshot_id: merge1,
                    ..file_4_6.clone()
                },
            ],
            "{engine:?}: deleted entries {ents:?}"
        );

        // Every other entry is a new file ADDED by the MERGE snapshot, with
        // the next sequence number.
        let added: Vec<_> = ents
            .iter()
            .filter(|e| e.status != DELETED && e.file_path != file_7_9.file_path)
            .collect();
        assert!(
            !added.is_empty(),
            "{engine:?}: MERGE added no file: {ents:?}"
        );
        for e in &added {
            assert_eq!(
                (e.status, e.snapshot_id, e.sequence_number),
                (ADDED, merge1, 4),
                "{engine:?}: new file entry {e:?}"
            );
            assert!(
                ![&file_1_3, &file_4_6, &file_7_9]
                    .iter()
                    .any(|o| o.file_path == e.file_path),
                "{engine:?}: new file reuses an old path: {e:?}"
            );
        }
        assert!(
            !ents.iter().any(|e| e.status == EXISTING),
            "{engine:?}: no EXISTING entries expected: {ents:?}"
        );
        assert_eq!(ents.len(), 3 + added.len(), "{engine:?}: {ents:?}");

        // Live files: the untouched one plus the new ones, nothing else.
        let mut expected_live: BTreeSet<String> =
            added.iter().map(|e| e.file_path.clone()).collect();
        expected_live.insert(file_7_9.file_path.clone());
        assert_eq!(live_files(&py), expected_live, "{engine:?}: live files");

        let duck = duckdb(wh);
        assert_eq!(
            duck["rows"],
            json!(rows_after_first_merge()),
            "{engine:?}: DuckDB rows"
        );

        // MERGE 2: delete every row of the file of ids 7-9. The file is
        // removed without replacement.
        let out = query(
            &session,
            "MERGE INTO db.t USING (VALUES (7), (8), (9)) AS s(id) ON t.id = s.id
             WHEN MATCHED THEN DELETE",
        )
        .await;
        // count, updated, deleted, inserted, copied; files_removed
        assert_eq!(
            &out[0][..5],
            &["3", "0", "3", "0", "0"],
            "{engine:?}: merge metrics {out:?}"
        );
        assert_eq!(out[0][6], "1", "{engine:?}: files_removed {out:?}");
        let expected: Vec<Value> = rows_after_first_merge()
            .into_iter()
            .filter(|r| !(7..=9).contains(&r["id"].as_i64().unwrap()))
            .collect();

        let py2 = pyiceberg(wh);
        assert_eq!(
            py2["rows"],
            json!(expected),
            "{engine:?}: PyIceberg rows after MERGE 2"
        );
        let merge2 = py2["snapshot_id"].as_i64().unwrap();
        assert!(
            merge2 != merge1 && !snapshots.contains(&merge2),
            "{engine:?}"
        );
        let ents2 = entries(&py2);
        let gone: Vec<_> = ents2
            .iter()
            .filter(|e| e.file_path == file_7_9.file_path)
            .collect();
        assert_eq!(
            gone,
            vec![&Entry {
                status: DELETED,
                snapshot_id: merge2,
                ..file_7_9.clone()
            }],
            "{engine:?}: entry of the removed file {ents2:?}"
        );
        assert!(
            !ents2
                .iter()
                .any(|e| e.snapshot_id == merge2 && e.status == ADDED),
            "{engine:?}: MERGE 2 added a file: {ents2:?}"
        );
        // The files MERGE 1 added are carried: still ADDED by MERGE 1.
        for e in &added {
            assert!(
                ents2.contains(e),
                "{engine:?}: {e:?} not carried into {ents2:?}"
            );
        }
        let mut live2 = expected_live.clone();
        live2.remove(&file_7_9.file_path);
        assert_eq!(
            live_files(&py2),
            live2,
            "{engine:?}: live files after MERGE 2"
        );

        let duck2 = duckdb(wh);
        assert_eq!(
            duck2["rows"],
            json!(expected),
            "{engine:?}: DuckDB rows after MERGE 2"
        );
        eprintln!(
            "{engine:?}: MERGE 2 snapshot operation {}; MERGE 1 added {} file(s)",
            py2["operation"],
            added.len()
        );
    }
}

/// A MERGE into a table partitioned by `day(ts)` and `truncate(1, name)`
/// that keeps a row in its partition, moves one to another, empties a
/// partition and opens a new one: PyIceberg reads the expected rows and
/// every live file's partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pyiceberg_reads_rows_and_partitions_after_a_merge_moving_rows() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let wh = dir.path().to_str().unwrap();
        let session = open_session(dir.path(), engine).await;
        session
            .execute(
                "CREATE SCHEMA db;
                 CREATE TABLE db.t (id BIGINT, name STRING, ts TIMESTAMP) PARTITIONED BY (day(ts), truncate(1, name));
                 INSERT INTO db.t VALUES
                   (1, 'ant', TIMESTAMP '2024-05-01 08:00:00'),
                   (2, 'ape', TIMESTAMP '2024-05-01 09:00:00'),
                   (3, 'bee', TIMESTAMP '2024-05-02 10:00:00')",
            )
            .await
            .unwrap();
        query(
            &session,
            "MERGE INTO db.t USING (VALUES
                 (1, 'ant', TIMESTAMP '2024-05-01 20:00:00'),
                 (2, 'cat', TIMESTAMP '2024-05-03 09:00:00'),
                 (3, NULL, NULL),
                 (4, 'dog', TIMESTAMP '2024-05-04 00:00:00')) AS s(id, name, ts)
             ON t.id = s.id
             WHEN MATCHED AND s.name IS NULL THEN DELETE
             WHEN MATCHED THEN UPDATE SET name = s.name, ts = s.ts
             WHEN NOT MATCHED THEN INSERT *",
        )
        .await;
        let view = pyiceberg(wh);
        assert_eq!(
            view["rows"],
            json!([
                {"id": 1, "name": "ant", "ts": "2024-05-01T20:00:00"},
                {"id": 2, "name": "cat", "ts": "2024-05-03T09:00:00"},
                {"id": 4, "name": "dog", "ts": "2024-05-04T00:00:00"},
            ]),
            "{engine:?}"
        );
        assert_eq!(
            view["partitions"],
            json!([
                {"partition": {"name_trunc": "a", "ts_day": "2024-05-01"}, "record_count": 1},
                {"partition": {"name_trunc": "c", "ts_day": "2024-05-03"}, "record_count": 1},
                {"partition": {"name_trunc": "d", "ts_day": "2024-05-04"}, "record_count": 1},
            ]),
            "{engine:?}"
        );
    }
}
