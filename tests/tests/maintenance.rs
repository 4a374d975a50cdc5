//! Table maintenance procedures at the file level, on both engines:
//! `expire_snapshots` after merges of both write modes leaves exactly the
//! files the retained snapshots reach (the warehouse listed against
//! PyIceberg's view of every retained snapshot), retained snapshots still
//! read as before and expired ones are refused; `rollback_to_snapshot` and
//! `set_current_snapshot` move the table and `cherrypick_snapshot` applies
//! an append (they refuse what they must, the table unchanged); `remove_orphan_files` deletes planted old orphans and
//! nothing else, keeps a young one, and only lists with `dry_run`;
//! `rewrite_data_files` compacts many small files with merge-on-read
//! position deletes into few files without delete files, the rows the same
//! for icemerge and PyIceberg; a compaction and a MERGE committing at the
//! same time both stay correct whichever commits first, and a concurrent
//! commit fails only the file group (partition) it changed. The rollback and
//! expiry also run on a Postgres catalog.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use icemerge_scheduler::{EngineKind, Session};
use icemerge_tests::{
    last_operation, open_session, open_session_on, postgres_database, query, run_python, ENGINES,
};

/// The local directory of table `name` (from one of its data files).
async fn table_dir(session: &Session, name: &str) -> PathBuf {
    let (ns, t) = name.split_once('.').unwrap();
    let rows = query(
        session,
        &format!("SELECT file_path FROM {ns}.\"{t}$files\" LIMIT 1"),
    )
    .await;
    let path = rows[0][0].clone();
    let path = path
        .strip_prefix("file://")
        .or_else(|| path.strip_prefix("file:"))
        .unwrap_or(&path)
        .to_string();
    let at = path.find("/data/").expect("a data file under data/");
    PathBuf::from(&path[..at])
}

/// Every file under `dir`, as absolute paths.
fn files_under(dir: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                out.insert(path.to_string_lossy().into_owned());
            }
        }
    }
    out
}

fn local(location: &str) -> String {
    location
        .strip_prefix("file://")
        .or_else(|| location.strip_prefix("file:"))
        .unwrap_or(location)
        .to_string()
}

fn strings(value: &serde_json::Value) -> BTreeSet<String> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|v| local(v.as_str().unwrap()))
        .collect()
}

/// Snapshot ids in commit order.
/// The data and delete files under `table`'s location, asserted to be
/// exactly those PyIceberg says the table's snapshots reach; returned.
async fn data_files_match_the_reachable(
    session: &Session,
    wh: &str,
    table: &str,
    what: &str,
) -> BTreeSet<String> {
    let dir = table_dir(session, table).await;
    let view = run_python(
        "maintenance_files.py",
        &["reach", "--warehouse", wh, "--table", table],
    );
    let on_disk: BTreeSet<String> = files_under(&dir)
        .into_iter()
        .filter(|f| f.contains("/data/"))
        .collect();
    assert_eq!(on_disk, strings(&view["content_files"]), "{what}");
    on_disk
}

async fn snapshot_ids(session: &Session, table: &str) -> Vec<String> {
    let (ns, t) = table.split_once('.').unwrap();
    query(
        session,
        &format!(
            "SELECT snapshot_id FROM {ns}.\"{t}$snapshots\" ORDER BY committed_at, snapshot_id"
        ),
    )
    .await
    .into_iter()
    .map(|r| r[0].clone())
    .collect()
}

async fn rows_at(session: &Session, snapshot: &str) -> Vec<Vec<String>> {
    query(
        session,
        &format!("SELECT id, v FROM db.t FOR VERSION AS OF {snapshot} ORDER BY id"),
    )
    .await
}

/// Five merges over two write modes: copy-on-write rewrites, merge-on-read
/// position delete files, then a copy-on-write merge that drops them.
async fn merge_history(session: &Session) {
    session
        .execute(
            "CREATE SCHEMA db;
             CREATE TABLE db.t (id BIGINT, v STRING) TBLPROPERTIES ('format-version' = '2');
             INSERT INTO db.t SELECT value, 'v0' FROM generate_series(1, 40)",
        )
        .await
        .unwrap();
    let merges = [
        "MERGE INTO db.t USING (SELECT value AS id FROM generate_series(1, 5)) s ON t.id = s.id \
         WHEN MATCHED THEN UPDATE SET v = 'v1' WHEN NOT MATCHED THEN INSERT VALUES (s.id, 'n1')",
        "MERGE INTO db.t USING (SELECT value AS id FROM generate_series(38, 45)) s ON t.id = s.id \
         WHEN MATCHED THEN UPDATE SET v = 'v2' WHEN NOT MATCHED THEN INSERT VALUES (s.id, 'n2')",
        "ALTER TABLE db.t SET TBLPROPERTIES ('write.merge.mode' = 'merge-on-read', 'write.delete.mode' = 'merge-on-read')",
        "MERGE INTO db.t USING (SELECT value AS id FROM generate_series(10, 14)) s ON t.id = s.id \
         WHEN MATCHED THEN UPDATE SET v = 'v3'",
        "DELETE FROM db.t WHERE id IN (20, 21, 44)",
        "ALTER TABLE db.t UNSET TBLPROPERTIES ('write.merge.mode', 'write.delete.mode')",
        "MERGE INTO db.t USING (SELECT value AS id FROM generate_series(1, 45)) s ON t.id = s.id \
         WHEN MATCHED AND s.id % 7 = 0 THEN UPDATE SET v = 'v5'",
    ];
    for sql in merges {
        tokio::time::sleep(Duration::from_millis(5)).await;
        session
            .execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn expire_keeps_exactly_what_retained_snapshots_reach() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let wh = dir.path().to_str().unwrap().to_string();
        let session = open_session(dir.path(), engine).await;
        merge_history(&session).await;
        let ids = snapshot_ids(&session, "db.t").await;
        assert_eq!(ids.len(), 6, "{engine:?}: insert + 5 writes");
        let mut before = vec![];
        for id in &ids {
            before.push(rows_at(&session, id).await);
        }
        let table = table_dir(&session, "db.t").await;
        let files_before = files_under(&table);

        // Everything before the fourth snapshot goes (strictly older than
        // its commit time); the fourth and later stay.
        let cutoff = query(
            &session,
            &format!(
                "SELECT CAST(committed_at AS VARCHAR) FROM db.\"t$snapshots\" WHERE snapshot_id = {}",
                ids[3]
            ),
        )
        .await[0][0]
            .clone();
        let out = query(
            &session,
            &format!(
                "CALL system.expire_snapshots(table => 'db.t', older_than => TIMESTAMP '{cutoff}', retain_last => 1)"
            ),
        )
        .await;
        let counts: Vec<u64> = out[0].iter().map(|c| c.parse().unwrap()).collect();
        assert_eq!(
            snapshot_ids(&session, "db.t").await,
            ids[3..].to_vec(),
            "{engine:?}"
        );

        // The warehouse holds exactly what PyIceberg says the retained
        // snapshots reach.
        let view = run_python(
            "maintenance_files.py",
            &["reach", "--warehouse", &wh, "--table", "db.t"],
        );
        let files_after = files_under(&table);
        let data_on_disk: BTreeSet<String> = files_after
            .iter()
            .filter(|f| f.contains("/data/"))
            .cloned()
            .collect();
        assert_eq!(
            data_on_disk,
            strings(&view["content_files"]),
            "{engine:?}: data and delete files"
        );
        let avro_on_disk: BTreeSet<String> = files_after
            .iter()
            .filter(|f| f.contains("/metadata/") && f.ends_with(".avro"))
            .cloned()
            .collect();
        let reached: BTreeSet<String> = strings(&view["manifest_lists"])
            .union(&strings(&view["manifests"]))
            .cloned()
            .collect();
        assert_eq!(
            avro_on_disk, reached,
            "{engine:?}: manifests and manifest lists"
        );

        // The counts say what went: every deleted file was counted once.
        let gone: Vec<&String> = files_before.difference(&files_after).collect();
        let gone_content = gone.iter().filter(|f| f.contains("/data/")).count() as u64;
        let gone_avro = gone.iter().filter(|f| f.ends_with(".avro")).count() as u64;
        assert_eq!(
            counts[0] + counts[1] + counts[2],
            gone_content,
            "{engine:?}: {out:?}"
        );
        assert_eq!(counts[3] + counts[4], gone_avro, "{engine:?}: {out:?}");
        assert_eq!(counts[4], 3, "{engine:?}: three manifest lists: {out:?}");
        assert!(
            counts[0] >= 1,
            "{engine:?}: the rewritten data files went: {out:?}"
        );
        let new: Vec<&String> = files_after.difference(&files_before).collect();
        assert!(
            new.len() == 1 && new[0].ends_with(".metadata.json"),
            "{engine:?}: one new metadata file only: {new:?}"
        );
        assert!(
            files_after.iter().any(|f| f.ends_with(".metadata.json")),
            "metadata files stay"
        );

        // Retained snapshots read as before (here and in PyIceberg); expired
        // ones are refused.
        for (i, id) in ids.iter().enumerate().skip(3) {
            assert_eq!(
                rows_at(&session, id).await,
                before[i],
                "{engine:?}: snapshot {i}"
            );
            assert_eq!(
                view["rows"][id].as_u64().unwrap() as usize,
                before[i].len(),
                "{engine:?}: PyIceberg at snapshot {i}"
            );
        }
        for id in &ids[..3] {
            let sql = format!("SELECT count(*) FROM db.t FOR VERSION AS OF {id}");
            let err = session.execute_one(&sql).await.unwrap_err().to_string();
            assert!(err.contains(id.as_str()), "{engine:?}: {err}");
        }

        // Explicit ids: the current snapshot cannot go, nothing changes.
        let current = ids.last().unwrap();
        let err = session
            .execute_one(&format!(
                "CALL system.expire_snapshots(table => 'db.t', snapshot_ids => array({}, {current}))",
                ids[3]
            ))
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("main"), "{err}");
        assert_eq!(snapshot_ids(&session, "db.t").await, ids[3..].to_vec());
        assert_eq!(files_under(&table), files_after);
        // An explicit older snapshot does go.
        let out = query(
            &session,
            &format!(
                "CALL system.expire_snapshots(table => 'db.t', snapshot_ids => array({}))",
                ids[3]
            ),
        )
        .await;
        assert_eq!(out[0][4], "1", "{engine:?}: its manifest list: {out:?}");
        assert_eq!(snapshot_ids(&session, "db.t").await, ids[4..].to_vec());
        data_files_match_the_reachable(&session, &wh, "db.t", &format!("{engine:?}")).await;
        assert_eq!(
            query(&session, "SELECT id, v FROM db.t ORDER BY id").await,
            *before.last().unwrap()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rollback_and_set_current_snapshot() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let session = open_session(dir.path(), engine).await;
        // On the heap: the checks' future outgrows a test thread's stack in
        // debug builds.
        Box::pin(rollback_checks(&session, engine)).await;
    }
    let Some(db) = postgres_database("maintenance_rollback").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let session = open_session_on(dir.path(), Some(&db.uri), EngineKind::Local).await;
    rollback_checks(&session, EngineKind::Local).await;
    // Expiry on the Postgres catalog: all but the current snapshot go. The
    // cherry-picked snapshot's data file is shared with the current one and
    // stays; only its own manifest goes.
    let out = query(
        &session,
        "CALL system.expire_snapshots(table => 'db.t', older_than => TIMESTAMP '2999-01-01 00:00:00')",
    )
    .await;
    assert_eq!(out, vec![vec!["0", "0", "0", "1", "4", "0"]]);
    assert_eq!(snapshot_ids(&session, "db.t").await.len(), 1);
    assert_eq!(
        query(&session, "SELECT count(*) FROM db.t").await,
        vec![vec!["4"]]
    );
    drop(session);
    db.drop().await;
}

async fn rollback_checks(session: &Session, engine: EngineKind) {
    session
        .execute(
            "CREATE SCHEMA db; CREATE TABLE db.t (id BIGINT, v STRING);
             INSERT INTO db.t VALUES (1, 'a');
             INSERT INTO db.t VALUES (2, 'b');
             INSERT INTO db.t VALUES (3, 'c')",
        )
        .await
        .unwrap();
    let ids = snapshot_ids(session, "db.t").await;
    let out = query(
        session,
        &format!("CALL system.rollback_to_snapshot('db.t', {})", ids[0]),
    )
    .await;
    assert_eq!(
        out,
        vec![vec![ids[2].clone(), ids[0].clone()]],
        "{engine:?}"
    );
    assert_eq!(
        query(session, "SELECT count(*) FROM db.t").await,
        vec![vec!["1"]]
    );
    // The third snapshot is no ancestor of the current one now.
    let err = session
        .execute_one(&format!(
            "CALL system.rollback_to_snapshot(table => 'db.t', snapshot_id => {})",
            ids[2]
        ))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("not an ancestor"), "{err}");
    assert_eq!(
        query(session, "SELECT count(*) FROM db.t").await,
        vec![vec!["1"]]
    );
    // set_current_snapshot moves to any snapshot.
    let out = query(
        session,
        &format!(
            "CALL system.set_current_snapshot(table => 'db.t', snapshot_id => {})",
            ids[2]
        ),
    )
    .await;
    assert_eq!(out, vec![vec![ids[0].clone(), ids[2].clone()]]);
    assert_eq!(
        query(session, "SELECT count(*) FROM db.t").await,
        vec![vec!["3"]]
    );
    // To main's own snapshot: nothing changes.
    let out = query(
        session,
        "CALL system.set_current_snapshot(table => 'db.t', ref => 'main')",
    )
    .await;
    assert_eq!(out, vec![vec![ids[2].clone(), ids[2].clone()]]);
    // A write after a rollback builds on the rolled-back state.
    query(
        session,
        &format!("CALL system.rollback_to_snapshot('db.t', {})", ids[1]),
    )
    .await;
    session
        .execute("INSERT INTO db.t VALUES (4, 'd')")
        .await
        .unwrap();
    assert_eq!(
        query(session, "SELECT id FROM db.t ORDER BY id").await,
        vec![vec!["1"], vec!["2"], vec!["4"]]
    );
    let all = snapshot_ids(session, "db.t").await;
    let s4 = all.last().unwrap().clone();
    // Cherry-picking: back to the second snapshot, then the append made on
    // it is a fast-forward.
    query(
        session,
        &format!("CALL system.rollback_to_snapshot('db.t', {})", ids[1]),
    )
    .await;
    let out = query(
        session,
        &format!("CALL system.cherrypick_snapshot('db.t', {s4})"),
    )
    .await;
    assert_eq!(out, vec![vec![s4.clone(), s4.clone()]], "{engine:?}");
    assert_eq!(
        snapshot_ids(session, "db.t").await.len(),
        4,
        "no new snapshot"
    );
    // On top of the third snapshot, its file is appended again.
    query(
        session,
        &format!("CALL system.set_current_snapshot('db.t', {})", ids[2]),
    )
    .await;
    let out = query(
        session,
        &format!("CALL system.cherrypick_snapshot('db.t', {s4})"),
    )
    .await;
    let after = snapshot_ids(session, "db.t").await;
    assert_eq!(after.len(), 5);
    assert_eq!(out, vec![vec![s4.clone(), after.last().unwrap().clone()]]);
    assert_eq!(
        query(session, "SELECT id FROM db.t ORDER BY id").await,
        vec![vec!["1"], vec!["2"], vec!["3"], vec!["4"]]
    );
    for id in [&s4, &ids[1]] {
        let err = session
            .execute_one(&format!("CALL system.cherrypick_snapshot('db.t', {id})"))
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("cherrypick_snapshot"), "{err}");
    }
    assert_eq!(
        snapshot_ids(session, "db.t").await,
        after,
        "refusals change nothing"
    );
}

fn age(path: &Path, days: u64) {
    let when = SystemTime::now() - Duration::from_secs(days * 24 * 3600);
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(when)
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn remove_orphan_files_deletes_old_orphans_only() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let wh = dir.path().to_str().unwrap().to_string();
        let session = open_session(dir.path(), engine).await;
        session
            .execute(
                "CREATE SCHEMA db; CREATE TABLE db.t (id BIGINT, v STRING) PARTITIONED BY (v);
                 INSERT INTO db.t VALUES (1, 'a'), (2, 'b');
                 UPDATE db.t SET id = 10 WHERE v = 'a';
                 CREATE TABLE db.t2 (id BIGINT);
                 INSERT INTO db.t2 VALUES (7)",
            )
            .await
            .unwrap();
        let table = table_dir(&session, "db.t").await;
        let other = table_dir(&session, "db.t2").await;
        // Orphans: in a partition directory, in metadata/, and a crashed
        // writer's checksum file; one young orphan.
        let partition_dir = files_under(&table.join("data"))
            .into_iter()
            .next()
            .map(|f| PathBuf::from(f).parent().unwrap().to_path_buf())
            .unwrap();
        let old_data = partition_dir.join("00000-orphan.parquet");
        let old_meta = table.join("metadata").join("snap-orphan.avro");
        let old_crc = partition_dir.join(".00000-orphan.parquet.crc");
        let young = table.join("data").join("young-orphan.parquet");
        for f in [&old_data, &old_meta, &old_crc, &young] {
            std::fs::write(f, b"not iceberg").unwrap();
        }
        // Every file of both tables is old, but the young orphan.
        for f in files_under(&table).iter().chain(files_under(&other).iter()) {
            if Path::new(f) != young {
                age(Path::new(f), 10);
            }
        }
        let before = files_under(dir.path());
        let orphans: BTreeSet<String> = [&old_data, &old_meta, &old_crc]
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();

        let listed = |rows: Vec<Vec<String>>| -> BTreeSet<String> {
            rows.into_iter().map(|r| local(&r[0])).collect()
        };
        let dry = query(
            &session,
            "CALL system.remove_orphan_files(table => 'db.t', dry_run => true)",
        )
        .await;
        assert_eq!(listed(dry), orphans, "{engine:?}");
        assert_eq!(
            files_under(dir.path()),
            before,
            "{engine:?}: dry run deletes nothing"
        );

        let done = query(&session, "CALL system.remove_orphan_files('db.t')").await;
        assert_eq!(listed(done), orphans, "{engine:?}");
        let after = files_under(dir.path());
        let removed: BTreeSet<String> = before.difference(&after).cloned().collect();
        assert_eq!(removed, orphans, "{engine:?}: the orphans and nothing else");
        assert!(young.exists());

        // With a cutoff of now, the young orphan goes too.
        let done = query(
            &session,
            "ALTER TABLE db.t EXECUTE remove_orphan_files(retention_threshold => '0s')",
        )
        .await;
        assert_eq!(
            listed(done),
            BTreeSet::from([young.to_string_lossy().into_owned()]),
            "{engine:?}"
        );
        assert_eq!(
            query(&session, "SELECT id, v FROM db.t ORDER BY id").await,
            vec![vec!["2", "b"], vec!["10", "a"]]
        );
        assert_eq!(
            query(&session, "SELECT id FROM db.t2").await,
            vec![vec!["7"]]
        );
        let view = run_python(
            "maintenance_files.py",
            &["reach", "--warehouse", &wh, "--table", "db.t"],
        );
        for f in strings(&view["content_files"])
            .iter()
            .chain(strings(&view["manifests"]).iter())
        {
            assert!(
                Path::new(f).exists(),
                "{engine:?}: {f} is reached and must stay"
            );
        }
    }
}

fn sorted_rows(out: &serde_json::Value) -> Vec<(i64, String)> {
    let mut rows: Vec<(i64, String)> = out["rows"]
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

/// The script of a merge-on-read table `db.c (id, v)` loaded as `files`
/// small files of `rows` rows each (`v` = `value`, where `{i}` is the
/// file's number), then given position deletes by a DELETE (ids ending in
/// 3) and an UPDATE (`v` = 'u' for multiples of 7).
fn small_files_with_deletes(files: usize, rows: usize, value: &str) -> String {
    let mut script = String::from(
        "CREATE SCHEMA db; CREATE TABLE db.c (id BIGINT, v STRING) TBLPROPERTIES (
           'write.merge.mode' = 'merge-on-read', 'write.update.mode' = 'merge-on-read',
           'write.delete.mode' = 'merge-on-read');",
    );
    for i in 0..files {
        script.push_str(&format!(
            "INSERT INTO db.c SELECT value, {} FROM generate_series({}, {});",
            value.replace("{i}", &i.to_string()),
            i * rows,
            i * rows + rows - 1
        ));
    }
    script.push_str(
        "DELETE FROM db.c WHERE id % 10 = 3;
         UPDATE db.c SET v = 'u' WHERE id % 7 = 0;",
    );
    script
}

/// Asserts that PyIceberg reads exactly `rows` (`id`, `v`, as icemerge
/// printed them) from `table`; returns them typed.
fn pyiceberg_reads(wh: &str, table: &str, rows: &[Vec<String>], what: &str) -> Vec<(i64, String)> {
    let expected: Vec<(i64, String)> = rows
        .iter()
        .map(|r| (r[0].parse().unwrap(), r[1].clone()))
        .collect();
    let py = run_python(
        "pyiceberg_interop.py",
        &["read", "--warehouse", wh, "--table", table],
    );
    assert_eq!(
        sorted_rows(&py),
        expected,
        "{what}: PyIceberg reads the same rows"
    );
    expected
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rewrite_data_files_compacts_small_files_and_applies_deletes() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let wh = dir.path().to_str().unwrap().to_string();
        let session = open_session(dir.path(), engine).await;
        session
            .execute(&small_files_with_deletes(40, 5, "'v{i}'"))
            .await
            .unwrap();
        let files = |rows: Vec<Vec<String>>| -> (u64, u64) {
            let count = |c: &str| {
                rows.iter()
                    .find(|r| r[0] == c)
                    .map(|r| r[1].parse().unwrap())
                    .unwrap_or(0)
            };
            (count("0"), count("1") + count("2"))
        };
        let content = "SELECT content, count(*) FROM db.\"c$files\" GROUP BY content";
        let (data_before, deletes_before) = files(query(&session, content).await);
        assert!(
            data_before > 40 && deletes_before > 0,
            "{engine:?}: {data_before} {deletes_before}"
        );
        let rows_sql = "SELECT id, v FROM db.c ORDER BY id";
        let before = query(&session, rows_sql).await;
        assert_eq!(before.len(), 200 - 20, "{engine:?}");

        let out = query(&session, "CALL system.rewrite_data_files(table => 'db.c')").await;
        assert_eq!(out[0][0], data_before.to_string(), "{engine:?}: {out:?}");
        assert_eq!(out[0][1], "1", "{engine:?}: small input, one file: {out:?}");
        assert_eq!(out[0][3], "0");
        assert_eq!(
            files(query(&session, content).await),
            (1, 0),
            "{engine:?}: no delete files"
        );
        assert_eq!(query(&session, rows_sql).await, before, "{engine:?}");
        assert_eq!(last_operation(&session, "db.c").await, "replace");
        pyiceberg_reads(&wh, "db.c", &before, &format!("{engine:?}"));

        // More rows, then a small target size: several files, the rows
        // unchanged.
        session
            .execute(
                "INSERT INTO db.c SELECT value + 1000, concat(repeat('x', 40), CAST(value AS VARCHAR)) \
                 FROM generate_series(1, 60000)",
            )
            .await
            .unwrap();
        let before = query(&session, rows_sql).await;
        let bytes: u64 = query(
            &session,
            "SELECT sum(file_size_in_bytes) FROM db.\"c$files\"",
        )
        .await[0][0]
            .parse()
            .unwrap();
        let out = query(
            &session,
            &format!(
                "CALL system.rewrite_data_files(table => 'db.c', options => map('target-file-size-bytes', '{}', 'rewrite-all', 'true'))",
                bytes / 3
            ),
        )
        .await;
        assert_eq!(out[0][0], "2", "{engine:?}: {out:?}");
        let added: u64 = out[0][1].parse().unwrap();
        assert!(added >= 2, "{engine:?}: {out:?}");
        assert_eq!(files(query(&session, content).await), (added, 0));
        assert_eq!(query(&session, rows_sql).await, before, "{engine:?}");
        // The files the rewrites replaced stay until their snapshots expire;
        // expiring them all leaves exactly the current files.
        query(
            &session,
            "CALL system.expire_snapshots(table => 'db.c', older_than => TIMESTAMP '2999-01-01 00:00:00')",
        )
        .await;
        let on_disk =
            data_files_match_the_reachable(&session, &wh, "db.c", &format!("{engine:?}")).await;
        assert_eq!(on_disk.len() as u64, added);
        pyiceberg_reads(&wh, "db.c", &before, &format!("{engine:?}"));
    }
}

/// Runs `first` on a session paused before its commit while `second`
/// commits on another session, then lets `first` commit.
async fn across(
    warehouse: &Path,
    engine: EngineKind,
    first: &str,
    second: &str,
) -> (
    std::sync::Arc<Session>,
    datafusion::error::Result<icemerge_scheduler::StatementOutput>,
) {
    let session = std::sync::Arc::new(open_session(warehouse, engine).await);
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
        let first = first.to_string();
        tokio::spawn(async move { session.execute_one(&first).await })
    };
    let paused = pause.path().join("paused");
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while !paused.exists() {
        assert!(std::time::Instant::now() < deadline, "never paused");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let other = open_session(warehouse, EngineKind::Local).await;
    other.execute_one(second).await.unwrap();
    std::fs::write(pause.path().join("go"), b"").unwrap();
    (session, running.await.unwrap())
}

const SETUP: &str = "CREATE SCHEMA db; CREATE TABLE db.t (id BIGINT, v BIGINT);
    INSERT INTO db.t SELECT value, 0 FROM generate_series(0, 9);
    INSERT INTO db.t SELECT value, 0 FROM generate_series(10, 19);
    INSERT INTO db.t SELECT value, 0 FROM generate_series(20, 29)";
const COMPACT: &str =
    "CALL system.rewrite_data_files(table => 'db.t', options => map('min-input-files', '2'))";
const BUMP: &str =
    "MERGE INTO db.t USING (SELECT value AS id FROM generate_series(5, 14)) s ON t.id = s.id \
    WHEN MATCHED THEN UPDATE SET v = t.v + 1";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn compaction_and_a_merge_committing_at_once() {
    for engine in ENGINES {
        // The merge commits first: the compaction's commit is a conflict,
        // its files are deleted and the merge's rows stay.
        let dir = tempfile::tempdir().unwrap();
        open_session(dir.path(), engine)
            .await
            .execute(SETUP)
            .await
            .unwrap();
        let (session, result) = across(dir.path(), engine, COMPACT, BUMP).await;
        let err = result.unwrap_err().to_string();
        assert!(
            err.contains("rewrite_data_files") && err.contains("nothing was rewritten"),
            "{engine:?}: {err}"
        );
        assert_eq!(
            query(&session, "SELECT count(*), sum(v) FROM db.t").await,
            vec![vec!["30", "10"]],
            "{engine:?}"
        );
        let wh = dir.path().to_str().unwrap();
        data_files_match_the_reachable(
            &session,
            wh,
            "db.t",
            &format!("{engine:?}: the rewrite left no file"),
        )
        .await;
        // Run again (without the pause), it compacts.
        let session = open_session(dir.path(), engine).await;
        let out = query(&session, COMPACT).await;
        assert_eq!(out[0][1], "1", "{engine:?}: {out:?}");
        assert_eq!(
            query(&session, "SELECT count(*), sum(v) FROM db.t").await,
            vec![vec!["30", "10"]]
        );

        // The compaction commits first: the merge, whose files were
        // replaced, runs again on the compacted table.
        let dir = tempfile::tempdir().unwrap();
        open_session(dir.path(), engine)
            .await
            .execute(SETUP)
            .await
            .unwrap();
        let (session, result) = across(dir.path(), engine, BUMP, COMPACT).await;
        result.unwrap_or_else(|e| panic!("{engine:?}: {e}"));
        assert_eq!(
            query(&session, "SELECT count(*), sum(v) FROM db.t").await,
            vec![vec!["30", "10"]],
            "{engine:?}: updated once"
        );
        assert_eq!(
            query(
                &session,
                "SELECT operation FROM db.\"t$snapshots\" ORDER BY committed_at"
            )
            .await,
            vec![
                vec!["append"],
                vec!["append"],
                vec!["append"],
                vec!["replace"],
                vec!["overwrite"]
            ],
            "{engine:?}"
        );
    }
}

fn output_rows(out: &icemerge_scheduler::StatementOutput) -> Vec<Vec<String>> {
    match out {
        icemerge_scheduler::StatementOutput::Rows { batches, .. } => {
            icemerge_tests::rows_as_strings(batches)
        }
        other => panic!("no rows: {other:?}"),
    }
}

const PARTITIONED: &str = "CREATE SCHEMA db;
    CREATE TABLE db.p (id BIGINT, p INT, v BIGINT) PARTITIONED BY (p);
    INSERT INTO db.p SELECT value, CAST(value % 2 AS INT), 0 FROM generate_series(0, 9);
    INSERT INTO db.p SELECT value, CAST(value % 2 AS INT), 0 FROM generate_series(10, 19);
    INSERT INTO db.p SELECT value, CAST(value % 2 AS INT), 0 FROM generate_series(20, 29)";
const COMPACT_P: &str =
    "CALL system.rewrite_data_files(table => 'db.p', options => map('min-input-files', '2'))";

/// A compaction of two partitions (two file groups) while another writer
/// commits: a MERGE rewriting files of partition 1 makes that group fail
/// (its new files deleted, its old files kept) and the other group
/// commits; an INSERT is no conflict at all, and its rows stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_concurrent_commit_drops_only_the_groups_it_changed() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let wh = dir.path().to_str().unwrap().to_string();
        open_session(dir.path(), engine)
            .await
            .execute(PARTITIONED)
            .await
            .unwrap();
        let bump = "MERGE INTO db.p USING (SELECT 7 AS id) s ON p.id = s.id \
                    WHEN MATCHED THEN UPDATE SET v = p.v + 1";
        let (session, result) = across(dir.path(), engine, COMPACT_P, bump).await;
        let out = result.unwrap_or_else(|e| panic!("{engine:?}: {e}"));
        let out = output_rows(&out);
        // Partition 0's three files became one; partition 1's three failed.
        assert_eq!(out[0][0], "3", "{engine:?}: {out:?}");
        assert_eq!(out[0][1], "1", "{engine:?}: {out:?}");
        assert_eq!(out[0][3], "3", "{engine:?}: {out:?}");
        assert_eq!(
            query(
                &session,
                "SELECT partition, count(*) FROM db.\"p$files\" GROUP BY partition ORDER BY partition"
            )
            .await,
            vec![vec!["{p=0}", "1"], vec!["{p=1}", "3"]],
            "{engine:?}"
        );
        assert_eq!(
            query(&session, "SELECT count(*), sum(id), sum(v) FROM db.p").await,
            vec![vec!["30", "435", "1"]],
            "{engine:?}: the merge's update stays"
        );
        // No file of the failed group is left behind.
        data_files_match_the_reachable(&session, &wh, "db.p", &format!("{engine:?}")).await;

        // An INSERT committing meanwhile: both groups commit, its rows stay.
        let dir = tempfile::tempdir().unwrap();
        open_session(dir.path(), engine)
            .await
            .execute(PARTITIONED)
            .await
            .unwrap();
        let insert = "INSERT INTO db.p VALUES (100, 0, 5), (101, 1, 5)";
        let (session, result) = across(dir.path(), engine, COMPACT_P, insert).await;
        let out = output_rows(&result.unwrap_or_else(|e| panic!("{engine:?}: {e}")));
        assert_eq!(out[0][..2], ["6", "2"], "{engine:?}: {out:?}");
        assert_eq!(out[0][3], "0", "{engine:?}: {out:?}");
        assert_eq!(
            query(&session, "SELECT count(*), sum(id), sum(v) FROM db.p").await,
            vec![vec!["32", "636", "10"]],
            "{engine:?}: the inserted rows stay"
        );
        assert_eq!(
            query(&session, "SELECT count(*) FROM db.\"p$files\"").await,
            vec![vec!["4"]],
            "{engine:?}: one compacted file and one inserted file per partition"
        );
    }
}

/// Compaction of 200 small files carrying merge-on-read position deletes:
/// files near the target size, no delete file left, and the same rows for
/// icemerge, PyIceberg, DuckDB and (when set up) Spark 3.5 + Iceberg 1.10.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn compacted_small_files_read_the_same_in_every_engine() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().to_str().unwrap().to_string();
    let session = open_session(dir.path(), EngineKind::Local).await;
    session
        .execute(&small_files_with_deletes(
            200,
            50,
            "concat('row-', CAST(value AS VARCHAR), '-{i}')",
        ))
        .await
        .unwrap();
    let kinds = "SELECT content, count(*) FROM db.\"c$files\" GROUP BY content ORDER BY content";
    let before = query(&session, kinds).await;
    assert_eq!(before[0][0], "0");
    assert!(before[0][1].parse::<u64>().unwrap() > 200, "{before:?}");
    assert_eq!(before[1][0], "1", "position delete files: {before:?}");
    let rows_sql = "SELECT id, v FROM db.c ORDER BY id";
    let rows = query(&session, rows_sql).await;
    assert_eq!(rows.len(), 10_000 - 1_000);

    let target: u64 = 32 * 1024;
    let out = query(
        &session,
        &format!(
            "CALL system.rewrite_data_files(table => 'db.c', \
             options => map('target-file-size-bytes', '{target}'))"
        ),
    )
    .await;
    assert_eq!(out[0][0], before[0][1], "every small file: {out:?}");
    assert_eq!(out[0][3], "0");
    assert_eq!(
        query(&session, kinds).await,
        vec![vec!["0".to_string(), out[0][1].clone()]],
        "data files only"
    );
    // Near the target: none above the max (180 %), together no more than
    // the files the bytes fill plus one partial file per writer.
    let sizes: Vec<u64> = query(&session, "SELECT file_size_in_bytes FROM db.\"c$files\"")
        .await
        .iter()
        .map(|r| r[0].parse().unwrap())
        .collect();
    let total: u64 = sizes.iter().sum();
    assert!(
        sizes.iter().all(|s| *s <= target * 18 / 10),
        "{sizes:?} against {target}"
    );
    assert!(
        sizes.len() as u64 <= 2 * total.div_ceil(target),
        "{sizes:?} against {target}"
    );
    assert_eq!(query(&session, rows_sql).await, rows, "icemerge");
    let expected = pyiceberg_reads(&wh, "db.c", &rows, "compacted");
    let duck = run_python(
        "merge_interop.py",
        &["duckdb", "--warehouse", &wh, "--table", "db.c"],
    );
    assert_eq!(sorted_rows(&duck), expected, "DuckDB");
    drop(session);
    let Some(spark) = icemerge_tests::spark("compacted_small_files_read_the_same_in_every_engine")
    else {
        return;
    };
    let out = spark.run(
        dir.path(),
        "icemerge",
        &[
            "SELECT id, v FROM db.c ORDER BY id",
            "SELECT count(*) FROM db.c.delete_files",
        ],
    );
    assert_eq!(out[0], rows, "Spark");
    assert_eq!(
        out[1],
        vec![vec!["0".to_string()]],
        "Spark sees no delete file"
    );
}
