//! Merge-on-read interop with Spark 3.5 + Iceberg 1.10 on one SQLite catalog
//! database (Spark as Iceberg's JdbcCatalog, `tests/spark/spark_sql.py`):
//!
//! - Spark makes two identical merge-on-read tables and gives them position
//!   delete files (DELETE, UPDATE, MERGE); icemerge merges into one (in
//!   merge-on-read mode, as the table says), Spark runs the same MERGE on
//!   the other: both read back the same rows, in Spark and in icemerge.
//!   Then both tables switch to copy-on-write and get the same MERGE again
//!   (icemerge's rewrite applies Spark's and its own deletes).
//!   UPDATE and DELETE follow the same way (merge-on-read, then a DELETE in
//!   copy-on-write).
//! - icemerge makes a merge-on-read table, merges into it, updates (in
//!   copy-on-write) and deletes (in merge-on-read); Spark reads exactly the
//!   expected rows and sees icemerge's position delete files.
//!
//! Skipped, saying so, without `$ICEMERGE_SPARK_PYTHON` (`./test.sh` sets
//! it up). The statements of one side are batched into one Spark process.

use std::path::Path;

use icemerge_scheduler::{CatalogOptions, EngineKind, Session, SessionOptions};
use icemerge_tests::{query, spark};

/// Spark's catalog name (what its JdbcCatalog writes in `catalog_name`).
const SPARK_CATALOG: &str = "lake";

async fn open(warehouse: &Path, name: &str, engine: EngineKind) -> Session {
    Session::open(SessionOptions {
        catalog: CatalogOptions {
            warehouse: warehouse.to_path_buf(),
            catalog_name: name.to_string(),
            ..Default::default()
        },
        engine,
        executors: Some(2),
        target_partitions: Some(4),
        ..Default::default()
    })
    .await
    .expect("open session")
}

/// The statements that make table `name` in Spark, with position deletes.
fn spark_table(name: &str) -> Vec<String> {
    vec![
        format!(
            "CREATE TABLE db.{name} (id BIGINT, v STRING, p INT) USING iceberg PARTITIONED BY (p) \
             TBLPROPERTIES ('format-version' = '2', 'write.delete.mode' = 'merge-on-read', \
             'write.update.mode' = 'merge-on-read', 'write.merge.mode' = 'merge-on-read')"
        ),
        format!(
            "INSERT INTO db.{name} SELECT id, concat('v', CAST(id AS STRING)), CAST(id % 3 AS INT) \
             FROM range(0, 60)"
        ),
        format!("INSERT INTO db.{name} VALUES (100, 'x', 0), (101, 'y', 1), (102, 'z', 2)"),
        format!("DELETE FROM db.{name} WHERE id % 7 = 0"),
        format!("UPDATE db.{name} SET v = 'spark-u' WHERE id % 5 = 1"),
        format!(
            "MERGE INTO db.{name} t USING (SELECT id, 'spark-m' AS v, CAST(id % 3 AS INT) AS p \
             FROM range(50, 110, 4)) s ON t.id = s.id \
             WHEN MATCHED AND t.id % 2 = 0 THEN DELETE \
             WHEN MATCHED THEN UPDATE SET v = s.v \
             WHEN NOT MATCHED THEN INSERT *"
        ),
    ]
}

/// The MERGE both sides run: the same rows, in each engine's syntax.
const SOURCE_ROWS: &str = "(3, 'D', 0), (4, 'm', 1), (8, 'm', 2), (11, 'D', 2), (14, 'm', 2), \
                           (16, 'm', 1), (54, 'm', 0), (58, 'D', 1), (101, 'm', 2), (200, 'n', 2), \
                           (201, 'D', 0)";

fn spark_merge(table: &str, tag: &str) -> String {
    format!(
        "MERGE INTO db.{table} t USING (SELECT * FROM VALUES {SOURCE_ROWS} AS s(id, v, p)) s \
         ON t.id = s.id \
         WHEN MATCHED AND s.v = 'D' THEN DELETE \
         WHEN MATCHED THEN UPDATE SET v = concat(s.v, '{tag}') \
         WHEN NOT MATCHED AND s.v <> 'D' THEN INSERT (id, v, p) VALUES (s.id, concat(s.v, '{tag}'), s.p)"
    )
}

fn icemerge_merge(table: &str, tag: &str) -> String {
    format!(
        "MERGE INTO db.{table} USING (VALUES {SOURCE_ROWS}) AS s(id, v, p) \
         ON {table}.id = s.id \
         WHEN MATCHED AND s.v = 'D' THEN DELETE \
         WHEN MATCHED THEN UPDATE SET v = concat(s.v, '{tag}') \
         WHEN NOT MATCHED AND s.v <> 'D' THEN INSERT (id, v, p) VALUES (s.id, concat(s.v, '{tag}'), s.p)"
    )
}

/// The UPDATE and DELETE both engines run after the first MERGE (same
/// syntax in both).
fn update_delete(table: &str) -> [String; 2] {
    [
        format!("UPDATE db.{table} SET v = concat(v, '-u') WHERE id % 4 = 2 AND p <> 1"),
        format!("DELETE FROM db.{table} WHERE id % 9 = 4 OR v = 'x'"),
    ]
}

/// The DELETE both engines run in copy-on-write.
fn cow_delete(table: &str) -> String {
    format!("DELETE FROM db.{table} WHERE id IN (10, 20, 30, 55)")
}

const READ_A: &str = "SELECT id, v, p FROM db.a ORDER BY id";
const READ_B: &str = "SELECT id, v, p FROM db.b ORDER BY id";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn icemerge_merges_into_spark_merge_on_read_tables() {
    let Some(spark) = spark("icemerge_merges_into_spark_merge_on_read_tables") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path();
    let mut setup = vec!["CREATE NAMESPACE db".to_string()];
    setup.extend(spark_table("a"));
    setup.extend(spark_table("b"));
    setup.push("SELECT count(*) FROM db.a.delete_files".into());
    let setup: Vec<&str> = setup.iter().map(String::as_str).collect();
    let out = spark.run(wh, SPARK_CATALOG, &setup);
    let spark_deletes: usize = out.last().unwrap()[0][0].parse().unwrap();
    assert!(spark_deletes > 0, "Spark wrote position delete files");

    // icemerge merges into a (merge-on-read: Spark's property), on the
    // cluster engine; it reads Spark's deletes first.
    let session = open(wh, SPARK_CATALOG, EngineKind::Cluster).await;
    let before_a = query(&session, READ_A).await;
    assert_eq!(before_a, query(&session, READ_B).await);
    session.execute(&icemerge_merge("a", "1")).await.unwrap();
    for statement in update_delete("a") {
        let row = query(&session, &statement).await;
        assert_ne!(row[0][0], "0", "{statement} changed rows");
    }
    let files = query(
        &session,
        "SELECT content, count(*) FROM db.\"a$files\" GROUP BY content ORDER BY content",
    )
    .await;
    let delete_files: usize = files
        .iter()
        .find(|r| r[0] == "1")
        .map_or(0, |r| r[1].parse().unwrap());
    assert!(
        delete_files > spark_deletes,
        "icemerge added position delete files: {files:?}"
    );
    let icemerge_a = query(&session, READ_A).await;
    drop(session);

    // Spark: the same MERGE into b; both tables read the same; then both
    // switch to copy-on-write.
    let merge_b = spark_merge("b", "1");
    let [update_b, delete_b] = update_delete("b");
    let out = spark.run(
        wh,
        SPARK_CATALOG,
        &[
            &merge_b,
            &update_b,
            &delete_b,
            READ_A,
            READ_B,
            "ALTER TABLE db.a SET TBLPROPERTIES ('write.merge.mode' = 'copy-on-write', \
             'write.delete.mode' = 'copy-on-write')",
            "ALTER TABLE db.b SET TBLPROPERTIES ('write.merge.mode' = 'copy-on-write', \
             'write.delete.mode' = 'copy-on-write')",
        ],
    );
    assert_eq!(
        out[3], out[4],
        "Spark reads icemerge's statements as its own"
    );
    assert_eq!(out[3], icemerge_a, "icemerge and Spark read the same rows");
    assert_ne!(out[3], before_a, "the statements changed rows");

    // Copy-on-write over files with Spark's and icemerge's deletes.
    let session = open(wh, SPARK_CATALOG, EngineKind::Local).await;
    session.execute(&icemerge_merge("a", "2")).await.unwrap();
    session.execute(&cow_delete("a")).await.unwrap();
    let icemerge_a = query(&session, READ_A).await;
    drop(session);
    let merge_b = spark_merge("b", "2");
    let delete_b = cow_delete("b");
    let out = spark.run(wh, SPARK_CATALOG, &[&merge_b, &delete_b, READ_A, READ_B]);
    assert_eq!(out[2], out[3], "copy-on-write: Spark's rows");
    assert_eq!(out[2], icemerge_a, "copy-on-write: icemerge's rows");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn spark_reads_icemerge_merge_on_read_tables() {
    let Some(spark) = spark("spark_reads_icemerge_merge_on_read_tables") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path();
    let session = open(wh, "icemerge", EngineKind::Local).await;
    session
        .execute(
            "CREATE SCHEMA db;
             CREATE TABLE db.m (id BIGINT, v STRING) PARTITIONED BY (bucket(2, id))
               TBLPROPERTIES ('write.merge.mode' = 'merge-on-read', 'write.delete.mode' = 'merge-on-read');
             INSERT INTO db.m SELECT value, 'a' FROM generate_series(0, 29);
             MERGE INTO db.m USING (VALUES (1, 'u'), (2, 'D'), (40, 'i')) AS s(id, v) ON m.id = s.id
               WHEN MATCHED AND s.v = 'D' THEN DELETE
               WHEN MATCHED THEN UPDATE SET v = s.v
               WHEN NOT MATCHED THEN INSERT *;
             MERGE INTO db.m USING (VALUES (1, 'D'), (3, 'w'), (40, 'w')) AS s(id, v) ON m.id = s.id
               WHEN MATCHED AND s.v = 'D' THEN DELETE
               WHEN MATCHED THEN UPDATE SET v = s.v;
             UPDATE db.m SET v = 'up' WHERE id IN (5, 7);
             DELETE FROM db.m WHERE id = 6 OR id > 25;",
        )
        .await
        .unwrap();
    let expected = query(&session, "SELECT id, v FROM db.m ORDER BY id").await;
    let model: Vec<Vec<String>> = (0..26)
        .filter(|i| ![1, 2, 6].contains(i))
        .map(|i| {
            let v = match i {
                3 => "w",
                5 | 7 => "up",
                _ => "a",
            };
            vec![i.to_string(), v.to_string()]
        })
        .collect();
    assert_eq!(expected, model);
    let delete_files = query(
        &session,
        "SELECT count(*) FROM db.\"m$files\" WHERE content = 1",
    )
    .await;
    drop(session);
    let out = spark.run(
        wh,
        "icemerge",
        &[
            "SELECT id, v FROM db.m ORDER BY id",
            "SELECT count(*) FROM db.m.delete_files",
            "SELECT count(*) FROM db.m.data_files",
        ],
    );
    assert_eq!(out[0], model, "Spark reads exactly the live rows");
    assert_eq!(out[1], delete_files, "Spark sees icemerge's delete files");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deletion_vectors_are_refused_by_name() {
    let Some(spark) = spark("deletion_vectors_are_refused_by_name") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path();
    spark.run(
        wh,
        SPARK_CATALOG,
        &[
            "CREATE NAMESPACE db",
            "CREATE TABLE db.v3 (id BIGINT, v STRING) USING iceberg \
             TBLPROPERTIES ('format-version' = '3', 'write.delete.mode' = 'merge-on-read')",
            "INSERT INTO db.v3 VALUES (1, 'a'), (2, 'b'), (3, 'c')",
            "DELETE FROM db.v3 WHERE id = 2",
        ],
    );
    for engine in [EngineKind::Local, EngineKind::Cluster] {
        let session = open(wh, SPARK_CATALOG, engine).await;
        let snapshots = query(&session, "SELECT count(*) FROM db.\"v3$snapshots\"").await;
        for sql in [
            "SELECT id FROM db.v3",
            "MERGE INTO db.v3 USING (VALUES (1, 'x')) AS s(id, v) ON v3.id = s.id \
             WHEN MATCHED THEN UPDATE SET v = s.v",
        ] {
            let err = session.execute(sql).await.expect_err(sql).to_string();
            assert!(
                err.contains("deletion vector") && err.contains("not supported"),
                "{engine:?}: {sql}: {err}"
            );
        }
        assert_eq!(
            query(&session, "SELECT count(*) FROM db.\"v3$snapshots\"").await,
            snapshots,
            "{engine:?}: the table is unchanged"
        );
    }
}
