//! icemerge on a Postgres catalog (iceberg-catalog-sql's tables in a real
//! PostgreSQL server): the commit's compare-and-swap of the catalog row.
//! Each test creates a database of its own on the server of
//! `$ICEMERGE_TEST_POSTGRES_URI` and drops it at the end; when the variable
//! is unset the tests print that they are skipped (`./test.sh` sets it).
//! The whole sqllogictest suite on Postgres is in `sql_logic.rs`.

use std::collections::{BTreeSet, HashSet};
use std::path::Path;

use futures::future::join_all;
use iceberg::spec::Operation;
use iceberg::table::Table;
use iceberg::{NamespaceIdent, TableIdent};
use icemerge_proto::error::{ErrorKind, IcemergeError};
use icemerge_scheduler::catalog::open_catalog;
use icemerge_scheduler::commit::{
    commit_overwrite, current_metadata_location, CommitContext, CommitOutcome, ConflictFilter,
    ConflictKind, IsolationLevel, OverwriteCommit,
};
use icemerge_scheduler::{CatalogOptions, EngineKind, Session, DEFAULT_CATALOG_NAME};
use icemerge_tests::{open_session_on, postgres_database, query};

fn ident(ns: &str, name: &str) -> TableIdent {
    TableIdent::new(NamespaceIdent::new(ns.to_string()), name.to_string())
}

/// Every file under `dir`, recursively.
fn files_under(dir: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
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
                out.insert(format!("file://{}", path.display()));
            }
        }
    }
    out
}

/// Paths of the data files of every snapshot of `table`.
async fn data_files_of_all_snapshots(table: &Table) -> HashSet<String> {
    let mut paths = HashSet::new();
    for snapshot in table.metadata().snapshots() {
        let list = table
            .manifest_list_reader(snapshot)
            .load()
            .await
            .expect("manifest list");
        for manifest_file in list.entries() {
            let manifest = manifest_file
                .load_manifest(table.file_io())
                .await
                .expect("manifest");
            for entry in manifest.entries() {
                paths.insert(entry.file_path().to_string());
            }
        }
    }
    paths
}

/// The catalog row as Postgres has it: (metadata, previous metadata).
async fn catalog_row(uri: &str, ns: &str, name: &str) -> (String, Option<String>) {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(uri).await.expect("connect");
    let row: (String, Option<String>) = sqlx::query_as(
        "SELECT metadata_location, previous_metadata_location FROM iceberg_tables \
         WHERE catalog_name = $1 AND table_namespace = $2 AND table_name = $3",
    )
    .bind(DEFAULT_CATALOG_NAME)
    .bind(ns)
    .bind(name)
    .fetch_one(&mut conn)
    .await
    .expect("catalog row");
    row
}

/// A commit built on a snapshot that is no longer current loses the
/// compare-and-swap on the Postgres row, and validation finds that the
/// winner removed the file it would remove: a conflict naming the winner's
/// snapshot, and the table, the row and the metadata directory are as the
/// winner left them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stale_commit_conflicts_and_changes_nothing() {
    let Some(db) = postgres_database("lost_swap").await else {
        return;
    };
    let warehouse = tempfile::tempdir().unwrap();
    let session = open_session_on(warehouse.path(), Some(&db.uri), EngineKind::Local).await;
    session
        .execute(
            "CREATE SCHEMA db; CREATE TABLE db.t (id BIGINT, v VARCHAR); \
             INSERT INTO db.t VALUES (1, 'a'), (2, 'b');",
        )
        .await
        .unwrap();
    let t = ident("db", "t");
    let stale = session.catalog().load_table(&t).await.unwrap();
    let (row_before, _) = catalog_row(&db.uri, "db", "t").await;
    assert_eq!(Some(row_before.as_str()), stale.metadata_location());

    // The winner: a MERGE through the session moves the row on.
    session
        .execute_one(
            "MERGE INTO db.t t USING (VALUES (1, 'x')) AS s(id, v) ON t.id = s.id \
             WHEN MATCHED THEN UPDATE SET v = s.v",
        )
        .await
        .unwrap();
    let (row_now, previous) = catalog_row(&db.uri, "db", "t").await;
    assert_ne!(row_now, row_before);
    assert_eq!(previous.as_deref(), Some(row_before.as_str()));
    let winner = session.catalog().load_table(&t).await.unwrap();
    let winner_snapshot = winner.metadata().current_snapshot_id();
    let metadata_dir = warehouse.path().join("db/t/metadata");
    let files_before = files_under(&metadata_dir);

    // The loser: a commit built on the stale snapshot, deleting a file.
    let live = stale.scan().build().unwrap().plan_files().await.unwrap();
    let live: Vec<_> = futures::TryStreamExt::try_collect(live).await.unwrap();
    let removed: HashSet<String> = live.iter().map(|t| t.data_file_path.clone()).collect();
    assert!(!removed.is_empty());
    let catalog = open_catalog(&CatalogOptions {
        warehouse: warehouse.path().to_path_buf(),
        catalog_uri: Some(db.uri.clone()),
        ..Default::default()
    })
    .await
    .unwrap();
    let context = CommitContext::copy_on_write(
        stale.metadata().current_snapshot_id(),
        IsolationLevel::Snapshot,
        ConflictFilter::WholeTable,
    );
    let outcome = commit_overwrite(
        &catalog,
        &stale,
        OverwriteCommit {
            added: vec![],
            removed,
            summary: Default::default(),
            operation: Operation::Delete,
        },
        &context,
    )
    .await
    .unwrap();
    let CommitOutcome::Conflict(conflict) = outcome else {
        panic!("expected a conflict, got {outcome:?}");
    };
    assert_eq!(conflict.snapshot_id, winner_snapshot);
    assert_eq!(conflict.table, "db.t");
    assert!(
        matches!(conflict.kind, ConflictKind::FileRemoved { .. }),
        "{conflict}"
    );

    assert_eq!(catalog_row(&db.uri, "db", "t").await.0, row_now);
    assert_eq!(
        current_metadata_location(&db.uri, DEFAULT_CATALOG_NAME, &t)
            .await
            .unwrap()
            .as_deref(),
        Some(row_now.as_str())
    );
    assert_eq!(
        files_under(&metadata_dir),
        files_before,
        "the lost commit left metadata files behind"
    );
    assert_eq!(
        query(&session, "SELECT id, v FROM db.t ORDER BY id").await,
        vec![vec!["1", "x"], vec!["2", "b"]]
    );
    drop(session);
    db.drop().await;
}

/// Sessions racing MERGEs on one row: each statement either commits (after
/// re-executing on the snapshots that beat it) or fails with a conflict;
/// the row counts exactly the commits, the snapshots are exactly those
/// commits, and no data file of a failed statement is left in the
/// warehouse.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_merges_serialise_on_the_catalog_row() {
    let Some(db) = postgres_database("racing_merges").await else {
        return;
    };
    let warehouse = tempfile::tempdir().unwrap();
    let first = open_session_on(warehouse.path(), Some(&db.uri), EngineKind::Local).await;
    first
        .execute(
            "CREATE SCHEMA db; CREATE TABLE db.c (id BIGINT, n BIGINT); \
             INSERT INTO db.c VALUES (1, 0), (2, 0);",
        )
        .await
        .unwrap();
    let mut sessions = vec![first];
    for _ in 0..3 {
        sessions.push(open_session_on(warehouse.path(), Some(&db.uri), EngineKind::Local).await);
    }
    const ROUNDS: usize = 4;
    let merge = "MERGE INTO db.c t USING (VALUES (1)) AS s(id) ON t.id = s.id \
                 WHEN MATCHED THEN UPDATE SET n = t.n + 1";
    async fn run(session: &Session, merge: &str) -> Vec<datafusion::error::Result<()>> {
        let mut outcomes = vec![];
        for _ in 0..ROUNDS {
            outcomes.push(session.execute_one(merge).await.map(|_| ()));
        }
        outcomes
    }
    let outcomes: Vec<_> = join_all(sessions.iter().map(|s| run(s, merge)))
        .await
        .into_iter()
        .flatten()
        .collect();
    let committed = outcomes.iter().filter(|o| o.is_ok()).count();
    for e in outcomes.iter().filter_map(|o| o.as_ref().err()) {
        assert_eq!(IcemergeError::kind_of(e), Some(ErrorKind::Conflict), "{e}");
    }
    eprintln!(
        "{} merges: {committed} committed, {} failed on a conflict",
        outcomes.len(),
        outcomes.len() - committed
    );
    assert!(committed >= 1);

    let reader = &sessions[0];
    assert_eq!(
        query(reader, "SELECT id, n FROM db.c ORDER BY id").await,
        vec![
            vec!["1".to_string(), committed.to_string()],
            vec!["2".into(), "0".into()]
        ]
    );
    let table = reader
        .catalog()
        .load_table(&ident("db", "c"))
        .await
        .unwrap();
    assert_eq!(table.metadata().snapshots().count(), 1 + committed);
    let referenced = data_files_of_all_snapshots(&table).await;
    let on_disk = files_under(&warehouse.path().join("db/c/data"));
    let orphans: Vec<_> = on_disk
        .iter()
        .filter(|f| !referenced.contains(*f))
        .collect();
    assert!(orphans.is_empty(), "orphan data files: {orphans:?}");
    drop(sessions);
    db.drop().await;
}

/// Several processes starting on a fresh database at once all create the
/// catalog tables with `CREATE TABLE IF NOT EXISTS`, which Postgres does not
/// make race-free: every session must still open.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sessions_opening_a_fresh_database_at_once() {
    for round in 0..3 {
        let Some(db) = postgres_database("fresh_database_at_once").await else {
            return;
        };
        let warehouse = tempfile::tempdir().unwrap();
        let opens = (0..6).map(|_| {
            icemerge_scheduler::Session::open(icemerge_scheduler::SessionOptions {
                catalog: icemerge_scheduler::CatalogOptions {
                    warehouse: warehouse.path().to_path_buf(),
                    catalog_uri: Some(db.uri.clone()),
                    ..Default::default()
                },
                ..Default::default()
            })
        });
        let sessions = join_all(opens).await;
        for (i, s) in sessions.iter().enumerate() {
            if let Err(e) = s {
                panic!("round {round}, session {i}: {e}");
            }
        }
        drop(sessions);
        db.drop().await;
    }
}
