//! Opening a session on bad settings fails with one clear error that names
//! the problem, and creates nothing.

use icemerge_scheduler::{CatalogOptions, EngineKind, Session, SessionOptions};

async fn open_err(catalog: CatalogOptions) -> String {
    match Session::open(SessionOptions {
        catalog,
        engine: EngineKind::Local,
        ..Default::default()
    })
    .await
    {
        Ok(_) => panic!("opening should fail"),
        Err(e) => e.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warehouse_that_cannot_be_created_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let warehouse = file.join("warehouse");
    let err = open_err(CatalogOptions {
        warehouse: warehouse.clone(),
        catalog_uri: None,
        ..Default::default()
    })
    .await;
    assert!(err.contains("cannot create warehouse directory"), "{err}");
    assert!(err.contains(&warehouse.display().to_string()), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalog_uri_that_cannot_be_opened_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let err = open_err(CatalogOptions {
        warehouse: dir.path().join("wh"),
        catalog_uri: Some("sqlite:///nonexistent-dir/sub/catalog.db".into()),
        ..Default::default()
    })
    .await;
    assert!(
        err.contains("cannot open catalog 'sqlite:///nonexistent-dir/sub/catalog.db'"),
        "{err}"
    );

    let err = open_err(CatalogOptions {
        warehouse: dir.path().join("wh"),
        catalog_uri: Some("mysql://x".into()),
        ..Default::default()
    })
    .await;
    assert!(err.contains("unsupported catalog URI 'mysql://x'"), "{err}");
    assert!(!std::path::Path::new("/nonexistent-dir").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_catalog_that_cannot_be_reached_is_named_quickly() {
    // A loopback port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    let err = open_err(CatalogOptions {
        warehouse: dir.path().join("wh"),
        catalog_uri: Some(format!("postgres://icemerge:hunter2@127.0.0.1:{port}/cat")),
        ..Default::default()
    })
    .await;
    assert!(
        err.contains(&format!(
            "cannot connect to the Postgres catalog at 127.0.0.1:{port} (database 'cat', user 'icemerge')"
        )),
        "{err}"
    );
    assert!(!err.contains("hunter2"), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_database_that_does_not_exist_is_named() {
    let Some(server) = icemerge_tests::postgres_server("postgres_database_that_does_not_exist")
    else {
        return;
    };
    let mut url = url::Url::parse(&server).unwrap();
    url.set_path("/icemerge_no_such_database");
    let dir = tempfile::tempdir().unwrap();
    let err = open_err(CatalogOptions {
        warehouse: dir.path().join("wh"),
        catalog_uri: Some(url.to_string()),
        ..Default::default()
    })
    .await;
    assert!(
        err.contains("database 'icemerge_no_such_database'"),
        "{err}"
    );
    assert!(err.contains("does not exist"), "{err}");
    if let Some(password) = url.password() {
        assert!(!err.contains(password), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_warehouse_without_catalog_uri_is_refused() {
    let err = open_err(CatalogOptions {
        warehouse: "s3://bucket/wh".into(),
        catalog_uri: None,
        s3: icemerge_scheduler::S3Options {
            // Nobody listens here; the catalog check comes first anyway.
            endpoint: Some("http://127.0.0.1:1".into()),
            region: Some("us-east-1".into()),
            ..Default::default()
        },
        ..Default::default()
    })
    .await;
    assert!(err.contains("needs a catalog URI"), "{err}");
}
