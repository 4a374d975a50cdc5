//! An `s3://` warehouse on a real S3-compatible server: moto's server
//! (PyPI `moto[server]`, installed into `.venv` by `./test.sh`), started by
//! the test itself as a child process on a free loopback port and killed at
//! the end. Tables are created, loaded, merged into and read back on both
//! engines (the cluster on a Postgres catalog when `ICEMERGE_TEST_POSTGRES_URI`
//! is set, as under `./test.sh`) with every data and metadata file in the
//! bucket; a failed MERGE
//! and DROP TABLE leave no objects behind; the cleanup of uncommitted files
//! lists and deletes through S3; snapshot expiry and orphan removal delete
//! exactly the objects they must.

use std::collections::BTreeSet;
use std::time::Duration;

use icemerge_executor::cleanup::{delete_files_with_prefix, s3_operator};
use icemerge_scheduler::{CatalogOptions, EngineKind, Session, SessionOptions};
use icemerge_tests::moto::{start_moto, Moto};
use icemerge_tests::{postgres_database, query, ENGINES};

fn sqlite_uri(dir: &std::path::Path) -> String {
    format!("sqlite://{}/catalog.db?mode=rwc", dir.display())
}

async fn open(moto: &Moto, warehouse: &str, catalog_uri: &str, engine: EngineKind) -> Session {
    Session::open(SessionOptions {
        catalog: CatalogOptions {
            warehouse: warehouse.into(),
            catalog_uri: Some(catalog_uri.to_string()),
            s3: moto.s3_options(),
            ..Default::default()
        },
        engine,
        executors: Some(2),
        target_partitions: Some(4),
        ..Default::default()
    })
    .await
    .expect("open session on an s3:// warehouse")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn create_insert_merge_read_on_s3() {
    let moto = start_moto();
    moto.create_bucket("lake");
    for engine in ENGINES {
        let warehouse = format!("s3://lake/wh-{engine:?}").to_lowercase();
        let catalog_dir = tempfile::tempdir().unwrap();
        // The cluster runs as a cluster deployment would: on a Postgres
        // catalog, when the test server is configured.
        let database = match engine {
            EngineKind::Cluster => postgres_database("s3_warehouse").await,
            EngineKind::Local => None,
        };
        let catalog_uri = match &database {
            Some(db) => db.uri.clone(),
            None => sqlite_uri(catalog_dir.path()),
        };
        let session = open(&moto, &warehouse, &catalog_uri, engine).await;
        session
            .execute(
                "CREATE SCHEMA db;
                 CREATE TABLE db.people (id BIGINT NOT NULL, name VARCHAR, city VARCHAR)
                   PARTITIONED BY (city);
                 INSERT INTO db.people VALUES (1, 'ann', 'oslo'), (2, 'bob', 'rome'), (3, 'cy', 'oslo');",
            )
            .await
            .unwrap();
        let out = query(
            &session,
            "MERGE INTO db.people t
             USING (VALUES (2, 'bobby', 'rome'), (3, NULL, 'oslo'), (4, 'dee', 'lima')) AS s(id, name, city)
             ON t.id = s.id
             WHEN MATCHED AND s.name IS NULL THEN DELETE
             WHEN MATCHED THEN UPDATE SET name = s.name
             WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.name, s.city)",
        )
        .await;
        assert_eq!(out[0][..4], ["3", "1", "1", "1"], "{engine:?}: {out:?}");
        assert_eq!(
            query(&session, "SELECT id, name, city FROM db.people ORDER BY id").await,
            vec![
                vec!["1", "ann", "oslo"],
                vec!["2", "bobby", "rome"],
                vec!["4", "dee", "lima"],
            ],
            "{engine:?}"
        );

        // Every file the table references is an object in the bucket.
        let table_location = format!("{warehouse}/db/people");
        let objects = moto.objects(&table_location).await;
        let files = query(&session, "SELECT file_path FROM db.\"people$files\"").await;
        assert_eq!(files.len(), 3, "{files:?}");
        for file in &files {
            let key = file[0]
                .strip_prefix("s3://lake/")
                .unwrap_or_else(|| panic!("{engine:?}: data file outside the bucket: {}", file[0]));
            assert!(
                objects.contains(key),
                "{engine:?}: {key} not in {objects:?}"
            );
        }
        assert!(objects
            .iter()
            .any(|k| k.contains("/metadata/") && k.ends_with(".metadata.json")));

        // A MERGE that fails (two source rows match one target row) leaves
        // the table and the bucket as they were.
        let before = moto.objects(&table_location).await;
        let err = session
            .execute_one(
                "MERGE INTO db.people t
                 USING (VALUES (1, 'x', 'oslo'), (1, 'y', 'oslo'), (9, 'new', 'oslo'), (8, 'new', 'rome')) AS s(id, name, city)
                 ON t.id = s.id
                 WHEN MATCHED THEN UPDATE SET name = s.name
                 WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.name, s.city)",
            )
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.to_lowercase().contains("more than one"),
            "{engine:?}: {err}"
        );
        // The statement's objects are deleted when it fails, and again
        // over the next seconds: an upload a writer sent before the
        // failure (a sibling task, dropped or still running on an
        // executor) can complete at the store after the first pass.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(40);
        let mut after = moto.objects(&table_location).await;
        while after != before && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            after = moto.objects(&table_location).await;
        }
        assert_eq!(after, before, "{engine:?}: objects left by a failed MERGE");
        assert_eq!(
            query(&session, "SELECT count(*) FROM db.people").await,
            vec![vec!["3"]]
        );

        // DROP TABLE purges its objects.
        session.execute_one("DROP TABLE db.people").await.unwrap();
        let left = moto.objects(&table_location).await;
        assert_eq!(left, BTreeSet::new(), "{engine:?}");
        drop(session);
        if let Some(db) = database {
            db.drop().await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncommitted_files_are_listed_and_deleted_on_s3() {
    let moto = start_moto();
    moto.create_bucket("scratch");
    let catalog_dir = tempfile::tempdir().unwrap();
    // Opening the catalog registers the warehouse's S3 settings for cleanup.
    let _session = open(
        &moto,
        "s3://scratch/wh",
        &sqlite_uri(catalog_dir.path()),
        EngineKind::Local,
    )
    .await;
    let props = moto.s3_options().file_io_props();
    let (operator, _) = s3_operator("s3://scratch/wh", &props).unwrap();
    for key in [
        "wh/ns/t/data/w1-00000-0-a.parquet",
        "wh/ns/t/data/city=oslo/w1-00001-0-b.parquet",
        "wh/ns/t/data/w2-00000-0-c.parquet",
        "wh/ns/t/metadata/w1-not-data.json",
    ] {
        operator.write(key, b"x".to_vec()).await.unwrap();
    }
    let deleted = delete_files_with_prefix("s3://scratch/wh/ns/t/data", "w1-");
    assert_eq!(deleted, 2);
    assert_eq!(
        moto.objects("s3://scratch/wh/ns/t").await,
        BTreeSet::from([
            "wh/ns/t/data/w2-00000-0-c.parquet".to_string(),
            "wh/ns/t/metadata/w1-not-data.json".to_string(),
        ])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_bucket_is_named() {
    let moto = start_moto();
    let catalog_dir = tempfile::tempdir().unwrap();
    let err = match Session::open(SessionOptions {
        catalog: CatalogOptions {
            warehouse: "s3://no-such-bucket/wh".into(),
            catalog_uri: Some(sqlite_uri(catalog_dir.path())),
            s3: moto.s3_options(),
            ..Default::default()
        },
        ..Default::default()
    })
    .await
    {
        Ok(_) => panic!("opening a warehouse in a missing bucket should fail"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains(&format!(
            "cannot write to warehouse 's3://no-such-bucket/wh' at {}",
            moto.endpoint
        )),
        "{err}"
    );
    assert!(err.contains("NoSuchBucket"), "{err}");
    assert!(!err.contains("icemerge-test-secret"), "{err}");
}

/// Maintenance on S3: `expire_snapshots` deletes the objects only expired
/// snapshots reached, `remove_orphan_files` lists the table's prefix and
/// deletes the planted orphans and nothing else (another table's objects
/// and every referenced one stay).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expire_and_remove_orphans_on_s3() {
    let moto = start_moto();
    moto.create_bucket("maint");
    let catalog_dir = tempfile::tempdir().unwrap();
    let session = open(
        &moto,
        "s3://maint/wh",
        &sqlite_uri(catalog_dir.path()),
        EngineKind::Local,
    )
    .await;
    session
        .execute(
            "CREATE SCHEMA db; CREATE TABLE db.t (id BIGINT, v STRING);
             INSERT INTO db.t VALUES (1, 'a'), (2, 'b');
             INSERT INTO db.t VALUES (3, 'c');
             UPDATE db.t SET v = 'B' WHERE id = 2;
             CREATE TABLE db.t2 (id BIGINT); INSERT INTO db.t2 VALUES (7)",
        )
        .await
        .unwrap();
    let file = query(&session, "SELECT file_path FROM db.\"t$files\" LIMIT 1").await[0][0].clone();
    let location = file[..file.find("/data/").unwrap()].to_string();
    let everything = || moto.objects("s3://maint/wh");
    let before = everything().await;

    let out = query(
        &session,
        "CALL system.expire_snapshots(table => 'db.t', older_than => TIMESTAMP '2999-01-01 00:00:00')",
    )
    .await;
    assert_eq!(out, vec![vec!["1", "0", "0", "1", "2", "0"]]);
    let after = everything().await;
    let gone: Vec<&String> = before.difference(&after).collect();
    assert_eq!(gone.len(), 4, "{gone:?}");
    assert!(gone.iter().all(|k| k.starts_with("wh/db/t/")), "{gone:?}");

    let (operator, _) = s3_operator("s3://maint/wh", &moto.s3_options().file_io_props()).unwrap();
    let key = |location: &str| location.strip_prefix("s3://maint/").unwrap().to_string();
    let orphans = [
        format!("{location}/data/orphan-00000.parquet"),
        format!("{location}/metadata/orphan-snap.avro"),
    ];
    for orphan in &orphans {
        operator.write(&key(orphan), b"x".to_vec()).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let err = session
        .execute_one("CALL system.remove_orphan_files(table => 'db.t', older_than => TIMESTAMP '2999-01-01 00:00:00')")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("in the future"), "{err}");
    let planted = everything().await;
    let now = query(&session, "SELECT CAST(now() AS VARCHAR)").await[0][0].clone();
    let out = query(
        &session,
        &format!(
            "CALL system.remove_orphan_files(table => 'db.t', older_than => TIMESTAMP '{now}')"
        ),
    )
    .await;
    let listed: BTreeSet<String> = out.into_iter().map(|r| r[0].clone()).collect();
    assert_eq!(listed, BTreeSet::from(orphans.clone()));
    let left = everything().await;
    let removed: BTreeSet<String> = planted.difference(&left).cloned().collect();
    assert_eq!(removed, orphans.iter().map(|o| key(o)).collect());
    assert_eq!(
        query(&session, "SELECT id, v FROM db.t ORDER BY id").await,
        vec![vec!["1", "a"], vec!["2", "B"], vec!["3", "c"]]
    );
    assert_eq!(
        query(&session, "SELECT id FROM db.t2").await,
        vec![vec!["7"]]
    );
}
