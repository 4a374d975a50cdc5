//! A MERGE meeting a concurrent commit at a known point, on both engines:
//! the MERGE's session pauses after its job and before its commit
//! (`icemerge.test_pause_before_commit`), another session appends a row,
//! then the MERGE commits. Appending outside the files the MERGE's keys
//! pruned to is no conflict at either isolation level (the commit is
//! rebased: two compare-and-swaps, no re-execution); appending inside them
//! is a conflict under `serializable` (the MERGE runs again) and not under
//! `snapshot`. A MERGE that may not run again fails with a conflict naming
//! the snapshot, the table and the isolation level, and leaves no file.
//! A concurrent position delete conflicts only with the data file it names.
//! Processes racing each other are in `cli/tests/concurrent_writers.rs`.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::error::Result;
use iceberg::{NamespaceIdent, TableIdent};
use icemerge_proto::error::{ErrorKind, IcemergeError};
use icemerge_scheduler::{EngineKind, Session, StatementOutput};
use icemerge_tests::{open_session, query, ENGINES};

/// Even keys 0..198 in one INSERT, keys 1000..1099 in another.
async fn create_table(session: &Session, level: &str) {
    session
        .execute(&format!(
            "CREATE SCHEMA db; \
             CREATE TABLE db.t (k BIGINT, v BIGINT) \
               TBLPROPERTIES ('write.merge.isolation-level' = '{level}'); \
             INSERT INTO db.t SELECT value * 2, 0 FROM generate_series(0, 99); \
             INSERT INTO db.t SELECT 1000 + value, 0 FROM generate_series(0, 99);"
        ))
        .await
        .unwrap();
}

/// 100 distinct keys (more than the probe lists one by one): the target
/// is pruned to files overlapping k in [0, 198].
const MERGE: &str =
    "MERGE INTO db.t t USING (SELECT value * 2 AS k FROM generate_series(0, 99)) s \
                     ON t.k = s.k WHEN MATCHED THEN UPDATE SET v = t.v + 1";

/// A figure of a MERGE result row.
fn figure(output: &StatementOutput, name: &str) -> u64 {
    let StatementOutput::Rows { batches, .. } = output else {
        panic!("no rows: {output:?}");
    };
    let column = batches[0].column_by_name(name).expect(name);
    column
        .as_any()
        .downcast_ref::<arrow::array::UInt64Array>()
        .unwrap()
        .value(0)
}

fn wait_for(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `merge` on `session`, paused before its commit while `other`
/// appends a row with key `appended`; the current snapshot after the
/// append and the merge's result.
async fn merge_across_append(
    session: Arc<Session>,
    other: &Session,
    merge: &str,
    appended: i64,
) -> (Option<i64>, Result<StatementOutput>) {
    let append = format!("INSERT INTO db.t VALUES ({appended}, 0)");
    merge_across(session, other, merge, &append).await
}

/// Runs `merge` on `session`, paused before its commit while `other` runs
/// `concurrent`; the current snapshot after it and the merge's result.
async fn merge_across(
    session: Arc<Session>,
    other: &Session,
    merge: &str,
    concurrent: &str,
) -> (Option<i64>, Result<StatementOutput>) {
    let pause = tempfile::tempdir().unwrap();
    session
        .execute_one(&format!(
            "SET icemerge.test_pause_before_commit = '{}'",
            pause.path().display()
        ))
        .await
        .unwrap();
    let merge = merge.to_string();
    let running = tokio::spawn(async move { session.execute_one(&merge).await });
    let paused = pause.path().join("paused");
    tokio::task::spawn_blocking(move || wait_for(&paused))
        .await
        .unwrap();
    other.execute_one(concurrent).await.unwrap();
    let ident = TableIdent::new(NamespaceIdent::new("db".into()), "t".into());
    let appended_snapshot = other
        .catalog()
        .load_table(&ident)
        .await
        .unwrap()
        .metadata()
        .current_snapshot_id();
    std::fs::write(pause.path().join("go"), b"").unwrap();
    (appended_snapshot, running.await.unwrap())
}

/// The merge committed once over 201 rows: 100 updated, the appended row
/// (and the untouched ones) at 0.
async fn assert_merged_once(session: &Session) {
    assert_eq!(
        query(session, "SELECT count(*), sum(v) FROM db.t").await,
        vec![vec!["201", "100"]]
    );
}

async fn check_case(engine: EngineKind, level: &str, appended: i64, attempts: u64, reruns: u64) {
    let warehouse = tempfile::tempdir().unwrap();
    let session = Arc::new(open_session(warehouse.path(), engine).await);
    create_table(&session, level).await;
    let other = open_session(warehouse.path(), EngineKind::Local).await;
    let (_, result) = merge_across_append(session.clone(), &other, MERGE, appended).await;
    let output = result.unwrap_or_else(|e| panic!("{engine:?} {level} {appended}: {e}"));
    let case = format!("{engine:?}, {level}, appended key {appended}");
    assert_eq!(figure(&output, "rows_updated"), 100, "{case}");
    assert_eq!(figure(&output, "commit_attempts"), attempts, "{case}");
    assert_eq!(figure(&output, "reexecutions"), reruns, "{case}");
    assert_merged_once(&other).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_append_outside_the_pruned_files_is_rebased_at_both_levels() {
    for engine in ENGINES {
        for level in ["serializable", "snapshot"] {
            // Key 500 is outside [0, 198]: the appended file is not one
            // the merge could have read.
            check_case(engine, level, 500, 2, 0).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_append_inside_the_pruned_files_conflicts_only_when_serializable() {
    for engine in ENGINES {
        // Key 3 is inside [0, 198]: serializable runs the merge again on
        // the new snapshot; snapshot isolation rebases the commit.
        check_case(engine, "serializable", 3, 1, 1).await;
        check_case(engine, "snapshot", 3, 2, 0).await;
    }
}

/// Another writer's merge-on-read DELETE committed while a merge-on-read
/// MERGE is paused: its position delete file names one data file, and it
/// conflicts only when that is a file the MERGE read (as in Iceberg's own
/// validation), even though both files are in the one partition. A delete
/// in the other file is rebased; one of a row the MERGE read runs it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_concurrent_position_delete_conflicts_only_with_the_file_it_names() {
    for engine in ENGINES {
        // (deleted key, commit attempts, re-executions, rows updated)
        for (deleted, attempts, reruns, updated) in [(1050, 2, 0, 100), (4, 1, 1, 99)] {
            let warehouse = tempfile::tempdir().unwrap();
            let session = Arc::new(open_session(warehouse.path(), engine).await);
            create_table(&session, "serializable").await;
            session
                .execute_one(
                    "ALTER TABLE db.t SET TBLPROPERTIES ( \
                     'write.merge.mode' = 'merge-on-read', \
                     'write.delete.mode' = 'merge-on-read')",
                )
                .await
                .unwrap();
            let other = open_session(warehouse.path(), EngineKind::Local).await;
            let delete = format!("DELETE FROM db.t WHERE k = {deleted}");
            let (_, result) = merge_across(session.clone(), &other, MERGE, &delete).await;
            let case = format!("{engine:?}, concurrent delete of key {deleted}");
            let output = result.unwrap_or_else(|e| panic!("{case}: {e}"));
            assert_eq!(figure(&output, "rows_updated"), updated, "{case}");
            assert_eq!(figure(&output, "commit_attempts"), attempts, "{case}");
            assert_eq!(figure(&output, "reexecutions"), reruns, "{case}");
            assert_eq!(
                query(&other, "SELECT count(*), sum(v) FROM db.t").await,
                vec![vec!["199".to_string(), updated.to_string()]],
                "{case}"
            );
        }
    }
}

/// Every data file under the table's data directory.
fn data_files(warehouse: &Path) -> usize {
    let mut count = 0;
    let mut dirs = vec![warehouse.join("db/t/data")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            if entry.path().is_dir() {
                dirs.push(entry.path());
            } else {
                count += 1;
            }
        }
    }
    count
}

/// A conflicting MERGE that may not run again — no retries allowed, or a
/// source that is not deterministic — fails with a conflict naming the
/// appended snapshot, the table and the isolation level; the table is as
/// the append left it and the merge's files are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_conflict_that_cannot_run_again_fails_and_leaves_nothing() {
    let volatile = "MERGE INTO db.t t USING \
                    (SELECT value * 2 AS k, random() AS r FROM generate_series(0, 99)) s \
                    ON t.k = s.k WHEN MATCHED THEN UPDATE SET v = t.v + 1";
    let cases = [
        (
            "SET icemerge.max_statement_retries = 0",
            MERGE,
            "max_statement_retries = 0",
        ),
        (
            "SET icemerge.max_statement_retries = 3",
            volatile,
            "not deterministic",
        ),
    ];
    for (setting, merge, why) in cases {
        let warehouse = tempfile::tempdir().unwrap();
        let session = Arc::new(open_session(warehouse.path(), EngineKind::Local).await);
        create_table(&session, "serializable").await;
        session.execute_one(setting).await.unwrap();
        let other = open_session(warehouse.path(), EngineKind::Local).await;
        let files_before = data_files(warehouse.path());
        let (appended, result) = merge_across_append(session, &other, merge, 3).await;
        let err = result.expect_err("the merge must conflict");
        assert_eq!(
            IcemergeError::kind_of(&err),
            Some(ErrorKind::Conflict),
            "{err}"
        );
        let text = err.to_string();
        let snapshot = format!("snapshot {}", appended.unwrap());
        for part in [
            "db.t",
            snapshot.as_str(),
            "serializable isolation",
            "was added",
            why,
        ] {
            assert!(text.contains(part), "'{part}' missing: {text}");
        }
        assert_eq!(
            query(&other, "SELECT count(*), sum(v) FROM db.t").await,
            vec![vec!["201", "0"]]
        );
        assert_eq!(
            data_files(warehouse.path()),
            files_before + 1,
            "only the appended file was added"
        );
    }
}

/// `EXPLAIN ANALYZE MERGE` reports the commit's attempts and re-executions
/// on its `Merge:` line.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn explain_analyze_reports_commit_attempts_and_reexecutions() {
    let warehouse = tempfile::tempdir().unwrap();
    let session = Arc::new(open_session(warehouse.path(), EngineKind::Local).await);
    create_table(&session, "snapshot").await;
    let other = open_session(warehouse.path(), EngineKind::Local).await;
    let analyze = format!("EXPLAIN ANALYZE {MERGE}");
    let (_, result) = merge_across_append(session, &other, &analyze, 3).await;
    let StatementOutput::Rows { batches, .. } = result.unwrap() else {
        panic!("no rows");
    };
    let text = icemerge_tests::rows_as_strings(&batches)
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join("\n");
    let merge_line = text
        .lines()
        .find(|l| l.starts_with("Merge:"))
        .unwrap_or_else(|| panic!("no Merge: line in {text}"));
    assert!(
        merge_line.contains("commit_attempts=2, reexecutions=0"),
        "{merge_line}"
    );
    assert_merged_once(&other).await;
}

/// Bad isolation levels are refused at CREATE TABLE, naming the property.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn other_isolation_levels_are_refused() {
    let warehouse = tempfile::tempdir().unwrap();
    let session = open_session(warehouse.path(), EngineKind::Local).await;
    session.execute_one("CREATE SCHEMA db").await.unwrap();
    let err = session
        .execute_one(
            "CREATE TABLE db.t (k BIGINT) \
             TBLPROPERTIES ('write.update.isolation-level' = 'read-committed')",
        )
        .await
        .unwrap_err();
    assert_eq!(IcemergeError::kind_of(&err), Some(ErrorKind::InvalidInput));
    let text = err.to_string();
    assert!(
        text.contains("write.update.isolation-level") && text.contains("read-committed"),
        "{text}"
    );
}
