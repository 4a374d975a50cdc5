//! Shared helpers for icemerge's end-to-end tests: sessions on a fresh
//! warehouse for each engine, throwaway Postgres catalog databases, the
//! sqllogictest adapter, moto's S3 server (`moto`), and result helpers.
//!
//! Postgres: tests that need it read `ICEMERGE_TEST_POSTGRES_URI` (a server
//! whose role may create databases). `./test.sh` always sets it, starting a
//! throwaway server (tests/postgres.sh). When it is unset, e.g. under a
//! plain `cargo test`, those tests print why and pass without running
//! ([`postgres_database`] returns `None`).

use std::path::{Path, PathBuf};

pub mod moto;

use arrow::array::Array;
use arrow::datatypes::DataType;
use arrow::record_batch::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::error::DataFusionError;
use icemerge_scheduler::{CatalogOptions, EngineKind, Session, SessionOptions, StatementOutput};
use sqllogictest::{DBOutput, DefaultColumnType};

/// Both engines, for tests that must pass on each.
pub const ENGINES: [EngineKind; 2] = [EngineKind::Local, EngineKind::Cluster];

/// Opens a session on `warehouse` with `engine` (a cluster of 2 executors).
pub async fn open_session(warehouse: &Path, engine: EngineKind) -> Session {
    open_session_on(warehouse, None, engine).await
}

/// As [`open_session`], with the catalog at `catalog_uri` (default: SQLite
/// in the warehouse).
pub async fn open_session_on(
    warehouse: &Path,
    catalog_uri: Option<&str>,
    engine: EngineKind,
) -> Session {
    Session::open(SessionOptions {
        catalog: CatalogOptions {
            warehouse: warehouse.to_path_buf(),
            catalog_uri: catalog_uri.map(str::to_string),
            ..Default::default()
        },
        engine,
        executors: Some(2),
        target_partitions: Some(4),
        ..Default::default()
    })
    .await
    .expect("open session")
}

/// The environment variable naming the Postgres server for catalog tests.
pub const POSTGRES_URI_VAR: &str = "ICEMERGE_TEST_POSTGRES_URI";

/// A database of its own on the test Postgres server, dropped by
/// [`PgDatabase::drop`].
pub struct PgDatabase {
    /// Connection URI of the new database (password included).
    pub uri: String,
    server_uri: String,
    name: String,
}

/// Creates a fresh database on the server of `$ICEMERGE_TEST_POSTGRES_URI`
/// for `test`. `None` (after printing why) when the variable is unset: the
/// caller skips. Any other failure panics: a configured server must work.
pub async fn postgres_database(test: &str) -> Option<PgDatabase> {
    let server_uri = postgres_server(test)?;
    let name = format!(
        "icemerge_{}_{}",
        test.chars()
            .map(|c| if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            })
            .take(30)
            .collect::<String>(),
        uuid::Uuid::new_v4().simple()
    );
    let mut conn = connect_postgres(&server_uri).await;
    sqlx::query(&format!("CREATE DATABASE \"{name}\""))
        .execute(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{POSTGRES_URI_VAR}: CREATE DATABASE {name}: {e}"));
    let _ = sqlx::Connection::close(conn).await;
    let mut url = url::Url::parse(&server_uri)
        .unwrap_or_else(|e| panic!("{POSTGRES_URI_VAR} is not a URI: {e}"));
    url.set_path(&format!("/{name}"));
    Some(PgDatabase {
        uri: url.to_string(),
        server_uri,
        name,
    })
}

/// `$ICEMERGE_TEST_POSTGRES_URI`, or `None` after printing that `test` is
/// skipped.
pub fn postgres_server(test: &str) -> Option<String> {
    match std::env::var(POSTGRES_URI_VAR) {
        Ok(uri) if !uri.is_empty() => Some(uri),
        _ => {
            eprintln!(
                "SKIPPED {test}: {POSTGRES_URI_VAR} is not set (./test.sh starts a throwaway \
                 PostgreSQL server and sets it; or point it at a server whose role may \
                 CREATE DATABASE)"
            );
            None
        }
    }
}

async fn connect_postgres(uri: &str) -> sqlx::PgConnection {
    use sqlx::Connection;
    sqlx::PgConnection::connect(uri)
        .await
        .unwrap_or_else(|e| panic!("{POSTGRES_URI_VAR}: cannot connect: {e}"))
}

impl PgDatabase {
    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Drops the database (closing the connections still open to it).
    pub async fn drop(self) {
        let mut conn = connect_postgres(&self.server_uri).await;
        if let Err(e) = sqlx::query(&format!("DROP DATABASE \"{}\" WITH (FORCE)", self.name))
            .execute(&mut conn)
            .await
        {
            eprintln!("dropping test database {}: {e}", self.name);
        }
    }
}

/// Renders every row of `batches` as strings (NULL as "NULL").
pub fn rows_as_strings(batches: &[RecordBatch]) -> Vec<Vec<String>> {
    let options = FormatOptions::default().with_null("NULL");
    let mut rows = vec![];
    for batch in batches {
        let formatters: Vec<_> = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).expect("formatter"))
            .collect();
        for row in 0..batch.num_rows() {
            rows.push(
                formatters
                    .iter()
                    .zip(batch.columns())
                    .map(|(f, col)| {
                        let s = f.value(row).to_string();
                        if !col.is_null(row)
                            && s.is_empty()
                            && matches!(col.data_type(), DataType::Utf8)
                        {
                            "(empty)".to_string()
                        } else {
                            s
                        }
                    })
                    .collect(),
            );
        }
    }
    rows
}

/// Runs `sql` (one statement) and returns its rows as strings.
pub async fn query(session: &Session, sql: &str) -> Vec<Vec<String>> {
    match session
        .execute_one(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
    {
        StatementOutput::Rows { batches, .. } => rows_as_strings(&batches),
        StatementOutput::Done { .. } => vec![],
    }
}

/// The operation of the newest snapshot of `table` (`namespace.name`).
pub async fn last_operation(session: &Session, table: &str) -> String {
    let (namespace, name) = table
        .rsplit_once('.')
        .unwrap_or_else(|| panic!("'{table}' is not namespace.name"));
    let sql = format!(
        "SELECT operation FROM {namespace}.\"{name}$snapshots\" ORDER BY committed_at DESC LIMIT 1"
    );
    query(session, &sql).await[0][0].clone()
}

/// sqllogictest adapter over a `Session`.
pub struct SltSession(pub std::sync::Arc<Session>);

/// Error type the sqllogictest runner sees.
#[derive(Debug)]
pub struct SltError(pub String);

impl std::fmt::Display for SltError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SltError {}

impl From<DataFusionError> for SltError {
    fn from(e: DataFusionError) -> Self {
        SltError(e.to_string())
    }
}

fn column_type(data_type: &DataType) -> DefaultColumnType {
    match data_type {
        DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32
        | DataType::UInt64 => DefaultColumnType::Integer,
        DataType::Float16 | DataType::Float32 | DataType::Float64 | DataType::Decimal128(_, _) => {
            DefaultColumnType::FloatingPoint
        }
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => DefaultColumnType::Text,
        _ => DefaultColumnType::Any,
    }
}

#[async_trait::async_trait]
impl sqllogictest::AsyncDB for SltSession {
    type Error = SltError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, SltError> {
        match self.0.execute_one(sql).await? {
            StatementOutput::Rows { schema, batches } => {
                let types = schema
                    .fields()
                    .iter()
                    .map(|f| column_type(f.data_type()))
                    .collect();
                let rows = rows_as_strings(&batches);
                Ok(DBOutput::Rows { types, rows })
            }
            StatementOutput::Done { .. } => Ok(DBOutput::StatementComplete(0)),
        }
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "icemerge"
    }

    async fn sleep(dur: std::time::Duration) {
        tokio::time::sleep(dur).await
    }
}

/// The Python interpreter with PyIceberg installed: `$ICEMERGE_PYTHON`, else
/// the workspace's `.venv` (made by `./test.sh`).
pub fn python() -> PathBuf {
    if let Ok(p) = std::env::var("ICEMERGE_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python");
    assert!(
        venv.exists(),
        "interop tests need Python with PyIceberg: run ./test.sh (it creates .venv) or set ICEMERGE_PYTHON"
    );
    venv
}

/// Runs a script in `tests/python/` and parses its last stdout line as JSON.
pub fn run_python(script: &str, args: &[&str]) -> serde_json::Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("python")
        .join(script);
    let out = std::process::Command::new(python())
        .arg(&path)
        .args(args)
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "{script} {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{script}: bad JSON {last:?}: {e}"))
}

/// The Spark 3.5 + Iceberg 1.10 runner of the Spark interop tests
/// (`tests/spark/spark_sql.py`), as `./test.sh` sets it up
/// (`tests/spark/setup.sh`): `$ICEMERGE_SPARK_PYTHON` is the Python of its
/// venv (with PySpark) and `$ICEMERGE_SPARK_JARS` the directory of the
/// Iceberg runtime and JDBC driver jars.
pub struct Spark {
    python: PathBuf,
    jars: PathBuf,
}

/// The environment variables naming the Spark set-up.
pub const SPARK_PYTHON_VAR: &str = "ICEMERGE_SPARK_PYTHON";
pub const SPARK_JARS_VAR: &str = "ICEMERGE_SPARK_JARS";

/// The Spark set-up, or `None` after printing that `test` is skipped when
/// `$ICEMERGE_SPARK_PYTHON` is unset (e.g. under a plain `cargo test`).
pub fn spark(test: &str) -> Option<Spark> {
    let python = std::env::var(SPARK_PYTHON_VAR)
        .ok()
        .filter(|p| !p.is_empty());
    let Some(python) = python else {
        eprintln!(
            "SKIPPED {test}: {SPARK_PYTHON_VAR} is not set (./test.sh installs Spark with \
             tests/spark/setup.sh and sets it and {SPARK_JARS_VAR})"
        );
        return None;
    };
    let jars = std::env::var(SPARK_JARS_VAR)
        .unwrap_or_else(|_| panic!("{SPARK_PYTHON_VAR} is set but {SPARK_JARS_VAR} is not"));
    Some(Spark {
        python: PathBuf::from(python),
        jars: PathBuf::from(jars),
    })
}

/// One statement's result from Spark: rows of values rendered as text
/// (NULL as "NULL").
pub type SparkRows = Vec<Vec<String>>;

impl Spark {
    /// Runs `statements` in one Spark process whose default catalog `name`
    /// is Iceberg's JdbcCatalog on `<warehouse>/catalog.db` (SQLite), and
    /// returns each statement's rows. Panics, with Spark's message, if one
    /// fails.
    pub fn run(&self, warehouse: &Path, name: &str, statements: &[&str]) -> Vec<SparkRows> {
        use std::io::Write;
        let runner = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("spark/spark_sql.py");
        let mut child = std::process::Command::new(&self.python)
            .arg(&runner)
            .arg("--warehouse")
            .arg(warehouse)
            .args(["--catalog-name", name])
            .arg("--jars")
            .arg(&self.jars)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.python.display()));
        let input = serde_json::to_vec(statements).expect("statements as JSON");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(&input)
            .expect("write statements to Spark");
        let out = child.wait_with_output().expect("Spark runner");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let mut results = vec![];
        for line in stdout.lines().filter(|l| l.starts_with('{')) {
            let value: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("Spark: bad JSON {line}: {e}"));
            if let Some(error) = value.get("error") {
                let index = value["statement"].as_u64().unwrap_or(0) as usize;
                panic!(
                    "Spark failed on {:?}:\n{}\n{}",
                    statements.get(index),
                    error.as_str().unwrap_or_default(),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            let rows = value["rows"]
                .as_array()
                .expect("rows")
                .iter()
                .map(|row| {
                    row.as_array()
                        .expect("row")
                        .iter()
                        .map(|v| match v {
                            serde_json::Value::Null => "NULL".to_string(),
                            serde_json::Value::String(s) => s.clone(),
                            other => other.to_string(),
                        })
                        .collect()
                })
                .collect();
            results.push(rows);
        }
        assert!(
            out.status.success() && results.len() == statements.len(),
            "Spark runner failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        results
    }
}

/// `GET path` over plain HTTP/1.1 (the scheduler's REST API and live page),
/// with `authorization: Bearer <token>` when given; the status code and
/// the body.
pub fn http_get(addr: std::net::SocketAddr, path: &str, token: Option<&str>) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    let auth = token
        .map(|t| format!("authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, body.to_string())
}

/// Every `.parquet` file under `dir`.
pub fn parquet_files(dir: &Path) -> std::collections::BTreeSet<PathBuf> {
    files_under(dir)
        .into_iter()
        .filter(|path| path.extension().is_some_and(|e| e == "parquet"))
        .collect()
}

/// Every file under `dir`, at any depth.
pub fn files_under(dir: &Path) -> std::collections::BTreeSet<PathBuf> {
    let mut files = std::collections::BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files.insert(path);
            }
        }
    }
    files
}
