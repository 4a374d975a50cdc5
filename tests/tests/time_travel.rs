//! Time travel on both engines: `FOR VERSION AS OF <snapshot id | 'branch'>`,
//! `FOR TIMESTAMP AS OF`, Spark's forms without `FOR`; as a query, a CTAS
//! source and a MERGE source; clear errors for an unknown snapshot, branch
//! or tag, a time before the table and a time-travel target of a write.

use icemerge_tests::{open_session, query, ENGINES};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reads_as_of_a_snapshot_id_and_a_timestamp() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let session = open_session(dir.path(), engine).await;
        session
            .execute(
                "CREATE SCHEMA db; CREATE TABLE db.t (id BIGINT, v STRING);
                 INSERT INTO db.t VALUES (1, 'a'), (2, 'b')",
            )
            .await
            .unwrap();
        let first = query(
            &session,
            "SELECT snapshot_id, CAST(committed_at AS VARCHAR) FROM db.\"t$snapshots\"",
        )
        .await;
        let (first_id, first_at) = (first[0][0].clone(), first[0][1].clone());
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        session
            .execute(
                "UPDATE db.t SET v = 'B' WHERE id = 2;
                 INSERT INTO db.t VALUES (3, 'c')",
            )
            .await
            .unwrap();
        let now = vec![
            vec!["1".to_string(), "a".to_string()],
            vec!["2".into(), "B".into()],
            vec!["3".into(), "c".into()],
        ];
        let then = vec![
            vec!["1".to_string(), "a".to_string()],
            vec!["2".into(), "b".into()],
        ];
        assert_eq!(
            query(&session, "SELECT id, v FROM db.t ORDER BY id").await,
            now
        );
        for sql in [
            format!("SELECT id, v FROM db.t FOR VERSION AS OF {first_id} ORDER BY id"),
            format!(
                "SELECT t.id, t.v FROM db.t VERSION AS OF {first_id} WHERE t.id < 10 ORDER BY t.id"
            ),
            format!(
                "SELECT x.id, x.v FROM db.t FOR SYSTEM_VERSION AS OF {first_id} AS x ORDER BY x.id"
            ),
            format!(
                "SELECT id, v FROM db.t FOR TIMESTAMP AS OF TIMESTAMP '{first_at}' ORDER BY id"
            ),
            format!("SELECT id, v FROM db.t TIMESTAMP AS OF '{first_at}' ORDER BY id"),
        ] {
            assert_eq!(query(&session, &sql).await, then, "{engine:?}: {sql}");
        }
        assert_eq!(
            query(
                &session,
                "SELECT count(*) FROM db.t FOR VERSION AS OF 'main'"
            )
            .await,
            vec![vec!["3"]],
            "{engine:?}: the main branch is the current snapshot"
        );
        // The past and the present side by side.
        let diff = query(
            &session,
            &format!(
                "SELECT n.id, o.v AS old_v, n.v AS new_v FROM db.t AS n JOIN db.t FOR VERSION AS OF {first_id} AS o \
                 ON n.id = o.id WHERE n.v <> o.v"
            ),
        )
        .await;
        assert_eq!(diff, vec![vec!["2", "b", "B"]], "{engine:?}");

        // A source of INSERT ... SELECT and of MERGE: restore row 2.
        session
            .execute(&format!(
                "CREATE TABLE db.copy AS SELECT * FROM db.t FOR VERSION AS OF {first_id}"
            ))
            .await
            .unwrap();
        assert_eq!(
            query(&session, "SELECT id, v FROM db.copy ORDER BY id").await,
            then
        );
        let merged = query(
            &session,
            &format!(
                "MERGE INTO db.t USING db.t FOR VERSION AS OF {first_id} AS old ON t.id = old.id \
                 WHEN MATCHED AND t.v <> old.v THEN UPDATE SET v = old.v"
            ),
        )
        .await;
        assert_eq!(merged[0][1], "1", "{engine:?}: one row restored");
        assert_eq!(
            query(&session, "SELECT v FROM db.t WHERE id = 2").await,
            vec![vec!["b"]]
        );

        // Errors name the table and what is missing; nothing is written.
        let err = |sql: String| {
            let session = &session;
            async move { session.execute_one(&sql).await.unwrap_err().to_string() }
        };
        let e = err("SELECT * FROM db.t FOR VERSION AS OF 12345".into()).await;
        assert!(e.contains("table db.t has no snapshot 12345"), "{e}");
        let e = err("SELECT * FROM db.t FOR TIMESTAMP AS OF '2001-01-01 00:00:00'".into()).await;
        assert!(
            e.contains("no snapshot at or before '2001-01-01 00:00:00'"),
            "{e}"
        );
        let e = err("SELECT * FROM db.t FOR VERSION AS OF 'nope'".into()).await;
        assert!(e.contains("no branch or tag 'nope'"), "{e}");
        let e = err(format!(
            "INSERT INTO db.t FOR VERSION AS OF {first_id} VALUES (9, 'z')"
        ))
        .await;
        assert!(e.contains("cannot be written"), "{e}");
        let e = err(format!("DELETE FROM db.t FOR VERSION AS OF {first_id}")).await;
        assert!(e.contains("cannot be written"), "{e}");
        let e = err("SELECT * FROM db.missing FOR VERSION AS OF 1".into()).await;
        assert!(e.contains("'db.missing' does not exist"), "{e}");
        assert_eq!(
            query(&session, "SELECT count(*) FROM db.t").await,
            vec![vec!["3"]]
        );
    }
}
