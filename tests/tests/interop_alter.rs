//! Interop after schema and partition evolution, on one SQLite catalog:
//! icemerge adds, renames, promotes and drops columns and adds a partition
//! field, writes and merges; PyIceberg, DuckDB and Spark then read the same
//! rows under the same column names. Spark evolves the schema in turn
//! (adds and renames a column, writes a row), and icemerge merges into the
//! result and reads what Spark reads.
//!
//! The Spark half is skipped, saying so, without `$ICEMERGE_SPARK_PYTHON`
//! (`./test.sh` sets it up).

use icemerge_scheduler::EngineKind;
use icemerge_tests::{open_session, query, run_python, spark};
use serde_json::{json, Value};

fn sorted_rows(out: &Value) -> Vec<Value> {
    let mut rows = out["rows"].as_array().expect("rows").clone();
    rows.sort_by_key(|r| r["id"].as_i64());
    rows
}

fn row(id: i64, v: i64, label: &str, n: Option<f64>) -> Value {
    json!({"id": id, "v": v, "label": label, "n": n})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn peers_read_an_evolved_table_and_icemerge_merges_into_one_spark_evolved() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path();
    let session = open_session(wh, EngineKind::Local).await;
    session
        .execute(
            "CREATE SCHEMA db;
             CREATE TABLE db.t (id BIGINT NOT NULL, v INT, s STRING) PARTITIONED BY (bucket(2, id));
             INSERT INTO db.t VALUES (1, 1, 'a'), (2, 2, 'b'), (3, 3, 'c'), (4, 4, 'd');
             ALTER TABLE db.t ADD COLUMN n DOUBLE;
             ALTER TABLE db.t ADD COLUMN tmp INT;
             ALTER TABLE db.t RENAME COLUMN s TO label;
             ALTER TABLE db.t ALTER COLUMN v TYPE BIGINT;
             ALTER TABLE db.t ADD PARTITION FIELD label;
             INSERT INTO db.t VALUES (5, 5000000000, 'e', 0.5, 7);
             ALTER TABLE db.t DROP COLUMN tmp;
             MERGE INTO db.t USING (VALUES (1, 1.5)) AS src(id, n) ON t.id = src.id
               WHEN MATCHED THEN UPDATE SET n = src.n;",
        )
        .await
        .unwrap();
    let expected = vec![
        row(1, 1, "a", Some(1.5)),
        row(2, 2, "b", None),
        row(3, 3, "c", None),
        row(4, 4, "d", None),
        row(5, 5_000_000_000, "e", Some(0.5)),
    ];
    let ours = query(&session, "SELECT id, v, label, n FROM db.t ORDER BY id").await;
    assert_eq!(ours.len(), 5, "{ours:?}");
    assert_eq!(ours[4], ["5", "5000000000", "e", "0.5"]);

    let path = wh.to_str().unwrap();
    let py = run_python(
        "pyiceberg_interop.py",
        &["read", "--warehouse", path, "--table", "db.t"],
    );
    assert_eq!(sorted_rows(&py), expected, "PyIceberg");
    let duck = run_python(
        "merge_interop.py",
        &["duckdb", "--warehouse", path, "--table", "db.t"],
    );
    assert_eq!(sorted_rows(&duck), expected, "DuckDB");
    drop(session);

    let Some(spark) =
        spark("peers_read_an_evolved_table_and_icemerge_merges_into_one_spark_evolved")
    else {
        return;
    };
    let out = spark.run(
        wh,
        "icemerge",
        &[
            "SELECT id, v, label, n FROM db.t ORDER BY id",
            "DESCRIBE db.t",
            "ALTER TABLE db.t ADD COLUMNS (note STRING)",
            "ALTER TABLE db.t RENAME COLUMN label TO tag",
            "INSERT INTO db.t VALUES (6, 6, 'f', NULL, 'spark')",
        ],
    );
    let text = |rows: &[&[&str]]| -> Vec<Vec<String>> {
        rows.iter()
            .map(|r| r.iter().map(|v| v.to_string()).collect())
            .collect()
    };
    assert_eq!(
        out[0],
        text(&[
            &["1", "1", "a", "1.5"],
            &["2", "2", "b", "NULL"],
            &["3", "3", "c", "NULL"],
            &["4", "4", "d", "NULL"],
            &["5", "5000000000", "e", "0.5"],
        ]),
        "Spark's rows"
    );
    let mut types: Vec<Vec<String>> = out[1]
        .iter()
        .filter(|r| ["id", "v", "label", "n"].contains(&r[0].as_str()))
        .map(|r| r[..2].to_vec())
        .collect();
    types.sort();
    types.dedup();
    assert_eq!(
        types,
        text(&[
            &["id", "bigint"],
            &["label", "string"],
            &["n", "double"],
            &["v", "bigint"],
        ]),
        "Spark's schema"
    );

    let session = open_session(wh, EngineKind::Local).await;
    session
        .execute(
            "MERGE INTO db.t USING (VALUES (2, 'merged'), (6, 'again'), (7, 'new')) AS src(id, note)
               ON t.id = src.id
               WHEN MATCHED THEN UPDATE SET note = src.note
               WHEN NOT MATCHED THEN INSERT (id, v, tag, note) VALUES (src.id, 7, 'g', src.note)",
        )
        .await
        .unwrap();
    let after = [
        ["1", "1", "a", "NULL"],
        ["2", "2", "b", "merged"],
        ["3", "3", "c", "NULL"],
        ["4", "4", "d", "NULL"],
        ["5", "5000000000", "e", "NULL"],
        ["6", "6", "f", "again"],
        ["7", "7", "g", "new"],
    ];
    assert_eq!(
        query(&session, "SELECT id, v, tag, note FROM db.t ORDER BY id").await,
        after
    );
    drop(session);
    let out = spark.run(
        wh,
        "icemerge",
        &["SELECT id, v, tag, note FROM db.t ORDER BY id"],
    );
    assert_eq!(
        out[0],
        after
            .iter()
            .map(|r| r.iter().map(|v| v.to_string()).collect::<Vec<_>>())
            .collect::<Vec<_>>(),
        "Spark reads icemerge's merge into the table it evolved"
    );
}

/// A MERGE WITH SCHEMA EVOLUTION adds a column and widens another, and the
/// table's write order is set: PyIceberg and DuckDB read the new column's
/// values and the widened ones, and PyIceberg sees the sort order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn peers_read_a_table_a_merge_evolved_and_its_write_order() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path();
    let session = open_session(wh, EngineKind::Local).await;
    session
        .execute(
            "CREATE SCHEMA db;
             CREATE TABLE db.t (id BIGINT NOT NULL, v INT);
             INSERT INTO db.t VALUES (1, 1), (2, 2);
             ALTER TABLE db.t WRITE ORDERED BY v DESC NULLS LAST;
             MERGE WITH SCHEMA EVOLUTION INTO db.t
               USING (VALUES (2, 5000000000, 'two'), (3, 3, 'three')) AS s(id, v, note)
               ON t.id = s.id
               WHEN MATCHED THEN UPDATE SET *
               WHEN NOT MATCHED THEN INSERT *;",
        )
        .await
        .unwrap();
    let expected = vec![
        json!({"id": 1, "v": 1, "note": null}),
        json!({"id": 2, "v": 5_000_000_000i64, "note": "two"}),
        json!({"id": 3, "v": 3, "note": "three"}),
    ];
    let path = wh.to_str().unwrap();
    let py = run_python(
        "pyiceberg_interop.py",
        &["read", "--warehouse", path, "--table", "db.t"],
    );
    assert_eq!(sorted_rows(&py), expected, "PyIceberg");
    assert_eq!(
        py["sort_order"],
        json!([{"column": "v", "direction": "desc", "null_order": "nulls-last"}]),
        "PyIceberg: the sort order"
    );
    let duck = run_python(
        "merge_interop.py",
        &["duckdb", "--warehouse", path, "--table", "db.t"],
    );
    assert_eq!(sorted_rows(&duck), expected, "DuckDB");
}
