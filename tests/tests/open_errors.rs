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
    })
    .await;
    assert!(
        err.contains("cannot open catalog 'sqlite:///nonexistent-dir/sub/catalog.db'"),
        "{err}"
    );

    let err = open_err(CatalogOptions {
        warehouse: dir.path().join("wh"),
        catalog_uri: Some("mysql://x".into()),
    })
    .await;
    assert!(err.contains("unsupported catalog URI 'mysql://x'"), "{err}");
    assert!(!std::path::Path::new("/nonexistent-dir").exists());
}
