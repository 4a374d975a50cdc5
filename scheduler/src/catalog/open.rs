//! Opening the Iceberg SQL catalog (SQLite by default, Postgres for a
//! cluster) and the warehouse it points at: a local directory or an
//! `s3://bucket/prefix` location on S3 or an S3-compatible store.
//!
//! The catalog tables are those of Iceberg's JDBC catalog (`iceberg_tables`,
//! `iceberg_namespace_properties`), the same that PyIceberg's `SqlCatalog`
//! and Iceberg Java's `JdbcCatalog` (Spark, Trino, Flink) use, in either of
//! their layouts ([`super::sql_catalog`]): open the same database in
//! PyIceberg or Spark with the same catalog name (default
//! [`DEFAULT_CATALOG_NAME`]) and all see the same tables.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::error::Result;
use iceberg::Catalog;
use iceberg_storage_opendal::OpenDalResolvingStorageFactory;

use super::sql_catalog::{CatalogLayout, SqlCatalog, SqlCatalogConfig};
use icemerge_proto::error::invalid_input;

/// The default catalog name, recorded in the catalog database's rows
/// (PyIceberg: `SqlCatalog("icemerge", ...)`).
pub const DEFAULT_CATALOG_NAME: &str = "icemerge";

/// Where the catalog and the data live.
#[derive(Debug, Clone)]
pub struct CatalogOptions {
    /// Warehouse (data and metadata files): a local directory, created if
    /// missing, or an `s3://bucket/prefix` location (which needs a
    /// `catalog_uri`: the default SQLite catalog lives in a local warehouse).
    pub warehouse: PathBuf,
    /// `sqlite://...` or `postgres://...`; default `sqlite://<warehouse>/catalog.db`.
    pub catalog_uri: Option<String>,
    /// The catalog name of the rows this catalog reads and writes (the
    /// `catalog_name` column; Spark's JdbcCatalog writes the name of the
    /// Spark catalog), also the first part of three-part table names.
    pub catalog_name: String,
    /// How to reach an `s3://` warehouse.
    pub s3: S3Options,
}

impl Default for CatalogOptions {
    fn default() -> Self {
        Self {
            warehouse: PathBuf::from("warehouse"),
            catalog_uri: None,
            catalog_name: DEFAULT_CATALOG_NAME.to_string(),
            s3: S3Options::default(),
        }
    }
}

/// Settings for an `s3://` warehouse. They become the FileIO properties of
/// the catalog and of every table, and travel with the plans to the
/// executors; unset ones are left to the S3 client's own defaults (its
/// environment variables and config files on each machine).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct S3Options {
    /// Endpoint URL of an S3-compatible store, e.g. `http://127.0.0.1:9000`.
    pub endpoint: Option<String>,
    /// Region, e.g. `eu-west-1`; with an endpoint and no region, `us-east-1`.
    pub region: Option<String>,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    pub session_token: Option<String>,
    /// Path-style requests (`http://endpoint/bucket/key`) instead of
    /// virtual-hosted ones (`http://bucket.endpoint/key`). Default: path
    /// style when an endpoint is given (what S3-compatible servers expect),
    /// virtual-hosted for AWS itself.
    pub path_style_access: Option<bool>,
}

impl std::fmt::Debug for S3Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hidden = |v: &Option<String>| v.as_ref().map(|_| "****");
        f.debug_struct("S3Options")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &hidden(&self.secret_access_key))
            .field("session_token", &hidden(&self.session_token))
            .field("path_style_access", &self.path_style_access)
            .finish()
    }
}

impl S3Options {
    /// The FileIO properties (`s3.endpoint`, `s3.region`, ...) for these settings.
    pub fn file_io_props(&self) -> HashMap<String, String> {
        let mut props = HashMap::new();
        let mut set = |key: &str, value: &Option<String>| {
            if let Some(v) = value.as_ref().filter(|v| !v.is_empty()) {
                props.insert(key.to_string(), v.clone());
            }
        };
        set(iceberg::io::S3_ENDPOINT, &self.endpoint);
        // S3-compatible servers mostly ignore the region, but the S3
        // client refuses to sign without one: us-east-1 (MinIO's default).
        let region = match (&self.region, &self.endpoint) {
            (None, Some(endpoint)) if !endpoint.is_empty() => Some("us-east-1".to_string()),
            _ => self.region.clone(),
        };
        set(iceberg::io::S3_REGION, &region);
        set(iceberg::io::S3_ACCESS_KEY_ID, &self.access_key_id);
        set(iceberg::io::S3_SECRET_ACCESS_KEY, &self.secret_access_key);
        set(iceberg::io::S3_SESSION_TOKEN, &self.session_token);
        let path_style = self
            .path_style_access
            .unwrap_or_else(|| self.endpoint.as_ref().is_some_and(|e| !e.is_empty()));
        props.insert(
            iceberg::io::S3_PATH_STYLE_ACCESS.to_string(),
            path_style.to_string(),
        );
        props
    }
}

/// A warehouse given as a directory or as a URL.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Warehouse {
    Local(PathBuf),
    /// `s3://bucket[/prefix]`, without a trailing slash.
    S3(String),
}

fn parse_warehouse(warehouse: &Path) -> Result<Warehouse> {
    let text = warehouse.to_string_lossy();
    if text.starts_with("file:") {
        // file:///dir and file:/dir (as Hadoop writes it) alike.
        return icemerge_executor::cleanup::local_path(&text)
            .map(|dir| Warehouse::Local(dir.to_path_buf()))
            .ok_or_else(|| {
                invalid_input(format!(
                    "warehouse '{text}': expected file:///DIR (an absolute local path)"
                ))
            });
    }
    let Some((scheme, rest)) = text.split_once("://") else {
        return Ok(Warehouse::Local(warehouse.to_path_buf()));
    };
    match scheme {
        "s3" | "s3a" => {
            let rest = rest.trim_end_matches('/');
            let bucket = rest.split('/').next().unwrap_or_default();
            if bucket.is_empty() {
                return Err(invalid_input(format!(
                    "warehouse '{text}': expected s3://BUCKET[/PREFIX]"
                )));
            }
            Ok(Warehouse::S3(format!("s3://{rest}")))
        }
        _ => Err(invalid_input(format!(
            "unsupported warehouse '{text}': expected a directory, file://DIR or s3://BUCKET[/PREFIX]"
        ))),
    }
}

/// An open catalog plus the storage properties executors need.
#[derive(Debug, Clone)]
pub struct OpenCatalog {
    pub catalog: Arc<dyn Catalog>,
    /// The catalog name (of the catalog's rows and of three-part names).
    pub name: String,
    /// The layout of the catalog database's `iceberg_tables`.
    pub layout: CatalogLayout,
    pub warehouse_location: String,
    pub file_io_props: HashMap<String, String>,
    /// The catalog database URI (for the commit's compare-and-swap).
    pub uri: String,
}

/// Opens (creating if needed) the warehouse directory and the SQL catalog.
pub async fn open_catalog(options: &CatalogOptions) -> Result<OpenCatalog> {
    let name = options.catalog_name.as_str();
    if name.trim().is_empty() {
        return Err(invalid_input(
            "the catalog name (--catalog-name) cannot be empty",
        ));
    }
    let (warehouse_location, default_uri, file_io_props) =
        match parse_warehouse(&options.warehouse)? {
            Warehouse::Local(dir) => {
                let warehouse = absolute(&dir)?;
                std::fs::create_dir_all(&warehouse).map_err(|e| {
                    invalid_input(format!(
                        "cannot create warehouse directory '{}': {e}",
                        warehouse.display()
                    ))
                })?;
                (
                    format!("file://{}", warehouse.display()),
                    Some(format!(
                        "sqlite://{}/catalog.db?mode=rwc",
                        warehouse.display()
                    )),
                    HashMap::new(),
                )
            }
            Warehouse::S3(location) => (location, None, options.s3.file_io_props()),
        };
    let uri = match (&options.catalog_uri, default_uri) {
        (Some(uri), _) => uri.clone(),
        (None, Some(uri)) => uri,
        (None, None) => {
            return Err(invalid_input(format!(
                "warehouse '{warehouse_location}' needs a catalog URI (--catalog-uri \
                 postgres://... or sqlite://...): the default SQLite catalog lives in a \
                 local warehouse directory"
            )))
        }
    };
    if !file_io_props.is_empty() {
        check_s3_warehouse(&warehouse_location, &file_io_props).await?;
    }
    let (postgres, creation_lock) = if uri.starts_with("sqlite:") {
        (false, None)
    } else if is_postgres(&uri) {
        (true, Some(lock_postgres_catalog(&uri).await?))
    } else {
        return Err(invalid_input(format!(
            "unsupported catalog URI '{}': expected sqlite://... or postgres://...",
            redact(&uri)
        )));
    };
    icemerge_executor::cleanup::register_storage(&warehouse_location, &file_io_props);
    let load = || {
        SqlCatalog::open(
            SqlCatalogConfig {
                name: name.to_string(),
                uri: uri.clone(),
                warehouse_location: warehouse_location.clone(),
                file_io_props: file_io_props.clone(),
            },
            Arc::new(OpenDalResolvingStorageFactory::new()),
        )
    };
    let catalog = match load().await {
        // Another program (not holding our lock) created the catalog tables
        // at the same moment: one CREATE TABLE IF NOT EXISTS loses with a
        // unique violation; the tables exist now, so try once more.
        Err(e) if postgres && is_creation_race(&e) => load().await,
        other => other,
    };
    if let Some(conn) = creation_lock {
        // Closing the session releases its advisory lock.
        let _ = sqlx::Connection::close(conn).await;
    }
    let catalog = catalog
        .map_err(|e| invalid_input(format!("cannot open catalog '{}': {e}", redact(&uri))))?;
    Ok(OpenCatalog {
        layout: catalog.layout(),
        catalog: Arc::new(catalog),
        name: name.to_string(),
        warehouse_location,
        file_io_props,
        uri,
    })
}

fn is_postgres(uri: &str) -> bool {
    uri.starts_with("postgres:") || uri.starts_with("postgresql:")
}

fn is_creation_race(e: &iceberg::Error) -> bool {
    let text = format!("{e:?}");
    text.contains("duplicate key value") || text.contains("already exists")
}

/// Advisory lock key serialising the creation of the catalog tables among
/// icemerge processes ("icemerge" in ASCII).
const CATALOG_CREATION_LOCK: i64 = 0x6963_656d_6572_6765;

/// Connects to a Postgres catalog and takes the catalog-creation advisory
/// lock on that connection; the lock is released when the connection is
/// closed. Postgres's `CREATE TABLE IF NOT EXISTS` is not safe against a
/// concurrent creator (one of two fails with a unique violation), so
/// processes opening a fresh catalog database at once take turns.
///
/// The first connection also makes a server that cannot be reached, a
/// refused login or a missing database one error naming host, port,
/// database and user, within seconds rather than after a pool's timeout.
async fn lock_postgres_catalog(uri: &str) -> Result<sqlx::PgConnection> {
    use sqlx::ConnectOptions;
    let options: sqlx::postgres::PgConnectOptions = uri.parse().map_err(|e| {
        invalid_input(format!(
            "invalid Postgres catalog URI '{}': {e}",
            redact(uri)
        ))
    })?;
    let place = format!(
        "Postgres catalog at {}:{} (database '{}', user '{}')",
        options.get_host(),
        options.get_port(),
        options.get_database().unwrap_or(options.get_username()),
        options.get_username()
    );
    let timeout = std::time::Duration::from_secs(15);
    let mut conn = match tokio::time::timeout(timeout, options.connect()).await {
        Ok(Ok(conn)) => conn,
        Ok(Err(e)) => return Err(invalid_input(format!("cannot connect to the {place}: {e}"))),
        Err(_) => {
            return Err(invalid_input(format!(
                "cannot connect to the {place}: no answer within 15 s"
            )))
        }
    };
    let locked = async {
        sqlx::query("SET lock_timeout = '60s'")
            .execute(&mut conn)
            .await?;
        sqlx::query("SELECT pg_advisory_lock($1)")
            .bind(CATALOG_CREATION_LOCK)
            .execute(&mut conn)
            .await
    }
    .await;
    match locked {
        Ok(_) => Ok(conn),
        Err(e) => Err(invalid_input(format!(
            "{place}: cannot take the catalog-creation lock: {e}"
        ))),
    }
}

/// Writes and deletes one small object under the warehouse, so that a wrong
/// endpoint, a missing bucket or refused credentials fail here, naming the
/// location and endpoint, rather than at the first write.
async fn check_s3_warehouse(location: &str, props: &HashMap<String, String>) -> Result<()> {
    let file_io = icemerge_executor::file_io::file_io_from_props(props);
    let probe = format!("{location}/.icemerge-probe-{}", uuid::Uuid::new_v4());
    let outcome = async {
        file_io
            .new_output(&probe)?
            .write(bytes::Bytes::from_static(b"icemerge"))
            .await?;
        file_io.delete(&probe).await
    };
    let outcome = tokio::time::timeout(std::time::Duration::from_secs(60), outcome).await;
    let endpoint = props
        .get(iceberg::io::S3_ENDPOINT)
        .map(|e| format!(" at {e}"))
        .unwrap_or_default();
    match outcome {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(invalid_input(format!(
            "cannot write to warehouse '{location}'{endpoint}: {e}"
        ))),
        Err(_) => Err(invalid_input(format!(
            "cannot write to warehouse '{location}'{endpoint}: no answer within 60 s"
        ))),
    }
}

fn absolute(path: &Path) -> Result<PathBuf> {
    if path.is_absolute() {
        return Ok(path.to_path_buf());
    }
    let cwd = std::env::current_dir()
        .map_err(|e| invalid_input(format!("cannot read current directory: {e}")))?;
    Ok(cwd.join(path))
}

/// Hides a password in a connection URI before it is shown.
pub(crate) fn redact(uri: &str) -> String {
    match url::Url::parse(uri) {
        Ok(mut url) if url.password().is_some() => {
            let _ = url.set_password(Some("****"));
            url.to_string()
        }
        _ => uri.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warehouse_forms() {
        assert_eq!(
            parse_warehouse(Path::new("wh")).unwrap(),
            Warehouse::Local(PathBuf::from("wh"))
        );
        assert_eq!(
            parse_warehouse(Path::new("file:///data/wh")).unwrap(),
            Warehouse::Local(PathBuf::from("/data/wh"))
        );
        assert_eq!(
            parse_warehouse(Path::new("file:/data/wh")).unwrap(),
            Warehouse::Local(PathBuf::from("/data/wh"))
        );
        assert!(parse_warehouse(Path::new("file:data/wh")).is_err());
        assert_eq!(
            parse_warehouse(Path::new("s3://bucket/a/wh/")).unwrap(),
            Warehouse::S3("s3://bucket/a/wh".into())
        );
        assert_eq!(
            parse_warehouse(Path::new("s3a://bucket")).unwrap(),
            Warehouse::S3("s3://bucket".into())
        );
        assert!(parse_warehouse(Path::new("s3:///x")).is_err());
        assert!(parse_warehouse(Path::new("gs://b/x")).is_err());
    }

    #[test]
    fn s3_props() {
        let options = S3Options {
            endpoint: Some("http://127.0.0.1:9000".into()),
            region: Some("us-east-1".into()),
            access_key_id: Some("key".into()),
            secret_access_key: Some("secret".into()),
            session_token: None,
            path_style_access: None,
        };
        let props = options.file_io_props();
        assert_eq!(props["s3.endpoint"], "http://127.0.0.1:9000");
        assert_eq!(props["s3.region"], "us-east-1");
        assert_eq!(props["s3.access-key-id"], "key");
        assert_eq!(props["s3.secret-access-key"], "secret");
        assert_eq!(props["s3.path-style-access"], "true");
        assert!(!props.contains_key("s3.session-token"));
        assert!(!format!("{options:?}").contains("secret\""));
        let no_region = S3Options {
            endpoint: Some("http://127.0.0.1:9000".into()),
            ..Default::default()
        };
        assert_eq!(no_region.file_io_props()["s3.region"], "us-east-1");
        let aws = S3Options::default().file_io_props();
        assert_eq!(aws["s3.path-style-access"], "false");
        assert_eq!(aws.len(), 1);
    }

    #[test]
    fn redacts_passwords() {
        assert_eq!(
            redact("postgres://u:secret@h:5432/db"),
            "postgres://u:****@h:5432/db"
        );
        assert_eq!(redact("sqlite:///x/catalog.db"), "sqlite:///x/catalog.db");
    }
}
