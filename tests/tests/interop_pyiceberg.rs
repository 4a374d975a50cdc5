//! Interop with PyIceberg on one shared SQLite catalog: PyIceberg reads
//! exactly the rows icemerge wrote, and icemerge reads exactly the rows of a
//! table PyIceberg created and appended to. Runs on both engines.

use icemerge_tests::{open_session, query, run_python, ENGINES};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pyiceberg_reads_what_icemerge_wrote() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let session = open_session(dir.path(), engine).await;
        session
            .execute(
                "CREATE SCHEMA db;
                 CREATE TABLE db.t (id BIGINT NOT NULL, name STRING, amount DECIMAL(10,2), day DATE, ts TIMESTAMP)
                   PARTITIONED BY (bucket(2, id));
                 INSERT INTO db.t VALUES (1, 'one', 1.25, DATE '2024-01-01', TIMESTAMP '2024-01-01 10:00:00'),
                                         (2, NULL, NULL, NULL, NULL);
                 INSERT INTO db.t VALUES (3, 'three', -7.50, DATE '1999-12-31', TIMESTAMP '1999-12-31 23:59:59');",
            )
            .await
            .unwrap();
        let wh = dir.path().to_str().unwrap();
        let out = run_python(
            "pyiceberg_interop.py",
            &["read", "--warehouse", wh, "--table", "db.t"],
        );
        let mut rows = out["rows"].as_array().unwrap().clone();
        rows.sort_by_key(|r| r["id"].as_i64());
        assert_eq!(
            rows,
            vec![
                json!({"id": 1, "name": "one", "amount": "1.25", "day": "2024-01-01", "ts": "2024-01-01T10:00:00"}),
                json!({"id": 2, "name": null, "amount": null, "day": null, "ts": null}),
                json!({"id": 3, "name": "three", "amount": "-7.50", "day": "1999-12-31", "ts": "1999-12-31T23:59:59"}),
            ],
            "engine {engine:?}"
        );
        assert_eq!(
            out["snapshots"],
            json!(2),
            "one snapshot per INSERT ({engine:?})"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn icemerge_reads_what_pyiceberg_wrote() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let wh = dir.path().to_str().unwrap();
        // The catalog database is created by icemerge first, as a user would.
        drop(open_session(dir.path(), engine).await);
        run_python(
            "pyiceberg_interop.py",
            &["create", "--warehouse", wh, "--table", "pyns.py_t"],
        );
        let session = open_session(dir.path(), engine).await;
        let rows = query(
            &session,
            "SELECT id, name, amount, day FROM pyns.py_t ORDER BY id",
        )
        .await;
        assert_eq!(
            rows,
            vec![
                vec!["1", "py-one", "1.50", "2024-01-01"],
                vec!["2", "NULL", "NULL", "NULL"],
                vec!["3", "py-three", "-3.25", "2023-12-31"],
            ],
            "engine {engine:?}"
        );
        let snapshots = query(&session, "SELECT count(*) FROM pyns.\"py_t$snapshots\"").await;
        assert_eq!(snapshots, vec![vec!["2"]]);
        // icemerge can append to PyIceberg's table, and PyIceberg sees it.
        session
            .execute("INSERT INTO pyns.py_t VALUES (4, 'ice', 4.00, DATE '2024-04-04')")
            .await
            .unwrap();
        let out = run_python(
            "pyiceberg_interop.py",
            &["read", "--warehouse", wh, "--table", "pyns.py_t"],
        );
        assert_eq!(out["rows"].as_array().unwrap().len(), 4);
        assert_eq!(out["snapshots"], json!(3));
    }
}
