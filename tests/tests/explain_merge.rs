//! EXPLAIN for MERGE on both engines: the stage graph names every stage's
//! role, tasks and partitioning; GRAPHVIZ gives DOT; ANALYZE runs the merge
//! (one new snapshot) and adds per-stage figures.

use icemerge_tests::{open_session, query, ENGINES};

const MERGE: &str =
    "MERGE INTO db.t USING (VALUES (2, 'B'), (9, 'new')) AS s(id, v) ON t.id = s.id \
                     WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn explain_merge_shows_the_stage_graph() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let session = open_session(dir.path(), engine).await;
        session
            .execute("CREATE SCHEMA db; CREATE TABLE db.t (id BIGINT, v STRING); INSERT INTO db.t VALUES (1, 'a'), (2, 'b')")
            .await
            .unwrap();

        let text: Vec<String> = query(&session, &format!("EXPLAIN {MERGE}"))
            .await
            .into_iter()
            .map(|r| r[0].clone())
            .collect();
        let text = text.join("\n");
        for role in [
            "scan target (row-id)",
            "scan source",
            "join / classify",
            "writer: copy-on-write per data file",
            "commit (coordinator)",
        ] {
            assert!(text.contains(role), "{engine:?}: no '{role}' in\n{text}");
        }
        assert!(text.contains("HashJoinExec"), "{text}");
        assert!(text.contains("IcebergScanExec: table=db.t"), "{text}");
        assert!(
            text.contains("hash(__icemerge_route"),
            "writer input is partitioned by data file:\n{text}"
        );
        assert!(text.contains("tasks: "), "{text}");
        // EXPLAIN changes nothing.
        assert_eq!(
            query(&session, "SELECT count(*) FROM db.\"t$snapshots\"").await,
            vec![vec!["1"]]
        );

        let dot: Vec<String> = query(&session, &format!("EXPLAIN (FORMAT GRAPHVIZ) {MERGE}"))
            .await
            .into_iter()
            .map(|r| r[0].clone())
            .collect();
        assert!(dot[0].starts_with("digraph"), "{dot:?}");
        assert!(dot.iter().any(|l| l.contains("->")), "{dot:?}");

        let analyze: Vec<String> = query(&session, &format!("EXPLAIN ANALYZE {MERGE}"))
            .await
            .into_iter()
            .map(|r| r[0].clone())
            .collect();
        let analyze = analyze.join("\n");
        assert!(
            analyze.contains("Merge: updated=1, deleted=0, inserted=1"),
            "{engine:?}:\n{analyze}"
        );
        assert!(analyze.contains("tasks="), "{analyze}");
        assert_eq!(
            query(&session, "SELECT count(*) FROM db.\"t$snapshots\"").await,
            vec![vec!["2"]]
        );
        assert_eq!(
            query(&session, "SELECT id, v FROM db.t ORDER BY id").await,
            vec![vec!["1", "a"], vec!["2", "B"], vec!["9", "new"]]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn explain_merge_names_the_merge_on_read_writer() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let session = open_session(dir.path(), engine).await;
        session
            .execute(
                "CREATE SCHEMA db;
                 CREATE TABLE db.t (id BIGINT, v STRING) TBLPROPERTIES ('write.merge.mode' = 'merge-on-read');
                 INSERT INTO db.t VALUES (1, 'a'), (2, 'b')",
            )
            .await
            .unwrap();
        let text: Vec<String> = query(&session, &format!("EXPLAIN {MERGE}"))
            .await
            .into_iter()
            .map(|r| r[0].clone())
            .collect();
        let text = text.join("\n");
        assert!(
            text.contains("writer: merge-on-read, position deletes per data file"),
            "{engine:?}:\n{text}"
        );
        assert!(text.contains("MergeOnReadWriterExec"), "{text}");
        assert!(!text.contains("CopyOnWriteWriterExec"), "{text}");
        let analyze: Vec<String> = query(&session, &format!("EXPLAIN ANALYZE {MERGE}"))
            .await
            .into_iter()
            .map(|r| r[0].clone())
            .collect();
        let analyze = analyze.join("\n");
        assert!(
            analyze.contains("delete_files_added=1"),
            "{engine:?}:\n{analyze}"
        );
        assert_eq!(
            query(&session, "SELECT id, v FROM db.t ORDER BY id").await,
            vec![vec!["1", "a"], vec!["2", "B"], vec!["9", "new"]]
        );
    }
}
