//! Processes of a test cluster on loopback: an `icemerge-scheduler`, its
//! `icemerge-executor`s and the `icemerge` CLI talking to it over Flight
//! SQL; every process is killed when its handle is dropped.

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use icemerge_tests::http_get;

pub const SCHEDULER: &str = env!("CARGO_BIN_EXE_icemerge-scheduler");
pub const EXECUTOR: &str = env!("CARGO_BIN_EXE_icemerge-executor");
pub const CLI: &str = env!("CARGO_BIN_EXE_icemerge");

/// A child process killed when dropped.
pub struct Process(pub Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub ballista: SocketAddr,
    pub flight_sql: SocketAddr,
    /// The live page's address (`start_with_ui`).
    pub ui: Option<SocketAddr>,
    /// The metrics endpoint's address (`start_with_metrics`).
    pub metrics: Option<SocketAddr>,
    pub executor_logs: Vec<PathBuf>,
    /// What every executor is started with beyond the defaults.
    executor_setup: ProcessSetup,
    // Executors first: they are stopped before the scheduler.
    pub executors: Vec<Process>,
    _scheduler: Process,
}

/// More arguments and environment variables for a process of the cluster.
#[derive(Clone, Default)]
pub struct ProcessSetup {
    pub args: Vec<std::ffi::OsString>,
    pub env: Vec<(String, String)>,
}

impl ProcessSetup {
    pub fn args<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Self {
        Self {
            args: args.iter().map(|a| a.as_ref().to_owned()).collect(),
            env: vec![],
        }
    }

    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    fn apply(&self, command: &mut Command) {
        command.args(&self.args);
        command.envs(self.env.iter().map(|(k, v)| (k, v)));
    }
}

/// A loopback port free at the time of asking, and never one this test
/// process handed out before: the kernel may give a port `free_port` just
/// released to the next bind to port 0, so two executors started side by
/// side were given the same port (one its Flight port, the other its gRPC
/// port) and the second failed to start.
pub fn free_port() -> u16 {
    static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if HANDED_OUT.lock().unwrap().insert(port) {
            return port;
        }
    }
}

pub fn read_log(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

impl Cluster {
    pub fn start(executors: usize, token: Option<&str>) -> Cluster {
        Self::start_with(executors, token, false)
    }

    /// As `start`, with the scheduler's live page on a free port.
    pub fn start_with_ui(executors: usize, token: Option<&str>) -> Cluster {
        Self::start_with(executors, token, true)
    }

    /// As `start`, with the scheduler's metrics endpoint on a free port.
    pub fn start_with_metrics(executors: usize, token: Option<&str>) -> Cluster {
        let none = ProcessSetup::default;
        Self::start_with_ports(executors, token, false, true, none(), none())
    }

    /// As `start`, with more arguments and environment for the scheduler
    /// (its own `--warehouse` replaces the default) and the executors.
    pub fn start_with_setup(
        executors: usize,
        token: Option<&str>,
        scheduler: ProcessSetup,
        executor: ProcessSetup,
    ) -> Cluster {
        Self::start_with_ports(executors, token, false, false, scheduler, executor)
    }

    fn start_with(executors: usize, token: Option<&str>, ui: bool) -> Cluster {
        let none = ProcessSetup::default;
        Self::start_with_ports(executors, token, ui, false, none(), none())
    }

    fn start_with_ports(
        executors: usize,
        token: Option<&str>,
        ui: bool,
        metrics: bool,
        scheduler_setup: ProcessSetup,
        executor_setup: ProcessSetup,
    ) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let scheduler_log = dir.path().join("scheduler.log");
        let mut command = Command::new(SCHEDULER);
        command
            .args(["--bind-host", "127.0.0.1", "--port", "0"])
            .args(["--flight-sql-port", "0", "--target-partitions", "6"])
            .args(["--executor-timeout", "10"])
            .env_remove("ICEMERGE_TOKEN")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&scheduler_log).unwrap());
        if let Some(token) = token {
            command.args(["--token", token]);
        }
        if ui {
            command.args(["--ui-port", "0"]);
        }
        if metrics {
            command.args(["--metrics-port", "0"]);
        }
        if !scheduler_setup.args.iter().any(|a| a == "--warehouse") {
            command.arg("--warehouse").arg(dir.path().join("warehouse"));
        }
        scheduler_setup.apply(&mut command);
        let mut child = command.spawn().expect("spawn icemerge-scheduler");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let scheduler = Process(child);
        // "icemerge-scheduler: ballista ADDR flight-sql ADDR [ui http://ADDR/]
        // [metrics http://ADDR/metrics]"
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(
            words.len(),
            5 + if ui { 2 } else { 0 } + if metrics { 2 } else { 0 },
            "scheduler did not start: '{line}'\n{}",
            read_log(&scheduler_log)
        );
        let named = |key: &str| {
            let at = words.iter().position(|w| *w == key)?;
            let value = words[at + 1]
                .strip_prefix("http://")
                .unwrap_or(words[at + 1]);
            Some(
                value
                    .split('/')
                    .next()
                    .unwrap()
                    .parse::<SocketAddr>()
                    .unwrap(),
            )
        };
        let ballista = named("ballista").unwrap();
        let flight_sql = named("flight-sql").unwrap();
        let ui = named("ui");
        let metrics = named("metrics");

        let mut processes = vec![];
        let mut executor_logs = vec![];
        for i in 0..executors {
            let (child, log) = spawn_executor(dir.path(), ballista, i, &executor_setup);
            processes.push(child);
            executor_logs.push(log);
        }
        let cluster = Cluster {
            dir,
            ballista,
            flight_sql,
            ui,
            metrics,
            executor_logs,
            executor_setup,
            executors: processes,
            _scheduler: scheduler,
        };
        cluster.wait_for_executors(executors);
        cluster
    }

    /// Starts one more executor and waits until it registered.
    pub fn add_executor(&mut self) {
        let i = self.executor_logs.len();
        let (child, log) = spawn_executor(self.dir.path(), self.ballista, i, &self.executor_setup);
        self.executors.push(child);
        self.executor_logs.push(log);
        self.wait_for_executors(self.executors.len());
    }

    /// Waits until the scheduler's REST API lists `n` executors.
    pub fn wait_for_executors(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (_, body) = http_get(self.ballista, "/api/executors", None);
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

    pub fn logs(&self) -> String {
        let mut text = read_log(&self.dir.path().join("scheduler.log"));
        for log in &self.executor_logs {
            text.push_str(&read_log(log));
        }
        text
    }

    /// Runs the CLI against this cluster.
    pub fn cli(&self, token: Option<&str>, args: &[&str]) -> Output {
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
    pub fn sql(&self, token: Option<&str>, sql: &str) -> String {
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
    pub fn tasks_done_per_executor(&self) -> Vec<usize> {
        self.executor_logs
            .iter()
            .map(|log| read_log(log).matches("Done with task").count())
            .collect()
    }
}

/// Starts executor number `i` of a cluster in `dir`, registering with the
/// scheduler at `ballista`; its log file is returned with it.
fn spawn_executor(
    dir: &Path,
    ballista: SocketAddr,
    i: usize,
    setup: &ProcessSetup,
) -> (Process, PathBuf) {
    let log = dir.join(format!("executor-{i}.log"));
    let mut command = Command::new(EXECUTOR);
    setup.apply(&mut command);
    let child = command
        .arg("--scheduler")
        .arg(ballista.to_string())
        .args(["--bind-host", "127.0.0.1", "--task-slots", "2"])
        .args(["--port", &free_port().to_string()])
        .args(["--grpc-port", &free_port().to_string()])
        .arg("--work-dir")
        .arg(dir.join(format!("work-{i}")))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("spawn icemerge-executor");
    (Process(child), log)
}
