//! The memory budget (`--memory-limit`): statements run in a DataFusion
//! memory pool of that size on both engines; a sort beyond it spills and
//! completes with exact results, and so does a copy-on-write merge whose
//! writer input is larger than the budget (its inserted rows skip the
//! writer's sort); a merge that cannot fit fails with an
//! error naming the budget, leaving the table and the warehouse as they
//! were. A MERGE's join builds its hash table on the side that takes fewer
//! bytes; one that would build on a source too large for its budget builds
//! on the target rows the source matches, or sorts.

use std::path::Path;

use icemerge_planner::explain::{ExplainDocument, StageFigures, StageKind};
use icemerge_proto::error::{ErrorKind, IcemergeError};
use icemerge_proto::memory_budget::MemoryBudget;
use icemerge_scheduler::{CatalogOptions, EngineKind, Session, SessionOptions};
use icemerge_tests::{open_session, parquet_files, query, ENGINES};

async fn open(warehouse: &Path, engine: EngineKind, limit: &str) -> Session {
    open_with(warehouse, engine, limit, 4).await
}

async fn open_with(
    warehouse: &Path,
    engine: EngineKind,
    limit: &str,
    partitions: usize,
) -> Session {
    Session::open(SessionOptions {
        catalog: CatalogOptions {
            warehouse: warehouse.to_path_buf(),
            ..Default::default()
        },
        engine,
        executors: Some(2),
        target_partitions: Some(partitions),
        memory_limit: Some(limit.parse::<MemoryBudget>().expect("budget")),
    })
    .await
    .expect("open session")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sort_beyond_the_budget_spills_and_a_merge_beyond_it_fails_cleanly() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let session = open(dir.path(), engine, "512MiB").await;
        session
            .execute(
                "CREATE SCHEMA db;
                 CREATE TABLE db.t (id BIGINT, v BIGINT, s VARCHAR);
                 INSERT INTO db.t SELECT value, value % 7,
                   'a string long enough to weigh something ' || value
                   FROM generate_series(1, 300000);",
            )
            .await
            .unwrap();
        drop(session);

        // 4 MiB hold a sort of ~20 MB only by spilling: the order is exact.
        let small = open(dir.path(), engine, "4MiB").await;
        let ordered = query(
            &small,
            "SELECT id FROM (SELECT id, s FROM db.t ORDER BY s DESC, id) LIMIT 3 OFFSET 1000",
        )
        .await;
        let expected = query(
            &open(dir.path(), engine, "512MiB").await,
            "SELECT id FROM (SELECT id, s FROM db.t ORDER BY s DESC, id) LIMIT 3 OFFSET 1000",
        )
        .await;
        assert_eq!(ordered, expected, "{engine:?}");
        assert_eq!(ordered.len(), 3);

        // A merge whose join must hold the whole table cannot fit in 1 MiB.
        let before = parquet_files(dir.path());
        let tiny = open(dir.path(), engine, "1MiB").await;
        let err = tiny
            .execute(
                "MERGE INTO db.t t USING (SELECT id, v + 1 AS v, s FROM db.t) s ON t.id = s.id
                 WHEN MATCHED THEN UPDATE SET v = s.v",
            )
            .await
            .expect_err("a merge over 300k rows cannot fit in 1 MiB");
        assert_eq!(
            IcemergeError::kind_of(&err),
            Some(ErrorKind::OutOfMemory),
            "{engine:?}: {err}"
        );
        let message = err.to_string();
        assert!(message.contains("1 MiB"), "{message}");
        assert!(message.contains("--memory-limit"), "{message}");
        drop(tiny);

        let session = open(dir.path(), engine, "512MiB").await;
        assert_eq!(
            query(&session, "SELECT count(*), sum(v) FROM db.t").await,
            vec![vec!["300000".to_string(), "899998".to_string()]],
            "{engine:?}: the table changed"
        );
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(40);
        while parquet_files(dir.path()) != before {
            assert!(
                std::time::Instant::now() < deadline,
                "{engine:?}: files left behind"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
}

/// The writer stage's figures (and the whole document) of `EXPLAIN ANALYZE
/// (FORMAT JSON) <merge>` run with one writer task, whose sort has the
/// budget to itself (sorts running side by side in a budget this small
/// contend for the memory their spill merges need), in 24 MiB and batches
/// of 1024 rows: the budget holds a few batches.
async fn writer_figures_in_24_mib(
    warehouse: &Path,
    engine: EngineKind,
    merge: &str,
) -> (StageFigures, String) {
    let small = open_with(warehouse, engine, "24MiB", 1).await;
    small
        .execute_one("SET datafusion.execution.batch_size = 1024")
        .await
        .unwrap();
    let output = small
        .execute_one(&format!("EXPLAIN ANALYZE (FORMAT JSON) {merge}"))
        .await
        .unwrap_or_else(|e| panic!("{engine:?}: {e}"));
    let json = output.as_document().expect("a document").to_string();
    let doc: ExplainDocument = serde_json::from_str(&json).unwrap();
    let writer = doc
        .stages
        .into_iter()
        .find(|s| s.stage.kind == StageKind::MergeWriter)
        .and_then(|s| s.figures)
        .unwrap_or_else(|| panic!("{engine:?}: no writer figures: {json}"));
    (writer, json)
}

/// A copy-on-write merge updating half the rows of a table larger than the
/// budget completes: the writer's input, sorted by data file, spills
/// compressed files (EXPLAIN ANALYZE's writer stage says so: fewer bytes
/// than the rows it spilled) and each file is rewritten as
/// soon as its changes are complete; the rows are exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_rewrite_beyond_the_budget_spills_and_completes() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let session = open(dir.path(), engine, "512MiB").await;
        let mut script =
            String::from("CREATE SCHEMA db; CREATE TABLE db.t (id BIGINT, v BIGINT, s VARCHAR);");
        // Four files of 100k rows of ~300 bytes: the writer rewrites them
        // one by one; the source (ids and values) is small.
        for f in 0..4 {
            script.push_str(&format!(
                "INSERT INTO db.t SELECT value, value % 7, repeat('x', 250) || value
                   FROM generate_series({}, {});",
                f * 100_000 + 1,
                (f + 1) * 100_000
            ));
        }
        session.execute(&script).await.unwrap();
        drop(session);

        // The budget holds far less than the rows sorted (~100 MB).
        let (writer, json) = writer_figures_in_24_mib(
            dir.path(),
            engine,
            "MERGE INTO db.t t \
             USING (SELECT id, v + 1 AS v FROM db.t WHERE id % 2 = 0) s ON t.id = s.id \
             WHEN MATCHED THEN UPDATE SET v = s.v",
        )
        .await;
        assert!(
            writer.spill_count > 0 && writer.spilled_bytes > 0,
            "{engine:?}: the writer's sort did not spill: {json}"
        );
        // Spill files are compressed: each spilled row carries a string of
        // 250 repeated bytes (and its file's path), far more than it takes
        // on disk.
        assert!(
            writer.spilled_rows > 0 && writer.spilled_bytes < writer.spilled_rows * 250 / 4,
            "{engine:?}: {} bytes spilled for {} rows: {json}",
            writer.spilled_bytes,
            writer.spilled_rows
        );
        // The writer's input is the 200k merge rows; in one partition the
        // join's task writes them itself, and the stage's input is then the
        // rows its scans read: the target's 400k and the source's 200k.
        let written_where_joined = json.contains("rows written where they are joined");
        let rows_in = if written_where_joined {
            600_000
        } else {
            200_000
        };
        assert_eq!(writer.rows_in, Some(rows_in), "{engine:?}: {json}");

        let session = open(dir.path(), engine, "512MiB").await;
        assert_eq!(
            query(
                &session,
                "SELECT count(*), sum(v), count(DISTINCT s), count(*) FILTER (WHERE id % 2 = 0 AND v = 0) FROM db.t"
            )
            .await,
            vec![vec!["400000", "1400003", "400000", "0"]],
            "{engine:?}"
        );
    }
}

/// A copy-on-write upsert's inserted rows skip the writer's sort by data
/// file: 200k inserted rows of ~260 bytes (~50 MB, their strings made
/// after the join) and 2k updates through a 24 MiB budget complete without a spill (a sort of every row would
/// spill them), each file's changes still arrive in file order, and the
/// rows are exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upserts_inserted_rows_skip_the_writers_sort() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let session = open(dir.path(), engine, "512MiB").await;
        let mut script =
            String::from("CREATE SCHEMA db; CREATE TABLE db.t (id BIGINT, v BIGINT, s VARCHAR);");
        for f in 0..2 {
            script.push_str(&format!(
                "INSERT INTO db.t SELECT value, 0, 'old' FROM generate_series({}, {});",
                f * 50_000 + 1,
                (f + 1) * 50_000
            ));
        }
        session.execute(&script).await.unwrap();
        drop(session);

        let (writer, json) = writer_figures_in_24_mib(
            dir.path(),
            engine,
            "MERGE INTO db.t t USING ( \
               SELECT value * 50 AS id, 1 AS v FROM generate_series(1, 2000) \
               UNION ALL \
               SELECT value + 1000000 AS id, 2 AS v FROM generate_series(1, 200000)) s \
             ON t.id = s.id \
             WHEN MATCHED THEN UPDATE SET v = s.v, s = 'updated' \
             WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.v, repeat('x', 250) || s.id)",
        )
        .await;
        assert_eq!(writer.rows_in, Some(202_000), "{engine:?}: {json}");
        assert_eq!(
            (writer.spill_count, writer.spilled_rows),
            (0, 0),
            "{engine:?}: the writer's sort spilled: {json}"
        );
        assert!(
            json.contains("SortChangesByFileExec"),
            "{engine:?}: no sort of changes: {json}"
        );

        let session = open(dir.path(), engine, "512MiB").await;
        assert_eq!(
            query(
                &session,
                "SELECT count(*), sum(v), count(*) FILTER (WHERE s = 'updated'), \
                        count(*) FILTER (WHERE s = 'updated' AND id % 50 <> 0), count(DISTINCT id) \
                 FROM db.t"
            )
            .await,
            vec![vec!["300000", "402000", "2000", "0", "300000"]],
            "{engine:?}"
        );
    }
}

/// The join line (hash or sort-merge) of `EXPLAIN <merge>`.
async fn join_line(session: &Session, merge: &str) -> String {
    query(session, &format!("EXPLAIN {merge}"))
        .await
        .into_iter()
        .map(|row| row[0].clone())
        .find(|line| line.contains("JoinExec"))
        .unwrap_or_else(|| panic!("no join in EXPLAIN {merge}"))
}

/// A MERGE's join holds its build side in memory: it builds on the side
/// that takes fewer bytes. A wide source of as many rows as the target
/// builds on the target's row-id scan (its key and row ids); a narrow
/// source, on the source (the join as written, source first). An
/// insert-only merge is an anti join that reads the target's key alone,
/// and builds on the narrower side too. On a cluster the joins of this
/// one-file target run in the one task of its scan or of the one-file
/// source's (`CollectLeft`): the wide source's anti join builds on the
/// target keys, the narrow source's on the source, as on the local engine.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_merge_join_builds_on_the_narrower_side_on_both_engines() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let session = open_session(dir.path(), engine).await;
        session
            .execute(
                "CREATE SCHEMA db; CREATE TABLE db.t (id BIGINT, v BIGINT); \
                 CREATE TABLE db.wide (id BIGINT, a STRING, b STRING, c STRING, d STRING, \
                   e STRING, f STRING); \
                 INSERT INTO db.t SELECT value, value * 2 FROM generate_series(1, 10000); \
                 INSERT INTO db.wide SELECT value + 5000, 'a', 'b', 'c', 'd', 'e', 'f' \
                   FROM generate_series(1, 10000)",
            )
            .await
            .unwrap();
        let joins = |source: &str, insert: &str| {
            [
                format!(
                    "MERGE INTO db.t t USING {source} s ON t.id = s.id \
                     WHEN MATCHED THEN DELETE WHEN NOT MATCHED THEN INSERT (id, v) VALUES {insert}"
                ),
                format!(
                    "MERGE INTO db.t t USING {source} s ON t.id = s.id \
                     WHEN NOT MATCHED THEN INSERT (id, v) VALUES {insert}"
                ),
            ]
        };
        let [wide, wide_insert_only] = joins("db.wide", "(s.id, length(s.a || s.f))");
        let [narrow, narrow_insert_only] =
            joins("(SELECT id FROM db.wide WHERE id < 5100)", "(s.id, 0)");
        let (wide_anti, narrow_anti) = match engine {
            EngineKind::Local => ("join_type=RightAnti,", "join_type=LeftAnti,"),
            EngineKind::Cluster => (
                "mode=CollectLeft, join_type=RightAnti,",
                "mode=CollectLeft, join_type=LeftAnti,",
            ),
        };
        for (merge, join) in [
            (wide, "join_type=Right,"),
            (wide_insert_only, wide_anti),
            (narrow, "join_type=Left,"),
            (narrow_insert_only, narrow_anti),
        ] {
            let line = join_line(&session, &merge).await;
            assert!(line.contains(join), "{engine:?}: {merge}: {line}");
        }
    }
}

/// A target of 500k rows (its keys and row ids, estimated at 16 MB) and a
/// source of 300k rows of ~120 bytes (estimated at 14.4 MB): either side
/// is estimated at more than a quarter of 48 MiB, and at less than a
/// sixteenth of 512 MiB.
const TARGET_AND_SOURCE: &str = "CREATE SCHEMA db;
     CREATE TABLE db.t (id BIGINT, v BIGINT, s VARCHAR);
     INSERT INTO db.t SELECT value * 2, value % 7, 'old ' || value
       FROM generate_series(1, 500000);
     CREATE TABLE db.src (id BIGINT, v BIGINT, s VARCHAR);
     INSERT INTO db.src SELECT value * 3, value, 'new ' || repeat('y', 100) || value
       FROM generate_series(1, 300000);";

/// On the local engine, a MERGE whose join would build on a source
/// estimated at more than a sixteenth of the budget builds on the target
/// rows that source matches instead (a semi join on the source's ON
/// columns first, `RightSemi`): neither join holds the source's rows. One
/// that needs every target row (a NOT MATCHED BY SOURCE clause: a FULL or
/// target-preserving join) and whose smaller side is estimated at more than a quarter of the
/// budget joins by sort-merge: its sorts spill. Either completes where a
/// hash join on the source would not fit. A cluster keeps the hash join,
/// each task building one partition's table. The rows are those of the
/// hash join under a large budget, ON's non-equality conjunct included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merge_whose_source_outgrows_the_budget_builds_on_matched_rows_or_sorts() {
    const MERGE: &str = "MERGE INTO db.t t USING db.src s ON t.id = s.id AND s.v % 5 <> 0 \
         WHEN MATCHED THEN UPDATE SET v = s.v, s = s.s \
         WHEN NOT MATCHED THEN INSERT (id, v, s) VALUES (s.id, s.v, s.s)";
    // The same, with a clause that needs every target row and acts on none.
    const FULL: &str = "MERGE INTO db.t t USING db.src s ON t.id = s.id AND s.v % 5 <> 0 \
         WHEN MATCHED THEN UPDATE SET v = s.v, s = s.s \
         WHEN NOT MATCHED THEN INSERT (id, v, s) VALUES (s.id, s.v, s.s) \
         WHEN NOT MATCHED BY SOURCE AND t.id < 0 THEN DELETE";
    // A target-preserving join (no NOT MATCHED clause) whose NOT MATCHED BY
    // SOURCE clause deletes target rows no source row matches: a join built
    // on the matched target rows alone would keep them.
    const BY_SOURCE: &str = "MERGE INTO db.t t USING db.src s ON t.id = s.id \
         WHEN MATCHED THEN UPDATE SET v = s.v, s = s.s \
         WHEN NOT MATCHED BY SOURCE AND t.id % 4 = 0 THEN DELETE";
    const CHECK: &str = "SELECT count(*), sum(v), count(DISTINCT s), \
         count(*) FILTER (WHERE s LIKE 'new %') FROM db.t";
    let mut expected: std::collections::HashMap<&str, Vec<Vec<String>>> = Default::default();
    for engine in ENGINES {
        for (merge, small_plan, rows_of) in [
            (MERGE, "join_type=RightSemi", "upsert"),
            (FULL, "SortMergeJoinExec", "upsert"),
            (BY_SOURCE, "SortMergeJoinExec", "by source"),
        ] {
            let small_plan = match engine {
                EngineKind::Local => small_plan,
                EngineKind::Cluster => "HashJoinExec",
            };
            for (limit, plan) in [("512MiB", "HashJoinExec"), ("48MiB", small_plan)] {
                let dir = tempfile::tempdir().unwrap();
                let session = open(dir.path(), engine, "512MiB").await;
                session.execute(TARGET_AND_SOURCE).await.unwrap();
                drop(session);
                // Two partitions (a session of one is planned over two for
                // a sort-merge join anyway, as checked below).
                let session = open_with(dir.path(), engine, limit, 2).await;
                session
                    .execute_one("SET datafusion.execution.batch_size = 1024")
                    .await
                    .unwrap();
                let explain = explain_lines(&session, merge).await;
                assert!(explain.contains(plan), "{engine:?} {limit}: {explain}");
                if plan == "join_type=RightSemi" {
                    // The classification's join builds on the target side.
                    assert!(
                        explain.contains("HashJoinExec: mode=Partitioned, join_type=Right,")
                            || explain.contains("HashJoinExec: mode=CollectLeft, join_type=Right,"),
                        "{engine:?} {limit}: {explain}"
                    );
                }
                if plan == "SortMergeJoinExec" {
                    // A session of one partition, where DataFusion would
                    // build a hash table for every join, is planned over two.
                    let single = open_with(dir.path(), engine, limit, 1).await;
                    let explain = explain_lines(&single, merge).await;
                    assert!(
                        explain.contains(plan),
                        "{engine:?} {limit}, one partition: {explain}"
                    );
                }
                if plan == "HashJoinExec" && limit == "48MiB" {
                    // The cluster's hash join needs more than 48 MiB here:
                    // the error asks for more memory or more executors.
                    continue;
                }
                session
                    .execute(merge)
                    .await
                    .unwrap_or_else(|e| panic!("{engine:?} {limit}: {e}"));
                drop(session);
                let rows = query(&open(dir.path(), engine, "512MiB").await, CHECK).await;
                match expected.get(rows_of) {
                    None => {
                        expected.insert(rows_of, rows);
                    }
                    Some(expected) => assert_eq!(&rows, expected, "{engine:?} {limit} {merge}"),
                }
            }
        }
    }
    // 500k rows, plus the 300k source rows less the 120,000 that matched
    // (every even source v, whose id 3v is the target's, less the 30,000
    // multiples of 10 that ON's second conjunct turns away).
    let upsert = &expected["upsert"];
    assert_eq!(upsert[0][0], "680000", "{upsert:?}");
    assert_eq!(upsert[0][3], "300000", "{upsert:?}");
    // 500k rows less the 125,000 multiples of 4 no source row matches
    // (ids 2v with v even; those that are multiples of 3 and match stay).
    let by_source = &expected["by source"];
    assert_ne!(by_source[0][0], "500000", "{by_source:?}");
}

/// The join that builds on the target rows a source matches still fails a
/// merge whose source matches one target row twice, naming the row, and
/// leaves the table as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_match_fails_the_merge_built_on_matched_rows() {
    let dir = tempfile::tempdir().unwrap();
    let session = open(dir.path(), EngineKind::Local, "512MiB").await;
    session
        .execute(&format!(
            "{TARGET_AND_SOURCE} INSERT INTO db.src VALUES (600, -1, 'again');"
        ))
        .await
        .unwrap();
    let before = query(&session, "SELECT count(*), sum(v) FROM db.t").await;
    drop(session);
    let small = open_with(dir.path(), EngineKind::Local, "48MiB", 2).await;
    let merge = "MERGE INTO db.t t USING db.src s ON t.id = s.id \
                 WHEN MATCHED THEN UPDATE SET v = s.v \
                 WHEN NOT MATCHED THEN INSERT *";
    let explain = explain_lines(&small, merge).await;
    assert!(explain.contains("join_type=RightSemi"), "{explain}");
    let err = small.execute(merge).await.unwrap_err().to_string();
    assert!(
        err.contains("id=600") && err.contains("matched more than one source row"),
        "{err}"
    );
    drop(small);
    let session = open(dir.path(), EngineKind::Local, "512MiB").await;
    assert_eq!(
        query(&session, "SELECT count(*), sum(v) FROM db.t").await,
        before
    );
}

/// Every line of `EXPLAIN <merge>`, one string.
async fn explain_lines(session: &Session, merge: &str) -> String {
    query(session, &format!("EXPLAIN {merge}"))
        .await
        .into_iter()
        .map(|row| row[0].clone())
        .collect::<Vec<_>>()
        .join("\n")
}
