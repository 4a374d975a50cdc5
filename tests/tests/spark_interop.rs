//! Interop with Spark 3.5 + Iceberg 1.10 on one SQLite catalog database,
//! Spark running as Iceberg's JdbcCatalog (`tests/spark/spark_sql.py`):
//!
//! - Spark makes the catalog (its default V0 layout, under its own catalog
//!   name) and its tables, one of them at a `file:/` location as Spark writes
//!   them; icemerge, opened with `--catalog-name` = Spark's, reads and merges
//!   them copy-on-write, cleans up after a failed merge, creates a table of
//!   its own there, and drops tables with their files; Spark reads back
//!   exactly the expected rows, no delete files, and the catalog's layout is
//!   as Spark made it.
//! - icemerge makes the catalog (V1 layout) and a v1 and a v2 table, merges
//!   them; Spark and PyIceberg read them back.
//!
//! Skipped, saying so, without `$ICEMERGE_SPARK_PYTHON` (`./test.sh` sets
//! it up). Each Spark process costs several seconds: the statements of one
//! side are batched into one process.

use std::path::Path;

use iceberg::spec::FormatVersion;
use iceberg::{NamespaceIdent, TableIdent};
use icemerge_executor::cleanup;
use icemerge_scheduler::{CatalogOptions, EngineKind, Session, SessionOptions};
use icemerge_tests::{query, run_python, spark};
use serde_json::json;
use sqlx::{Connection, SqliteConnection};

/// Spark's catalog name in the first test (what its JdbcCatalog writes in
/// `catalog_name`).
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

/// The `CREATE TABLE` statements of the SQLite catalog database.
async fn catalog_schema(warehouse: &Path) -> Vec<String> {
    let uri = format!("sqlite://{}/catalog.db", warehouse.display());
    let mut conn = SqliteConnection::connect(&uri).await.expect("catalog.db");
    let rows: Vec<(String,)> =
        sqlx::query_as("SELECT sql FROM sqlite_master WHERE type = 'table' ORDER BY name")
            .fetch_all(&mut conn)
            .await
            .unwrap();
    rows.into_iter().map(|(sql,)| sql).collect()
}

/// Every regular file under `dir`, as paths relative to it.
fn files_under(dir: &Path) -> Vec<String> {
    let mut out = vec![];
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                out.push(path.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

fn rows(expected: &[&[&str]]) -> Vec<Vec<String>> {
    expected
        .iter()
        .map(|r| r.iter().map(|v| v.to_string()).collect())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn icemerge_merges_into_spark_tables_on_spark_catalog() {
    let Some(spark) = spark("icemerge_merges_into_spark_tables_on_spark_catalog") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path();
    // Spark's own spelling of a local location: one slash.
    let f_location = format!("file:{}/db/f", wh.display());

    // 1. Spark makes the catalog database, a namespace and two tables.
    spark.run(
        wh,
        SPARK_CATALOG,
        &[
            "CREATE NAMESPACE db",
            "CREATE TABLE db.t (id BIGINT, v STRING, p INT) USING iceberg PARTITIONED BY (p) \
             TBLPROPERTIES ('format-version' = '2')",
            "INSERT INTO db.t VALUES (1, 'a', 1), (2, 'b', 1), (3, 'c', 2), (4, 'd', 2)",
            &format!(
                "CREATE TABLE db.f (id BIGINT, v STRING) USING iceberg LOCATION '{f_location}'"
            ),
            "INSERT INTO db.f VALUES (1, 'a'), (2, 'b'), (3, 'c')",
        ],
    );
    let schema = catalog_schema(wh).await;
    assert!(
        schema.iter().all(|sql| !sql.contains("iceberg_type")),
        "Spark's JdbcCatalog made the V0 layout: {schema:?}"
    );

    // 2. icemerge, under Spark's catalog name.
    let session = open(wh, SPARK_CATALOG, EngineKind::Local).await;
    assert_eq!(
        query(&session, "SELECT id, v, p FROM lake.db.t ORDER BY id").await,
        rows(&[
            &["1", "a", "1"],
            &["2", "b", "1"],
            &["3", "c", "2"],
            &["4", "d", "2"]
        ])
    );
    let merged = query(
        &session,
        "MERGE INTO db.t USING (VALUES (2, 'B', 1), (3, NULL, 2), (5, 'e', 2)) AS s(id, v, p)
         ON t.id = s.id
         WHEN MATCHED AND s.v IS NULL THEN DELETE
         WHEN MATCHED THEN UPDATE SET v = s.v
         WHEN NOT MATCHED THEN INSERT *",
    )
    .await;
    assert_eq!(merged[0][..4], ["3", "1", "1", "1"]);
    assert_eq!(
        query(
            &session,
            "SELECT count(*) FROM db.\"t$files\" WHERE content <> 0"
        )
        .await,
        rows(&[&["0"]]),
        "copy-on-write: no delete files"
    );
    // A table of icemerge's own in Spark's catalog.
    session
        .execute("CREATE TABLE db.mine (id BIGINT, v STRING); INSERT INTO db.mine VALUES (10, 'x')")
        .await
        .unwrap();
    drop(session);

    // The `file:/` table, on the cluster engine: a failed merge (after its
    // inserts may have been written) leaves no file behind, a good one works.
    let session = open(wh, SPARK_CATALOG, EngineKind::Cluster).await;
    let f_data = wh.join("db/f/data");
    let before = files_under(&f_data);
    let err = session
        .execute(
            "MERGE INTO db.f USING (
               SELECT value AS id, 'n' AS v FROM generate_series(100, 3000)
               UNION ALL SELECT 1, 'x' UNION ALL SELECT 1, 'y') AS s
             ON f.id = s.id
             WHEN MATCHED THEN UPDATE SET v = s.v
             WHEN NOT MATCHED THEN INSERT *",
        )
        .await
        .expect_err("a target row matched twice");
    assert!(
        err.to_string().contains("more than one source row"),
        "{err}"
    );
    assert_eq!(
        files_under(&f_data),
        before,
        "the failed merge left no file"
    );
    // The clean-up itself on the data location Spark's metadata gives.
    let table = session
        .catalog()
        .load_table(&TableIdent::new(
            NamespaceIdent::new("db".into()),
            "f".into(),
        ))
        .await
        .unwrap();
    let data_location = cleanup::data_location(table.metadata());
    assert_eq!(data_location, format!("{f_location}/data"));
    std::fs::write(f_data.join("w-uncommitted-0-0.parquet"), b"x").unwrap();
    assert_eq!(
        cleanup::delete_files_with_prefix(&data_location, "w-uncommitted-"),
        1
    );
    assert_eq!(files_under(&f_data), before);
    session
        .execute(
            "MERGE INTO db.f USING (VALUES (2, 'B'), (9, 'z')) AS s(id, v) ON f.id = s.id
             WHEN MATCHED THEN UPDATE SET v = s.v
             WHEN NOT MATCHED THEN INSERT *",
        )
        .await
        .unwrap();
    let paths = query(&session, "SELECT file_path FROM db.\"f$files\"").await;
    assert!(!paths.is_empty());
    for path in paths.iter().map(|r| &r[0]) {
        assert!(
            path.starts_with(&format!("{f_location}/data/")),
            "files of a file:/ table are named under its location as written: {path}"
        );
        let local = path.strip_prefix("file:").unwrap();
        assert!(Path::new(local).is_file(), "{path}");
    }
    drop(session);

    // 3. Spark reads what icemerge wrote.
    let out = spark.run(
        wh,
        SPARK_CATALOG,
        &[
            "SELECT id, v, p FROM db.t ORDER BY id",
            "SELECT id, v FROM db.f ORDER BY id",
            "SELECT id, v FROM db.mine",
            "SELECT count(*) FROM db.t.delete_files",
            "SELECT operation FROM db.t.snapshots ORDER BY committed_at",
        ],
    );
    assert_eq!(
        out[0],
        rows(&[
            &["1", "a", "1"],
            &["2", "B", "1"],
            &["4", "d", "2"],
            &["5", "e", "2"]
        ])
    );
    assert_eq!(
        out[1],
        rows(&[&["1", "a"], &["2", "B"], &["3", "c"], &["9", "z"]])
    );
    assert_eq!(out[2], rows(&[&["10", "x"]]));
    assert_eq!(out[3], rows(&[&["0"]]));
    assert_eq!(out[4], rows(&[&["append"], &["overwrite"]]));
    assert_eq!(
        catalog_schema(wh).await,
        schema,
        "the catalog's layout is as Spark made it"
    );

    // 4. DROP TABLE removes the files of Spark's tables (and Spark's .crc
    //    files beside them).
    let session = open(wh, SPARK_CATALOG, EngineKind::Local).await;
    session
        .execute("DROP TABLE db.f; DROP TABLE db.t")
        .await
        .unwrap();
    assert_eq!(files_under(&wh.join("db/f")), Vec::<String>::new());
    assert_eq!(files_under(&wh.join("db/t")), Vec::<String>::new());
    assert_eq!(
        query(&session, "SELECT id, v FROM db.mine").await,
        rows(&[&["10", "x"]])
    );
    assert_eq!(catalog_schema(wh).await, schema);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn spark_and_pyiceberg_read_icemerge_tables() {
    let Some(spark) = spark("spark_and_pyiceberg_read_icemerge_tables") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path();
    let session = open(wh, "icemerge", EngineKind::Local).await;
    session
        .execute(
            "CREATE SCHEMA db;
             CREATE TABLE db.t2 (id BIGINT, v STRING) PARTITIONED BY (bucket(4, id));
             CREATE TABLE db.t1 (id BIGINT, v STRING) PARTITIONED BY (bucket(4, id))
               TBLPROPERTIES ('format-version' = '1');
             INSERT INTO db.t2 VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd');
             INSERT INTO db.t1 VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd');
             MERGE INTO db.t2 USING (VALUES (2, 'B'), (4, NULL), (6, 'f')) AS s(id, v) ON t2.id = s.id
               WHEN MATCHED AND s.v IS NULL THEN DELETE
               WHEN MATCHED THEN UPDATE SET v = s.v
               WHEN NOT MATCHED THEN INSERT *;
             MERGE INTO db.t1 USING (VALUES (2, 'B'), (4, NULL), (6, 'f')) AS s(id, v) ON t1.id = s.id
               WHEN MATCHED AND s.v IS NULL THEN DELETE
               WHEN MATCHED THEN UPDATE SET v = s.v
               WHEN NOT MATCHED THEN INSERT *;",
        )
        .await
        .unwrap();
    let version = |name: &str| {
        let catalog = session.catalog();
        let ident = TableIdent::new(NamespaceIdent::new("db".into()), name.into());
        async move {
            catalog
                .load_table(&ident)
                .await
                .unwrap()
                .metadata()
                .format_version()
        }
    };
    assert_eq!(version("t1").await, FormatVersion::V1);
    assert_eq!(version("t2").await, FormatVersion::V2);
    drop(session);
    let schema = catalog_schema(wh).await;
    assert!(schema.iter().any(|sql| sql.contains("iceberg_type")), "V1");

    let expected = rows(&[&["1", "a"], &["2", "B"], &["3", "c"], &["6", "f"]]);
    let out = spark.run(
        wh,
        "icemerge",
        &[
            "SELECT id, v FROM db.t2 ORDER BY id",
            "SELECT id, v FROM db.t1 ORDER BY id",
            "SHOW TBLPROPERTIES db.t1 ('format-version')",
            "SHOW TBLPROPERTIES db.t2 ('format-version')",
        ],
    );
    assert_eq!(out[0], expected);
    assert_eq!(out[1], expected);
    assert_eq!(out[2], rows(&[&["format-version", "1"]]));
    assert_eq!(out[3], rows(&[&["format-version", "2"]]));
    assert_eq!(catalog_schema(wh).await, schema, "Spark altered nothing");

    let py = run_python(
        "pyiceberg_interop.py",
        &[
            "read",
            "--warehouse",
            wh.to_str().unwrap(),
            "--table",
            "db.t1",
        ],
    );
    let mut py_rows = py["rows"].as_array().unwrap().clone();
    py_rows.sort_by_key(|r| r["id"].as_i64());
    assert_eq!(
        py_rows,
        vec![
            json!({"id": 1, "v": "a"}),
            json!({"id": 2, "v": "B"}),
            json!({"id": 3, "v": "c"}),
            json!({"id": 6, "v": "f"}),
        ]
    );
    assert_eq!(py["format_version"], json!(1));
}
