//! `rewrite_manifests` on both engines: a partitioned merge-on-read table
//! with many small manifests and position delete files gets one data and
//! one delete manifest, committed as a `replace` snapshot whose summary
//! keeps the totals; every live entry keeps its snapshot id and sequence
//! numbers (PyIceberg reads the manifests), the same files are listed, the
//! rows read by icemerge and PyIceberg are the same and deleted rows stay
//! deleted. A second call commits nothing. With a target size of one
//! partition's entries, each new data manifest holds exactly one
//! partition. Bad arguments are refused by name, nothing committed. An
//! INSERT committed while the rewrite is paused is kept (the rewrite is
//! redone on the new head), and Spark reads the rewritten manifests.

use std::collections::{BTreeMap, BTreeSet};

use icemerge_scheduler::Session;
use icemerge_tests::{last_operation, open_session, query, run_python, ENGINES};
use serde_json::Value;

/// A live entry as PyIceberg reads it: path → (content, partition,
/// snapshot id, data sequence number, file sequence number).
type Entries = BTreeMap<String, (i64, String, i64, i64, i64)>;

fn manifests(warehouse: &str) -> Value {
    run_python(
        "maintenance_files.py",
        &["manifests", "--warehouse", warehouse, "--table", "db.t"],
    )
}

fn live_entries(view: &Value) -> Entries {
    let mut out = Entries::new();
    for manifest in view["manifests"].as_array().unwrap() {
        for e in manifest["entries"].as_array().unwrap() {
            if e["status"] == "DELETED" {
                continue;
            }
            let previous = out.insert(
                e["path"].as_str().unwrap().to_string(),
                (
                    e["content"].as_i64().unwrap(),
                    e["partition"].to_string(),
                    e["snapshot_id"].as_i64().unwrap(),
                    e["sequence_number"].as_i64().unwrap(),
                    e["file_sequence_number"].as_i64().unwrap(),
                ),
            );
            assert!(previous.is_none(), "a file live in two manifests: {e}");
        }
    }
    out
}

/// (data manifests, delete manifests) of the current snapshot.
fn manifest_counts(view: &Value) -> (usize, usize) {
    let list = view["manifests"].as_array().unwrap();
    let deletes = list.iter().filter(|m| m["content"] == 1).count();
    (list.len() - deletes, deletes)
}

/// Rows read by icemerge, files listed by `t$files`, and PyIceberg's rows.
async fn state(session: &Session, warehouse: &str) -> (Vec<Vec<String>>, Vec<Vec<String>>, Value) {
    let rows = query(session, "SELECT id, p, v FROM db.t ORDER BY id").await;
    let files = query(
        session,
        "SELECT content, file_path, record_count FROM db.\"t$files\" ORDER BY file_path",
    )
    .await;
    let py = run_python(
        "pyiceberg_interop.py",
        &["read", "--warehouse", warehouse, "--table", "db.t"],
    );
    let mut py_rows: Vec<(i64, i64, String)> = py["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["id"].as_i64().unwrap(),
                r["p"].as_i64().unwrap(),
                r["v"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    py_rows.sort();
    let py_rows: Vec<Vec<String>> = py_rows
        .into_iter()
        .map(|(id, p, v)| vec![id.to_string(), p.to_string(), v])
        .collect();
    assert_eq!(py_rows, rows, "PyIceberg reads what icemerge reads");
    (rows, files, py["snapshots"].clone())
}

const TOTALS: [&str; 5] = [
    "total-data-files",
    "total-delete-files",
    "total-records",
    "total-files-size",
    "total-position-deletes",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rewrite_manifests_regroups_and_keeps_every_file() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let wh = dir.path().to_str().unwrap().to_string();
        let session = open_session(dir.path(), engine).await;
        let mut script = String::from(
            "CREATE SCHEMA db; CREATE TABLE db.t (id BIGINT, p BIGINT, v STRING)
             PARTITIONED BY (p) TBLPROPERTIES ('format-version' = '2',
               'write.merge.mode' = 'merge-on-read', 'write.update.mode' = 'merge-on-read',
               'write.delete.mode' = 'merge-on-read');",
        );
        // Ten INSERTs, each one file in each of three partitions.
        for i in 0..10 {
            script.push_str(&format!(
                "INSERT INTO db.t SELECT value, value % 3, 'v{i}' FROM generate_series({}, {});",
                i * 6,
                i * 6 + 5
            ));
        }
        script.push_str(
            "DELETE FROM db.t WHERE id IN (7, 20);
             UPDATE db.t SET v = 'u' WHERE id = 31;",
        );
        session.execute(&script).await.unwrap();
        let before = manifests(&wh);
        let (data_before, deletes_before) = manifest_counts(&before);
        assert!(
            data_before >= 11 && deletes_before >= 2,
            "{engine:?}: {data_before} data and {deletes_before} delete manifests"
        );
        let entries_before = live_entries(&before);
        assert!(
            entries_before.values().any(|e| e.0 == 1),
            "{engine:?}: position delete files"
        );
        let (rows, files, snapshots) = state(&session, &wh).await;
        assert_eq!(rows.len(), 58, "{engine:?}");
        assert!(!rows.iter().any(|r| r[0] == "7" || r[0] == "20"));
        assert!(rows.iter().any(|r| r[0] == "31" && r[2] == "u"));

        let out = query(&session, "CALL system.rewrite_manifests(table => 'db.t')").await;
        assert_eq!(
            out,
            vec![vec![
                (data_before + deletes_before).to_string(),
                "2".to_string()
            ]],
            "{engine:?}: rewritten_manifests_count, added_manifests_count"
        );
        let after = manifests(&wh);
        assert_eq!(manifest_counts(&after), (1, 1), "{engine:?}");
        for manifest in after["manifests"].as_array().unwrap() {
            let content = manifest["content"].as_i64().unwrap();
            for e in manifest["entries"].as_array().unwrap() {
                assert_eq!(e["status"], "EXISTING", "{engine:?}: {e}");
                // Data manifests hold data files (content 0) only, delete
                // manifests delete files only.
                assert_eq!(e["content"].as_i64().unwrap() > 0, content == 1, "{e}");
            }
        }
        // The same live files, each with its snapshot id and sequence numbers.
        assert_eq!(live_entries(&after), entries_before, "{engine:?}");
        assert_eq!(after["operation"], "replace", "{engine:?}");
        let summary = &after["summary"];
        for total in TOTALS {
            assert_eq!(
                summary[total], before["summary"][total],
                "{engine:?}: {total}"
            );
        }
        assert_eq!(summary["manifests-created"], "2", "{engine:?}");
        assert_eq!(summary["manifests-kept"], "0", "{engine:?}");
        assert_eq!(
            summary["manifests-replaced"],
            (data_before + deletes_before).to_string()
        );
        assert_eq!(
            summary["entries-processed"],
            entries_before.len().to_string()
        );
        let (rows_after, files_after, snapshots_after) = state(&session, &wh).await;
        assert_eq!(rows_after, rows, "{engine:?}: deleted rows stay deleted");
        assert_eq!(files_after, files, "{engine:?}");
        assert_eq!(
            snapshots_after.as_i64().unwrap(),
            snapshots.as_i64().unwrap() + 1
        );
        assert_eq!(last_operation(&session, "db.t").await, "replace");

        // Nothing left to regroup: no snapshot, zeros.
        let out = query(&session, "CALL system.rewrite_manifests('db.t')").await;
        assert_eq!(out, vec![vec!["0", "0"]], "{engine:?}");
        assert_eq!(
            state(&session, &wh).await.2.as_i64().unwrap(),
            snapshots_after.as_i64().unwrap(),
            "{engine:?}: a second call commits nothing"
        );

        // A target size that holds one partition's data files: one data
        // manifest per partition, the delete manifest kept.
        let data_manifest = after["manifests"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["content"] == 0)
            .unwrap();
        let entries = data_manifest["entries"].as_array().unwrap().len() as u64;
        let mut per_partition: BTreeMap<String, u64> = BTreeMap::new();
        for e in data_manifest["entries"].as_array().unwrap() {
            *per_partition.entry(e["partition"].to_string()).or_default() += 1;
        }
        assert_eq!(per_partition.len(), 3);
        let largest = *per_partition.values().max().unwrap();
        let bytes_per_entry = data_manifest["length"].as_u64().unwrap() / entries;
        session
            .execute(&format!(
                "ALTER TABLE db.t SET TBLPROPERTIES ('commit.manifest.target-size-bytes' = '{}')",
                bytes_per_entry * largest
            ))
            .await
            .unwrap();
        let out = query(&session, "CALL system.rewrite_manifests('db.t')").await;
        let clustered = manifests(&wh);
        let (data_manifests, delete_manifests) = manifest_counts(&clustered);
        assert_eq!(data_manifests, 3, "{engine:?}");
        // The delete manifest is kept, or split when the smaller target
        // holds fewer of its (larger) entries.
        let delete_manifest_kept = clustered["manifests"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["content"] == 1 && after["manifests"].as_array().unwrap().contains(m));
        let expected = if delete_manifest_kept {
            vec!["1".to_string(), "3".to_string()]
        } else {
            vec!["2".to_string(), (3 + delete_manifests).to_string()]
        };
        assert_eq!(out, vec![expected], "{engine:?}");
        let mut seen = BTreeSet::new();
        for manifest in clustered["manifests"].as_array().unwrap() {
            if manifest["content"] == 1 {
                continue;
            }
            let partitions: BTreeSet<String> = manifest["entries"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["partition"].to_string())
                .collect();
            assert_eq!(partitions.len(), 1, "{engine:?}: {partitions:?}");
            seen.extend(partitions);
        }
        assert_eq!(seen.len(), 3, "{engine:?}");
        assert_eq!(live_entries(&clustered), entries_before, "{engine:?}");
        assert_eq!(
            state(&session, &wh).await.0,
            rows,
            "{engine:?}: the rows once more"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rewrite_manifests_refuses_bad_input_and_empty_tables_are_a_no_op() {
    let dir = tempfile::tempdir().unwrap();
    let session = open_session(dir.path(), ENGINES[0]).await;
    session
        .execute("CREATE SCHEMA db; CREATE TABLE db.e (id BIGINT)")
        .await
        .unwrap();
    let out = query(&session, "CALL system.rewrite_manifests('db.e')").await;
    assert_eq!(out, vec![vec!["0", "0"]], "no snapshot: nothing to rewrite");
    let out = query(&session, "ALTER TABLE db.e EXECUTE optimize_manifests").await;
    assert_eq!(out, vec![vec!["0", "0"]]);
    for (sql, expected) in [
        (
            "CALL system.rewrite_manifests('db.missing')",
            "does not exist",
        ),
        (
            "CALL system.rewrite_manifests('db.e', spec_id => 7)",
            "no partition spec 7",
        ),
        (
            "CALL system.rewrite_manifests('db.e', use_caching => 3)",
            "boolean",
        ),
        (
            "CALL system.rewrite_manifests('db.e', target => 3)",
            "unknown argument 'target'",
        ),
    ] {
        let e = session.execute_one(sql).await.unwrap_err().to_string();
        assert!(e.contains(expected), "{sql}: {e}");
    }
    let snapshots = query(&session, "SELECT count(*) FROM db.\"e$snapshots\"").await;
    assert_eq!(snapshots, vec![vec!["0"]]);
}

/// An INSERT commits while the rewrite is paused after reading the
/// manifests: the rewrite loses the swap, is redone on the new head, and
/// the inserted file stays live.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_insert_committed_during_the_rewrite_is_kept() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let setup = open_session(dir.path(), engine).await;
        setup
            .execute(
                "CREATE SCHEMA db; CREATE TABLE db.t (id BIGINT, p BIGINT) PARTITIONED BY (p);
                 INSERT INTO db.t VALUES (1, 1), (2, 2);
                 INSERT INTO db.t VALUES (3, 1);
                 INSERT INTO db.t VALUES (4, 2)",
            )
            .await
            .unwrap();
        let session = std::sync::Arc::new(open_session(dir.path(), engine).await);
        let pause = tempfile::tempdir().unwrap();
        session
            .execute_one(&format!(
                "SET icemerge.test_pause_before_commit = '{}'",
                pause.path().display()
            ))
            .await
            .unwrap();
        let running = {
            let session = session.clone();
            tokio::spawn(async move {
                session
                    .execute_one("CALL system.rewrite_manifests('db.t')")
                    .await
            })
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while !pause.path().join("paused").exists() {
            assert!(std::time::Instant::now() < deadline, "never paused");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        setup
            .execute_one("INSERT INTO db.t VALUES (5, 1)")
            .await
            .unwrap();
        std::fs::write(pause.path().join("go"), b"").unwrap();
        running.await.unwrap().unwrap();
        assert_eq!(
            query(&setup, "SELECT id FROM db.t ORDER BY id").await,
            vec![vec!["1"], vec!["2"], vec!["3"], vec!["4"], vec!["5"]],
            "{engine:?}: the concurrent INSERT's row is kept"
        );
        assert_eq!(
            query(&setup, "SELECT count(*) FROM db.\"t$manifests\"").await,
            vec![vec!["1"]],
            "{engine:?}: the new head's four manifests became one"
        );
        assert_eq!(
            query(
                &setup,
                "SELECT operation, count(*) FROM db.\"t$snapshots\" GROUP BY operation ORDER BY operation"
            )
            .await,
            vec![vec!["append", "4"], vec!["replace", "1"]],
            "{engine:?}"
        );
    }
}

/// Iceberg Java (Spark 3.5 + Iceberg 1.10) reads the rewritten manifests:
/// the same rows, the position deletes still applied, two manifests.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn spark_reads_the_rewritten_manifests() {
    let Some(spark) = icemerge_tests::spark("spark_reads_the_rewritten_manifests") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let session = open_session(dir.path(), ENGINES[0]).await;
    let mut script = String::from(
        "CREATE SCHEMA db; CREATE TABLE db.t (id BIGINT, p BIGINT, v STRING)
         PARTITIONED BY (p) TBLPROPERTIES ('format-version' = '2', 'write.delete.mode' = 'merge-on-read');",
    );
    for i in 0..5 {
        script.push_str(&format!(
            "INSERT INTO db.t SELECT value, value % 3, 'v{i}' FROM generate_series({}, {});",
            i * 6,
            i * 6 + 5
        ));
    }
    script.push_str("DELETE FROM db.t WHERE id IN (4, 13, 20);");
    session.execute(&script).await.unwrap();
    let expected = query(&session, "SELECT id, v FROM db.t ORDER BY id").await;
    assert_eq!(expected.len(), 27);
    let delete_files = query(
        &session,
        "SELECT count(*) FROM db.\"t$files\" WHERE content = 1",
    )
    .await;
    let out = query(&session, "CALL system.rewrite_manifests('db.t')").await;
    // Five data manifests become one; the one delete manifest is kept.
    assert_eq!(out, vec![vec!["5", "1"]]);
    assert_eq!(
        query(&session, "SELECT id, v FROM db.t ORDER BY id").await,
        expected
    );
    drop(session);
    let out = spark.run(
        dir.path(),
        "icemerge",
        &[
            "SELECT id, v FROM db.t ORDER BY id",
            "SELECT count(*) FROM db.t.manifests",
            "SELECT count(*) FROM db.t.delete_files",
        ],
    );
    assert_eq!(out[0], expected, "Spark reads the same rows");
    assert_eq!(out[1], vec![vec!["2"]], "one data and one delete manifest");
    assert_eq!(out[2], delete_files, "the position delete files");
}

/// The rows of db.t (id BIGINT, v STRING) as PyIceberg reads them, by id.
fn id_and_v_by_pyiceberg(warehouse: &str) -> Vec<(i64, String)> {
    let py = run_python(
        "pyiceberg_interop.py",
        &["read", "--warehouse", warehouse, "--table", "db.t"],
    );
    let mut rows: Vec<(i64, String)> = py["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["id"].as_i64().unwrap(),
                r["v"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    rows.sort();
    rows
}

/// Appends merge small data manifests as Iceberg's merge append does: at
/// `commit.manifest.min-count-to-merge` manifests the append writes one,
/// its files `Added` and the carried files `Existing` with their snapshot
/// ids and sequence numbers (PyIceberg reads them), rows unchanged; a
/// MERGE then rewrites the merged manifest; with
/// `commit.manifest-merge.enabled` false every append keeps its own; a
/// value that is not a boolean fails the INSERT by the property's name,
/// nothing committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn appends_merge_small_manifests_at_the_minimum_count() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let wh = dir.path().to_str().unwrap().to_string();
        let session = open_session(dir.path(), engine).await;
        let insert = |i: i64| format!("INSERT INTO db.t VALUES ({i}, 'v{i}')");
        session
            .execute(&format!(
                "CREATE SCHEMA db; CREATE TABLE db.t (id BIGINT, v STRING)
                 TBLPROPERTIES ('format-version' = '2', 'commit.manifest.min-count-to-merge' = '3');
                 {}; {}",
                insert(1),
                insert(2)
            ))
            .await
            .unwrap();
        let before = manifests(&wh);
        assert_eq!(manifest_counts(&before), (2, 0), "{engine:?}");
        session.execute(&insert(3)).await.unwrap();
        let after = manifests(&wh);
        assert_eq!(manifest_counts(&after), (1, 0), "{engine:?}: {after}");
        let (merged, carried) = (live_entries(&after), live_entries(&before));
        assert_eq!(merged.len(), 3, "{engine:?}: {after}");
        for (path, entry) in &carried {
            assert_eq!(
                merged.get(path),
                Some(entry),
                "{engine:?}: {path} kept as it was"
            );
        }
        let statuses: Vec<&str> = after["manifests"][0]["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["status"].as_str().unwrap())
            .collect();
        assert_eq!(statuses, ["ADDED", "EXISTING", "EXISTING"], "{engine:?}");
        let py_ids: Vec<i64> = id_and_v_by_pyiceberg(&wh).iter().map(|r| r.0).collect();
        assert_eq!(
            py_ids,
            [1, 2, 3],
            "{engine:?}: PyIceberg reads the merged manifest"
        );

        session
            .execute(
                "MERGE INTO db.t USING (VALUES (2, 'u')) AS s(id, v) ON t.id = s.id
                 WHEN MATCHED THEN UPDATE SET v = s.v",
            )
            .await
            .unwrap();
        let rows = query(&session, "SELECT id, v FROM db.t ORDER BY id").await;
        assert_eq!(
            rows,
            vec![vec!["1", "v1"], vec!["2", "u"], vec!["3", "v3"]],
            "{engine:?}"
        );

        session
            .execute(
                "ALTER TABLE db.t SET TBLPROPERTIES ('commit.manifest-merge.enabled' = 'false')",
            )
            .await
            .unwrap();
        let (data, _) = manifest_counts(&manifests(&wh));
        for i in 4..7 {
            session.execute(&insert(i)).await.unwrap();
        }
        assert_eq!(
            manifest_counts(&manifests(&wh)),
            (data + 3, 0),
            "{engine:?}"
        );

        session
            .execute(
                "ALTER TABLE db.t SET TBLPROPERTIES ('commit.manifest-merge.enabled' = 'maybe')",
            )
            .await
            .unwrap();
        let snapshots = query(&session, "SELECT count(*) FROM db.\"t$snapshots\"").await;
        let e = session.execute(&insert(7)).await.unwrap_err().to_string();
        assert!(
            e.contains("commit.manifest-merge.enabled") && e.contains("maybe"),
            "{engine:?}: {e}"
        );
        assert_eq!(
            query(&session, "SELECT count(*) FROM db.\"t$snapshots\"").await,
            snapshots,
            "{engine:?}"
        );
        assert_eq!(
            query(&session, "SELECT count(*) FROM db.t").await,
            vec![vec!["6"]],
            "{engine:?}"
        );
    }
}

/// A MERGE that adds files merges the small data manifests it carries with
/// its own, as Iceberg's merging snapshot producer does: the carried
/// entries stay as they were (`EXISTING`, same snapshot ids and sequence
/// numbers), the manifest of its removed file is kept apart, and icemerge
/// and PyIceberg read the merged rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_merge_merges_the_small_manifests_it_carries() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let wh = dir.path().to_str().unwrap().to_string();
        let session = open_session(dir.path(), engine).await;
        let mut script = String::from(
            "CREATE SCHEMA db; CREATE TABLE db.t (id BIGINT, v STRING)
             TBLPROPERTIES ('format-version' = '2', 'commit.manifest-merge.enabled' = 'false');",
        );
        for i in 1..=4 {
            script.push_str(&format!("INSERT INTO db.t VALUES ({i}, 'v{i}');"));
        }
        session.execute(&script).await.unwrap();
        let before = manifests(&wh);
        assert_eq!(manifest_counts(&before), (4, 0), "{engine:?}");
        session
            .execute(
                "ALTER TABLE db.t SET TBLPROPERTIES ('commit.manifest-merge.enabled' = 'true',
                   'commit.manifest.min-count-to-merge' = '3');
                 MERGE INTO db.t USING (VALUES (1, 'u'), (9, 'n')) AS s(id, v) ON t.id = s.id
                 WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *",
            )
            .await
            .unwrap();
        let after = manifests(&wh);
        // The removed file's deleted-only manifest, and one of the three
        // carried manifests and the MERGE's own.
        assert_eq!(manifest_counts(&after), (2, 0), "{engine:?}: {after}");
        let merged = after["manifests"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["entries"].as_array().unwrap().len() > 1)
            .unwrap_or_else(|| panic!("{engine:?}: no merged manifest in {after}"));
        let mut statuses: Vec<&str> = merged["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["status"].as_str().unwrap())
            .collect();
        statuses.sort();
        assert_eq!(
            statuses.iter().filter(|s| **s == "EXISTING").count(),
            3,
            "{engine:?}: {merged}"
        );
        assert!(
            statuses.iter().all(|s| *s == "EXISTING" || *s == "ADDED"),
            "{engine:?}: {merged}"
        );
        let (entries_before, entries_after) = (live_entries(&before), live_entries(&after));
        let carried: Vec<_> = entries_before
            .iter()
            .filter(|(path, _)| entries_after.contains_key(*path))
            .collect();
        assert_eq!(carried.len(), 3, "{engine:?}: three files untouched");
        for (path, entry) in carried {
            assert_eq!(entries_after.get(path), Some(entry), "{engine:?}: {path}");
        }
        let rows = query(&session, "SELECT id, v FROM db.t ORDER BY id").await;
        let expected = [(1, "u"), (2, "v2"), (3, "v3"), (4, "v4"), (9, "n")];
        assert_eq!(
            rows,
            expected
                .iter()
                .map(|(id, v)| vec![id.to_string(), v.to_string()])
                .collect::<Vec<_>>(),
            "{engine:?}"
        );
        assert_eq!(
            id_and_v_by_pyiceberg(&wh),
            expected
                .iter()
                .map(|(id, v)| (*id, v.to_string()))
                .collect::<Vec<_>>(),
            "{engine:?}: PyIceberg"
        );
    }
}
