//! The distributed Iceberg scan: file pruning from pushed filters (asserted
//! from the scan's own metrics) on both engines, and on the cluster engine a
//! scan of many files that runs as several tasks on at least two executors;
//! a join's output columns that share a name, on both engines; a data
//! file reads only its own position delete files.

use std::collections::BTreeSet;

use icemerge_scheduler::EngineKind;
use icemerge_tests::{open_session, query, ENGINES};

/// A table of `files` data files, file `f` holding ids `f*100 .. f*100+9`.
async fn table_with_files(session: &icemerge_scheduler::Session, files: usize) {
    session
        .execute("CREATE SCHEMA db; CREATE TABLE db.t (id BIGINT, part STRING, v DOUBLE)")
        .await
        .unwrap();
    for f in 0..files {
        let sql = format!(
            "INSERT INTO db.t SELECT {f} * 100 + value, 'p{f}', value * 1.5 FROM generate_series(0, 9)"
        );
        session.execute(&sql).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn filters_prune_files_on_both_engines() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let session = open_session(dir.path(), engine).await;
        table_with_files(&session, 6).await;

        assert_eq!(
            query(&session, "SELECT count(*) FROM db.t").await,
            vec![vec!["60"]]
        );
        assert_eq!(
            session.last_metrics().get("files_scanned"),
            6,
            "{engine:?}: full scan reads every file"
        );

        let rows = query(&session, "SELECT id, part FROM db.t WHERE id = 305").await;
        assert_eq!(rows, vec![vec!["305", "p3"]]);
        assert_eq!(
            session.last_metrics().get("files_scanned"),
            1,
            "{engine:?}: id = 305 reads one file"
        );

        let rows = query(&session, "SELECT count(*) FROM db.t WHERE id >= 400").await;
        assert_eq!(rows, vec![vec!["20"]]);
        assert_eq!(
            session.last_metrics().get("files_scanned"),
            2,
            "{engine:?}: id >= 400 reads two files"
        );

        let rows = query(&session, "SELECT count(*) FROM db.t WHERE id > 10000").await;
        assert_eq!(rows, vec![vec!["0"]]);
        assert_eq!(
            session.last_metrics().get("files_scanned"),
            0,
            "{engine:?}: no file can match"
        );

        // A filter iceberg cannot use still filters correctly (DataFusion re-applies it).
        let rows = query(
            &session,
            "SELECT count(*) FROM db.t WHERE part LIKE 'p1%' OR v > 13",
        )
        .await;
        assert_eq!(rows, vec![vec!["15"]]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_scan_runs_as_several_tasks_on_two_executors() {
    let dir = tempfile::tempdir().unwrap();
    let session = open_session(dir.path(), EngineKind::Cluster).await;
    table_with_files(&session, 8).await;

    let rows = query(
        &session,
        "SELECT part, count(*), sum(id) FROM db.t GROUP BY part ORDER BY part",
    )
    .await;
    assert_eq!(rows.len(), 8);
    assert_eq!(rows[3], vec!["p3", "10", "3045"]);

    let cluster = session.cluster().expect("cluster engine");
    let job = session.last_job_id().expect("a Ballista job ran");
    let tasks = cluster.ledger.tasks_of(&job);
    let executors: BTreeSet<_> = tasks.iter().map(|t| t.executor_id.clone()).collect();
    let stages: BTreeSet<_> = tasks.iter().map(|t| t.stage_id).collect();
    assert!(
        executors.len() >= 2,
        "tasks ran on {} executor(s): {tasks:?}",
        executors.len()
    );
    assert!(
        stages.len() >= 2,
        "the aggregation runs as more than one stage"
    );
    let scan_tasks = tasks
        .iter()
        .filter(|t| {
            t.metrics
                .iter()
                .any(|m| m.sum_by_name("files_scanned").is_some())
        })
        .count();
    assert!(scan_tasks >= 2, "the scan ran as {scan_tasks} task(s)");
    assert_eq!(session.last_metrics().get("files_scanned"), 8);
}

/// A query whose output columns share a name (`a.v`, `b.v`) runs on both
/// engines and keeps both columns.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn columns_with_the_same_name_come_back_on_both_engines() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let session = open_session(dir.path(), engine).await;
        session
            .execute(
                "CREATE SCHEMA db; CREATE TABLE db.a (id BIGINT, v STRING);
                 CREATE TABLE db.b (id BIGINT, v STRING);
                 INSERT INTO db.a VALUES (1, 'a1'), (2, 'a2');
                 INSERT INTO db.b VALUES (1, 'b1'), (3, 'b3')",
            )
            .await
            .unwrap();
        let rows = query(
            &session,
            "SELECT a.id, a.v, b.v FROM db.a AS a JOIN db.b AS b ON a.id = b.id",
        )
        .await;
        assert_eq!(rows, vec![vec!["1", "a1", "b1"]], "{engine:?}");
    }
}

/// A scan that needs no column (`count(*)`) counts rows from the manifests'
/// record counts and reads no data file; position deletes (merge-on-read
/// DELETE) are subtracted. A count with a filter reads the filter's one
/// column, not every column, and the scan's `bytes_scanned` is what it read
/// from storage, not the files' sizes: a small fraction of what a read of
/// every column takes (its footer read takes the file's last 512 KiB).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_count_reads_no_data_file_and_a_filtered_count_one_column_on_both_engines() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let session = open_session(dir.path(), engine).await;
        session
            .execute(
                "CREATE SCHEMA db; \
                 CREATE TABLE db.w (a STRING, b STRING, id INT, c STRING, d DOUBLE) \
                 TBLPROPERTIES ('write.delete.mode' = 'merge-on-read')",
            )
            .await
            .unwrap();
        session
            .execute(
                "INSERT INTO db.w SELECT md5(CAST(value AS STRING)), md5(CAST(value + 1 AS STRING)), \
                 CAST(value AS INT), md5(CAST(value + 2 AS STRING)), value * 0.5 \
                 FROM generate_series(0, 199999)",
            )
            .await
            .unwrap();
        assert_eq!(
            query(&session, "SELECT count(*) FROM db.w").await,
            vec![vec!["200000"]]
        );
        assert_eq!(
            session.last_metrics().get("bytes_scanned"),
            0,
            "{engine:?}: count(*) is answered from the record counts"
        );
        assert_eq!(
            query(&session, "SELECT count(*) FROM db.w WHERE id % 2 = 0").await,
            vec![vec!["100000"]]
        );
        let filtered = session.last_metrics().get("bytes_scanned");
        let rows = query(
            &session,
            "SELECT count(a), count(b), sum(id), count(c), sum(d) FROM db.w",
        )
        .await;
        assert_eq!(
            rows,
            vec![vec![
                "200000",
                "200000",
                "19999900000",
                "200000",
                "9999950000.0"
            ]]
        );
        let full = session.last_metrics().get("bytes_scanned");
        assert!(
            filtered > 0 && filtered * 4 < full,
            "{engine:?}: a count filtered on id read {filtered} bytes, a read of every column {full}"
        );

        // Position deletes: the count subtracts the rows they delete.
        session
            .execute("DELETE FROM db.w WHERE id < 1000 OR id % 10 = 3")
            .await
            .unwrap();
        assert_ne!(
            query(
                &session,
                "SELECT count(*) FROM db.\"w$files\" WHERE content = 1"
            )
            .await,
            vec![vec!["0"]],
            "{engine:?}: the DELETE wrote position deletes"
        );
        assert_eq!(
            query(&session, "SELECT count(*) FROM db.w").await,
            vec![vec!["179100"]]
        );
        assert_eq!(
            query(&session, "SELECT count(*) FROM db.w WHERE id % 2 = 0").await,
            vec![vec!["99500"]]
        );
    }
}

/// A data file reads only the position delete files that name it (their
/// manifest entries' referenced data file), not every position delete file
/// of its partition, which is what iceberg's scan planning lists.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_data_file_reads_only_its_own_position_delete_files_on_both_engines() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let session = open_session(dir.path(), engine).await;
        session
            .execute(
                "CREATE SCHEMA db; CREATE TABLE db.w (id INT, v STRING) \
                 TBLPROPERTIES ('write.delete.mode' = 'merge-on-read')",
            )
            .await
            .unwrap();
        for file in 0..4 {
            session
                .execute(&format!(
                    "INSERT INTO db.w SELECT CAST(value AS INT), 'v' FROM \
                     generate_series({}, {})",
                    file * 1000,
                    file * 1000 + 999
                ))
                .await
                .unwrap();
        }
        // One row of every data file: a position delete file for each.
        session
            .execute("DELETE FROM db.w WHERE id % 1000 = 7")
            .await
            .unwrap();
        assert_eq!(
            query(
                &session,
                "SELECT count(*) FROM db.\"w$files\" WHERE content = 1"
            )
            .await,
            vec![vec!["4"]]
        );
        assert_eq!(
            query(
                &session,
                "SELECT count(*), sum(id) FROM db.w WHERE id < 500"
            )
            .await,
            vec![vec!["499", "124743"]]
        );
        assert_eq!(
            session.last_metrics().get("delete_files_read"),
            1,
            "{engine:?}: the one data file scanned reads its own delete file"
        );
        assert_eq!(
            query(&session, "SELECT count(*), sum(id) FROM db.w").await,
            vec![vec!["3996", "7991972"]]
        );
        assert_eq!(
            session.last_metrics().get("delete_files_read"),
            4,
            "{engine:?}: each delete file is read by its data file's task only"
        );
    }
}
