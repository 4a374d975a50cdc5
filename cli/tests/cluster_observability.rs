//! Observability of a real cluster of processes on loopback (one
//! `icemerge-scheduler` with `--metrics-port` and `--token`, executor
//! processes, the `icemerge --scheduler` CLI): the Prometheus counters move
//! by what the CLI ran and need the token; `SHOW STATEMENTS` lists what ran;
//! `CANCEL STATEMENT <id>` stops a MERGE held before its commit (nothing
//! committed, its files deleted), a queued statement and a running job,
//! and refuses unknown and ended ids by name; the embedded CLI refuses both
//! commands.

mod support;

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use icemerge_tests::http_get;
use icemerge_tests::parquet_files;
use support::{Cluster, CLI};

const TOKEN: &str = "obs-token";

/// The `/metrics` text, with the token.
fn scrape(cluster: &Cluster) -> String {
    let (status, body) = http_get(cluster.metrics.unwrap(), "/metrics", Some(TOKEN));
    assert_eq!(status, 200, "{body}");
    body
}

/// The value of one series (`name{labels}`) of a scrape.
fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no series {series} in\n{text}"))
        .parse()
        .unwrap()
}

/// How much `series` grew from `before` to `after`.
fn delta(before: &str, after: &str, series: &str) -> f64 {
    value(after, series) - value(before, series)
}

fn kind(name: &str, kind: &str) -> String {
    format!("{name}{{kind=\"{kind}\"}}")
}

#[test]
fn metrics_count_what_the_cli_ran_and_need_the_token() {
    let cluster = Cluster::start_with_metrics(2, Some(TOKEN));
    let metrics = cluster
        .metrics
        .expect("the scheduler printed the metrics URL");
    for token in [None, Some("wrong")] {
        let (status, body) = http_get(metrics, "/metrics", token);
        assert_eq!(status, 401, "token {token:?}: {body}");
        assert!(!body.contains("icemerge_statements"), "{body}");
    }

    let start = scrape(&cluster);
    assert_eq!(value(&start, "icemerge_executors_alive"), 2.0, "{start}");
    cluster.sql(
        Some(TOKEN),
        "CREATE SCHEMA m; CREATE TABLE m.t (id BIGINT, v BIGINT); \
         INSERT INTO m.t SELECT value, 0 FROM generate_series(1, 10)",
    );
    let before_query = scrape(&cluster);
    assert_eq!(
        cluster.sql(Some(TOKEN), "SELECT count(*) AS n FROM m.t"),
        "n\n10\n"
    );
    let before_merge = scrape(&cluster);
    let out = cluster.sql(
        Some(TOKEN),
        "MERGE INTO m.t USING (SELECT value AS id FROM generate_series(8, 12)) AS s \
         ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = 1 \
         WHEN NOT MATCHED THEN INSERT (id, v) VALUES (s.id, 2)",
    );
    let after_merge = scrape(&cluster);
    let failed = cluster.cli(Some(TOKEN), &["-c", "SELECT * FROM m.missing"]);
    assert_eq!(failed.status.code(), Some(1));
    let end = scrape(&cluster);

    // The MERGE's result row, by column name.
    let mut lines = out.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let row: Vec<u64> = lines
        .next()
        .unwrap()
        .split(',')
        .map(|v| v.parse().unwrap())
        .collect();
    let figure = |name: &str| row[header.iter().position(|h| *h == name).unwrap()] as f64;
    assert_eq!(figure("count"), 5.0, "{out}");

    let moved = |series: &str| delta(&start, &end, series);
    for (k, submitted, succeeded, failed) in [
        ("ddl", 2.0, 2.0, 0.0),
        ("insert", 1.0, 1.0, 0.0),
        ("query", 2.0, 1.0, 1.0),
        ("merge", 1.0, 1.0, 0.0),
        ("update", 0.0, 0.0, 0.0),
        ("other", 0.0, 0.0, 0.0),
    ] {
        let context = format!("kind {k}\n{end}");
        assert_eq!(
            moved(&kind("icemerge_statements_submitted_total", k)),
            submitted,
            "{context}"
        );
        assert_eq!(
            moved(&kind("icemerge_statements_succeeded_total", k)),
            succeeded,
            "{context}"
        );
        assert_eq!(
            moved(&kind("icemerge_statements_failed_total", k)),
            failed,
            "{context}"
        );
        assert_eq!(
            moved(&kind("icemerge_statement_duration_seconds_count", k)),
            submitted,
            "{context}"
        );
    }
    assert_eq!(
        moved(&kind("icemerge_statements_cancelled_total", "query")),
        0.0
    );
    assert_eq!(value(&end, "icemerge_statements_running"), 0.0, "{end}");
    assert_eq!(value(&end, "icemerge_statements_queued"), 0.0, "{end}");
    assert_eq!(
        moved(&kind("icemerge_commit_attempts_total", "merge")),
        figure("commit_attempts"),
        "{end}"
    );
    assert_eq!(figure("commit_attempts"), 1.0, "{out}");

    // Tasks, stages and bytes of the query and of the MERGE.
    let query_tasks = delta(
        &before_query,
        &before_merge,
        "icemerge_tasks_completed_total",
    );
    assert!(query_tasks >= 1.0, "{before_merge}");
    assert!(
        delta(
            &before_query,
            &before_merge,
            "icemerge_stages_completed_total"
        ) >= 1.0,
        "{before_merge}"
    );
    let merge_tasks = delta(
        &before_merge,
        &after_merge,
        "icemerge_tasks_completed_total",
    );
    assert!(merge_tasks >= 2.0, "{after_merge}");
    assert_eq!(
        delta(
            &before_merge,
            &after_merge,
            "icemerge_task_duration_seconds_count"
        ),
        merge_tasks,
        "every task reports its times: {after_merge}"
    );
    assert!(
        delta(
            &before_merge,
            &after_merge,
            "icemerge_stages_completed_total"
        ) >= 2.0,
        "{after_merge}"
    );
    assert_eq!(
        delta(&before_merge, &after_merge, "icemerge_bytes_written_total"),
        figure("bytes_written"),
        "the MERGE's data files: {out}\n{after_merge}"
    );
    assert!(
        delta(&before_merge, &after_merge, "icemerge_bytes_read_total") > 0.0,
        "{after_merge}"
    );
    assert!(
        delta(&before_merge, &after_merge, "icemerge_bytes_shuffled_total") > 0.0,
        "{after_merge}"
    );

    // SHOW STATEMENTS lists them, and is not counted itself.
    let listed = show_statements(&cluster);
    let sqls: Vec<&str> = listed.iter().map(|s| s["sql"].as_str().unwrap()).collect();
    assert_eq!(sqls.len(), 6, "{listed:?}");
    assert_eq!(sqls[0], "SELECT * FROM m.missing");
    assert!(sqls[1].starts_with("MERGE INTO m.t"), "{sqls:?}");
    assert_eq!(listed[0]["state"], "failed");
    assert!(
        listed[0]["error"].as_str().unwrap().contains("missing"),
        "{listed:?}"
    );
    assert_eq!(listed[1]["state"], "succeeded");
    assert_eq!(listed[1]["kind"], "merge");
    assert!(listed[1]["job"].is_string(), "{listed:?}");
    let after_show = scrape(&cluster);
    assert_eq!(
        delta(
            &end,
            &after_show,
            &kind("icemerge_statements_submitted_total", "query")
        ),
        0.0
    );
}

/// `SHOW STATEMENTS` through the CLI, as JSON rows.
fn show_statements(cluster: &Cluster) -> Vec<serde_json::Value> {
    let out = cluster.cli(Some(TOKEN), &["--format", "json", "-c", "SHOW STATEMENTS"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice::<Vec<serde_json::Value>>(&out.stdout).unwrap()
}

/// The id and state of the newest listed statement whose SQL starts with
/// `prefix`.
fn listed(cluster: &Cluster, prefix: &str) -> Option<(u64, String)> {
    show_statements(cluster)
        .iter()
        .find(|s| s["sql"].as_str().unwrap().starts_with(prefix))
        .map(|s| {
            (
                s["id"].as_u64().unwrap(),
                s["state"].as_str().unwrap().to_string(),
            )
        })
}

/// Waits until the newest statement starting with `prefix` is in `state`;
/// returns its id.
fn wait_listed(cluster: &Cluster, prefix: &str, state: &str) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some((id, now)) = listed(cluster, prefix) {
            if now == state {
                return id;
            }
        }
        assert!(
            Instant::now() < deadline,
            "'{prefix}' never {state}: {:?}\n{}",
            show_statements(cluster),
            cluster.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Starts the CLI on `sql` without waiting, in the scheduler session
/// `session`.
fn spawn_cli(cluster: &Cluster, session: &str, sql: &str) -> Child {
    Command::new(CLI)
        .arg("--scheduler")
        .arg(cluster.flight_sql.to_string())
        .args(["--session", session])
        .args(["--token", TOKEN, "--format", "csv", "-c", sql])
        .env_remove("ICEMERGE_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// `CANCEL STATEMENT <id>` through the CLI.
fn cancel(cluster: &Cluster, id: u64) -> Output {
    cluster.cli(Some(TOKEN), &["-c", &format!("CANCEL STATEMENT {id}")])
}

/// `CANCEL STATEMENT id`, which must succeed.
fn cancelled(cluster: &Cluster, id: u64) {
    let out = cancel(cluster, id);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("CANCEL STATEMENT {id}: cancelled")
    );
}

/// `CANCEL STATEMENT id`, which must fail saying `why`.
fn cancel_refused(cluster: &Cluster, id: u64, why: &str) {
    let out = cancel(cluster, id);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("CANCEL STATEMENT {id}: {why}")),
        "{stderr}"
    );
}

/// Waits for a client that must fail as cancelled (exit status 130).
fn wait_cancelled(child: Child) -> String {
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("statement cancelled"), "{stderr}");
    stderr
}

#[test]
fn cancel_statement_stops_held_queued_and_running_statements() {
    let cluster = Cluster::start_with_metrics(2, Some(TOKEN));
    cluster.sql(
        Some(TOKEN),
        "CREATE SCHEMA c; CREATE TABLE c.t (id BIGINT, v BIGINT); \
         INSERT INTO c.t SELECT value, 0 FROM generate_series(1, 100)",
    );
    let table = "SELECT count(*) AS n, sum(v) AS s FROM c.t";
    let snapshots = "SELECT count(*) AS n FROM c.\"t$snapshots\"";
    assert_eq!(cluster.sql(Some(TOKEN), table), "n,s\n100,0\n");
    assert_eq!(cluster.sql(Some(TOKEN), snapshots), "n\n1\n");
    let warehouse = cluster.dir.path().join("warehouse");
    let files_before = parquet_files(&warehouse);
    let before = scrape(&cluster);

    // The commands need the token like any statement.
    let out = cluster.cli(None, &["-c", "SHOW STATEMENTS"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Unauthenticated"));

    // A MERGE held before its commit (the session's test hook), in a
    // session named by its client.
    let pause = tempfile::tempdir().unwrap();
    let out = cluster.cli(
        Some(TOKEN),
        &[
            "--session",
            "held",
            "-c",
            &format!(
                "SET icemerge.test_pause_before_commit = '{}'",
                pause.path().display()
            ),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let merge = spawn_cli(
        &cluster,
        "held",
        "MERGE INTO c.t USING (SELECT value AS id FROM generate_series(1, 50)) AS s \
         ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = 1",
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    while !pause.path().join("paused").exists() {
        assert!(Instant::now() < deadline, "{}", cluster.logs());
        std::thread::sleep(Duration::from_millis(50));
    }
    let merge_id = wait_listed(&cluster, "MERGE INTO c.t", "running");
    assert!(
        parquet_files(&warehouse).len() > files_before.len(),
        "the held MERGE wrote its files"
    );

    // A statement of the same session waits behind it; cancelled, it never
    // runs. Another session's statement runs meanwhile.
    let queued = spawn_cli(&cluster, "held", "SELECT 42 AS queued");
    let queued_id = wait_listed(&cluster, "SELECT 42 AS queued", "queued");
    assert_eq!(
        cluster.sql(Some(TOKEN), "SELECT 7 AS other_session"),
        "other_session\n7\n"
    );
    cancelled(&cluster, queued_id);
    let stderr = wait_cancelled(queued);
    assert!(stderr.contains("while queued"), "{stderr}");
    assert_eq!(
        listed(&cluster, "MERGE INTO c.t").unwrap(),
        (merge_id, "running".to_string()),
        "the MERGE is still held"
    );

    // The held MERGE, cancelled: nothing committed, its files deleted.
    cancelled(&cluster, merge_id);
    wait_cancelled(merge);
    std::fs::write(pause.path().join("go"), b"").unwrap();
    assert_eq!(cluster.sql(Some(TOKEN), table), "n,s\n100,0\n");
    assert_eq!(
        cluster.sql(Some(TOKEN), snapshots),
        "n\n1\n",
        "nothing committed"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while parquet_files(&warehouse) != files_before {
        assert!(
            Instant::now() < deadline,
            "the cancelled MERGE's files are left: {:?}",
            parquet_files(&warehouse).difference(&files_before)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (id, state) = listed(&cluster, "MERGE INTO c.t").unwrap();
    assert_eq!((id, state.as_str()), (merge_id, "failed"));

    // Ended and unknown ids are refused by name.
    cancel_refused(
        &cluster,
        merge_id,
        &format!("statement {merge_id} already failed"),
    );
    cancel_refused(&cluster, 987654, "this scheduler has no statement 987654");

    // A running job (a cross join far too big to finish): cancelled on the
    // cluster, the statement ends at once.
    let slow = "SELECT count(*) AS n FROM generate_series(1, 300000) a \
                CROSS JOIN generate_series(1, 300000) b WHERE a.value + b.value = 7";
    let running = spawn_cli(&cluster, "slow", slow);
    let slow_id = wait_listed(
        &cluster,
        "SELECT count(*) AS n FROM generate_series",
        "running",
    );
    std::thread::sleep(Duration::from_secs(2));
    let asked = Instant::now();
    cancelled(&cluster, slow_id);
    let stderr = wait_cancelled(running);
    assert!(stderr.contains("(job "), "the job was cancelled: {stderr}");
    assert!(
        asked.elapsed() < Duration::from_secs(30),
        "took {:?}",
        asked.elapsed()
    );

    let after = scrape(&cluster);
    for (k, cancelled) in [("merge", 1.0), ("query", 2.0)] {
        assert_eq!(
            delta(
                &before,
                &after,
                &kind("icemerge_statements_cancelled_total", k)
            ),
            cancelled,
            "{k}\n{after}"
        );
        assert_eq!(
            delta(
                &before,
                &after,
                &kind("icemerge_statements_failed_total", k)
            ),
            cancelled,
            "{k}\n{after}"
        );
    }
    assert_eq!(
        delta(
            &before,
            &after,
            &kind("icemerge_statements_succeeded_total", "merge")
        ),
        0.0
    );
    assert_eq!(value(&after, "icemerge_statements_running"), 0.0, "{after}");
    assert_eq!(value(&after, "icemerge_statements_queued"), 0.0, "{after}");
}

#[test]
fn the_embedded_engine_refuses_the_statement_commands() {
    let dir = tempfile::tempdir().unwrap();
    for sql in ["SHOW STATEMENTS", "CANCEL STATEMENT 3"] {
        let out = Command::new(CLI)
            .arg("--warehouse")
            .arg(dir.path().join("warehouse"))
            .args(["-c", sql])
            .env_remove("ICEMERGE_SCHEDULER")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{sql}: {stderr}");
        let name = if sql.starts_with("SHOW") {
            "SHOW STATEMENTS"
        } else {
            "CANCEL STATEMENT"
        };
        assert!(
            stderr.contains(&format!(
                "{name} works on an icemerge-scheduler (icemerge --scheduler HOST:PORT)"
            )),
            "{sql}: {stderr}"
        );
    }
}
