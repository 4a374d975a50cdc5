//! Concurrent writers as separate `icemerge` processes on one table (and one
//! catalog: SQLite in the warehouse, Postgres, or a process cluster's):
//! merges on separate partitions all commit, merges over every key lose no
//! update (each commits, re-executed if it must, or fails with a conflict),
//! and a merging process killed at random moments leaves the table at a
//! committed state that icemerge and PyIceberg read, after which the next
//! merge succeeds. The deterministic interleavings (an append at a known
//! point) are in `tests/tests/concurrent_writers.rs`.

mod support;

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use support::{Cluster, CLI};

/// Where the processes find the table.
#[derive(Clone, Copy)]
struct Target<'a> {
    warehouse: &'a Path,
    catalog_uri: Option<&'a str>,
}

impl Target<'_> {
    fn command(&self, sql: &str) -> Command {
        let mut command = Command::new(CLI);
        command
            .arg("--warehouse")
            .arg(self.warehouse)
            .args(["--format", "csv", "-c", sql])
            .env_remove("ICEMERGE_WAREHOUSE")
            .env_remove("ICEMERGE_CATALOG_URI")
            .env_remove("ICEMERGE_SCHEDULER");
        if let Some(uri) = self.catalog_uri {
            command.args(["--catalog-uri", uri]);
        }
        command
    }

    fn run(&self, sql: &str) -> Output {
        self.command(sql).output().expect("run icemerge")
    }

    /// Runs `sql`; its CSV output (panics on failure).
    fn sql(&self, sql: &str) -> String {
        let out = self.run(sql);
        assert!(
            out.status.success(),
            "{sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }
}

/// The `name` figure of every MERGE result row in CSV `output`.
fn figures(output: &str, name: &str) -> Vec<u64> {
    let mut values = vec![];
    let mut lines = output.lines();
    while let Some(line) = lines.next() {
        if !line.starts_with("count,rows_updated") {
            continue;
        }
        let column = line.split(',').position(|c| c == name).expect(name);
        let row = lines.next().expect("a figures row");
        values.push(row.split(',').nth(column).unwrap().parse().unwrap());
    }
    values
}

#[test]
fn four_processes_merging_their_own_partitions_all_commit() {
    let warehouse = tempfile::tempdir().unwrap();
    let target = Target {
        warehouse: warehouse.path(),
        catalog_uri: None,
    };
    // Four processes committing back to back can each lose the swap more
    // often than Iceberg's default 4 retries allow; what is tested is that
    // every lost swap rebases without a conflict.
    target.sql(
        "CREATE SCHEMA db; \
         CREATE TABLE db.p (part INT, k BIGINT, v BIGINT) PARTITIONED BY (part) \
         TBLPROPERTIES ('commit.retry.num-retries' = '20'); \
         INSERT INTO db.p SELECT CAST(value % 4 AS INT), value, 0 FROM generate_series(0, 79)",
    );
    const MERGES: usize = 8;
    let children: Vec<_> = (0..4)
        .map(|part| {
            let merge = format!(
                "MERGE INTO db.p t USING \
                 (SELECT {part} AS part, value * 4 + {part} AS k FROM generate_series(0, 19)) s \
                 ON t.part = s.part AND t.k = s.k WHEN MATCHED THEN UPDATE SET v = t.v + 1"
            );
            let script = vec![merge; MERGES].join(";\n");
            target
                .command(&script)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn icemerge")
        })
        .collect();
    let (mut attempts, mut reruns) = (vec![], vec![]);
    for child in children {
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8(out.stdout).unwrap();
        assert!(
            out.status.success(),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(figures(&stdout, "count"), vec![20; MERGES], "{stdout}");
        attempts.extend(figures(&stdout, "commit_attempts"));
        reruns.extend(figures(&stdout, "reexecutions"));
    }
    eprintln!(
        "32 merges on separate partitions: {} commit attempts in all, {} re-executions",
        attempts.iter().sum::<u64>(),
        reruns.iter().sum::<u64>()
    );
    assert_eq!(
        reruns.iter().sum::<u64>(),
        0,
        "merges on other partitions never conflict"
    );
    assert_eq!(
        target.sql("SELECT part, count(*) AS n, min(v) AS lo, max(v) AS hi FROM db.p GROUP BY part ORDER BY part"),
        "part,n,lo,hi\n0,20,8,8\n1,20,8,8\n2,20,8,8\n3,20,8,8\n"
    );
}

const EVERY_KEY: &str =
    "MERGE INTO db.c t USING (SELECT value AS k FROM generate_series(0, 19)) s \
                         ON t.k = s.k WHEN MATCHED THEN UPDATE SET v = t.v + 1";

/// What became of one MERGE over every key.
enum Fate {
    Committed { reexecutions: u64 },
    Conflict,
}

/// Reads a MERGE's fate from its process's output; any failure other than
/// the conflict error panics.
fn fate(out: Output) -> Fate {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        return Fate::Committed {
            reexecutions: figures(&stdout, "reexecutions")[0],
        };
    }
    assert!(
        stderr.contains("conflict on db.c") && stderr.contains("isolation"),
        "not a conflict: {stderr}"
    );
    Fate::Conflict
}

/// Four writers (`writers` runs one MERGE over every key of db.c to its
/// fate), four merges each, at once; then no update is lost.
fn race_over_every_key(reader: &dyn Fn(&str) -> String, writers: &[&(dyn Fn() -> Fate + Sync)]) {
    const ROUNDS: usize = 4;
    let fates: Vec<Fate> = std::thread::scope(|scope| {
        let threads: Vec<_> = writers
            .iter()
            .map(|writer| scope.spawn(move || (0..ROUNDS).map(|_| writer()).collect::<Vec<_>>()))
            .collect();
        threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect()
    });
    let committed = fates
        .iter()
        .filter(|f| matches!(f, Fate::Committed { .. }))
        .count();
    let reexecutions: u64 = fates
        .iter()
        .map(|f| match f {
            Fate::Committed { reexecutions } => *reexecutions,
            Fate::Conflict => 0,
        })
        .sum();
    eprintln!(
        "{} merges over every key: {committed} committed ({reexecutions} re-executions), {} \
         failed on a conflict",
        fates.len(),
        fates.len() - committed
    );
    assert!(committed >= 1);
    assert_eq!(
        reader("SELECT count(*) AS n, min(v) AS lo, max(v) AS hi FROM db.c"),
        format!("n,lo,hi\n20,{committed},{committed}\n"),
        "every committed merge added 1 to every key, and nothing else did"
    );
}

const CREATE_COUNTERS: &str = "CREATE SCHEMA db; CREATE TABLE db.c (k BIGINT, v BIGINT); \
                               INSERT INTO db.c SELECT value, 0 FROM generate_series(0, 19)";

#[test]
fn merges_over_every_key_from_four_processes_lose_no_update() {
    let warehouse = tempfile::tempdir().unwrap();
    let target = Target {
        warehouse: warehouse.path(),
        catalog_uri: None,
    };
    target.sql(CREATE_COUNTERS);
    let writer = || fate(target.run(EVERY_KEY));
    race_over_every_key(
        &|sql| target.sql(sql),
        &[&writer, &writer, &writer, &writer],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merges_over_every_key_on_a_postgres_catalog_lose_no_update() {
    let Some(db) = icemerge_tests::postgres_database("every_key_processes").await else {
        return;
    };
    let warehouse = tempfile::tempdir().unwrap();
    let target = Target {
        warehouse: warehouse.path(),
        catalog_uri: Some(&db.uri),
    };
    tokio::task::block_in_place(|| {
        target.sql(CREATE_COUNTERS);
        let writer = || fate(target.run(EVERY_KEY));
        race_over_every_key(
            &|sql| target.sql(sql),
            &[&writer, &writer, &writer, &writer],
        );
    });
    db.drop().await;
}

#[test]
fn merges_over_every_key_through_a_process_cluster_lose_no_update() {
    let cluster = Cluster::start(2, None);
    cluster.sql(None, CREATE_COUNTERS);
    let warehouse = cluster.dir.path().join("warehouse");
    let local = Target {
        warehouse: &warehouse,
        catalog_uri: None,
    };
    // One writer through the scheduler and its executors, three local
    // processes on the same warehouse and catalog.
    let through_cluster = || fate(cluster.cli(None, &["--format", "csv", "-c", EVERY_KEY]));
    let local_writer = || fate(local.run(EVERY_KEY));
    race_over_every_key(
        &|sql| cluster.sql(None, sql),
        &[
            &through_cluster,
            &local_writer,
            &local_writer,
            &local_writer,
        ],
    );
}

/// A number in `0..bound`, different on every call.
fn random_below(bound: u64) -> u64 {
    RandomState::new().hash_one(Instant::now()) % bound.max(1)
}

/// Every key's value, if they all have the same one.
fn common_value(target: &Target) -> u64 {
    let out = target.sql("SELECT count(*) AS n, min(v) AS lo, max(v) AS hi FROM db.k");
    let row: Vec<u64> = out
        .lines()
        .nth(1)
        .unwrap()
        .split(',')
        .map(|x| x.parse().unwrap())
        .collect();
    assert_eq!(row[0], 200, "{out}");
    assert_eq!(row[1], row[2], "the table mixes two states: {out}");
    row[1]
}

/// The values PyIceberg reads.
fn pyiceberg_values(warehouse: &Path) -> Vec<u64> {
    let read = icemerge_tests::run_python(
        "pyiceberg_interop.py",
        &[
            "read",
            "--warehouse",
            warehouse.to_str().unwrap(),
            "--table",
            "db.k",
        ],
    );
    let mut values: Vec<u64> = read["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["v"].as_u64().unwrap())
        .collect();
    values.dedup();
    values
}

#[test]
fn a_merging_process_killed_at_random_moments_leaves_a_committed_state() {
    let warehouse = tempfile::tempdir().unwrap();
    let target = Target {
        warehouse: warehouse.path(),
        catalog_uri: None,
    };
    target.sql(
        "CREATE SCHEMA db; CREATE TABLE db.k (k BIGINT, v BIGINT); \
         INSERT INTO db.k SELECT value, 0 FROM generate_series(0, 99); \
         INSERT INTO db.k SELECT value, 0 FROM generate_series(100, 199)",
    );
    let merge = "MERGE INTO db.k t USING (SELECT value AS k FROM generate_series(0, 199)) s \
                 ON t.k = s.k WHEN MATCHED THEN UPDATE SET v = t.v + 1";
    // How long a whole merge process takes: kills land from its start to
    // a little after its end.
    let started = Instant::now();
    target.sql(merge);
    let span = started.elapsed().as_millis() as u64 * 6 / 5;
    let mut value = common_value(&target);
    assert_eq!(value, 1);
    const KILLS: usize = 20;
    let mut finished_first = 0;
    for kill in 0..KILLS {
        let mut child = target
            .command(merge)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(random_below(span)));
        if child.try_wait().unwrap().is_some() {
            finished_first += 1;
        }
        let _ = child.kill(); // SIGKILL
        child.wait().unwrap();
        let now = common_value(&target);
        assert!(
            now == value || now == value + 1,
            "kill {kill}: value went from {value} to {now}"
        );
        value = now;
        if kill % 5 == 4 {
            assert_eq!(
                pyiceberg_values(warehouse.path()),
                vec![value],
                "kill {kill}"
            );
        }
    }
    eprintln!(
        "{KILLS} kills within {span} ms of a merge's start ({finished_first} after it ended); \
         the table went from 1 to {value}"
    );
    let out = target.sql(merge);
    assert_eq!(figures(&out, "count"), vec![200], "{out}");
    assert_eq!(common_value(&target), value + 1);
    assert_eq!(pyiceberg_values(warehouse.path()), vec![value + 1]);
}
