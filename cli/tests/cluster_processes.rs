//! A real cluster of processes on loopback: one `icemerge-scheduler` and
//! executor processes (`icemerge-executor`, push scheduling), driven by the
//! `icemerge --scheduler` CLI over Flight SQL. Checks a MERGE's result and
//! the table's rows, that the MERGE's tasks ran in at least two executor
//! processes (from the executors' own logs), and the bearer-token auth.

mod support;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use icemerge_tests::http_get;
use icemerge_tests::parquet_files;
use support::{Cluster, ProcessSetup, CLI, SCHEDULER};

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

/// The embedded cluster's MERGE prints its result and nothing else: the
/// scheduler used to log an error per finished stage, when a task's
/// metrics sets did not line up with the stage plan's operators.
#[test]
fn an_embedded_cluster_merge_writes_nothing_to_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(CLI)
        .args(["--engine", "cluster", "--format", "csv", "--warehouse"])
        .arg(dir.path().join("wh"))
        .arg("-c")
        .arg(
            "CREATE SCHEMA db; CREATE TABLE db.t (id BIGINT, v BIGINT); \
             INSERT INTO db.t VALUES (1, 10), (2, 20); \
             MERGE INTO db.t t USING (SELECT 2 AS id, 21 AS v) s ON t.id = s.id \
             WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *; \
             SELECT id, v FROM db.t ORDER BY id",
        )
        .env_remove("ICEMERGE_LOG")
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.ends_with("id,v\n1,10\n2,21\n"), "{stdout}");
    assert_eq!(stderr, "");
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

#[test]
fn adbc_lists_the_catalog_and_runs_prepared_statements() {
    let cluster = Cluster::start(2, Some("tools-token"));
    let uri = format!("grpc://{}", cluster.flight_sql);
    let result = icemerge_tests::run_python("flight_sql_tools.py", &[&uri, "tools-token"]);
    assert_eq!(result["catalogs"].as_array().unwrap().len(), 1, "{result}");
    assert_eq!(
        result["objects"]["tools"],
        serde_json::json!({
            "order_lines": ["TABLE", ["order_id", "qty"]],
            "orders": ["TABLE", ["id", "amount", "note"]],
        }),
        "{result}"
    );
    assert_eq!(
        result["filtered"],
        serde_json::json!({"tools": {"order_lines": ["TABLE", []]}}),
        "{result}"
    );
    let schema = result["orders_schema"].as_array().unwrap();
    assert_eq!(schema[0], serde_json::json!(["id", "int64"]), "{result}");
    assert_eq!(
        schema[1],
        serde_json::json!(["amount", "decimal128(10, 2)"]),
        "{result}"
    );
    assert_eq!(
        result["table_types"],
        serde_json::json!(["LOCAL TEMPORARY", "TABLE"])
    );
    // Prepared statements: an INSERT run once per row of values, a query
    // and a MERGE with parameters (a decimal and a string with a quote
    // keep their values), a wrong number of values refused by count.
    assert_eq!(result["insert_rowcount"], 2, "{result}");
    assert_eq!(
        result["query"],
        serde_json::json!([{"id": 1, "note": "it's"}]),
        "{result}"
    );
    assert_eq!(result["merge"][0]["rows_updated"], 1, "{result}");
    let refused = result["wrong_count"].as_str().unwrap();
    assert!(
        refused.contains("takes 2 parameter(s); 1 were bound"),
        "{refused}"
    );
    assert_eq!(
        result["rows"],
        serde_json::json!([
            {"id": 1, "amount": "12.50", "note": "it's"},
            {"id": 2, "amount": "7.25", "note": "merged"},
        ]),
        "{result}"
    );
    // Preparing describes: parameters typed by the columns they meet, a
    // query's result schema, a MERGE's parameters counted but untyped;
    // describing an INSERT does not run it.
    assert_eq!(
        result["described_query_parameters"],
        serde_json::json!([["$1", "decimal128(10, 2)"], ["$2", "string"]]),
        "{result}"
    );
    assert_eq!(
        result["described_query_rows"],
        serde_json::json!([["id", "int64"], ["doubled", "decimal128(31, 2)"]]),
        "{result}"
    );
    assert_eq!(
        result["ran_query_rows"], result["described_query_rows"],
        "the rows' schema as run and as described"
    );
    assert_eq!(
        result["described_insert_parameters"],
        serde_json::json!([["$1", "int32"], ["$2", "int64"]]),
        "{result}"
    );
    assert_eq!(
        result["described_merge_parameters"],
        serde_json::json!([["$1", "null"]]),
        "{result}"
    );
    assert_eq!(
        result["order_lines_after_describe"],
        serde_json::json!([{"n": 0}]),
        "{result}"
    );
}

/// A query's rows are not gathered on the coordinator: `GetFlightInfo`
/// answers once the job has ended, with an unknown row count, and `DoGet`
/// fetches the rows from the executors as the client reads them. Read in
/// full they are exact; once the executors are gone, the rows past the
/// first batch cannot be read, and the error says where they were.
#[test]
fn a_query_streams_its_rows_from_the_executors() {
    use futures::StreamExt;
    let mut cluster = Cluster::start(2, Some("stream-token"));
    cluster.sql(
        Some("stream-token"),
        "CREATE SCHEMA s; CREATE TABLE s.t (id BIGINT, v STRING); \
         INSERT INTO s.t SELECT value, repeat('x', 100) FROM generate_series(1, 100000); \
         INSERT INTO s.t SELECT value, repeat('y', 100) FROM generate_series(100001, 200000)",
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let channel =
            tonic::transport::Endpoint::from_shared(format!("http://{}", cluster.flight_sql))
                .unwrap()
                .connect()
                .await
                .unwrap();
        let mut client = arrow_flight::sql::client::FlightSqlServiceClient::new(channel);
        client.set_header("authorization", "Bearer stream-token");
        let query = "SELECT id, v FROM s.t";

        let info = client.execute(query.to_string(), None).await.unwrap();
        assert_eq!(info.total_records, -1, "{info:?}");
        let ticket = info.endpoint[0].ticket.clone().unwrap();
        let mut rows = client.do_get(ticket).await.unwrap();
        let (mut count, mut id_sum, mut batches) = (0usize, 0i64, 0usize);
        while let Some(batch) = rows.next().await {
            let batch = batch.unwrap();
            let ids = batch
                .column(0)
                .as_any()
                .downcast_ref::<arrow::array::Int64Array>()
                .unwrap();
            id_sum += ids.values().iter().sum::<i64>();
            count += batch.num_rows();
            batches += 1;
        }
        assert_eq!((count, id_sum), (200_000, 200_000 * 200_001 / 2));
        assert!(batches > 2, "{batches} batches");

        let info = client.execute(query.to_string(), None).await.unwrap();
        let ticket = info.endpoint[0].ticket.clone().unwrap();
        // The job has ended; its output is on the executors only.
        cluster.executors.clear();
        let mut rows = client.do_get(ticket).await.unwrap();
        let mut read = 0usize;
        let error = loop {
            match rows.next().await {
                Some(Ok(batch)) => read += batch.num_rows(),
                Some(Err(e)) => break e.to_string(),
                None => panic!("all {read} rows were read with no executor left"),
            }
        };
        assert!(read < 200_000, "{read}");
        assert!(
            error.contains("reading the query's rows from the executors"),
            "{error}"
        );
    });
}

/// A CA and a certificate it signed for 127.0.0.1 / localhost, as PEM
/// files in `dir`: (ca, cert, key).
fn tls_files(dir: &std::path::Path) -> (PathBuf, PathBuf, PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let params = CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()]).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    let paths = (
        dir.join("ca.pem"),
        dir.join("cert.pem"),
        dir.join("key.pem"),
    );
    std::fs::write(&paths.0, ca.pem()).unwrap();
    std::fs::write(&paths.1, cert.pem()).unwrap();
    std::fs::write(&paths.2, key.serialize_pem()).unwrap();
    paths
}

#[test]
fn the_flight_sql_port_with_tls_serves_only_clients_that_trust_its_ca() {
    let certs = tempfile::tempdir().unwrap();
    let (ca, cert, key) = tls_files(certs.path());
    let cluster = Cluster::start_with_setup(
        1,
        Some("tls-token"),
        ProcessSetup::args(&[
            "--tls-cert".as_ref(),
            cert.as_os_str(),
            "--tls-key".as_ref(),
            key.as_os_str(),
        ]),
        ProcessSetup::default(),
    );
    let tls_address = format!("grpc+tls://{}", cluster.flight_sql);
    let cli = |address: &str, token: &str, ca: Option<&std::path::Path>, sql: &str| {
        let mut command = Command::new(CLI);
        command
            .args(["--scheduler", address, "--token", token, "--format", "csv"])
            .args(["-c", sql])
            .env_remove("ICEMERGE_TOKEN")
            .env_remove("ICEMERGE_TLS_CA");
        if let Some(ca) = ca {
            command.arg("--tls-ca").arg(ca);
        }
        let out = command.output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    // Without the CA (the system's roots do not hold it), or in plain TCP,
    // no statement reaches the scheduler.
    let (ok, _, stderr) = cli(&tls_address, "tls-token", None, "CREATE SCHEMA refused");
    assert!(!ok && stderr.contains("cannot connect"), "{stderr}");
    let plain = format!("grpc://{}", cluster.flight_sql);
    let (ok, _, stderr) = cli(&plain, "tls-token", None, "CREATE SCHEMA refused");
    assert!(!ok, "{stderr}");
    // With it, a MERGE runs end to end.
    let (ok, stdout, stderr) = cli(
        &tls_address,
        "tls-token",
        Some(&ca),
        "CREATE SCHEMA tls; CREATE TABLE tls.t (id BIGINT, v BIGINT); \
         INSERT INTO tls.t VALUES (1, 10), (2, 20); \
         MERGE INTO tls.t USING (VALUES (2, 21), (3, 30)) AS s(id, v) ON t.id = s.id \
         WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *; \
         SELECT id, v FROM tls.t ORDER BY id",
    );
    assert!(ok, "{stdout}\n{stderr}\n{}", cluster.logs());
    assert!(stdout.ends_with("id,v\n1,10\n2,21\n3,30\n"), "{stdout}");
    // TLS does not stand in for the token.
    let (ok, _, stderr) = cli(
        &tls_address,
        "wrong",
        Some(&ca),
        "SELECT count(*) FROM tls.t",
    );
    assert!(!ok && stderr.contains("Unauthenticated"), "{stderr}");
    // The refused clients' CREATE SCHEMA never ran: it runs now.
    let (ok, _, stderr) = cli(
        &tls_address,
        "tls-token",
        Some(&ca),
        "CREATE SCHEMA refused",
    );
    assert!(ok, "{stderr}");
}

/// `ICEMERGE_LOG` for processes whose logs must not show a secret at any
/// level (the chattiest transport crates kept at info).
const DEBUG_LOG: &str = "debug,h2=info,hyper=info,hyper_util=info,tower=info,rustls=info";

#[test]
fn s3_warehouse_and_postgres_catalog_with_the_real_processes() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let Some(database) =
        runtime.block_on(icemerge_tests::postgres_database("cluster_processes_s3"))
    else {
        return;
    };
    let moto = icemerge_tests::moto::start_moto();
    moto.create_bucket("team");
    let warehouse = "s3://team/wh";
    // The scheduler's credentials stay on the scheduler: plans carry the
    // endpoint, each executor signs with its own.
    let scheduler = ProcessSetup::args(&[
        "--warehouse",
        warehouse,
        "--catalog-uri",
        &database.uri,
        "--s3-endpoint",
        &moto.endpoint,
        "--s3-access-key-id",
        "icemerge-test",
        "--s3-secret-access-key",
        "scheduler-only-secret",
    ])
    .env("ICEMERGE_LOG", DEBUG_LOG);
    let executor = ProcessSetup::args(&[
        "--s3-access-key-id",
        "icemerge-test",
        "--s3-secret-access-key",
        "executor-own-secret",
    ])
    .env("ICEMERGE_LOG", DEBUG_LOG);
    let cluster = Cluster::start_with_setup(2, None, scheduler, executor);
    cluster.sql(
        None,
        "CREATE SCHEMA db; CREATE TABLE db.t (id BIGINT, v BIGINT); \
         INSERT INTO db.t SELECT value, 0 FROM generate_series(1, 1000)",
    );
    let merged = cluster.sql(
        None,
        "MERGE INTO db.t USING (SELECT value AS id FROM generate_series(901, 1100)) s \
         ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = 1 \
         WHEN NOT MATCHED THEN INSERT (id, v) VALUES (s.id, 2)",
    );
    assert!(
        merged.lines().nth(1).unwrap().starts_with("200,100,"),
        "{merged}"
    );
    assert_eq!(
        cluster.sql(
            None,
            "SELECT v, count(*) AS n FROM db.t GROUP BY v ORDER BY v"
        ),
        "v,n\n0,900\n1,100\n2,100\n"
    );
    let objects = runtime.block_on(moto.objects(warehouse));
    assert!(
        objects.iter().any(|o| o.ends_with(".parquet"))
            && objects.iter().any(|o| o.ends_with(".metadata.json")),
        "{objects:?}"
    );
    assert!(!cluster.dir.path().join("warehouse").exists());

    // A failed MERGE leaves the bucket as it was (its files swept).
    let out = cluster.cli(
        None,
        &[
            "-c",
            "MERGE INTO db.t USING (SELECT 5 AS id UNION ALL SELECT 5 AS id) s \
             ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = 9",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("matched more than one source row"),
        "{stderr}"
    );
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let now = runtime.block_on(moto.objects(warehouse));
        if now == objects {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "files of the failed MERGE left in the bucket: {:?}",
            now.difference(&objects).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(
        cluster.sql(None, "SELECT count(*) AS n FROM db.t WHERE v = 9"),
        "n\n0\n"
    );
    // No secret in any process's log, at debug level.
    let logs = cluster.logs();
    assert!(
        logs.contains("DEBUG"),
        "the processes did not log at debug level"
    );
    for secret in ["scheduler-only-secret", "executor-own-secret"] {
        let leaks: Vec<String> = logs
            .lines()
            .filter_map(|line| {
                let at = line.find(secret)?;
                let from = line.floor_char_boundary(at.saturating_sub(400));
                Some(line[from..at + secret.len()].to_string())
            })
            .collect();
        assert!(leaks.is_empty(), "{secret} was logged: {leaks:#?}");
    }
    runtime.block_on(database.drop());
}

#[test]
fn four_clients_at_once_each_in_a_session_of_its_own() {
    let cluster = Cluster::start_with_ui(2, None);
    cluster.sql(
        None,
        "CREATE SCHEMA c; CREATE TABLE c.a (id BIGINT, v BIGINT); \
         CREATE TABLE c.b (id BIGINT, v BIGINT); \
         INSERT INTO c.a SELECT value, 0 FROM generate_series(1, 1000000); \
         INSERT INTO c.b SELECT value, 0 FROM generate_series(1, 1000000)",
    );
    // Each CLI process is one client (one connection): its SET holds for
    // its own statements only.
    let merge = |table: &str| {
        format!(
            "MERGE INTO c.{table} USING (SELECT value AS id FROM generate_series(1, 1000000, 2)) s \
             ON {table}.id = s.id WHEN MATCHED THEN UPDATE SET v = 1"
        )
    };
    let scripts = [
        format!(
            "SET datafusion.execution.batch_size = 1111; {}; SHOW datafusion.execution.batch_size",
            merge("a")
        ),
        format!(
            "SET datafusion.execution.batch_size = 2222; {}; SHOW datafusion.execution.batch_size",
            merge("b")
        ),
        "SET datafusion.execution.batch_size = 3333; SELECT sum(v) AS s FROM c.a; \
         SHOW datafusion.execution.batch_size"
            .to_string(),
        "SELECT count(*) AS n FROM c.b; SHOW datafusion.execution.batch_size".to_string(),
    ];
    let clients: Vec<Child> = scripts
        .iter()
        .map(|script| {
            Command::new(CLI)
                .arg("--scheduler")
                .arg(cluster.flight_sql.to_string())
                .args(["--format", "csv", "-c", script])
                .env_remove("ICEMERGE_TOKEN")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outputs: Vec<String> = clients
        .into_iter()
        .map(|client| {
            let out = client.wait_with_output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout).to_string();
            assert!(
                out.status.success(),
                "{stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            stdout
        })
        .collect();
    for (output, size) in outputs.iter().zip(["1111", "2222", "3333", "8192"]) {
        assert!(
            output.ends_with(&format!("datafusion.execution.batch_size,{size}\n")),
            "{output}"
        );
    }
    assert!(outputs[0].contains("\n500000,500000,"), "{}", outputs[0]);
    assert!(outputs[1].contains("\n500000,500000,"), "{}", outputs[1]);
    assert!(outputs[3].contains("n\n1000000\n"), "{}", outputs[3]);
    assert_eq!(
        cluster.sql(
            None,
            "SELECT (SELECT sum(v) FROM c.a) AS a, (SELECT sum(v) FROM c.b) AS b"
        ),
        "a,b\n500000,500000\n"
    );
    // The two MERGEs ran at the same time: each started before the other
    // ended.
    let (_, list) = http_get(cluster.ui.unwrap(), "/statements.json", None);
    let list: serde_json::Value = serde_json::from_str(&list).unwrap();
    let merges: Vec<(i64, i64, String)> = list["statements"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["sql"].as_str().unwrap().starts_with("MERGE"))
        .map(|s| {
            (
                s["started_ms"].as_i64().unwrap(),
                s["ended_ms"].as_i64().unwrap(),
                s["client"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(merges.len(), 2, "{list}");
    let ((start_a, end_a, client_a), (start_b, end_b, client_b)) = (&merges[0], &merges[1]);
    assert_ne!(client_a, client_b);
    assert!(start_a < end_b && start_b < end_a, "{list}");
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

/// The scheduler session `start_big_merge` runs its MERGE in.
const BIG_MERGE_SESSION: &str = "big-merge";

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
        .args(["--session", BIG_MERGE_SESSION])
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
fn killing_an_executor_during_the_writer_stage_the_merge_completes_without_orphans() {
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
    // Completed: the lost executor's tasks ran again on the other two.
    assert!(
        out.status.success(),
        "the MERGE failed: {stdout}{stderr}\n{}",
        cluster.logs()
    );
    assert!(stdout.starts_with("count,rows_updated"), "{stdout}");
    assert!(
        stdout
            .lines()
            .nth(1)
            .unwrap()
            .starts_with("2000000,2000000,"),
        "{stdout}"
    );
    // The loss was seen while the job ran, and its tasks ran again.
    let logs = cluster.logs();
    assert!(
        logs.contains("executor lost during the job"),
        "the executor loss was not handled during the job:\n{logs}"
    );
    // One snapshot more than before, with exactly the merged rows.
    assert_eq!(snapshots, "n\n5\n");
    assert_eq!(totals, "n,s\n4000000,2000000\n");
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

/// With its only executor killed, a MERGE fails at once with an error
/// naming it; the table is unchanged and no file of the MERGE is left.
#[test]
fn killing_the_last_executor_fails_the_merge_and_leaves_the_table_unchanged() {
    let mut cluster = Cluster::start(1, None);
    let (merge, before) = start_big_merge(&cluster);
    let mut victim = cluster.executors.remove(0);
    victim.0.kill().unwrap();
    victim.0.wait().unwrap();

    let out = merge.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("no executor left for job"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    // Start an executor again to read the table.
    cluster.add_executor();
    let snapshots = cluster.sql(None, "SELECT count(*) AS n FROM db.\"big$snapshots\"");
    let totals = cluster.sql(None, "SELECT count(*) AS n, sum(v) AS s FROM db.big");
    assert_eq!(snapshots, "n\n4\n", "{stderr}");
    assert_eq!(totals, "n,s\n4000000,0\n", "{stderr}");
    let warehouse = cluster.dir.path().join("warehouse");
    let deadline = Instant::now() + Duration::from_secs(40);
    while parquet_files(&warehouse) != before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(parquet_files(&warehouse), before, "{stderr}");
}

/// Asks the scheduler's `icemerge.progress` action (what the CLI's
/// progress bars show) about the statement of `start_big_merge`'s session.
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
        let mut action = tonic::Request::new(arrow_flight::Action {
            r#type: "icemerge.progress".into(),
            body: Default::default(),
        });
        action
            .metadata_mut()
            .insert("x-icemerge-session", BIG_MERGE_SESSION.parse().unwrap());
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

/// The document `EXPLAIN ANALYZE (FORMAT JSON) <merge>` prints through the
/// CLI, and the same pretty-printed for assertion messages.
fn explain_analyze_json(cluster: &Cluster, merge: &str) -> (serde_json::Value, String) {
    let sql = format!("EXPLAIN ANALYZE (FORMAT JSON) {merge}");
    let out = cluster.cli(None, &["--format", "json", "-c", &sql]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let context = serde_json::to_string_pretty(&doc).unwrap();
    (doc, context)
}

/// EXPLAIN ANALYZE (FORMAT JSON) through the CLI on executor processes: the
/// CLI prints the document as it is, and its per-stage figures are those
/// the executors reported (rows, shuffle files, data files, executor ids).
fn explain_analyze_reports_the_executor_processes_figures(cluster: &Cluster) {
    let (doc, context) = explain_analyze_json(
        cluster,
        "MERGE INTO db.t USING (SELECT 7 AS id) AS s
         ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = 3",
    );
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
    // The one file left after pruning is read in one task, which joins
    // and writes the one merge row (its one route): no join stage apart.
    assert!(stages.iter().all(|s| s["kind"] != "join"), "{context}");
    let writer = stage("merge_writer");
    let source_rows = 1;
    assert_eq!(
        writer["rows_in"].as_u64(),
        scan["rows_out"].as_u64().map(|rows| rows + source_rows),
        "{context}"
    );
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

/// The scheduler's live page (`--ui-port`) lists what `icemerge
/// --scheduler` sent, with the MERGE's stage graph and final figures, and
/// needs the scheduler's token.
#[test]
fn the_live_page_lists_what_the_cli_sent() {
    let token = "ui-token";
    let cluster = Cluster::start_with_ui(2, Some(token));
    let ui = cluster
        .ui
        .expect("the scheduler printed the live page's URL");
    cluster.sql(
        Some(token),
        "CREATE SCHEMA d; CREATE TABLE d.t (id BIGINT, v BIGINT); \
         INSERT INTO d.t SELECT value, 0 FROM generate_series(1, 10)",
    );
    let merge = "MERGE INTO d.t USING (SELECT value AS id FROM generate_series(8, 12)) AS s \
                 ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = 1 \
                 WHEN NOT MATCHED THEN INSERT (id, v) VALUES (s.id, 2)";
    let out = cluster.sql(Some(token), merge);
    assert!(out.lines().nth(1).unwrap().starts_with("5,3,0,2,"), "{out}");

    let (status, _) = http_get(ui, "/", None);
    assert_eq!(status, 401);
    let (status, _) = http_get(ui, "/statements.json", Some("wrong"));
    assert_eq!(status, 401);
    let (status, page) = http_get(ui, &format!("/?token={token}"), None);
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("MERGE INTO d.t USING"), "{page}");

    let (_, list) = http_get(ui, "/statements.json", Some(token));
    let list: serde_json::Value = serde_json::from_str(&list).unwrap();
    let statements = list["statements"].as_array().unwrap();
    // The CLI splits the script: one entry per statement, newest first.
    let sqls: Vec<&str> = statements
        .iter()
        .map(|s| s["sql"].as_str().unwrap())
        .collect();
    assert_eq!(sqls.len(), 4, "{list}");
    assert_eq!(sqls[0], merge);
    assert!(sqls[3].starts_with("CREATE SCHEMA d"), "{list}");
    assert!(
        statements.iter().all(|s| s["state"] == "succeeded"),
        "{list}"
    );

    let id = statements[0]["id"].as_u64().unwrap();
    let (status, view) = http_get(ui, &format!("/statements/{id}.json"), Some(token));
    assert_eq!(status, 200, "{view}");
    let view: serde_json::Value = serde_json::from_str(&view).unwrap();
    assert_eq!(view["merge"]["count"], 5, "{view}");
    let stages = view["stages"].as_array().unwrap();
    let kinds: Vec<&str> = stages.iter().map(|s| s["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "scan_source",
            "scan_target",
            "join",
            "merge_writer",
            "commit"
        ],
        "{view}"
    );
    for stage in stages {
        assert_eq!(stage["status"], "done", "{stage}");
        assert_eq!(stage["tasks_done"], stage["tasks_total"], "{stage}");
    }
    let join = &stages[2];
    assert_eq!(join["rows_out"], 5, "{view}");
    assert_eq!(stages[3]["rows_in"], 5, "{view}");
    let svg = view["svg"].as_str().unwrap();
    assert_eq!(svg.matches("<g class=\"stage\"").count(), 5, "{svg}");
}

/// An executor process runs each task in its slot's share of
/// `--memory-limit`: a copy-on-write merge updating half of a table far
/// larger than that share completes on it, its writer's sort spilling,
/// and the rows are exact.
#[test]
fn an_executor_process_spills_beyond_its_memory_limit_and_completes() {
    let cluster = Cluster::start_with_setup(
        1,
        None,
        ProcessSetup::default(),
        // Two task slots of 24 MiB each, 10 MiB of which each sort keeps
        // back for merging its spills.
        ProcessSetup::args(&["--memory-limit", "48MiB"]),
    );
    let mut script =
        String::from("CREATE SCHEMA db; CREATE TABLE db.t (id BIGINT, v BIGINT, s VARCHAR);");
    // Four files of 100k rows of ~260 bytes (~100 MB): each of the (at
    // most four) writers sorts ~14 MB of updated rows.
    for f in 0..4 {
        script.push_str(&format!(
            "INSERT INTO db.t SELECT value, 0, repeat('x', 250) || value \
             FROM generate_series({}, {});",
            f * 100_000 + 1,
            (f + 1) * 100_000
        ));
    }
    cluster.sql(None, &script);
    let (doc, context) = explain_analyze_json(
        &cluster,
        "MERGE INTO db.t t \
         USING (SELECT id, 1 AS v FROM db.t WHERE id % 2 = 0) s ON t.id = s.id \
         WHEN MATCHED THEN UPDATE SET v = s.v",
    );
    assert_eq!(doc["merge"]["rows_updated"], 200_000, "{context}");
    let spilled: u64 = doc["stages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["kind"] == "merge_writer")
        .filter_map(|s| s["figures"]["spill_count"].as_u64())
        .sum();
    assert!(spilled > 0, "the writer did not spill: {context}");
    let rows = cluster.sql(
        None,
        "SELECT count(*) AS n, sum(v) AS v, sum(id) AS i, sum(length(s)) AS l FROM db.t \
         WHERE v = 1 - id % 2 AND s = repeat('x', 250) || id",
    );
    assert_eq!(rows, "n,v,i,l\n400000,200000,80000200000,102288895\n");
}
