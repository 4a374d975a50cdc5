//! A real cluster of processes on loopback: one `icemerge-scheduler` and
//! executor processes (`icemerge-executor`, push scheduling), driven by the
//! `icemerge --scheduler` CLI over Flight SQL. Checks a MERGE's result and
//! the table's rows, that the MERGE's tasks ran in at least two executor
//! processes (from the executors' own logs), and the bearer-token auth.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const SCHEDULER: &str = env!("CARGO_BIN_EXE_icemerge-scheduler");
const EXECUTOR: &str = env!("CARGO_BIN_EXE_icemerge-executor");
const CLI: &str = env!("CARGO_BIN_EXE_icemerge");

/// A child process killed when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Cluster {
    dir: tempfile::TempDir,
    ballista: SocketAddr,
    flight_sql: SocketAddr,
    executor_logs: Vec<PathBuf>,
    // Executors first: they are stopped before the scheduler.
    executors: Vec<Process>,
    _scheduler: Process,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn read_log(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// `GET path` on the scheduler's REST API; the body.
fn http_get(addr: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).expect("connect to the REST API");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default()
}

impl Cluster {
    fn start(executors: usize, token: Option<&str>) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let scheduler_log = dir.path().join("scheduler.log");
        let mut command = Command::new(SCHEDULER);
        command
            .args(["--bind-host", "127.0.0.1", "--port", "0"])
            .args(["--flight-sql-port", "0", "--target-partitions", "6"])
            .args(["--executor-timeout", "10"])
            .arg("--warehouse")
            .arg(dir.path().join("warehouse"))
            .env_remove("ICEMERGE_TOKEN")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&scheduler_log).unwrap());
        if let Some(token) = token {
            command.args(["--token", token]);
        }
        let mut child = command.spawn().expect("spawn icemerge-scheduler");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let scheduler = Process(child);
        // "icemerge-scheduler: ballista ADDR flight-sql ADDR"
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(
            words.len(),
            5,
            "scheduler did not start: '{line}'\n{}",
            read_log(&scheduler_log)
        );
        let ballista: SocketAddr = words[2].parse().unwrap();
        let flight_sql: SocketAddr = words[4].parse().unwrap();

        let mut processes = vec![];
        let mut executor_logs = vec![];
        for i in 0..executors {
            let log = dir.path().join(format!("executor-{i}.log"));
            let child = Command::new(EXECUTOR)
                .arg("--scheduler")
                .arg(ballista.to_string())
                .args(["--bind-host", "127.0.0.1", "--task-slots", "2"])
                .args(["--port", &free_port().to_string()])
                .args(["--grpc-port", &free_port().to_string()])
                .arg("--work-dir")
                .arg(dir.path().join(format!("work-{i}")))
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .expect("spawn icemerge-executor");
            processes.push(Process(child));
            executor_logs.push(log);
        }
        let cluster = Cluster {
            dir,
            ballista,
            flight_sql,
            executor_logs,
            executors: processes,
            _scheduler: scheduler,
        };
        cluster.wait_for_executors(executors);
        cluster
    }

    /// Waits until the scheduler's REST API lists `n` executors.
    fn wait_for_executors(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let body = http_get(self.ballista, "/api/executors");
            let registered = serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v.as_array().map(|a| a.len()))
                .unwrap_or(0);
            if registered >= n {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "only {registered} of {n} executors registered: {body}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn logs(&self) -> String {
        let mut text = read_log(&self.dir.path().join("scheduler.log"));
        for log in &self.executor_logs {
            text.push_str(&read_log(log));
        }
        text
    }

    /// Runs the CLI against this cluster.
    fn cli(&self, token: Option<&str>, args: &[&str]) -> Output {
        let mut command = Command::new(CLI);
        command
            .arg("--scheduler")
            .arg(self.flight_sql.to_string())
            .args(args)
            .env_remove("ICEMERGE_TOKEN")
            .env_remove("ICEMERGE_SCHEDULER");
        if let Some(token) = token {
            command.args(["--token", token]);
        }
        command.output().expect("run icemerge")
    }

    /// Runs SQL through the CLI (CSV output); panics on failure.
    fn sql(&self, token: Option<&str>, sql: &str) -> String {
        let out = self.cli(token, &["--format", "csv", "-c", sql]);
        assert!(
            out.status.success(),
            "{sql}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.logs()
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Tasks each executor has finished so far, from its own log.
    fn tasks_done_per_executor(&self) -> Vec<usize> {
        self.executor_logs
            .iter()
            .map(|log| read_log(log).matches("Done with task").count())
            .collect()
    }
}

#[test]
fn merge_through_the_cli_runs_on_several_executor_processes() {
    let cluster = Cluster::start(3, None);
    cluster.sql(
        None,
        "CREATE SCHEMA db; CREATE TABLE db.t (id BIGINT, v BIGINT)",
    );
    for f in 0..8 {
        cluster.sql(
            None,
            &format!("INSERT INTO db.t SELECT {f} * 100 + value, 0 FROM generate_series(0, 49)"),
        );
    }
    let before = cluster.tasks_done_per_executor();
    // One matched row in every file, plus 3 new rows.
    let out = cluster.sql(
        None,
        "MERGE INTO db.t USING (SELECT value * 100 + 7 AS id FROM generate_series(0, 7)
                               UNION ALL SELECT 1000 + value FROM generate_series(1, 3)) AS s
         ON t.id = s.id
         WHEN MATCHED THEN UPDATE SET v = 1
         WHEN NOT MATCHED THEN INSERT (id, v) VALUES (s.id, 2)",
    );
    let after = cluster.tasks_done_per_executor();
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with(
            "count,rows_updated,rows_deleted,rows_inserted,rows_copied,files_scanned,files_removed"
        ),
        "{out}"
    );
    let figures: Vec<&str> = lines[1].split(',').collect();
    assert_eq!(
        &figures[..7],
        &["11", "8", "0", "3", "392", "8", "8"],
        "{out}"
    );

    let busy = before.iter().zip(&after).filter(|(b, a)| a > b).count();
    assert!(
        busy >= 2,
        "the MERGE's tasks ran in {busy} executor process(es): before {before:?}, after {after:?}"
    );

    let rows = cluster.sql(None, "SELECT count(*) AS n, sum(v) AS s FROM db.t");
    assert_eq!(rows, "n,s\n403,14\n");
    let updated = cluster.sql(None, "SELECT id FROM db.t WHERE v = 1 ORDER BY id");
    assert_eq!(
        updated, "id\n7\n107\n207\n307\n407\n507\n607\n707\n",
        "the matched rows were updated"
    );

    explain_analyze_reports_the_executor_processes_figures(&cluster);

    // Table-format output and DDL messages as the embedded CLI prints them.
    let out = cluster.cli(None, &["-c", "CREATE SCHEMA other; SELECT 1 AS one"]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "CREATE SCHEMA other\n+-----+\n| one |\n+-----+\n|   1 |\n+-----+\n(1 row)\n"
    );

    // A failing statement: one error line, exit status 1.
    let out = cluster.cli(None, &["-c", "SELECT * FROM db.missing"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.starts_with("error: ") && stderr.contains("missing"),
        "{stderr}"
    );
}

#[test]
fn flight_sql_requires_the_token_when_one_is_configured() {
    let cluster = Cluster::start(1, Some("s3cret-token"));
    for token in [None, Some("wrong-token")] {
        let out = cluster.cli(token, &["-c", "CREATE SCHEMA sneaky"]);
        assert_eq!(out.status.code(), Some(1), "token {token:?} was accepted");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(stderr.contains("Unauthenticated"), "{stderr}");
    }
    // Nothing ran: the schema does not exist yet, so creating it succeeds.
    let out = cluster.sql(
        Some("s3cret-token"),
        "CREATE SCHEMA sneaky; SELECT 41 + 1 AS x",
    );
    assert_eq!(out, "x\n42\n");
}

#[test]
fn scheduler_refuses_a_public_bind_without_a_token() {
    let out = Command::new(SCHEDULER)
        .args([
            "--bind-host",
            "0.0.0.0",
            "--port",
            "0",
            "--flight-sql-port",
            "0",
        ])
        .env_remove("ICEMERGE_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("without an auth token"), "{stderr}");
}

#[test]
fn adbc_flight_sql_client_runs_merge() {
    let cluster = Cluster::start(2, Some("py-token"));
    let uri = format!("grpc://{}", cluster.flight_sql);
    let result = icemerge_tests::run_python("flight_sql_client.py", &[&uri, "py-token"]);
    assert_eq!(result["insert"], serde_json::json!([{"count": 100}]));
    let columns = result["merge_columns"].as_array().unwrap();
    assert_eq!(columns[0], "count");
    assert_eq!(columns[1], "rows_updated");
    let merge = &result["merge"][0];
    assert_eq!(merge["count"], 20, "{result}");
    assert_eq!(merge["rows_updated"], 10, "{result}");
    assert_eq!(merge["rows_inserted"], 10, "{result}");
    assert_eq!(result["merge_update_count"], 5, "{result}");
    assert_eq!(
        result["rows"],
        serde_json::json!([{"v": 0, "n": 85}, {"v": 1, "n": 10}, {"v": 2, "n": 10}]),
        "{result}"
    );
    let refused = result["wrong_token"].as_str().unwrap();
    assert!(
        refused.contains("Unauthenticated") || refused.contains("UNAUTHENTICATED"),
        "{refused}"
    );
    // The wrong-token DROP ran nothing: the table is still there.
    assert_eq!(
        cluster.sql(Some("py-token"), "SELECT count(*) AS n FROM py.t"),
        "n\n105\n"
    );
}

/// Every `.parquet` file under `dir`.
fn parquet_files(dir: &Path) -> std::collections::BTreeSet<PathBuf> {
    let mut files = std::collections::BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "parquet") {
                files.insert(path);
            }
        }
    }
    files
}

#[test]
fn ctrl_c_cancels_a_running_merge_on_the_cluster() {
    let cluster = Cluster::start(3, None);
    let (merge, before) = start_big_merge(&cluster);
    let status = Command::new("kill")
        .args(["-INT", &merge.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = merge.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("statement cancelled"), "{stderr}");

    // The coordinator deletes what the cancelled job wrote.
    let warehouse = cluster.dir.path().join("warehouse");
    let deadline = Instant::now() + Duration::from_secs(30);
    while parquet_files(&warehouse) != before {
        assert!(
            Instant::now() < deadline,
            "files left behind: {:?}\n{}",
            parquet_files(&warehouse)
                .difference(&before)
                .collect::<Vec<_>>(),
            cluster.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let snapshots = "SELECT count(*) AS n FROM db.\"big$snapshots\"";
    assert_eq!(
        cluster.sql(None, snapshots),
        "n\n4\n",
        "nothing was committed"
    );
    assert_eq!(
        cluster.sql(None, "SELECT count(*) AS n, sum(v) AS s FROM db.big"),
        "n,s\n4000000,0\n"
    );
}

/// Builds a 4M-row table and starts a MERGE updating half of it; returns
/// once the MERGE's writers have written a file, with the files from before.
fn start_big_merge(cluster: &Cluster) -> (Child, std::collections::BTreeSet<PathBuf>) {
    cluster.sql(
        None,
        "CREATE SCHEMA db; CREATE TABLE db.big (id BIGINT, v BIGINT, s VARCHAR)",
    );
    for f in 0..4 {
        cluster.sql(
            None,
            &format!(
                "INSERT INTO db.big SELECT {f} * 10000000 + value, 0, 'row ' || value
                 FROM generate_series(0, 999999)"
            ),
        );
    }
    let warehouse = cluster.dir.path().join("warehouse");
    let before = parquet_files(&warehouse);
    let mut merge = Command::new(CLI)
        .arg("--scheduler")
        .arg(cluster.flight_sql.to_string())
        .args([
            "--format",
            "csv",
            "-c",
            "MERGE INTO db.big USING (SELECT id FROM db.big WHERE id % 2 = 0) s
             ON big.id = s.id WHEN MATCHED THEN UPDATE SET v = 1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        assert!(
            merge.try_wait().unwrap().is_none(),
            "the MERGE finished before it could be interrupted"
        );
        if parquet_files(&warehouse).len() > before.len() {
            return (merge, before);
        }
        assert!(Instant::now() < deadline, "the MERGE wrote no file");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn killing_an_executor_during_the_writer_stage_leaves_no_orphans() {
    let mut cluster = Cluster::start(3, None);
    let (merge, before) = start_big_merge(&cluster);
    // Kill the executor that has run the most tasks (it holds writer tasks).
    let busiest = cluster
        .tasks_done_per_executor()
        .iter()
        .enumerate()
        .max_by_key(|(_, n)| **n)
        .map(|(i, _)| i)
        .unwrap();
    let mut victim = cluster.executors.remove(busiest);
    victim.0.kill().unwrap();
    victim.0.wait().unwrap();

    let out = merge.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let warehouse = cluster.dir.path().join("warehouse");
    let snapshots = cluster.sql(None, "SELECT count(*) AS n FROM db.\"big$snapshots\"");
    let totals = cluster.sql(None, "SELECT count(*) AS n, sum(v) AS s FROM db.big");
    let live: std::collections::BTreeSet<PathBuf> = cluster
        .sql(None, "SELECT file_path FROM db.\"big$files\"")
        .lines()
        .skip(1)
        .map(|p| PathBuf::from(p.trim_start_matches("file://")))
        .collect();
    if out.status.success() {
        // Completed: tasks of the lost executor re-ran elsewhere.
        assert!(stdout.starts_with("count,rows_updated"), "{stdout}");
        assert!(
            stdout
                .lines()
                .nth(1)
                .unwrap()
                .starts_with("2000000,2000000,"),
            "{stdout}"
        );
        assert_eq!(snapshots, "n\n5\n");
        assert_eq!(totals, "n,s\n4000000,2000000\n");
    } else {
        // Failed: a clear error, nothing committed.
        assert!(stderr.starts_with("error: "), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert_eq!(snapshots, "n\n4\n", "{stderr}");
        assert_eq!(totals, "n,s\n4000000,0\n", "{stderr}");
    }
    // No orphans: every data file is one of the old snapshots' or live.
    let orphans: Vec<_> = parquet_files(&warehouse)
        .into_iter()
        .filter(|f| !before.contains(f) && !live.contains(f))
        .collect();
    assert!(
        orphans.is_empty(),
        "orphan files {orphans:?}; merge: {stdout}{stderr}\n{}",
        cluster.logs()
    );
    eprintln!("executor kill: merge {stdout}{stderr}");
}

/// Asks the scheduler's `icemerge.progress` action (what the CLI's
/// progress bars show).
fn progress_report(flight_sql: SocketAddr) -> serde_json::Value {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        use arrow_flight::flight_service_client::FlightServiceClient;
        use futures::TryStreamExt;
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{flight_sql}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut client = FlightServiceClient::new(channel);
        let action = arrow_flight::Action {
            r#type: "icemerge.progress".into(),
            body: Default::default(),
        };
        let mut stream = client.do_action(action).await.unwrap().into_inner();
        let result = stream.try_next().await.unwrap().unwrap();
        serde_json::from_slice(&result.body).unwrap()
    })
}

#[test]
fn progress_of_a_running_merge_per_stage() {
    let cluster = Cluster::start(3, None);
    let (merge, _) = start_big_merge(&cluster);
    // The writers are running: the report names the job and its stages.
    let report = progress_report(cluster.flight_sql);
    let out = merge.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(report["job"].is_string(), "{report}");
    let stages = report["stages"].as_array().unwrap();
    assert!(stages.len() >= 3, "{report}");
    let running: Vec<_> = stages
        .iter()
        .filter(|s| s["total"].as_u64().is_some_and(|t| t > 0))
        .collect();
    assert!(!running.is_empty(), "no stage with tasks: {report}");
    for stage in &running {
        assert!(stage["done"].as_u64().unwrap() <= stage["total"].as_u64().unwrap());
    }
    assert!(
        stages.iter().any(|s| s["status"] == "Successful"),
        "the writers run after the earlier stages succeeded: {report}"
    );
    // Idle: no job.
    assert!(progress_report(cluster.flight_sql)["job"].is_null());
}

/// EXPLAIN ANALYZE (FORMAT JSON) through the CLI on executor processes: the
/// CLI prints the document as it is, and its per-stage figures are those
/// the executors reported (rows, shuffle files, data files, executor ids).
fn explain_analyze_reports_the_executor_processes_figures(cluster: &Cluster) {
    let out = cluster.cli(
        None,
        &[
            "--format",
            "json",
            "-c",
            "EXPLAIN ANALYZE (FORMAT JSON) MERGE INTO db.t USING (SELECT 7 AS id) AS s
             ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = 3",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let context = serde_json::to_string_pretty(&doc).unwrap();
    assert_eq!(doc["engine"], "cluster", "{context}");
    assert_eq!(doc["merge"]["rows_updated"], 1, "{context}");
    let stages = doc["stages"].as_array().unwrap();
    let stage = |kind: &str| -> &serde_json::Value {
        let found: Vec<_> = stages.iter().filter(|s| s["kind"] == kind).collect();
        assert_eq!(found.len(), 1, "{kind}: {context}");
        &found[0]["figures"]
    };
    let scan = stage("scan_target");
    assert_eq!(scan["rows_in"], scan["rows_out"], "{context}");
    assert_eq!(
        scan["files_read"], doc["merge"]["files_scanned"],
        "{context}"
    );
    assert_eq!(stage("join")["rows_out"], 1, "{context}");
    let writer = stage("merge_writer");
    assert_eq!(writer["rows_in"], 1, "{context}");
    assert_eq!(
        writer["files_read"], doc["merge"]["files_rewritten"],
        "{context}"
    );
    assert_eq!(
        writer["files_written"], doc["merge"]["files_added"],
        "{context}"
    );
    for entry in stages.iter().filter(|s| s["kind"] != "commit") {
        let figures = &entry["figures"];
        if entry["pipelined"] == false {
            assert!(figures["bytes_shuffled"].as_u64().unwrap() > 0, "{context}");
        }
        assert!(figures["wall_ms"].as_f64().unwrap() > 0.0, "{context}");
        let executors = figures["executors"].as_array().unwrap();
        assert!(
            !executors.is_empty() && executors.iter().all(|e| e != "local"),
            "{context}"
        );
    }
}
