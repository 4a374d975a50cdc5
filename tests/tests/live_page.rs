//! The scheduler's live page (`--ui-port`), on a real scheduler (the
//! `icemerge-scheduler` process's `start`, in this process) with two
//! executors, statements sent over Flight SQL:
//! - a MERGE is listed; its page and JSON show every stage of its graph
//!   with exact figures, while it runs (held before its commit by the
//!   test-only pause: the job's stages done, the commit waiting) and after;
//! - with a token, every path needs it (401 without, or with a wrong one);
//! - headless Chromium (Debian's `chromium`) renders the statement page and
//!   an `EXPLAIN ANALYZE (FORMAT SVG)` picture: not blank, every stage in
//!   the DOM. Skipped, saying so, without chromium; with
//!   `ICEMERGE_REQUIRE_CHROMIUM=1` (set by ./test.sh after installing it)
//!   a missing chromium fails.

use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use arrow_flight::sql::client::FlightSqlServiceClient;
use icemerge_executor::process::ExecutorOptions;
use icemerge_scheduler::server::{start, RunningScheduler, SchedulerProcessOptions};
use icemerge_scheduler::{CatalogOptions, EngineKind};
use icemerge_tests::{http_get, open_session};
use serde_json::Value;
use tonic::transport::Channel;

const TOKEN: &str = "live-page s3cret/=";

/// A scheduler with the live page and two executors, in this process.
struct Cluster {
    dir: tempfile::TempDir,
    scheduler: RunningScheduler,
    token: Option<String>,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Cluster {
    async fn start(token: Option<&str>) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let scheduler = start(SchedulerProcessOptions {
            bind_host: "127.0.0.1".parse().unwrap(),
            ballista_port: 0,
            flight_sql_port: 0,
            catalog: CatalogOptions {
                warehouse: dir.path().join("warehouse"),
                ..Default::default()
            },
            token: token.map(str::to_string),
            insecure_no_auth: false,
            target_partitions: Some(4),
            push_scheduling: true,
            executor_timeout_seconds: 30,
            memory_limit: None,
            ui_port: Some(0),
            metrics_port: None,
            tls: None,
        })
        .await
        .expect("start the scheduler");
        for i in 0..2 {
            let options = ExecutorOptions {
                bind_host: "127.0.0.1".into(),
                external_host: None,
                port: free_port(),
                grpc_port: free_port(),
                scheduler_host: "127.0.0.1".into(),
                scheduler_port: scheduler.ballista_addr.port(),
                task_slots: 2,
                work_dir: Some(dir.path().join(format!("work-{i}"))),
                push_scheduling: true,
                memory_limit: Default::default(),
                storage_credentials: Default::default(),
            };
            tokio::spawn(icemerge_executor::process::run(options));
        }
        let cluster = Cluster {
            dir,
            scheduler,
            token: token.map(str::to_string),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (_, body) = http_get(cluster.scheduler.ballista_addr, "/api/executors", None);
            let n = serde_json::from_str::<Value>(&body)
                .ok()
                .and_then(|v| v.as_array().map(|a| a.len()))
                .unwrap_or(0);
            if n >= 2 {
                break;
            }
            assert!(Instant::now() < deadline, "executors did not register");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        cluster
    }

    fn ui(&self) -> SocketAddr {
        self.scheduler.ui_addr.expect("the live page is enabled")
    }

    /// A Flight SQL client carrying the token, in the one scheduler session
    /// of this test's statements (its SET holds for all of them).
    async fn client(&self) -> FlightSqlServiceClient<Channel> {
        let channel = tonic::transport::Endpoint::from_shared(format!(
            "http://{}",
            self.scheduler.flight_sql_addr
        ))
        .unwrap()
        .connect()
        .await
        .unwrap();
        let mut client = FlightSqlServiceClient::new(channel);
        client.set_header("x-icemerge-session", "live-page");
        if let Some(token) = &self.token {
            client.set_header("authorization", format!("Bearer {token}"));
        }
        client
    }

    /// Runs `sql` over Flight SQL; its update count.
    async fn run(&self, sql: &str) -> i64 {
        self.client()
            .await
            .execute_update(sql.to_string(), None)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// `GET path` on the live page with the token in the header; the body
    /// (asserting 200).
    fn page(&self, path: &str) -> String {
        let (status, body) = http_get(self.ui(), path, self.token.as_deref());
        assert_eq!(status, 200, "GET {path}: {body}");
        body
    }

    fn json(&self, path: &str) -> Value {
        let body = self.page(path);
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
    }
}

fn encoded_token() -> String {
    TOKEN
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' => (b as char).to_string(),
            b => format!("%{b:02X}"),
        })
        .collect()
}

const MERGE: &str = "MERGE INTO d.t USING (SELECT value AS id FROM generate_series(91, 110)) AS s \
     ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = 1 WHEN NOT MATCHED THEN INSERT (id, v) VALUES (s.id, 2)";

/// A table of 100 rows and the MERGE above: 10 updated, 10 inserted.
async fn load(cluster: &Cluster) {
    cluster.run("CREATE SCHEMA d").await;
    cluster.run("CREATE TABLE d.t (id BIGINT, v BIGINT)").await;
    let inserted = cluster
        .run("INSERT INTO d.t SELECT value, 0 FROM generate_series(1, 100)")
        .await;
    assert_eq!(inserted, 100);
}

/// The id of the newest listed statement whose SQL is `sql`.
fn statement_id(cluster: &Cluster, sql: &str) -> u64 {
    let list = cluster.json("/statements.json");
    list["statements"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["sql"] == sql)
        .unwrap_or_else(|| panic!("{sql} not listed: {list}"))["id"]
        .as_u64()
        .unwrap()
}

/// The stage of `kind` of a statement's JSON.
fn stage<'a>(view: &'a Value, kind: &str) -> &'a Value {
    view["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} stage in {view}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_live_page_shows_a_merge_while_it_runs_and_after() {
    let cluster = Cluster::start(Some(TOKEN)).await;
    load(&cluster).await;

    // Held before its commit: the job is done, the commit is not.
    let pause = cluster.dir.path().join("pause");
    std::fs::create_dir_all(&pause).unwrap();
    cluster
        .run(&format!(
            "SET icemerge.test_pause_before_commit = '{}'",
            pause.display()
        ))
        .await;
    let merge = {
        let mut client = cluster.client().await;
        tokio::spawn(async move { client.execute_update(MERGE.to_string(), None).await })
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    while !pause.join("paused").exists() {
        assert!(
            Instant::now() < deadline,
            "the MERGE did not reach its commit"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let id = statement_id(&cluster, MERGE);
    let list = cluster.page("/");
    assert!(list.contains("MERGE INTO d.t USING"), "{list}");
    assert!(list.contains("running"), "{list}");

    let running = cluster.json(&format!("/statements/{id}.json"));
    assert_eq!(running["state"], "running", "{running}");
    let stages = running["stages"].as_array().unwrap();
    assert!(stages.len() >= 4, "{running}");
    for s in stages {
        if s["kind"] == "commit" {
            assert_eq!(s["status"], "waiting", "{s}");
            assert!(s["rows_out"].is_null(), "{s}");
        } else {
            // Ballista's stage state and task counts, and the figures of
            // the tasks finished.
            assert_eq!(s["status"], "successful", "{s}");
            assert!(s["tasks_total"].as_u64().unwrap() >= 1, "{s}");
            assert_eq!(s["tasks_done"], s["tasks_total"], "{s}");
            assert!(s["rows_out"].is_u64(), "{s}");
        }
    }
    // One merge row per matched or inserted source row, all to the writer.
    assert_eq!(stage(&running, "join")["rows_out"], 20, "{running}");
    assert_eq!(stage(&running, "merge_writer")["rows_in"], 20, "{running}");
    let svg = running["svg"].as_str().expect("the running graph's SVG");
    for s in stages {
        assert!(
            svg.contains(&format!("data-stage=\"{}\"", s["id"])),
            "{svg}"
        );
    }

    std::fs::write(pause.join("go"), b"").unwrap();
    let count = merge.await.unwrap().expect("the MERGE");
    assert_eq!(count, 20);

    let done = cluster.json(&format!("/statements/{id}.json"));
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["merge"]["count"], 20, "{done}");
    assert_eq!(done["merge"]["rows_updated"], 10, "{done}");
    assert_eq!(done["merge"]["rows_inserted"], 10, "{done}");
    assert_eq!(stage(&done, "join")["rows_out"], 20, "{done}");
    let writer = stage(&done, "merge_writer");
    assert_eq!(writer["rows_in"], 20, "{done}");
    let commit = stage(&done, "commit");
    assert_eq!(commit["status"], "done", "{done}");
    assert_eq!(commit["tasks_done"], 1, "{done}");
    for s in done["stages"].as_array().unwrap() {
        assert_eq!(s["status"], "done", "{s}");
        assert!(s["wall_ms"].as_f64().is_some(), "{s}");
    }
    // The page: every stage's row and box, the state.
    let html = cluster.page(&format!("/statements/{id}"));
    for s in done["stages"].as_array().unwrap() {
        let stage_id = &s["id"];
        assert!(
            html.contains(&format!("<tr class=\"stage\" data-stage=\"{stage_id}\">")),
            "{html}"
        );
        assert!(
            html.contains(&format!("<g class=\"stage\" id=\"stage-{stage_id}\"")),
            "{html}"
        );
    }
    assert!(html.contains("succeeded"), "{html}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_live_page_needs_the_token() {
    let cluster = Cluster::start(Some(TOKEN)).await;
    cluster.run("CREATE SCHEMA d").await;
    let ui = cluster.ui();
    for path in [
        "/",
        "/statements.json",
        "/statements/1",
        "/statements/1.json",
        "/assets/statement.js",
        "/assets/live.css",
        "/no-such-page",
    ] {
        let (status, body) = http_get(ui, path, None);
        assert_eq!(status, 401, "GET {path} without the token: {body}");
        assert!(!body.contains("CREATE SCHEMA"), "{body}");
        let (status, _) = http_get(ui, path, Some("wrong"));
        assert_eq!(status, 401, "GET {path} with a wrong token");
        let (status, _) = http_get(ui, &format!("{path}?token=wrong"), None);
        assert_eq!(status, 401, "GET {path}?token=wrong");
    }
    // The header or the query parameter, and links carry the latter on.
    let (status, body) = http_get(ui, "/", Some(TOKEN));
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("CREATE SCHEMA d"), "{body}");
    let query = format!("?token={}", encoded_token());
    let (status, body) = http_get(ui, &format!("/{query}"), None);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(&format!("/statements/1{query}")), "{body}");
    let (status, _) = http_get(ui, &format!("/statements/1.json{query}"), None);
    assert_eq!(status, 200);
    let (status, _) = http_get(ui, "/statements/999.json", Some(TOKEN));
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_live_page_is_open_without_a_token_and_lists_failures() {
    let cluster = Cluster::start(None).await;
    let (status, _) = http_get(cluster.ui(), "/", None);
    assert_eq!(status, 200);
    let err = cluster
        .client()
        .await
        .execute_update("SELECT * FROM nowhere.t".into(), None)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("nowhere"), "{err}");
    let list = cluster.json("/statements.json");
    let failed = &list["statements"][0];
    assert_eq!(failed["sql"], "SELECT * FROM nowhere.t", "{list}");
    assert_eq!(failed["state"], "failed", "{list}");
    assert!(
        failed["error"].as_str().unwrap().contains("nowhere"),
        "{list}"
    );
}

/// Debian's chromium, or None after saying the test is skipped; with
/// `ICEMERGE_REQUIRE_CHROMIUM=1` a missing chromium fails the test.
fn chromium(test: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .flat_map(|dir| ["chromium", "chromium-browser"].map(|name| dir.join(name)))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        if std::env::var("ICEMERGE_REQUIRE_CHROMIUM").as_deref() == Ok("1") {
            panic!(
                "{test}: chromium is not on PATH but ICEMERGE_REQUIRE_CHROMIUM=1 \
                 (./test.sh installs Debian's 'chromium' package as root)"
            );
        }
        eprintln!(
            "SKIPPED {test}: chromium is not on PATH (./test.sh installs Debian's \
             'chromium' package and sets ICEMERGE_REQUIRE_CHROMIUM=1)"
        );
    }
    found
}

/// Runs headless chromium on `url` with `args`; its standard output.
fn run_chromium(chromium: &Path, profile: &Path, args: &[String], url: &str) -> String {
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start chromium");
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        stdout.read_to_string(&mut out).unwrap();
        out
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            assert!(status.success(), "chromium {url} {args:?}: {status}\n{err}");
            return reader.join().unwrap();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("chromium {url} {args:?} did not finish in 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The pixels of an 8-bit, non-interlaced RGB or RGBA PNG (what Chromium's
/// screenshots are), one `Vec<u8>` per pixel.
fn png_pixels(bytes: &[u8]) -> Vec<Vec<u8>> {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    let (mut width, mut height, mut channels) = (0usize, 0usize, 0usize);
    let mut compressed = vec![];
    let mut at = 8;
    while at + 8 <= bytes.len() {
        let len = u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        let kind = &bytes[at + 4..at + 8];
        let data = &bytes[at + 8..at + 8 + len];
        match kind {
            b"IHDR" => {
                width = u32::from_be_bytes(data[0..4].try_into().unwrap()) as usize;
                height = u32::from_be_bytes(data[4..8].try_into().unwrap()) as usize;
                assert_eq!(data[8], 8, "bit depth");
                channels = match data[9] {
                    2 => 3,
                    6 => 4,
                    other => panic!("PNG colour type {other}"),
                };
                assert_eq!(data[12], 0, "interlaced PNG");
            }
            b"IDAT" => compressed.extend_from_slice(data),
            b"IEND" => break,
            _ => {}
        }
        at += 12 + len;
    }
    let mut raw = vec![];
    flate2::read::ZlibDecoder::new(&compressed[..])
        .read_to_end(&mut raw)
        .expect("PNG image data");
    let stride = width * channels;
    assert_eq!(raw.len(), height * (stride + 1), "PNG data size");
    let mut image = vec![0u8; height * stride];
    for y in 0..height {
        let filter = raw[y * (stride + 1)];
        let line = &raw[y * (stride + 1) + 1..(y + 1) * (stride + 1)];
        for x in 0..stride {
            let a = if x >= channels {
                image[y * stride + x - channels]
            } else {
                0
            };
            let b = if y > 0 {
                image[(y - 1) * stride + x]
            } else {
                0
            };
            let c = if x >= channels && y > 0 {
                image[(y - 1) * stride + x - channels]
            } else {
                0
            };
            let predicted = match filter {
                0 => 0,
                1 => a,
                2 => b,
                3 => ((a as u16 + b as u16) / 2) as u8,
                4 => {
                    let p = a as i16 + b as i16 - c as i16;
                    let (pa, pb, pc) = (
                        (p - a as i16).abs(),
                        (p - b as i16).abs(),
                        (p - c as i16).abs(),
                    );
                    if pa <= pb && pa <= pc {
                        a
                    } else if pb <= pc {
                        b
                    } else {
                        c
                    }
                }
                other => panic!("PNG filter {other}"),
            };
            image[y * stride + x] = line[x].wrapping_add(predicted);
        }
    }
    image.chunks(channels).map(|p| p.to_vec()).collect()
}

/// Asserts the PNG at `path` is not blank: several colours and a fair
/// share of pixels unlike the background (the top-left pixel).
fn assert_not_blank(path: &Path) {
    let pixels = png_pixels(&std::fs::read(path).expect("the screenshot"));
    let background = &pixels[0];
    let differing = pixels.iter().filter(|p| *p != background).count();
    let colours: std::collections::BTreeSet<&Vec<u8>> = pixels.iter().collect();
    assert!(
        colours.len() > 8,
        "{}: only {} colours",
        path.display(),
        colours.len()
    );
    assert!(
        differing * 100 > pixels.len(),
        "{}: {differing} of {} pixels differ from the background",
        path.display(),
        pixels.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chromium_renders_the_live_page_and_the_svg_of_a_merge() {
    let Some(chromium) = chromium("chromium_renders_the_live_page_and_the_svg_of_a_merge") else {
        return;
    };
    let cluster = Cluster::start(Some(TOKEN)).await;
    load(&cluster).await;
    assert_eq!(cluster.run(MERGE).await, 20);
    let id = statement_id(&cluster, MERGE);
    let view = cluster.json(&format!("/statements/{id}.json"));
    let stages: Vec<u64> = view["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_u64().unwrap())
        .collect();
    assert!(stages.len() >= 4, "{view}");

    let out = cluster.dir.path().join("chromium");
    std::fs::create_dir_all(&out).unwrap();
    let profile = out.join("profile");
    let url = format!(
        "http://{}/statements/{id}?token={}",
        cluster.ui(),
        encoded_token()
    );
    let page_png = out.join("page.png");
    let chromium2 = chromium.clone();
    let (url2, profile2, png2) = (url.clone(), profile.clone(), page_png.clone());
    let dom = tokio::task::spawn_blocking(move || {
        run_chromium(
            &chromium2,
            &profile2,
            &[
                format!("--screenshot={}", png2.display()),
                "--window-size=1400,1200".into(),
            ],
            &url2,
        );
        run_chromium(&chromium2, &profile2, &["--dump-dom".into()], &url2)
    })
    .await
    .unwrap();
    assert_not_blank(&page_png);
    assert!(dom.contains("succeeded"), "{dom}");
    for stage in &stages {
        assert!(
            dom.contains(&format!("<tr class=\"stage\" data-stage=\"{stage}\">")),
            "stage {stage} row missing from the rendered page:\n{dom}"
        );
        assert!(
            dom.contains(&format!("id=\"stage-{stage}\"")),
            "stage {stage} box missing from the rendered page:\n{dom}"
        );
    }

    // A MERGE held before its commit: the page's script polls its JSON (the
    // token carried on from the page's URL) and redraws it as running.
    let pause = cluster.dir.path().join("pause");
    std::fs::create_dir_all(&pause).unwrap();
    cluster
        .run(&format!(
            "SET icemerge.test_pause_before_commit = '{}'",
            pause.display()
        ))
        .await;
    let again = "MERGE INTO d.t USING (SELECT value AS id FROM generate_series(1, 5)) AS s \
                 ON t.id = s.id WHEN MATCHED THEN DELETE";
    let merge = {
        let mut client = cluster.client().await;
        tokio::spawn(async move { client.execute_update(again.to_string(), None).await })
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    while !pause.join("paused").exists() {
        assert!(
            Instant::now() < deadline,
            "the MERGE did not reach its commit"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let running_id = statement_id(&cluster, again);
    let running_url = format!(
        "http://{}/statements/{running_id}?token={}",
        cluster.ui(),
        encoded_token()
    );
    let (chromium4, profile4) = (chromium.clone(), profile.clone());
    let running_dom = tokio::task::spawn_blocking(move || {
        run_chromium(
            &chromium4,
            &profile4,
            &["--dump-dom".into(), "--virtual-time-budget=3500".into()],
            &running_url,
        )
    })
    .await
    .unwrap();
    std::fs::write(pause.join("go"), b"").unwrap();
    assert_eq!(merge.await.unwrap().expect("the held MERGE"), 5);
    assert!(
        running_dom.contains("data-refreshed="),
        "the page's script did not redraw it:\n{running_dom}"
    );
    assert!(!running_dom.contains("refresh failed"), "{running_dom}");
    assert!(
        running_dom.contains("<span id=\"state\" class=\"running\">running</span>"),
        "{running_dom}"
    );
    assert!(
        running_dom.contains(">waiting<"),
        "the commit waits:\n{running_dom}"
    );

    // EXPLAIN ANALYZE (FORMAT SVG) of the same MERGE on the embedded engine.
    let local = open_session(&cluster.dir.path().join("local"), EngineKind::Local).await;
    local
        .execute(
            "CREATE SCHEMA d; CREATE TABLE d.t (id BIGINT, v BIGINT); \
             INSERT INTO d.t SELECT value, 0 FROM generate_series(1, 100)",
        )
        .await
        .unwrap();
    let output = local
        .execute_one(&format!("EXPLAIN ANALYZE (FORMAT SVG) {MERGE}"))
        .await
        .unwrap();
    let svg = output.as_document().expect("an SVG document").to_string();
    let boxes = svg.matches("<g class=\"stage\"").count();
    assert!(boxes >= 4, "{svg}");
    let svg_path = out.join("merge.svg");
    std::fs::write(&svg_path, &svg).unwrap();
    let svg_png = out.join("svg.png");
    let svg_url = format!("file://{}", svg_path.display());
    let (png3, profile3) = (svg_png.clone(), profile.clone());
    let svg_dom = tokio::task::spawn_blocking(move || {
        run_chromium(
            &chromium,
            &profile3,
            &[
                format!("--screenshot={}", png3.display()),
                "--window-size=1200,1400".into(),
            ],
            &svg_url,
        );
        run_chromium(&chromium, &profile3, &["--dump-dom".into()], &svg_url)
    })
    .await
    .unwrap();
    assert_not_blank(&svg_png);
    for stage in 1..=boxes {
        assert!(
            svg_dom.contains(&format!("id=\"stage-{stage}\"")),
            "stage {stage} missing from the rendered SVG:\n{svg_dom}"
        );
    }
}
