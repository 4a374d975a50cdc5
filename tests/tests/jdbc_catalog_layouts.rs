//! Both layouts of Iceberg's JDBC catalog tables, on SQLite and (when
//! `$ICEMERGE_TEST_POSTGRES_URI` is set) Postgres:
//!
//! - V0, as Iceberg Java's `JdbcCatalog` creates it by default (no
//!   `iceberg_type` column; the tables are made here with its DDL): icemerge
//!   opens it, creates, writes, merges and drops tables, and leaves the layout
//!   as it found it.
//! - V1 (with `iceberg_type`), as icemerge creates it in an empty database:
//!   a view row of another engine is not a table to icemerge.
//!
//! Also: rows of another catalog name are not this catalog's.

use icemerge_scheduler::{CatalogOptions, EngineKind, Session, SessionOptions};
use icemerge_tests::{postgres_database, query};
use sqlx::{AnyConnection, Connection};

/// Iceberg Java's JdbcCatalog DDL for the V0 layout
/// (`JdbcUtil.V0_CREATE_CATALOG_SQL`, `CREATE_NAMESPACE_PROPERTIES_TABLE_SQL`).
const JAVA_V0_DDL: [&str; 2] = [
    "CREATE TABLE iceberg_tables(catalog_name VARCHAR(255) NOT NULL,\
     table_namespace VARCHAR(255) NOT NULL,table_name VARCHAR(255) NOT NULL,\
     metadata_location VARCHAR(1000),previous_metadata_location VARCHAR(1000),\
     PRIMARY KEY (catalog_name, table_namespace, table_name))",
    "CREATE TABLE iceberg_namespace_properties(catalog_name VARCHAR(255) NOT NULL,\
     namespace VARCHAR(255) NOT NULL,property_key VARCHAR(255),property_value VARCHAR(1000),\
     PRIMARY KEY (catalog_name, namespace, property_key))",
];

const V0_COLUMNS: [&str; 5] = [
    "catalog_name",
    "table_namespace",
    "table_name",
    "metadata_location",
    "previous_metadata_location",
];

async fn connect(uri: &str) -> AnyConnection {
    sqlx::any::install_default_drivers();
    AnyConnection::connect(uri).await.expect("connect")
}

/// The columns of `iceberg_tables`, in order.
async fn columns(uri: &str) -> Vec<String> {
    let mut conn = connect(uri).await;
    let sql = if uri.starts_with("sqlite:") {
        "SELECT name FROM pragma_table_info('iceberg_tables') ORDER BY cid"
    } else {
        "SELECT CAST(column_name AS TEXT) FROM information_schema.columns \
         WHERE table_name = 'iceberg_tables' AND table_schema = current_schema() \
         ORDER BY ordinal_position"
    };
    let rows: Vec<(String,)> = sqlx::query_as(sql).fetch_all(&mut conn).await.unwrap();
    rows.into_iter().map(|(c,)| c).collect()
}

async fn execute(uri: &str, statements: &[&str]) {
    let mut conn = connect(uri).await;
    for statement in statements {
        sqlx::query(statement)
            .execute(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }
}

async fn table_rows(uri: &str) -> Vec<(String, String, String)> {
    let mut conn = connect(uri).await;
    sqlx::query_as(
        "SELECT catalog_name, table_namespace, table_name FROM iceberg_tables \
         ORDER BY catalog_name, table_namespace, table_name",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap()
}

async fn open(warehouse: &std::path::Path, uri: &str, name: &str) -> Session {
    Session::open(SessionOptions {
        catalog: CatalogOptions {
            warehouse: warehouse.to_path_buf(),
            catalog_uri: Some(uri.to_string()),
            catalog_name: name.to_string(),
            ..Default::default()
        },
        engine: EngineKind::Local,
        ..Default::default()
    })
    .await
    .expect("open session")
}

async fn error(session: &Session, sql: &str) -> String {
    match session.execute(sql).await {
        Ok(_) => panic!("{sql}: expected an error"),
        Err(e) => e.to_string(),
    }
}

/// icemerge on a catalog database whose tables Iceberg Java made (V0),
/// under the catalog name `java_cat`.
async fn v0_round_trip(uri: &str) {
    execute(uri, &JAVA_V0_DDL).await;
    let warehouse = tempfile::tempdir().unwrap();
    let session = open(warehouse.path(), uri, "java_cat").await;
    session
        .execute(
            "CREATE SCHEMA db;
             CREATE TABLE db.t (id BIGINT, v STRING) PARTITIONED BY (bucket(2, id));
             INSERT INTO db.t VALUES (1, 'a'), (2, 'b'), (3, 'c');
             MERGE INTO db.t USING (VALUES (2, 'B'), (3, NULL), (4, 'd')) AS s(id, v) ON t.id = s.id
               WHEN MATCHED AND s.v IS NULL THEN DELETE
               WHEN MATCHED THEN UPDATE SET v = s.v
               WHEN NOT MATCHED THEN INSERT *;
             INSERT INTO db.t VALUES (5, 'e');
             CREATE TABLE db.gone (id BIGINT);
             INSERT INTO db.gone VALUES (1);
             DROP TABLE db.gone;",
        )
        .await
        .unwrap();
    let expected = vec![
        vec!["1", "a"],
        vec!["2", "B"],
        vec!["4", "d"],
        vec!["5", "e"],
    ];
    assert_eq!(
        query(&session, "SELECT id, v FROM db.t ORDER BY id").await,
        expected
    );
    // Three-part names use the catalog's name.
    assert_eq!(
        query(&session, "SELECT id, v FROM java_cat.db.t ORDER BY id").await,
        expected
    );
    let err = error(&session, "CREATE TABLE icemerge.db.x (id BIGINT)").await;
    assert!(err.contains("unknown catalog 'icemerge'"), "{err}");
    let err = error(&session, "CREATE TABLE db.t (id BIGINT)").await;
    assert!(err.contains("already exists"), "{err}");
    drop(session);

    // The layout is as Iceberg Java made it; the rows carry the catalog's name.
    assert_eq!(columns(uri).await, V0_COLUMNS);
    assert_eq!(
        table_rows(uri).await,
        vec![("java_cat".to_string(), "db".to_string(), "t".to_string())]
    );

    // Reopened: the same table; under another catalog name: nothing.
    let session = open(warehouse.path(), uri, "java_cat").await;
    assert_eq!(
        query(&session, "SELECT id, v FROM db.t ORDER BY id").await,
        expected
    );
    drop(session);
    let other = open(warehouse.path(), uri, "other").await;
    let err = error(&other, "SELECT * FROM db.t").await;
    assert!(err.contains("'db' does not exist"), "{err}");
}

/// A view of another engine in a V1 catalog is not a table to icemerge.
async fn v1_view_row_is_not_a_table(uri: &str) {
    let warehouse = tempfile::tempdir().unwrap();
    let session = open(warehouse.path(), uri, "icemerge").await;
    session
        .execute("CREATE SCHEMA db; CREATE TABLE db.t (id BIGINT); INSERT INTO db.t VALUES (7)")
        .await
        .unwrap();
    assert_eq!(
        columns(uri).await,
        [&V0_COLUMNS[..], &["iceberg_type"]].concat(),
        "an empty database gets the V1 layout"
    );
    execute(
        uri,
        &[
            "INSERT INTO iceberg_tables (catalog_name, table_namespace, table_name, \
           metadata_location, previous_metadata_location, iceberg_type) \
           VALUES ('icemerge', 'db', 'v', 'file:///nowhere/v.metadata.json', NULL, 'VIEW')",
        ],
    )
    .await;
    let err = error(&session, "SELECT * FROM db.v").await;
    assert!(err.contains("not found"), "{err}");
    let err = error(&session, "DROP TABLE db.v").await;
    assert!(err.contains("does not exist"), "{err}");
    let err = error(&session, "CREATE TABLE db.v (id BIGINT)").await;
    assert!(err.contains("already exists"), "{err}");
    assert_eq!(
        query(&session, "SELECT id FROM db.t").await,
        vec![vec!["7"]]
    );
    assert_eq!(table_rows(uri).await.len(), 2, "the view row stays");
}

fn sqlite_uri(dir: &std::path::Path) -> String {
    format!("sqlite://{}/catalog.db?mode=rwc", dir.display())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn v0_layout_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    v0_round_trip(&sqlite_uri(dir.path())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn v1_layout_view_rows_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    v1_view_row_is_not_a_table(&sqlite_uri(dir.path())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn v0_layout_on_postgres() {
    let Some(db) = postgres_database("v0_layout_on_postgres").await else {
        return;
    };
    v0_round_trip(&db.uri).await;
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn v1_layout_view_rows_on_postgres() {
    let Some(db) = postgres_database("v1_layout_view_rows_on_postgres").await else {
        return;
    };
    v1_view_row_is_not_a_table(&db.uri).await;
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn empty_catalog_name_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let err = Session::open(SessionOptions {
        catalog: CatalogOptions {
            warehouse: dir.path().to_path_buf(),
            catalog_name: " ".to_string(),
            ..Default::default()
        },
        ..Default::default()
    })
    .await
    .err()
    .expect("an empty catalog name is refused")
    .to_string();
    assert!(err.contains("catalog name"), "{err}");
}
