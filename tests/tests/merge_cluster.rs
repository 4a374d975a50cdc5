//! MERGE on the in-process cluster: a merge over a table of 8 data files
//! runs its tasks on at least two executors, and its writer stage runs as
//! several tasks (asserted from the executors' task ledger).

use std::collections::BTreeSet;

use icemerge_scheduler::EngineKind;
use icemerge_tests::{open_session, query};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn merge_over_eight_files_runs_on_two_executors_with_several_writer_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let session = open_session(dir.path(), EngineKind::Cluster).await;
    session
        .execute("CREATE SCHEMA db; CREATE TABLE db.t (id BIGINT, v BIGINT)")
        .await
        .unwrap();
    for f in 0..8 {
        let sql =
            format!("INSERT INTO db.t SELECT {f} * 100 + value, 0 FROM generate_series(0, 49)");
        session.execute(&sql).await.unwrap();
    }
    // One matched row in every file, plus 3 new rows.
    let rows = query(
        &session,
        "MERGE INTO db.t USING (SELECT value * 100 + 7 AS id FROM generate_series(0, 7)
                               UNION ALL SELECT 1000 + value FROM generate_series(1, 3)) AS s
         ON t.id = s.id
         WHEN MATCHED THEN UPDATE SET v = 1
         WHEN NOT MATCHED THEN INSERT (id, v) VALUES (s.id, 2)",
    )
    .await;
    // count, updated, deleted, inserted, copied, files_scanned, files_removed
    assert_eq!(&rows[0][..7], &["11", "8", "0", "3", "392", "8", "8"]);

    let cluster = session.cluster().expect("cluster engine");
    let job = session
        .last_job_id()
        .expect("the merge ran as a Ballista job");
    let tasks = cluster.ledger.tasks_of(&job);
    let executors: BTreeSet<_> = tasks.iter().map(|t| t.executor_id.clone()).collect();
    assert!(
        executors.len() >= 2,
        "merge tasks ran on {} executor(s)",
        executors.len()
    );
    let writer_tasks: Vec<_> = tasks
        .iter()
        .filter(|t| {
            t.metrics
                .iter()
                .any(|m| m.sum_by_name("rows_copied").is_some())
        })
        .collect();
    assert!(
        writer_tasks.len() >= 2,
        "writer stage ran as {} task(s)",
        writer_tasks.len()
    );
    let writer_stages: BTreeSet<_> = writer_tasks.iter().map(|t| t.stage_id).collect();
    assert_eq!(writer_stages.len(), 1, "the writer is one stage");

    assert_eq!(
        query(&session, "SELECT count(*), sum(v) FROM db.t").await,
        vec![vec!["403", "14"]]
    );
}

/// Every data file under the table's data directory.
fn data_files(dir: &std::path::Path) -> BTreeSet<String> {
    icemerge_tests::files_under(dir)
        .into_iter()
        .map(|path| format!("file://{}", path.display()))
        .collect()
}

/// The data files under `dir` once they equal `expected`, or after the
/// window in which a failed cluster statement looks for late files again
/// (a file whose creation an executor's I/O thread finishes after the task
/// was aborted can appear just after the statement returned).
async fn data_files_once_settled(
    dir: &std::path::Path,
    expected: &BTreeSet<String>,
) -> BTreeSet<String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(40);
    loop {
        let found = data_files(dir);
        if &found == expected || std::time::Instant::now() > deadline {
            return found;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// A cluster MERGE whose writer stage fails in one task (a duplicate match)
/// while the other writer tasks are still rewriting large files: once the
/// statement has failed (and its late clean-up passes have run), the
/// warehouse holds exactly the table's files.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_cluster_merge_leaves_no_files_behind() {
    let dir = tempfile::tempdir().unwrap();
    let session = open_session(dir.path(), EngineKind::Cluster).await;
    session
        .execute("CREATE SCHEMA db; CREATE TABLE db.t (id BIGINT, v BIGINT)")
        .await
        .unwrap();
    for f in 0..8 {
        let sql = format!(
            "INSERT INTO db.t SELECT {f} * 100000 + value, 0 FROM generate_series(0, 59999)"
        );
        session.execute(&sql).await.unwrap();
    }
    let data = dir.path().join("db").join("t").join("data");
    let live = |rows: Vec<Vec<String>>| rows.into_iter().map(|r| r[0].clone()).collect();
    let files: BTreeSet<String> =
        live(query(&session, "SELECT file_path FROM db.\"t$files\"").await);
    assert_eq!(data_files(&data), files);
    for attempt in 0..5 {
        // One row of every file is updated; id 7 is matched twice.
        let err = session
            .execute_one(
                "MERGE INTO db.t USING (SELECT value * 100000 + 7 AS id FROM generate_series(0, 7)
                                       UNION ALL SELECT 7) AS s
                 ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = 1",
            )
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("more than one source row"), "{err}");
        assert_eq!(
            data_files_once_settled(&data, &files).await,
            files,
            "attempt {attempt}: files left by the failed MERGE"
        );
    }
    assert_eq!(
        query(&session, "SELECT count(*), sum(v) FROM db.t").await,
        vec![vec!["480000", "0"]]
    );
}
