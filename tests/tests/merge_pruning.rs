//! Target pruning of MERGE on a table of 40 data files (ids 100·f .. 100·f+99
//! in file f, region 'r' || f % 4), on both engines: the source's key values
//! prune the target scan (distinct values, or a min/max range when there are
//! many; from an Iceberg source's manifests or a Parquet source's footers
//! without reading it), ON
//! conjuncts on the target alone prune it statically, NOT MATCHED
//! BY SOURCE turns pruning off, an insert-only merge rewrites nothing and
//! appends one file, and a file whose rows are all deleted is dropped unread.
//! Inside a file, the row-id scan reads only the row groups whose statistics
//! the keys (or an UPDATE's WHERE) can match.
//! Figures are read from EXPLAIN ANALYZE MERGE and the merge's result row.

use std::collections::BTreeMap;
use std::path::Path;

use icemerge_scheduler::{EngineKind, Session};
use icemerge_tests::{last_operation, open_session, parquet_files, query, ENGINES};

const FILES: usize = 40;

/// A fresh warehouse holding `db.t` in 40 data files, opened on `engine`.
async fn forty_files(warehouse: &Path, engine: EngineKind) -> Session {
    {
        let setup = open_session(warehouse, EngineKind::Local).await;
        setup
            .execute("CREATE SCHEMA db; CREATE TABLE db.t (id BIGINT, region STRING, v BIGINT)")
            .await
            .unwrap();
        for f in 0..FILES {
            setup
                .execute(&format!(
                    "INSERT INTO db.t SELECT {f} * 100 + value, 'r{}', 0 FROM generate_series(0, 99)",
                    f % 4
                ))
                .await
                .unwrap();
        }
    }
    let session = open_session(warehouse, engine).await;
    assert_eq!(file_count(&session).await, FILES as u64);
    session
}

/// Live data files of `db.t`.
async fn file_count(session: &Session) -> u64 {
    query(session, "SELECT count(*) FROM db.\"t$files\"").await[0][0]
        .parse()
        .unwrap()
}

/// Runs `EXPLAIN ANALYZE <merge>` and returns its text and the figures of
/// its `Merge:` (or `Update:`, `Delete:`) line.
async fn analyze(session: &Session, merge: &str) -> (String, BTreeMap<String, u64>) {
    let rows = query(session, &format!("EXPLAIN ANALYZE {merge}")).await;
    let text: String = rows.iter().map(|r| r.join(" ") + "\n").collect();
    // `Merge: count=...` (`Update: ...` for an UPDATE).
    let line = text
        .lines()
        .find(|l| l.contains(": count="))
        .unwrap_or_else(|| panic!("no Merge line in:\n{text}"));
    let figures = line[line.find(": ").expect("a colon") + 2..]
        .split(", ")
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.trim_end_matches("ms").parse().unwrap()))
        .collect();
    (text, figures)
}

fn figure(figures: &BTreeMap<String, u64>, name: &str) -> u64 {
    *figures
        .get(name)
        .unwrap_or_else(|| panic!("no {name} in {figures:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn source_keys_in_two_files_scan_and_rewrite_only_those() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let session = forty_files(dir.path(), engine).await;
        // Many distinct keys (100 ids over files 10 and 11): pruned by range.
        let (text, f) = analyze(
            &session,
            "MERGE INTO db.t USING (SELECT 1000 + 2 * value AS id FROM generate_series(0, 99)) AS s
             ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = 3",
        )
        .await;
        assert_eq!(figure(&f, "files_scanned"), 2, "{engine:?}:\n{text}");
        assert_eq!(figure(&f, "updated"), 100, "{engine:?}:\n{text}");
        assert!(
            text.contains("dynamic_pruning=(id >= 1000) AND (id <= 1198) from probe"),
            "{engine:?}:\n{text}"
        );
        // Few distinct keys: listed one by one, so the files between the two
        // hit files are pruned too.
        let files = file_count(&session).await;
        let (text, f) = analyze(
            &session,
            "MERGE INTO db.t USING (VALUES (705), (3150), (3160), (99999)) AS s(id) ON t.id = s.id
             WHEN MATCHED THEN UPDATE SET v = 1
             WHEN NOT MATCHED THEN INSERT (id, region, v) VALUES (s.id, 'new', 2)",
        )
        .await;
        assert_eq!(figure(&f, "files_scanned"), 2, "{engine:?}:\n{text}");
        assert_eq!(figure(&f, "files_pruned"), files - 2, "{engine:?}:\n{text}");
        assert_eq!(figure(&f, "files_rewritten"), 2, "{engine:?}:\n{text}");
        assert_eq!(figure(&f, "files_removed"), 2, "{engine:?}:\n{text}");
        assert_eq!(
            (figure(&f, "updated"), figure(&f, "inserted")),
            (3, 1),
            "{engine:?}"
        );
        assert!(
            text.contains(
                "dynamic_pruning=(((id = 705) OR (id = 3150)) OR (id = 3160)) OR (id = 99999)"
            ),
            "{engine:?}: EXPLAIN ANALYZE shows the pruning predicate:\n{text}"
        );
        assert_eq!(
            query(&session, "SELECT count(*), sum(v) FROM db.t").await,
            vec![vec!["4001", "305"]],
            "{engine:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_parquet_source_prunes_from_its_footer_statistics_unprobed() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let session = forty_files(dir.path(), engine).await;
        let source = dir.path().join("source.parquet");
        session
            .execute(&format!(
                "COPY (SELECT 1000 + 2 * value AS id, value AS w FROM generate_series(0, 99)) \
                 TO '{}' STORED AS PARQUET",
                source.display()
            ))
            .await
            .unwrap();
        // 100 rows, keys 1000..1198 in the footer: the range comes from the
        // statistics, and the job is the only read of the source.
        let (text, f) = analyze(
            &session,
            &format!(
                "MERGE INTO db.t USING read_parquet('{}') AS s ON t.id = s.id
                 WHEN MATCHED THEN UPDATE SET v = s.w",
                source.display()
            ),
        )
        .await;
        assert!(
            text.contains("dynamic_pruning=(id >= 1000) AND (id <= 1198) from statistics"),
            "{engine:?}:\n{text}"
        );
        assert_eq!(figure(&f, "files_scanned"), 2, "{engine:?}:\n{text}");
        assert_eq!(figure(&f, "updated"), 100, "{engine:?}:\n{text}");
        assert_eq!(
            query(&session, "SELECT count(*), sum(v) FROM db.t").await,
            vec![vec!["4000", "4950"]],
            "{engine:?}"
        );

        // One row: its one key prunes like a probe's list, unprobed.
        let one = dir.path().join("one.parquet");
        session
            .execute(&format!(
                "COPY (SELECT CAST(1500 AS BIGINT) AS id, CAST(9 AS BIGINT) AS w) \
                 TO '{}' STORED AS PARQUET",
                one.display()
            ))
            .await
            .unwrap();
        let files = file_count(&session).await;
        let (text, f) = analyze(
            &session,
            &format!(
                "MERGE INTO db.t USING read_parquet('{}') AS s ON t.id = s.id
                 WHEN MATCHED THEN UPDATE SET v = s.w",
                one.display()
            ),
        )
        .await;
        assert!(
            text.contains("dynamic_pruning=id = 1500 from statistics"),
            "{engine:?}:\n{text}"
        );
        assert_eq!(figure(&f, "files_pruned"), files - 1, "{engine:?}:\n{text}");
        assert_eq!(figure(&f, "updated"), 1, "{engine:?}:\n{text}");

        // A computed key, or a filtered source, has no exact bounds in the
        // footer: the source is probed, and the range is the probed one.
        for (using, range, updated) in [
            (
                format!(
                    "(SELECT id + 2900 AS id, w FROM read_parquet('{}'))",
                    source.display()
                ),
                "(id >= 3900) AND (id <= 4098) from probe",
                50,
            ),
            (
                format!(
                    "(SELECT id, w FROM read_parquet('{}') WHERE w >= 20)",
                    source.display()
                ),
                "(id >= 1040) AND (id <= 1198) from probe",
                80,
            ),
        ] {
            let (text, f) = analyze(
                &session,
                &format!(
                    "MERGE INTO db.t USING {using} AS s ON t.id = s.id
                     WHEN MATCHED THEN UPDATE SET v = 0"
                ),
            )
            .await;
            assert!(
                text.contains(&format!("dynamic_pruning={range}")),
                "{engine:?} {using}:\n{text}"
            );
            assert_eq!(
                figure(&f, "updated"),
                updated,
                "{engine:?} {using}:\n{text}"
            );
        }
        assert_eq!(
            query(&session, "SELECT count(*), sum(v) FROM db.t").await,
            vec![vec!["4000", "199"]],
            "{engine:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_iceberg_source_prunes_from_its_manifests_bounds_unprobed() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let session = forty_files(dir.path(), engine).await;
        // Two data files of keys (1000..1098 and 2000..2098, even) and one
        // whose keys are all NULL: it has no bounds and no key to match.
        session
            .execute(
                "CREATE TABLE db.src (id BIGINT, w BIGINT);
                 INSERT INTO db.src SELECT 1000 + 2 * value, value FROM generate_series(0, 49);
                 INSERT INTO db.src SELECT 2000 + 2 * value, value FROM generate_series(0, 49);
                 INSERT INTO db.src SELECT NULL, 7 FROM generate_series(0, 9)",
            )
            .await
            .unwrap();
        let (text, f) = analyze(
            &session,
            "MERGE INTO db.t USING db.src AS s ON t.id = s.id
             WHEN MATCHED THEN UPDATE SET v = s.w + 1",
        )
        .await;
        assert!(
            text.contains("dynamic_pruning=(id >= 1000) AND (id <= 2098) from statistics"),
            "{engine:?}:\n{text}"
        );
        // Files 10, 20 and the nine between are read; files_scanned counts
        // the source's three too.
        assert_eq!(figure(&f, "files_pruned"), 29, "{engine:?}:\n{text}");
        assert_eq!(figure(&f, "updated"), 100, "{engine:?}:\n{text}");
        assert_eq!(
            query(&session, "SELECT count(*), sum(v) FROM db.t").await,
            vec![vec!["4000", "2550"]],
            "{engine:?}"
        );

        // Filtered, the source is probed: the range is that of the rows
        // the filter keeps, not the manifests'.
        let (text, f) = analyze(
            &session,
            "MERGE INTO db.t USING (SELECT * FROM db.src WHERE w >= 10) AS s ON t.id = s.id
             WHEN MATCHED THEN UPDATE SET v = 0",
        )
        .await;
        assert!(
            text.contains("dynamic_pruning=(id >= 1020) AND (id <= 2098) from probe"),
            "{engine:?}:\n{text}"
        );
        assert_eq!(figure(&f, "files_pruned"), 29, "{engine:?}:\n{text}");
        assert_eq!(figure(&f, "updated"), 80, "{engine:?}:\n{text}");

        // `id` renamed away and a new `id` added since the last write: the
        // name is the new column's (NULL in every file, no bounds), not the
        // one the snapshot's schema gives it, so the source is probed and
        // nothing matches.
        session
            .execute(
                "ALTER TABLE db.src RENAME COLUMN id TO old_id;
                 ALTER TABLE db.src ADD COLUMN id BIGINT",
            )
            .await
            .unwrap();
        let files = file_count(&session).await;
        let (text, f) = analyze(
            &session,
            "MERGE INTO db.t USING db.src AS s ON t.id = s.id
             WHEN MATCHED THEN UPDATE SET v = 5",
        )
        .await;
        assert!(
            text.contains("dynamic_pruning=FALSE from probe,"),
            "{engine:?}:\n{text}"
        );
        assert_eq!(figure(&f, "files_pruned"), files, "{engine:?}:\n{text}");
        assert_eq!(figure(&f, "updated"), 0, "{engine:?}:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn target_only_on_conjuncts_prune_and_not_matched_by_source_reads_everything() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let session = forty_files(dir.path(), engine).await;
        // One key in every file: the keys prune nothing, the region does
        // (every file holds one region; 10 hold r1).
        let (text, f) = analyze(
            &session,
            "MERGE INTO db.t USING (SELECT value * 100 + 5 AS id FROM generate_series(0, 39)) AS s
             ON t.id = s.id AND t.region = 'r1'
             WHEN MATCHED THEN UPDATE SET v = 7",
        )
        .await;
        assert_eq!(figure(&f, "files_scanned"), 10, "{engine:?}:\n{text}");
        assert_eq!(figure(&f, "updated"), 10, "{engine:?}:\n{text}");
        assert!(
            text.contains("predicate=region = \"r1\""),
            "{engine:?}:\n{text}"
        );
        assert_eq!(
            query(
                &session,
                "SELECT count(*) FROM db.t WHERE v = 7 AND region = 'r1'"
            )
            .await,
            vec![vec!["10"]],
            "{engine:?}"
        );

        // NOT MATCHED BY SOURCE needs every target row: nothing is pruned.
        let files = file_count(&session).await;
        let (text, f) = analyze(
            &session,
            "MERGE INTO db.t USING (VALUES (705)) AS s(id) ON t.id = s.id
             WHEN MATCHED THEN UPDATE SET v = 8
             WHEN NOT MATCHED BY SOURCE AND t.id < 0 THEN DELETE",
        )
        .await;
        assert_eq!(figure(&f, "files_scanned"), files, "{engine:?}:\n{text}");
        assert_eq!(figure(&f, "files_pruned"), 0, "{engine:?}:\n{text}");
        assert!(!text.contains("dynamic_pruning"), "{engine:?}:\n{text}");
        assert_eq!(figure(&f, "files_removed"), 1, "{engine:?}:\n{text}");
    }
}

/// An upsert whose source keys prune every file of the target matches no
/// target row: it runs as its NOT MATCHED clause alone, an insert-only
/// merge (an anti join reading the ON columns, no row ids), commits an
/// `append` and rewrites nothing. With one key inside the table's range it
/// reads row ids and updates as any upsert.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_upsert_whose_keys_prune_every_file_runs_as_an_insert_on_both_engines() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let session = forty_files(dir.path(), engine).await;
        let upsert = |keys: &str| {
            format!(
                "MERGE INTO db.t USING (VALUES {keys}) AS s(id, v) ON t.id = s.id \
                 WHEN MATCHED THEN UPDATE SET v = s.v \
                 WHEN NOT MATCHED THEN INSERT (id, region, v) VALUES (s.id, 'new', s.v)"
            )
        };
        let new_keys = upsert("(5000, 7), (5001, 8), (5002, 9)");
        let plan = query(&session, &format!("EXPLAIN {new_keys}")).await;
        let plan: String = plan.iter().map(|r| r.join(" ") + "\n").collect();
        assert!(
            plan.contains("files=0, files_pruned=40") && plan.contains("merge_target=keys only"),
            "{engine:?}:\n{plan}"
        );
        assert!(!plan.contains("row_ids="), "{engine:?}:\n{plan}");
        let rows = query(&session, &new_keys).await;
        // count, updated, deleted, inserted, copied, files_scanned,
        // files_removed, files_added
        assert_eq!(
            &rows[0][..8],
            &["3", "0", "0", "3", "0", "0", "0", "1"],
            "{engine:?}"
        );
        assert_eq!(
            last_operation(&session, "db.t").await,
            "append",
            "{engine:?}"
        );
        // Run again, the keys are in the table's newest file: updated.
        let rows = query(&session, &new_keys).await;
        assert_eq!(&rows[0][..4], &["3", "3", "0", "0"], "{engine:?}");
        let rows = query(&session, &upsert("(705, 1), (6000, 2)")).await;
        assert_eq!(&rows[0][..4], &["2", "1", "0", "1"], "{engine:?}");
        assert_eq!(
            query(
                &session,
                "SELECT count(*), sum(v), count(*) FILTER (WHERE region = 'new') FROM db.t"
            )
            .await,
            vec![vec!["4004", "27", "4"]],
            "{engine:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn insert_only_appends_one_file_and_delete_only_drops_files_unread() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let session = forty_files(dir.path(), engine).await;
        // Insert-only: the one matched key (705) is found in its file, which
        // is not rewritten; the three new rows go to one new file even with
        // four writers.
        let rows = query(
            &session,
            "MERGE INTO db.t USING (VALUES (705), (5000), (5001), (5002)) AS s(id) ON t.id = s.id
             WHEN NOT MATCHED THEN INSERT (id, region, v) VALUES (s.id, 'new', 1)",
        )
        .await;
        // count, updated, deleted, inserted, copied, files_scanned,
        // files_removed, files_added, bytes_read
        assert_eq!(
            &rows[0][..9],
            &["3", "0", "0", "3", "0", "1", "0", "1", "0"],
            "{engine:?}"
        );
        assert_eq!(
            last_operation(&session, "db.t").await,
            "append",
            "{engine:?}"
        );

        // Delete-only: every row of file 12 (a range of 100 keys) goes; the
        // file leaves the table without being read or replaced, and the
        // target scan reads only the ON key.
        let plan = query(
            &session,
            "EXPLAIN MERGE INTO db.t USING (SELECT 1200 + value AS id FROM generate_series(0, 99)) AS s
             ON t.id = s.id WHEN MATCHED THEN DELETE",
        )
        .await;
        let plan: String = plan.iter().map(|r| r.join(" ") + "\n").collect();
        assert!(
            plan.contains("row_ids=[_file, _pos], projection=[id, _file, _pos]"),
            "{engine:?}:\n{plan}"
        );
        let rows = query(
            &session,
            "MERGE INTO db.t USING (SELECT 1200 + value AS id FROM generate_series(0, 99)) AS s
             ON t.id = s.id WHEN MATCHED THEN DELETE",
        )
        .await;
        assert_eq!(
            &rows[0],
            &["100", "0", "100", "0", "0", "1", "1", "0", "0", "0", "1", "0"],
            "{engine:?}"
        );
        assert_eq!(
            query(
                &session,
                "SELECT count(*) FROM db.t WHERE id BETWEEN 1200 AND 1299"
            )
            .await,
            vec![vec!["0"]],
            "{engine:?}"
        );
        assert_eq!(
            file_count(&session).await,
            FILES as u64,
            "{engine:?}: one file added by the insert, one dropped by the delete"
        );
    }
}

/// Row groups of the Parquet file at `path`.
fn row_groups(path: &Path) -> usize {
    let file = std::fs::File::open(path).unwrap();
    parquet::file::reader::SerializedFileReader::new(file)
        .map(|r| parquet::file::reader::FileReader::metadata(&r).num_row_groups())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn row_groups_the_keys_cannot_match_are_not_read() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        {
            // One data file of 20,000 sorted ids in row groups of 1,000
            // (`write.parquet.row-group-limit`).
            let setup = open_session(dir.path(), EngineKind::Local).await;
            setup
                .execute(
                    "SET datafusion.execution.target_partitions = 1;
                     CREATE SCHEMA db;
                     CREATE TABLE db.rg (id BIGINT, v BIGINT)
                       TBLPROPERTIES ('write.parquet.row-group-limit' = '1000');
                     INSERT INTO db.rg SELECT value, 0 FROM generate_series(0, 19999)",
                )
                .await
                .unwrap();
        }
        let files = parquet_files(dir.path());
        assert_eq!(files.len(), 1, "{files:?}");
        assert_eq!(row_groups(files.iter().next().unwrap()), 20);
        let session = open_session(dir.path(), engine).await;

        // Keys in row groups 5 and 17: the other 18 are not read.
        let (text, f) = analyze(
            &session,
            "MERGE INTO db.rg AS t USING (VALUES (5005), (5010), (17001)) AS s(id) ON t.id = s.id
             WHEN MATCHED THEN UPDATE SET v = 1",
        )
        .await;
        assert_eq!(figure(&f, "updated"), 3, "{engine:?}:\n{text}");
        assert_eq!(figure(&f, "row_groups_pruned"), 18, "{engine:?}:\n{text}");
        assert_eq!(figure(&f, "files_scanned"), 1, "{engine:?}:\n{text}");
        // The rewrite kept the row-group limit: 20 row groups again.
        let files = parquet_files(dir.path());
        let rewritten = files.iter().filter(|p| row_groups(p) == 20).count();
        assert_eq!(rewritten, 2, "the original file and its rewrite: {files:?}");

        // An UPDATE's WHERE prunes the same way (row group 3 only).
        let (text, f) = analyze(
            &session,
            "UPDATE db.rg SET v = v + 10 WHERE id BETWEEN 3000 AND 3999",
        )
        .await;
        assert_eq!(figure(&f, "updated"), 1000, "{engine:?}:\n{text}");
        assert_eq!(figure(&f, "row_groups_pruned"), 19, "{engine:?}:\n{text}");

        // Positions stayed exact: the right rows changed, nothing else.
        assert_eq!(
            query(
                &session,
                "SELECT count(*), sum(v), min(id) FILTER (WHERE v = 1), \
                 max(id) FILTER (WHERE v = 1), min(id) FILTER (WHERE v = 10) FROM db.rg"
            )
            .await,
            vec![vec!["20000", "10003", "5005", "17001", "3000"]],
            "{engine:?}"
        );
    }
}
