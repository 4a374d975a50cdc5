//! Runs every sqllogictest file in `tests/slt/` on both engines (local and an
//! in-process cluster of 2 executors), each file on a fresh warehouse: once
//! with the default SQLite catalog and once with a Postgres catalog (a fresh
//! database per file on the server of `$ICEMERGE_TEST_POSTGRES_URI`; skipped,
//! saying so, when that is unset — `./test.sh` always sets it).
//! `$DATA_DIR` in a file is `tests/data/`; `$WAREHOUSE` the file's warehouse.

use std::path::PathBuf;
use std::sync::Arc;

use icemerge_scheduler::EngineKind;
use icemerge_tests::{open_session_on, postgres_database, postgres_server, SltSession};

fn slt_files() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("slt");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/slt")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "slt"))
        .filter(|p| {
            // ICEMERGE_SLT=<part of a file name> runs only those files.
            std::env::var("ICEMERGE_SLT").map_or(true, |only| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().contains(&only))
            })
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .slt files in {}", dir.display());
    files
}

/// Which catalog database the files run against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CatalogKind {
    Sqlite,
    Postgres,
}

async fn run_all(engine: EngineKind, catalog: CatalogKind) {
    let test = format!("sql_logic_{engine:?}_{catalog:?}");
    if catalog == CatalogKind::Postgres && postgres_server(&test).is_none() {
        return;
    }
    let data_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data");
    let mut failures = vec![];
    for file in slt_files() {
        let warehouse = tempfile::tempdir().expect("tempdir");
        let database = match catalog {
            CatalogKind::Sqlite => None,
            CatalogKind::Postgres => postgres_database(&test).await,
        };
        let uri = database.as_ref().map(|d| d.uri.as_str());
        let session = Arc::new(open_session_on(warehouse.path(), uri, engine).await);
        let mut runner = sqllogictest::Runner::new({
            let session = session.clone();
            move || {
                let session = session.clone();
                async move { Ok(SltSession(session)) }
            }
        });
        runner.add_label(match engine {
            EngineKind::Local => "local",
            EngineKind::Cluster => "cluster",
        });
        runner.set_var("DATA_DIR".into(), data_dir.display().to_string());
        runner.set_var("WAREHOUSE".into(), warehouse.path().display().to_string());
        if let Err(e) = runner.run_file_async(&file).await {
            failures.push(format!("{} [{engine:?}, {catalog:?}]: {e}", file.display()));
        }
        drop(runner);
        drop(session);
        if let Some(database) = database {
            database.drop().await;
        }
    }
    assert!(
        failures.is_empty(),
        "{} file(s) failed:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sql_logic_local() {
    run_all(EngineKind::Local, CatalogKind::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sql_logic_cluster() {
    run_all(EngineKind::Cluster, CatalogKind::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sql_logic_local_postgres() {
    run_all(EngineKind::Local, CatalogKind::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sql_logic_cluster_postgres() {
    run_all(EngineKind::Cluster, CatalogKind::Postgres).await;
}
