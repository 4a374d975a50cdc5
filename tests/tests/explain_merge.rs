//! EXPLAIN for MERGE on both engines: the stage graph names every stage's
//! role, tasks and partitioning; GRAPHVIZ gives DOT, JSON one document, SVG
//! a picture; ANALYZE runs the merge (one new snapshot) and its per-stage
//! figures are exact counts: the rows of the scanned files, the merge rows,
//! the files written.

use icemerge_planner::explain::{ExplainDocument, StageFigures, StageKind};
use icemerge_scheduler::{EngineKind, Session, StatementOutput};
use icemerge_tests::{open_session, query, ENGINES};

const MERGE: &str =
    "MERGE INTO db.t USING (VALUES (2, 'B'), (9, 'new')) AS s(id, v) ON t.id = s.id \
                     WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *";

async fn lines(session: &Session, sql: &str) -> Vec<String> {
    query(session, sql)
        .await
        .into_iter()
        .map(|r| r[0].clone())
        .collect()
}

/// The one document of an EXPLAIN (FORMAT JSON|SVG).
async fn document(session: &Session, sql: &str) -> String {
    let output = session.execute_one(sql).await.unwrap();
    output
        .as_document()
        .unwrap_or_else(|| panic!("not a document: {output:?}"))
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn explain_merge_shows_the_stage_graph() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let session = open_session(dir.path(), engine).await;
        session
            .execute(
                "CREATE SCHEMA db; CREATE TABLE db.t (id BIGINT, v STRING); \
                 INSERT INTO db.t SELECT value, CASE value WHEN 1 THEN 'a' WHEN 2 THEN 'b' \
                   ELSE 'z' END FROM generate_series(1, 40) WHERE value < 3 OR value >= 10",
            )
            .await
            .unwrap();

        let text = lines(&session, &format!("EXPLAIN {MERGE}"))
            .await
            .join("\n");
        for role in [
            "scan target (row-id)",
            "scan source",
            "join / classify / writer: copy-on-write per data file",
            "rows written where they are joined",
            "commit (coordinator)",
        ] {
            assert!(text.contains(role), "{engine:?}: no '{role}' in\n{text}");
        }
        assert!(text.contains("HashJoinExec"), "{text}");
        assert!(text.contains("IcebergScanExec: table=db.t"), "{text}");
        assert!(text.contains("CopyOnWriteWriterExec"), "{text}");
        assert!(text.contains("tasks: "), "{text}");
        assert!(!text.contains("StageProbeExec"), "{text}");
        // The target is one file, its scan one task: on a cluster too the
        // join runs in that task, the two-row source read there, as on the
        // local engine (no target filter); with one data file and one
        // route of inserts, that task writes what it classifies, with no
        // exchange to writers.
        assert!(!text.contains("filter target by source keys"), "{text}");
        assert!(!text.contains("hash(__icemerge_route"), "{text}");
        assert!(
            text.contains("HashJoinExec: mode=CollectLeft"),
            "{engine:?}: {text}"
        );
        let stages = 4;

        let dot = lines(&session, &format!("EXPLAIN (FORMAT GRAPHVIZ) {MERGE}")).await;
        assert!(dot[0].starts_with("digraph"), "{dot:?}");
        assert!(dot.iter().any(|l| l.contains("->")), "{dot:?}");

        let plan: ExplainDocument = serde_json::from_str(
            &document(&session, &format!("EXPLAIN (FORMAT JSON) {MERGE}")).await,
        )
        .unwrap();
        assert!(!plan.analyzed);
        assert_eq!(plan.stages.len(), stages, "{plan:?}");
        assert!(plan.stages.iter().all(|s| s.figures.is_none()));

        let svg = document(&session, &format!("EXPLAIN (FORMAT SVG) {MERGE}")).await;
        assert_eq!(stage_boxes(&svg), (1..=stages).collect::<Vec<_>>(), "{svg}");

        // EXPLAIN changes nothing.
        assert_eq!(
            query(&session, "SELECT count(*) FROM db.\"t$snapshots\"").await,
            vec![vec!["1"]]
        );
        let err = session
            .execute_one(&format!("EXPLAIN (FORMAT XML) {MERGE}"))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("unknown FORMAT 'XML'"), "{err}");

        let analyze = lines(&session, &format!("EXPLAIN ANALYZE {MERGE}"))
            .await
            .join("\n");
        assert!(
            analyze.contains("Merge: count=2, updated=1, deleted=0, inserted=1"),
            "{engine:?}:\n{analyze}"
        );
        assert!(analyze.contains("Per stage"), "{analyze}");
        assert!(analyze.contains("Time: total="), "{analyze}");
        assert_eq!(
            query(&session, "SELECT count(*) FROM db.\"t$snapshots\"").await,
            vec![vec!["2"]]
        );
        assert_eq!(
            query(&session, "SELECT id, v FROM db.t WHERE id < 10 ORDER BY id").await,
            vec![vec!["1", "a"], vec!["2", "B"], vec!["9", "new"]]
        );
        assert_eq!(
            query(&session, "SELECT count(*) FROM db.t").await,
            vec![vec!["34"]]
        );
    }
}

/// Tables db.t (id BIGINT, v STRING) of two files, ids 1..=100 with v 'a',
/// and db.s of the same shape, two files, ids 1..=101 with v 'u'.
async fn two_file_tables(session: &Session) {
    session
        .execute(
            "CREATE SCHEMA db; CREATE TABLE db.t (id BIGINT, v STRING); \
             CREATE TABLE db.s (id BIGINT, v STRING); \
             INSERT INTO db.t SELECT value, 'a' FROM generate_series(1, 50); \
             INSERT INTO db.t SELECT value, 'a' FROM generate_series(51, 100); \
             INSERT INTO db.s SELECT value, 'u' FROM generate_series(1, 50); \
             INSERT INTO db.s SELECT value, 'u' FROM generate_series(51, 101)",
        )
        .await
        .unwrap();
}

/// A cluster filters the target by the source's keys only where it pays:
/// each target scan task hashes every source key, to spare the exchange
/// the target rows no key matches. A source with a key for every target
/// row keeps the partitioned join (no "filter target by source keys"
/// stage); an insert-only merge of the same source still filters, its
/// anti join building on the matched keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_filters_the_target_by_source_keys_only_where_it_pays() {
    let dir = tempfile::tempdir().unwrap();
    let session = open_session(dir.path(), EngineKind::Cluster).await;
    two_file_tables(&session).await;
    let every_key = "MERGE INTO db.t USING db.s ON t.id = s.id";
    let upsert =
        format!("{every_key} WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *");
    let insert_only = format!("{every_key} WHEN NOT MATCHED THEN INSERT *");
    let text = lines(&session, &format!("EXPLAIN {upsert}"))
        .await
        .join("\n");
    assert!(!text.contains("filter target by source keys"), "{text}");
    assert!(text.contains("mode=Partitioned"), "{text}");
    let text = lines(&session, &format!("EXPLAIN {insert_only}"))
        .await
        .join("\n");
    assert!(text.contains("filter target by source keys"), "{text}");
    assert!(
        text.contains("mode=CollectLeft, join_type=RightAnti"),
        "{text}"
    );
    // count, updated, deleted, inserted
    assert_eq!(
        &query(&session, &upsert).await[0][..4],
        &["101", "100", "0", "1"]
    );
    assert_eq!(
        &query(&session, &insert_only).await[0][..4],
        &["0", "0", "0", "0"]
    );
    assert_eq!(
        query(
            &session,
            "SELECT count(*), count(*) FILTER (WHERE v = 'u') FROM db.t"
        )
        .await,
        vec![vec!["101", "101"]]
    );
}

/// On a cluster, a join whose probe side is read in one task (here the
/// scan of a one-file target) runs in that task, its small build side (the
/// source) read there too, as on the local engine: no exchange before the
/// writer's, no target filter, the stages of the local plan. The build
/// side's unmatched rows (the inserts) come out once, and so do the target
/// rows no source row matches, under NOT MATCHED BY SOURCE. The writers
/// are as many as the rows have routes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_joins_in_the_one_task_of_a_one_task_probe_side() {
    let dir = tempfile::tempdir().unwrap();
    let session = open_session(dir.path(), EngineKind::Cluster).await;
    session
        .execute(
            "CREATE SCHEMA db; CREATE TABLE db.t (id BIGINT, v STRING); \
             INSERT INTO db.t SELECT value, 'a' FROM generate_series(1, 100)",
        )
        .await
        .unwrap();
    let upsert = "MERGE INTO db.t USING (VALUES (2, 'B'), (200, 'new')) AS s(id, v) \
                  ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v \
                  WHEN NOT MATCHED THEN INSERT *";
    let by_source = "MERGE INTO db.t USING (VALUES (3, 'C'), (300, 'x')) AS s(id, v) \
                     ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v \
                     WHEN NOT MATCHED THEN INSERT * \
                     WHEN NOT MATCHED BY SOURCE AND t.id > 90 THEN DELETE";
    for (merge, join) in [(upsert, "join_type=Left"), (by_source, "join_type=Full")] {
        let text = lines(&session, &format!("EXPLAIN {merge}"))
            .await
            .join("\n");
        assert!(
            text.contains(&format!("HashJoinExec: mode=CollectLeft, {join}")),
            "{text}"
        );
        assert!(!text.contains("mode=Partitioned"), "{text}");
        assert!(!text.contains("filter target by source keys"), "{text}");
        // The upsert's one task writes what it joins: its rows have one
        // data file and one route of inserts. The source's size is not
        // probed under NOT MATCHED BY SOURCE: its inserts may spread over
        // every writer, two of the cluster's four with the data file.
        if merge == upsert {
            assert!(!text.contains("hash(__icemerge_route"), "{text}");
            assert!(
                text.contains("rows written where they are joined"),
                "{text}"
            );
        } else {
            assert!(
                text.contains("StageInput: stage 3 (hash(__icemerge_route@4) x4)"),
                "{text}"
            );
        }
        let plan: ExplainDocument = serde_json::from_str(
            &document(&session, &format!("EXPLAIN (FORMAT JSON) {merge}")).await,
        )
        .unwrap();
        let mut kinds: Vec<_> = plan
            .stages
            .iter()
            .map(|s| format!("{:?}", s.stage.kind))
            .collect();
        kinds.sort();
        assert_eq!(
            kinds,
            if merge == upsert {
                &["Commit", "MergeWriter", "ScanSource", "ScanTarget"][..]
            } else {
                &["Commit", "Join", "MergeWriter", "ScanSource", "ScanTarget"][..]
            },
            "{text}"
        );
    }
    // count, updated, deleted, inserted
    assert_eq!(
        &query(&session, upsert).await[0][..4],
        &["2", "1", "0", "1"]
    );
    assert_eq!(
        &query(&session, by_source).await[0][..4],
        &["13", "1", "11", "1"]
    );
    assert_eq!(
        query(
            &session,
            "SELECT count(*), count(*) FILTER (WHERE id IN (200, 300)), \
             string_agg(v, ',' ORDER BY id) FILTER (WHERE id < 4), max(id) FILTER (WHERE id < 200) \
             FROM db.t"
        )
        .await,
        vec![vec!["91", "1", "a,B,C", "90"]]
    );
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

/// The ids of the stage boxes of an SVG document, which must be valid XML.
fn stage_boxes(svg: &str) -> Vec<usize> {
    use quick_xml::events::Event;
    let mut reader = quick_xml::Reader::from_str(svg);
    let mut ids = vec![];
    let mut depth = 0i32;
    let mut root = None;
    loop {
        match reader
            .read_event()
            .unwrap_or_else(|e| panic!("invalid XML: {e}\n{svg}"))
        {
            Event::Start(e) => {
                depth += 1;
                let name = String::from_utf8(e.name().as_ref().to_vec()).unwrap();
                root.get_or_insert(name.clone());
                let attr = |key: &str| {
                    e.try_get_attribute(key)
                        .unwrap()
                        .map(|a| a.unescape_value().unwrap().to_string())
                };
                if name == "g" && attr("class").as_deref() == Some("stage") {
                    ids.push(attr("data-stage").unwrap().parse().unwrap());
                }
            }
            Event::End(_) => depth -= 1,
            Event::Eof => break,
            _ => {}
        }
    }
    assert_eq!(depth, 0, "unbalanced XML");
    assert_eq!(root.as_deref(), Some("svg"));
    ids.sort();
    ids
}

const EXACT_MERGE: &str = "MERGE INTO db.t USING (VALUES (2, 'B'), (150, 'C'), (7, NULL), \
     (300, 'new'), (301, 'new2')) AS s(id, v) ON t.id = s.id \
     WHEN MATCHED AND s.v IS NULL THEN DELETE WHEN MATCHED THEN UPDATE SET v = s.v \
     WHEN NOT MATCHED THEN INSERT *";

fn figures(doc: &ExplainDocument, kind: StageKind) -> &StageFigures {
    let stages = all_figures(doc, kind);
    assert_eq!(stages.len(), 1, "one {kind:?} stage in {doc:#?}");
    stages[0]
}

/// The figures of every stage of `kind`.
fn all_figures(doc: &ExplainDocument, kind: StageKind) -> Vec<&StageFigures> {
    doc.stages
        .iter()
        .filter(|s| s.stage.kind == kind)
        .map(|s| {
            s.figures
                .as_ref()
                .unwrap_or_else(|| panic!("{kind:?} has no figures: {doc:#?}"))
        })
        .collect()
}

/// A session on `engine` whose table db.t (id BIGINT, v STRING) holds two
/// data files of 100 rows each (ids 1..=200), the document of EXPLAIN
/// ANALYZE (FORMAT JSON) of `merge` on it, and that document with the
/// engine's name, for assertion messages.
async fn analyzed_on_two_files(
    dir: &std::path::Path,
    engine: EngineKind,
    merge: &str,
) -> (Session, ExplainDocument, String) {
    let session = open_session(dir, engine).await;
    session
        .execute(
            "CREATE SCHEMA db; CREATE TABLE db.t (id BIGINT, v STRING);
             INSERT INTO db.t SELECT value, 'a' FROM generate_series(1, 100);
             INSERT INTO db.t SELECT value, 'b' FROM generate_series(101, 200)",
        )
        .await
        .unwrap();
    let json = document(&session, &format!("EXPLAIN ANALYZE (FORMAT JSON) {merge}")).await;
    let doc: ExplainDocument = serde_json::from_str(&json).unwrap();
    (session, doc, format!("{engine:?}:\n{json}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn explain_analyze_counts_are_exact_on_both_engines() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let (session, doc, context) = analyzed_on_two_files(dir.path(), engine, EXACT_MERGE).await;
        assert!(doc.analyzed, "{context}");
        let merge = doc.merge.as_ref().expect("merge figures");
        let figure = |name: &str| {
            merge
                .get(name)
                .unwrap_or_else(|| panic!("{name}: {context}"))
        };
        assert_eq!(
            (
                figure("count"),
                figure("rows_updated"),
                figure("rows_deleted"),
                figure("rows_inserted")
            ),
            (5, 2, 1, 2),
            "{context}"
        );

        // The target scan reads every row of the two files it scans.
        let scan = figures(&doc, StageKind::ScanTarget);
        assert_eq!((scan.rows_in, scan.rows_out), (Some(200), 200), "{context}");
        assert_eq!(
            (scan.files_read, figure("files_scanned")),
            (2, 2),
            "{context}"
        );
        assert!(scan.bytes_read > 0, "{context}");
        // The join sends one merge row per matched or inserted source row.
        // On a cluster, the target rows reach it through the filter by
        // the source's keys (read a second time): the 3 that match.
        let join = figures(&doc, StageKind::Join);
        assert_eq!(join.rows_out, 3 + 2, "{context}");
        let sources = all_figures(&doc, StageKind::ScanSource);
        assert!(sources.iter().all(|s| s.rows_out == 5), "{context}");
        let stages = match engine {
            EngineKind::Local => {
                assert_eq!(sources.len(), 1, "{context}");
                assert_eq!(join.rows_in, Some(205), "{context}");
                5
            }
            EngineKind::Cluster => {
                assert_eq!(sources.len(), 2, "{context}");
                let filter = figures(&doc, StageKind::TargetFilter);
                assert_eq!(filter.rows_in, Some(205), "{context}");
                assert_eq!(filter.rows_out, 3, "{context}");
                assert_eq!(join.rows_in, Some(5 + 3), "{context}");
                7
            }
        };
        // The writer takes every merge row, re-reads the two files it
        // rewrites and writes what the commit adds.
        let writer = figures(&doc, StageKind::MergeWriter);
        assert_eq!(writer.rows_in, Some(5), "{context}");
        assert_eq!(writer.files_read, figure("files_rewritten"), "{context}");
        assert_eq!(writer.files_read, 2, "{context}");
        assert_eq!(writer.files_written, figure("files_added"), "{context}");
        assert_eq!(writer.bytes_written, figure("bytes_written"), "{context}");
        let commit = figures(&doc, StageKind::Commit);
        assert_eq!(commit.rows_in, Some(writer.rows_out), "{context}");

        // Time: every stage that did work took some; none outlasts the
        // statement; together they are the statement's order of magnitude.
        let timing = doc.timing.as_ref().expect("timing");
        let mut covered = 0.0;
        for entry in &doc.stages {
            let f = entry.figures.as_ref().expect("every stage ran");
            assert!(f.tasks > 0, "stage {}: {context}", entry.stage.id);
            assert!(f.wall_ms > 0.0, "stage {} wall: {context}", entry.stage.id);
            assert!(f.cpu_ms > 0.0, "stage {} cpu: {context}", entry.stage.id);
            // Stage starts count from the end of planning; the statement
            // also spends a moment between the job's end and the commit.
            assert!(
                f.start_ms + f.wall_ms <= timing.total_ms - timing.plan_ms + 1.0,
                "stage {} ends after the statement: {context}",
                entry.stage.id
            );
            covered += f.wall_ms;
        }
        assert!(
            timing.plan_ms + timing.run_ms + timing.commit_ms <= timing.total_ms + 0.01,
            "{context}"
        );
        assert!(
            covered * 10.0 >= timing.total_ms,
            "stages cover {covered} of {} ms: {context}",
            timing.total_ms
        );
        match engine {
            EngineKind::Local => {
                assert!(doc.stages.iter().all(|s| s
                    .figures
                    .as_ref()
                    .unwrap()
                    .bytes_shuffled
                    .is_none()));
            }
            EngineKind::Cluster => {
                let executors = &session.cluster().unwrap().executor_ids;
                // Every stage but the target scan, pipelined into the
                // filter by the source's keys, ends in a shuffle.
                let pipelined: Vec<_> = doc.stages.iter().filter(|s| s.stage.pipelined).collect();
                assert_eq!(pipelined.len(), 1, "{context}");
                assert_eq!(pipelined[0].stage.kind, StageKind::ScanTarget, "{context}");
                for entry in doc
                    .stages
                    .iter()
                    .filter(|s| s.stage.kind != StageKind::Commit && !s.stage.pipelined)
                {
                    let f = entry.figures.as_ref().unwrap();
                    assert!(entry.stage.ballista_stage.is_some(), "{context}");
                    assert!(
                        f.bytes_shuffled.unwrap_or(0) > 0,
                        "stage {}: {context}",
                        entry.stage.id
                    );
                    assert!(
                        f.executors.iter().all(|e| executors.contains(e)),
                        "{context}"
                    );
                }
            }
        }

        // The same figures as an SVG picture, one box per stage.
        let svg = session
            .last_run()
            .map(|doc| icemerge_planner::explain::render_svg(&doc))
            .unwrap();
        assert_eq!(stage_boxes(&svg), (1..=stages).collect::<Vec<_>>());
        assert!(svg.contains("rows: 200 in, 200 out"), "{svg}");
        assert!(matches!(
            session
                .execute_one(&format!("EXPLAIN ANALYZE (FORMAT SVG) {EXACT_MERGE}"))
                .await
                .unwrap(),
            StatementOutput::Rows { .. }
        ));
    }
}

/// UPDATE and DELETE explain as the stages they run: the target scan with
/// the classification on top (no source, no join), the writer of their
/// own write mode, the commit; ANALYZE runs them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn explain_update_and_delete_show_their_stages() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let session = open_session(dir.path(), engine).await;
        session
            .execute(
                "CREATE SCHEMA db;
                 CREATE TABLE db.t (id BIGINT, v STRING) TBLPROPERTIES ('write.delete.mode' = 'merge-on-read');
                 INSERT INTO db.t VALUES (1, 'a'), (2, 'b'), (3, 'c')",
            )
            .await
            .unwrap();
        let update = lines(&session, "EXPLAIN UPDATE db.t SET v = 'x' WHERE id = 2")
            .await
            .join("\n");
        for role in [
            "scan target (row-id) / classify",
            "writer: copy-on-write per data file",
            "commit (coordinator)",
        ] {
            assert!(
                update.contains(role),
                "{engine:?}: no '{role}' in\n{update}"
            );
        }
        assert!(!update.contains("scan source"), "{update}");
        assert!(!update.contains("JoinExec"), "{update}");
        let delete = lines(&session, "EXPLAIN DELETE FROM db.t WHERE id = 3")
            .await
            .join("\n");
        assert!(
            delete.contains("writer: merge-on-read, position deletes per data file"),
            "{engine:?}:\n{delete}"
        );
        assert_eq!(
            query(&session, "SELECT count(*) FROM db.\"t$snapshots\"").await,
            vec![vec!["1"]],
            "EXPLAIN changes nothing"
        );
        let analyze = lines(&session, "EXPLAIN ANALYZE DELETE FROM db.t WHERE id = 3")
            .await
            .join("\n");
        assert!(
            analyze.contains("Delete: count=1, updated=0, deleted=1, inserted=0"),
            "{engine:?}:\n{analyze}"
        );
        assert!(analyze.contains("delete_files_added=1"), "{analyze}");
        let doc: ExplainDocument = serde_json::from_str(
            &document(
                &session,
                "EXPLAIN ANALYZE (FORMAT JSON) UPDATE db.t SET v = 'x' WHERE id = 2",
            )
            .await,
        )
        .unwrap();
        assert_eq!(doc.statement, "update");
        assert_eq!(figures(&doc, StageKind::ScanTarget).rows_out, 1, "{doc:?}");
        assert_eq!(
            query(&session, "SELECT id, v FROM db.t ORDER BY id").await,
            vec![vec!["1", "a"], vec!["2", "x"]]
        );
    }
}

/// EXPLAIN with a FORMAT of a query and of an INSERT: the same stage graph
/// documents as a MERGE's (JSON, SVG, DOT, text); ANALYZE runs the
/// statement (an INSERT commits) with exact counts; a statement without a
/// plan is refused by name, and plain `EXPLAIN SELECT` stays DataFusion's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn explain_formats_of_a_query_and_an_insert() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let session = open_session(dir.path(), engine).await;
        session
            .execute(
                "CREATE SCHEMA db; CREATE TABLE db.t (id BIGINT, v STRING);
                 INSERT INTO db.t VALUES (1, 'a'), (2, 'b'), (3, 'c')",
            )
            .await
            .unwrap();
        let doc: ExplainDocument = serde_json::from_str(
            &document(
                &session,
                "EXPLAIN (FORMAT JSON) SELECT v FROM db.t WHERE id > 1",
            )
            .await,
        )
        .unwrap();
        assert_eq!(doc.statement, "query");
        assert!(!doc.analyzed);
        assert!(!doc.stages.is_empty());
        let svg = document(&session, "EXPLAIN (FORMAT SVG) SELECT count(*) FROM db.t").await;
        let boxes = stage_boxes(&svg);
        assert_eq!(boxes, (1..=boxes.len()).collect::<Vec<_>>(), "{svg}");
        let dot = lines(&session, "EXPLAIN (FORMAT GRAPHVIZ) SELECT * FROM db.t")
            .await
            .join("\n");
        assert!(dot.starts_with("digraph"), "{dot}");

        let analyzed: ExplainDocument = serde_json::from_str(
            &document(&session, "EXPLAIN ANALYZE (FORMAT JSON) SELECT * FROM db.t").await,
        )
        .unwrap();
        assert!(analyzed.analyzed);
        let root = analyzed.stages.last().and_then(|s| s.figures.as_ref());
        assert_eq!(root.map(|f| f.rows_out), Some(3), "{analyzed:#?}");
        let files_read: u64 = analyzed
            .stages
            .iter()
            .filter_map(|s| s.figures.as_ref())
            .map(|f| f.files_read)
            .sum();
        assert_eq!(files_read, 1, "{analyzed:#?}");
        let text = lines(&session, "EXPLAIN ANALYZE (FORMAT TEXT) SELECT * FROM db.t")
            .await
            .join("\n");
        assert!(text.contains("Query: rows=3"), "{text}");

        let insert: ExplainDocument = serde_json::from_str(
            &document(
                &session,
                "EXPLAIN ANALYZE (FORMAT JSON) INSERT INTO db.t VALUES (4, 'd'), (5, 'e')",
            )
            .await,
        )
        .unwrap();
        assert_eq!(insert.statement, "insert");
        let written: u64 = insert
            .stages
            .iter()
            .filter_map(|s| s.figures.as_ref())
            .map(|f| f.files_written)
            .sum();
        assert!(written >= 1, "{insert:#?}");
        let svg = document(
            &session,
            "EXPLAIN (FORMAT SVG) INSERT INTO db.t VALUES (6, 'f')",
        )
        .await;
        assert!(!stage_boxes(&svg).is_empty());
        assert_eq!(
            query(&session, "SELECT count(*) FROM db.t").await,
            vec![vec!["5"]],
            "{engine:?}: ANALYZE commits the INSERT, EXPLAIN does not"
        );

        let err = session
            .execute_one("EXPLAIN (FORMAT JSON) CREATE TABLE db.u (id BIGINT)")
            .await
            .unwrap_err();
        assert!(err.to_string().contains("has no stage graph"), "{err}");
        let err = session
            .execute_one("EXPLAIN (FORMAT XML) SELECT 1")
            .await
            .unwrap_err();
        assert!(err.to_string().contains("unknown FORMAT 'XML'"), "{err}");
        let datafusion = lines(&session, "EXPLAIN SELECT * FROM db.t").await;
        assert!(!datafusion.is_empty());
    }
}

/// On a cluster, a stage's `shuffled` figure is the size of the shuffle
/// files it wrote, measured on disk: 10k source rows of a 200-byte string
/// take 2 MB as Arrow batches, and far less once LZ4 compresses their
/// repeated bytes (Ballista's sort-based writer would report the former).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_stage_reports_the_bytes_its_shuffle_files_take_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let session = open_session(dir.path(), EngineKind::Cluster).await;
    session
        .execute(
            "CREATE SCHEMA db; CREATE TABLE db.t (id BIGINT, s STRING);
             INSERT INTO db.t SELECT value, repeat('x', 200) FROM generate_series(1, 50000);
             INSERT INTO db.t SELECT value, repeat('x', 200) FROM generate_series(50001, 100000)",
        )
        .await
        .unwrap();
    let json = document(
        &session,
        "EXPLAIN ANALYZE (FORMAT JSON) MERGE INTO db.t \
         USING (SELECT id, s FROM db.t WHERE id % 10 = 0) AS src ON t.id = src.id \
         WHEN MATCHED THEN UPDATE SET s = src.s",
    )
    .await;
    let doc: ExplainDocument = serde_json::from_str(&json).unwrap();
    // The source is read twice: its keys, collected by the target scan
    // tasks, and its rows, shuffled to the join.
    let sources = all_figures(&doc, StageKind::ScanSource);
    assert_eq!(sources.len(), 2, "{json}");
    assert!(sources.iter().all(|s| s.rows_out == 10_000), "{json}");
    let shuffled = sources
        .iter()
        .map(|s| s.bytes_shuffled.expect("a cluster stage shuffles"))
        .max()
        .unwrap();
    assert!(
        shuffled > 0 && shuffled < 10_000 * 200 / 4,
        "{shuffled} bytes shuffled for 10000 rows of 200 repeated bytes: {json}"
    );
}

/// On a cluster an insert-only merge into an unpartitioned table writes in
/// the tasks of its join, one file per source task (here the source table's
/// three files, one task each), every row once; into a partitioned table
/// its rows still cross the exchange to one writer, which writes one file
/// per partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_insert_only_merge_writes_in_the_tasks_that_read_the_source() {
    let dir = tempfile::tempdir().unwrap();
    let session = open_session(dir.path(), EngineKind::Cluster).await;
    session
        .execute(
            "CREATE SCHEMA db; CREATE TABLE db.t (id BIGINT, v STRING); \
             CREATE TABLE db.p (id BIGINT, v STRING) PARTITIONED BY (v); \
             CREATE TABLE db.src (id BIGINT, v STRING); \
             INSERT INTO db.t SELECT value, 'a' FROM generate_series(1, 100); \
             INSERT INTO db.p SELECT value, 'a' FROM generate_series(1, 100); \
             INSERT INTO db.src SELECT value, 'x' FROM generate_series(51, 1000); \
             INSERT INTO db.src SELECT value, 'y' FROM generate_series(1001, 2000); \
             INSERT INTO db.src SELECT value, 'x' FROM generate_series(2001, 3000)",
        )
        .await
        .unwrap();
    // count, updated, deleted, inserted, copied, files_scanned,
    // files_removed, files_added
    for (table, files_added) in [("db.t", "3"), ("db.p", "2")] {
        let merge = format!(
            "MERGE INTO {table} t USING db.src s ON t.id = s.id WHEN NOT MATCHED THEN INSERT *"
        );
        let rows = query(&session, &merge).await;
        assert_eq!(
            (&rows[0][3], &rows[0][7]),
            (&"2900".to_string(), &files_added.to_string()),
            "{table}: {rows:?}"
        );
        assert_eq!(
            query(
                &session,
                &format!(
                    "SELECT count(*), count(DISTINCT id), min(id), max(id), \
                     count(*) FILTER (WHERE v = 'a') FROM {table}"
                )
            )
            .await,
            vec![vec!["3000", "3000", "1", "3000", "100"]],
            "{table}"
        );
    }
}

/// An insert-only merge keeps the source rows no target row matches. On a
/// cluster the target keys the source matches (2 of the target's 200) are
/// collected whole into each source task, whose anti join
/// (`CollectLeft`, `RightAnti`) reads the source where it is: the source's
/// rows reach the join pipelined, with no exchange, on both engines. On a
/// cluster the join's tasks also write the rows they keep: there is no
/// exchange to writers, and no join stage apart from the writer's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_insert_only_merge_reads_the_source_where_it_is_on_both_engines() {
    const INSERT_ONLY: &str = "MERGE INTO db.t USING (VALUES (2, 'B'), (150, 'C'), \
         (300, 'new'), (301, 'new2')) AS s(id, v) ON t.id = s.id \
         WHEN NOT MATCHED THEN INSERT *";
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let (session, doc, context) = analyzed_on_two_files(dir.path(), engine, INSERT_ONLY).await;
        let merge = doc.merge.as_ref().expect("merge figures");
        assert_eq!(
            (
                merge.get("count"),
                merge.get("rows_inserted"),
                merge.get("files_added")
            ),
            (Some(2), Some(2), Some(1)),
            "{context}"
        );
        let join = doc
            .stages
            .iter()
            .find(|s| s.stage.operators.iter().any(|o| o.contains("Anti")))
            .unwrap_or_else(|| panic!("no anti join: {context}"));
        let source_inputs: Vec<_> = join
            .stage
            .inputs
            .iter()
            .map(|&id| &doc.stages[id - 1].stage)
            .filter(|s| s.kind == StageKind::ScanSource)
            .collect();
        assert_eq!(source_inputs.len(), 1, "{context}");
        assert!(source_inputs[0].pipelined, "{context}");
        match engine {
            EngineKind::Local => {
                assert_eq!(join.stage.kind, StageKind::Join, "{context}");
                assert_eq!(
                    join.figures.as_ref().expect("the join ran").rows_out,
                    2,
                    "{context}"
                );
            }
            EngineKind::Cluster => {
                assert_eq!(join.stage.kind, StageKind::MergeWriter, "{context}");
                assert!(
                    join.stage
                        .role
                        .contains("rows written where they are joined"),
                    "{context}"
                );
                assert!(all_figures(&doc, StageKind::Join).is_empty(), "{context}");
                let operators = join.stage.operators.join("\n");
                assert!(
                    operators.contains("mode=CollectLeft, join_type=RightAnti"),
                    "{context}"
                );
                let filter = figures(&doc, StageKind::TargetFilter);
                assert_eq!(
                    (filter.rows_in, filter.rows_out),
                    (Some(204), 2),
                    "{context}"
                );
            }
        }
        assert_eq!(
            query(
                &session,
                "SELECT count(*), count(*) FILTER (WHERE id >= 300) FROM db.t"
            )
            .await,
            vec![vec!["202", "2"]],
            "{context}"
        );
    }
}

/// The lines of the EXPLAIN stage whose header names `role`.
fn stage_lines<'a>(lines: &'a [String], role: &str) -> Vec<&'a str> {
    let start = lines
        .iter()
        .position(|l| l.starts_with("Stage ") && l.contains(role))
        .unwrap_or_else(|| panic!("no stage {role}: {lines:#?}"));
    lines[start + 1..]
        .iter()
        .take_while(|l| !l.starts_with("Stage ") && !l.is_empty())
        .map(String::as_str)
        .collect()
}

/// On a cluster, data file paths cross each hash exchange
/// dictionary-encoded: the target scan's stage encodes `_file` before its
/// shuffle and the join's stage casts it back to the scan's string views.
/// The local engine's exchanges keep the paths as they are. On neither are
/// the paths copied into plain strings for the writer's sort by data file
/// (it sorts by each file's ordinal). Counts, rows, and the data file a
/// duplicate match names come out exact on both engines.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_exchange_carries_data_file_paths_dictionary_encoded() {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let session = open_session(dir.path(), engine).await;
        two_file_tables(&session).await;
        let upsert = "MERGE INTO db.t USING db.s ON t.id = s.id \
                      WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *";
        let plan = lines(&session, &format!("EXPLAIN {upsert}")).await;
        let as_strings = |l: &String| l.contains("AS Utf8) as _file");
        assert!(!plan.iter().any(as_strings), "{engine:?}: {plan:#?}");
        assert!(
            plan.iter().any(|l| l.contains("SortChangesByFileExec")),
            "{engine:?}: {plan:#?}"
        );
        match engine {
            EngineKind::Local => {
                assert!(!plan.iter().any(|l| l.contains("Dictionary(")), "{plan:#?}");
            }
            EngineKind::Cluster => {
                let encoded = |l: &&str| {
                    l.contains("CAST(_file@") && l.contains("AS Dictionary(Int32, Utf8)) as _file")
                };
                let as_views = |l: &&str| l.contains("AS Utf8View) as _file");
                let scan = stage_lines(&plan, "— scan target (row-id)");
                let join = stage_lines(&plan, "— join / classify");
                let writer = stage_lines(&plan, "— writer");
                assert!(scan.iter().any(encoded), "{plan:#?}");
                assert!(join.iter().any(as_views), "{plan:#?}");
                assert!(writer.iter().any(as_views), "{plan:#?}");
            }
        }
        // count, updated, deleted, inserted
        assert_eq!(
            &query(&session, upsert).await[0][..4],
            &["101", "100", "0", "1"],
            "{engine:?}"
        );
        assert_eq!(
            query(
                &session,
                "SELECT count(*), count(*) FILTER (WHERE v = 'u') FROM db.t"
            )
            .await,
            vec![vec!["101", "101"]],
            "{engine:?}"
        );
        let err = session
            .execute(
                "MERGE INTO db.t USING (SELECT id, 'w' AS v FROM db.s UNION ALL SELECT 77, 'w') s \
                 ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v",
            )
            .await
            .unwrap_err()
            .to_string();
        let file = err
            .split("in data file ")
            .nth(1)
            .and_then(|rest| rest.split(" matched more than one source row").next())
            .unwrap_or_else(|| panic!("{engine:?}: {err}"));
        assert!(
            std::path::Path::new(file.trim_start_matches("file://")).is_file(),
            "{engine:?}: the duplicate match names {file}, not a data file: {err}"
        );
        assert_eq!(
            query(&session, "SELECT count(*) FILTER (WHERE v = 'w') FROM db.t").await,
            vec![vec!["0"]],
            "{engine:?}"
        );
    }
}
