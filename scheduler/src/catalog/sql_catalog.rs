//! icemerge's Iceberg SQL catalog: the tables of Iceberg's JDBC catalog
//! (`iceberg_tables`, `iceberg_namespace_properties`) in a SQLite or Postgres
//! database, as Iceberg Java's `JdbcCatalog`, PyIceberg's `SqlCatalog` and
//! iceberg-catalog-sql keep them, in either of their two layouts:
//!
//! - **V1**: `iceberg_tables` has an `iceberg_type` column (`TABLE`,
//!   `VIEW`, or NULL for rows written before the column existed); only
//!   `TABLE` and NULL rows are tables. PyIceberg and iceberg-catalog-sql
//!   create this layout, and so does icemerge in a database without the
//!   catalog tables.
//! - **V0**: no such column; every row is a table. Iceberg Java's
//!   `JdbcCatalog` creates this layout by default.
//!
//! The layout is read from the database when the catalog opens and used as
//! found: the catalog tables of another tool are never altered.
//!
//! Rows carry a catalog name (`catalog_name`); this catalog sees only the
//! rows of its own name, so several catalogs can share a database. Spark's
//! `JdbcCatalog` writes the name the Spark catalog is configured under.
//!
//! On SQLite every connection waits up to [`SQLITE_BUSY_TIMEOUT`] for
//! another process's lock on the database file instead of failing with
//! "database is locked" ([`wait_for_sqlite_locks`], also used by the
//! commit's own connections).

use std::collections::{HashMap, HashSet};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use iceberg::io::{FileIO, FileIOBuilder, StorageFactory};
use iceberg::spec::{TableMetadata, TableMetadataBuilder};
use iceberg::table::Table;
use iceberg::{
    Catalog, Error, ErrorKind, MetadataLocation, Namespace, NamespaceIdent, Result, Runtime,
    TableCommit, TableCreation, TableIdent,
};
use sqlx::any::{install_default_drivers, AnyPoolOptions, AnyRow};
use sqlx::{Any, AnyPool, Row, Transaction};

/// The two layouts of the JDBC catalog's `iceberg_tables`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatalogLayout {
    /// Without `iceberg_type`: every row is a table.
    V0,
    /// With `iceberg_type`: `TABLE` (or NULL) rows are tables, `VIEW` rows views.
    V1,
}

/// Where and how to open a [`SqlCatalog`].
#[derive(Debug, Clone)]
pub struct SqlCatalogConfig {
    /// The catalog name its rows carry (`catalog_name`).
    pub name: String,
    /// `sqlite://...` or `postgres://...`.
    pub uri: String,
    /// Tables without a location go under `<warehouse>/<namespace>/<table>`
    /// (or the namespace's `location` property).
    pub warehouse_location: String,
    /// FileIO properties (S3 settings).
    pub file_io_props: HashMap<String, String>,
}

/// The catalog; see the module documentation.
#[derive(Debug)]
pub struct SqlCatalog {
    name: String,
    pool: AnyPool,
    postgres: bool,
    layout: CatalogLayout,
    warehouse_location: String,
    file_io: FileIO,
    runtime: Runtime,
}

/// `iceberg_tables` of a database without the catalog tables (the V1 layout,
/// as iceberg-catalog-sql and PyIceberg create it).
const CREATE_TABLES_TABLE: &str = "CREATE TABLE IF NOT EXISTS iceberg_tables (
    catalog_name VARCHAR(255) NOT NULL,
    table_namespace VARCHAR(255) NOT NULL,
    table_name VARCHAR(255) NOT NULL,
    metadata_location VARCHAR(1000),
    previous_metadata_location VARCHAR(1000),
    iceberg_type VARCHAR(5),
    PRIMARY KEY (catalog_name, table_namespace, table_name))";

const CREATE_NAMESPACES_TABLE: &str = "CREATE TABLE IF NOT EXISTS iceberg_namespace_properties (
    catalog_name VARCHAR(255) NOT NULL,
    namespace VARCHAR(255) NOT NULL,
    property_key VARCHAR(255),
    property_value VARCHAR(1000),
    PRIMARY KEY (catalog_name, namespace, property_key))";

/// The namespace property every namespace row set has (as Iceberg Java and
/// PyIceberg write it), so that a namespace without properties still has a row.
const EXISTS_PROPERTY: &str = "exists";
/// A namespace's default location for its tables.
const LOCATION_PROPERTY: &str = "location";

impl SqlCatalog {
    /// Connects, creates the catalog tables where they are missing and
    /// detects the layout of `iceberg_tables`.
    pub async fn open(
        config: SqlCatalogConfig,
        storage_factory: Arc<dyn StorageFactory>,
    ) -> Result<Self> {
        if config.name.trim().is_empty() {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                "the catalog name cannot be empty",
            ));
        }
        let postgres = if config.uri.starts_with("sqlite:") {
            false
        } else if config.uri.starts_with("postgres:") || config.uri.starts_with("postgresql:") {
            true
        } else {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                "catalog URI: expected sqlite://... or postgres://...",
            ));
        };
        install_default_drivers();
        let pool = AnyPoolOptions::new()
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    if !postgres {
                        wait_for_sqlite_locks(conn).await?;
                    }
                    Ok(())
                })
            })
            .max_connections(10)
            .idle_timeout(Duration::from_secs(10))
            .test_before_acquire(true)
            .connect(&config.uri)
            .await
            .map_err(|e| sql_error("cannot connect", e))?;
        for ddl in [CREATE_TABLES_TABLE, CREATE_NAMESPACES_TABLE] {
            sqlx::query(ddl)
                .execute(&pool)
                .await
                .map_err(|e| sql_error("cannot create the catalog tables", e))?;
        }
        let layout = detect_layout(&pool).await?;
        let file_io = FileIOBuilder::new(storage_factory)
            .with_props(config.file_io_props)
            .build();
        Ok(Self {
            name: config.name,
            pool,
            postgres,
            layout,
            warehouse_location: config.warehouse_location,
            file_io,
            runtime: Runtime::try_current()?,
        })
    }

    /// The layout found at open.
    pub fn layout(&self) -> CatalogLayout {
        self.layout
    }

    /// The catalog name of this catalog's rows.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `?` placeholders as the database wants them.
    fn sql(&self, text: &str) -> String {
        if self.postgres {
            dollar_placeholders(text)
        } else {
            text.to_string()
        }
    }

    /// The condition selecting table rows (not views) of `iceberg_tables`.
    fn tables_only(&self) -> &'static str {
        match self.layout {
            CatalogLayout::V0 => "",
            CatalogLayout::V1 => " AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL)",
        }
    }

    async fn fetch(&self, text: &str, args: &[&str]) -> Result<Vec<AnyRow>> {
        let text = self.sql(text);
        let mut query = sqlx::query(&text);
        for arg in args {
            query = query.bind(*arg);
        }
        query
            .fetch_all(&self.pool)
            .await
            .map_err(|e| sql_error("query failed", e))
    }

    /// Runs one statement on its own; returns the rows it changed.
    async fn execute(&self, text: &str, args: &[&str]) -> std::result::Result<u64, sqlx::Error> {
        let text = self.sql(text);
        let mut query = sqlx::query(&text);
        for arg in args {
            query = query.bind(*arg);
        }
        Ok(query.execute(&self.pool).await?.rows_affected())
    }

    async fn execute_in(
        &self,
        tx: &mut Transaction<'_, Any>,
        text: &str,
        args: &[&str],
    ) -> Result<u64> {
        let text = self.sql(text);
        let mut query = sqlx::query(&text);
        for arg in args {
            query = query.bind(*arg);
        }
        Ok(query
            .execute(&mut **tx)
            .await
            .map_err(|e| sql_error("statement failed", e))?
            .rows_affected())
    }

    /// The metadata location of table `ident`, `None` when there is no such table.
    async fn metadata_location(&self, ident: &TableIdent) -> Result<Option<String>> {
        let rows = self
            .fetch(
                &format!(
                    "SELECT metadata_location FROM iceberg_tables \
                     WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?{}",
                    self.tables_only()
                ),
                &[&self.name, &namespace_key(ident.namespace()), ident.name()],
            )
            .await?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let location: Option<String> = row
            .try_get(0)
            .map_err(|e| sql_error("reading metadata_location", e))?;
        match location {
            Some(location) if !location.is_empty() => Ok(Some(location)),
            _ => Err(Error::new(
                ErrorKind::DataInvalid,
                format!("table {ident} has no metadata location in the catalog"),
            )),
        }
    }

    /// Whether any row of `iceberg_tables` (table or view) has this name.
    async fn name_taken(&self, ident: &TableIdent) -> Result<bool> {
        Ok(!self
            .fetch(
                "SELECT 1 FROM iceberg_tables \
                 WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?",
                &[&self.name, &namespace_key(ident.namespace()), ident.name()],
            )
            .await?
            .is_empty())
    }

    /// Every namespace name recorded for this catalog (with tables or properties).
    async fn all_namespaces(&self) -> Result<HashSet<String>> {
        let rows = self
            .fetch(
                "SELECT table_namespace FROM iceberg_tables WHERE catalog_name = ? \
                 UNION \
                 SELECT namespace FROM iceberg_namespace_properties WHERE catalog_name = ?",
                &[&self.name, &self.name],
            )
            .await?;
        rows.iter()
            .map(|row| {
                row.try_get::<String, _>(0)
                    .map_err(|e| sql_error("reading namespaces", e))
            })
            .collect()
    }

    async fn insert_table_row(
        &self,
        ident: &TableIdent,
        metadata_location: &str,
    ) -> std::result::Result<u64, sqlx::Error> {
        let namespace = namespace_key(ident.namespace());
        match self.layout {
            CatalogLayout::V0 => {
                self.execute(
                    "INSERT INTO iceberg_tables \
                     (catalog_name, table_namespace, table_name, metadata_location, \
                      previous_metadata_location) \
                     VALUES (?, ?, ?, ?, NULL)",
                    &[&self.name, &namespace, ident.name(), metadata_location],
                )
                .await
            }
            CatalogLayout::V1 => {
                self.execute(
                    "INSERT INTO iceberg_tables \
                     (catalog_name, table_namespace, table_name, metadata_location, \
                      previous_metadata_location, iceberg_type) \
                     VALUES (?, ?, ?, ?, NULL, 'TABLE')",
                    &[&self.name, &namespace, ident.name(), metadata_location],
                )
                .await
            }
        }
    }

    fn table(&self, ident: TableIdent, location: String, metadata: TableMetadata) -> Result<Table> {
        Table::builder()
            .file_io(self.file_io.clone())
            .identifier(ident)
            .metadata_location(location)
            .metadata(metadata)
            .runtime(self.runtime.clone())
            .build()
    }
}

/// Reads whether `iceberg_tables` has the `iceberg_type` column: selecting
/// it fails with "no such column" (SQLite) or SQLSTATE 42703 (Postgres)
/// where it is missing. Any other failure is an error.
async fn detect_layout(pool: &AnyPool) -> Result<CatalogLayout> {
    match sqlx::query("SELECT iceberg_type FROM iceberg_tables WHERE 1 = 0")
        .fetch_all(pool)
        .await
    {
        Ok(_) => Ok(CatalogLayout::V1),
        Err(sqlx::Error::Database(e))
            if e.code().as_deref() == Some("42703") || e.message().contains("no such column") =>
        {
            Ok(CatalogLayout::V0)
        }
        Err(e) => Err(sql_error("cannot read the layout of iceberg_tables", e)),
    }
}

/// How long a SQLite connection waits for another connection's lock.
pub const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// Makes a new SQLite connection wait up to [`SQLITE_BUSY_TIMEOUT`] for
/// locks held by other connections (`PRAGMA busy_timeout`).
pub(crate) async fn wait_for_sqlite_locks(conn: &mut sqlx::AnyConnection) -> sqlx::Result<()> {
    let pragma = format!("PRAGMA busy_timeout = {}", SQLITE_BUSY_TIMEOUT.as_millis());
    sqlx::Executor::execute(conn, pragma.as_str()).await?;
    Ok(())
}

/// A namespace as the catalog stores it: its levels joined by '.'.
fn namespace_key(namespace: &NamespaceIdent) -> String {
    namespace.join(".")
}

fn sql_error(what: &str, e: sqlx::Error) -> Error {
    Error::new(ErrorKind::Unexpected, format!("SQL catalog: {what}: {e}")).with_source(e)
}

fn no_such_namespace<T>(namespace: &NamespaceIdent) -> Result<T> {
    Err(Error::new(
        ErrorKind::NamespaceNotFound,
        format!("no such namespace: {}", namespace_key(namespace)),
    ))
}

fn no_such_table<T>(ident: &TableIdent) -> Result<T> {
    Err(Error::new(
        ErrorKind::TableNotFound,
        format!("no such table: {ident}"),
    ))
}

fn table_exists_error<T>(ident: &TableIdent) -> Result<T> {
    Err(Error::new(
        ErrorKind::TableAlreadyExists,
        format!("table {ident} already exists"),
    ))
}

fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.is_unique_violation())
}

#[async_trait]
impl Catalog for SqlCatalog {
    async fn list_namespaces(
        &self,
        parent: Option<&NamespaceIdent>,
    ) -> Result<Vec<NamespaceIdent>> {
        let all = self.all_namespaces().await?;
        let depth = match parent {
            Some(parent) => {
                if !self.namespace_exists(parent).await? {
                    return no_such_namespace(parent);
                }
                parent.len()
            }
            None => 0,
        };
        let prefix = parent.map(|p| format!("{}.", namespace_key(p)));
        let mut found = HashSet::new();
        for name in all {
            if prefix.as_ref().is_some_and(|p| !name.starts_with(p)) {
                continue;
            }
            let levels: Vec<&str> = name.split('.').collect();
            if levels.len() > depth {
                found.insert(NamespaceIdent::from_strs(&levels[..=depth])?);
            }
        }
        Ok(found.into_iter().collect())
    }

    async fn create_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<Namespace> {
        if self.namespace_exists(namespace).await? {
            return Err(Error::new(
                ErrorKind::NamespaceAlreadyExists,
                format!("namespace {} already exists", namespace_key(namespace)),
            ));
        }
        let mut properties = properties;
        properties
            .entry(EXISTS_PROPERTY.to_string())
            .or_insert_with(|| "true".to_string());
        let key = namespace_key(namespace);
        let mut tx = self.pool.begin().await.map_err(|e| sql_error("begin", e))?;
        for (k, v) in &properties {
            self.execute_in(
                &mut tx,
                "INSERT INTO iceberg_namespace_properties \
                 (catalog_name, namespace, property_key, property_value) VALUES (?, ?, ?, ?)",
                &[&self.name, &key, k, v],
            )
            .await?;
        }
        tx.commit().await.map_err(|e| sql_error("commit", e))?;
        Ok(Namespace::with_properties(namespace.clone(), properties))
    }

    async fn get_namespace(&self, namespace: &NamespaceIdent) -> Result<Namespace> {
        if !self.namespace_exists(namespace).await? {
            return no_such_namespace(namespace);
        }
        let rows = self
            .fetch(
                "SELECT property_key, property_value FROM iceberg_namespace_properties \
                 WHERE catalog_name = ? AND namespace = ?",
                &[&self.name, &namespace_key(namespace)],
            )
            .await?;
        let mut properties = HashMap::with_capacity(rows.len());
        for row in rows {
            let key: Option<String> = row
                .try_get(0)
                .map_err(|e| sql_error("reading namespace properties", e))?;
            let value: Option<String> = row
                .try_get(1)
                .map_err(|e| sql_error("reading namespace properties", e))?;
            if let (Some(key), Some(value)) = (key, value) {
                properties.insert(key, value);
            }
        }
        Ok(Namespace::with_properties(namespace.clone(), properties))
    }

    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> Result<bool> {
        let key = namespace_key(namespace);
        let rows = self
            .fetch(
                "SELECT 1 FROM iceberg_tables WHERE catalog_name = ? AND table_namespace = ? \
                 UNION ALL \
                 SELECT 1 FROM iceberg_namespace_properties WHERE catalog_name = ? AND namespace = ?",
                &[&self.name, &key, &self.name, &key],
            )
            .await?;
        Ok(!rows.is_empty())
    }

    async fn update_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<()> {
        let existing = self.get_namespace(namespace).await?;
        let key = namespace_key(namespace);
        let mut tx = self.pool.begin().await.map_err(|e| sql_error("begin", e))?;
        for (k, v) in &properties {
            match existing.properties().get(k) {
                Some(old) if old == v => {}
                Some(_) => {
                    self.execute_in(
                        &mut tx,
                        "UPDATE iceberg_namespace_properties SET property_value = ? \
                         WHERE catalog_name = ? AND namespace = ? AND property_key = ?",
                        &[v, &self.name, &key, k],
                    )
                    .await?;
                }
                None => {
                    self.execute_in(
                        &mut tx,
                        "INSERT INTO iceberg_namespace_properties \
                         (catalog_name, namespace, property_key, property_value) \
                         VALUES (?, ?, ?, ?)",
                        &[&self.name, &key, k, v],
                    )
                    .await?;
                }
            }
        }
        tx.commit().await.map_err(|e| sql_error("commit", e))?;
        Ok(())
    }

    async fn drop_namespace(&self, namespace: &NamespaceIdent) -> Result<()> {
        if !self.namespace_exists(namespace).await? {
            return no_such_namespace(namespace);
        }
        let key = namespace_key(namespace);
        // Tables and views alike keep a namespace alive.
        let entries = self
            .fetch(
                "SELECT table_name FROM iceberg_tables WHERE catalog_name = ? AND table_namespace = ?",
                &[&self.name, &key],
            )
            .await?;
        if !entries.is_empty() {
            return Err(Error::new(
                ErrorKind::Unexpected,
                format!(
                    "namespace {key} is not empty: {} tables or views exist",
                    entries.len()
                ),
            ));
        }
        self.execute(
            "DELETE FROM iceberg_namespace_properties WHERE catalog_name = ? AND namespace = ?",
            &[&self.name, &key],
        )
        .await
        .map_err(|e| sql_error("dropping the namespace", e))?;
        Ok(())
    }

    async fn list_tables(&self, namespace: &NamespaceIdent) -> Result<Vec<TableIdent>> {
        if !self.namespace_exists(namespace).await? {
            return no_such_namespace(namespace);
        }
        let rows = self
            .fetch(
                &format!(
                    "SELECT table_name FROM iceberg_tables \
                     WHERE catalog_name = ? AND table_namespace = ?{}",
                    self.tables_only()
                ),
                &[&self.name, &namespace_key(namespace)],
            )
            .await?;
        rows.iter()
            .map(|row| {
                let name: String = row
                    .try_get(0)
                    .map_err(|e| sql_error("reading table names", e))?;
                Ok(TableIdent::new(namespace.clone(), name))
            })
            .collect()
    }

    async fn create_table(
        &self,
        namespace: &NamespaceIdent,
        creation: TableCreation,
    ) -> Result<Table> {
        if !self.namespace_exists(namespace).await? {
            return no_such_namespace(namespace);
        }
        let ident = TableIdent::new(namespace.clone(), creation.name.clone());
        if self.name_taken(&ident).await? {
            return table_exists_error(&ident);
        }
        let location = match &creation.location {
            Some(location) => location.clone(),
            None => {
                let properties = self.get_namespace(namespace).await?.properties().clone();
                let base = match properties.get(LOCATION_PROPERTY) {
                    Some(location) => location.trim_end_matches('/').to_string(),
                    None => format!(
                        "{}/{}",
                        self.warehouse_location.trim_end_matches('/'),
                        namespace.join("/")
                    ),
                };
                format!("{base}/{}", ident.name())
            }
        };
        let creation = TableCreation {
            location: Some(location.clone()),
            ..creation
        };
        let metadata = TableMetadataBuilder::from_table_creation(creation)?
            .build()?
            .metadata;
        let metadata_location = MetadataLocation::new_with_metadata(&location, &metadata);
        metadata.write_to(&self.file_io, &metadata_location).await?;
        let metadata_location = metadata_location.to_string();
        if let Err(e) = self.insert_table_row(&ident, &metadata_location).await {
            // Nobody refers to the metadata file: remove it.
            let _ = self.file_io.delete(&metadata_location).await;
            if is_unique_violation(&e) {
                return table_exists_error(&ident);
            }
            return Err(sql_error("registering the new table", e));
        }
        self.table(ident, metadata_location, metadata)
    }

    async fn load_table(&self, ident: &TableIdent) -> Result<Table> {
        let Some(location) = self.metadata_location(ident).await? else {
            return no_such_table(ident);
        };
        let metadata = TableMetadata::read_from(&self.file_io, &location).await?;
        self.table(ident.clone(), location, metadata)
    }

    async fn drop_table(&self, ident: &TableIdent) -> Result<()> {
        let deleted = self
            .execute(
                &format!(
                    "DELETE FROM iceberg_tables \
                     WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?{}",
                    self.tables_only()
                ),
                &[&self.name, &namespace_key(ident.namespace()), ident.name()],
            )
            .await
            .map_err(|e| sql_error("dropping the table", e))?;
        if deleted == 0 {
            return no_such_table(ident);
        }
        Ok(())
    }

    async fn purge_table(&self, ident: &TableIdent) -> Result<()> {
        let table = self.load_table(ident).await?;
        self.drop_table(ident).await?;
        super::purge::purge_table_files(&table).await
    }

    async fn table_exists(&self, ident: &TableIdent) -> Result<bool> {
        let rows = self
            .fetch(
                &format!(
                    "SELECT 1 FROM iceberg_tables \
                     WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?{}",
                    self.tables_only()
                ),
                &[&self.name, &namespace_key(ident.namespace()), ident.name()],
            )
            .await?;
        Ok(!rows.is_empty())
    }

    async fn rename_table(&self, src: &TableIdent, dest: &TableIdent) -> Result<()> {
        if src == dest {
            return Ok(());
        }
        if !self.table_exists(src).await? {
            return no_such_table(src);
        }
        if !self.namespace_exists(dest.namespace()).await? {
            return no_such_namespace(dest.namespace());
        }
        if self.name_taken(dest).await? {
            return table_exists_error(dest);
        }
        let dest_namespace = namespace_key(dest.namespace());
        let src_namespace = namespace_key(src.namespace());
        let renamed = self
            .execute(
                &format!(
                    "UPDATE iceberg_tables SET table_namespace = ?, table_name = ? \
                     WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?{}",
                    self.tables_only()
                ),
                &[
                    &dest_namespace,
                    dest.name(),
                    &self.name,
                    &src_namespace,
                    src.name(),
                ],
            )
            .await;
        match renamed {
            Ok(0) => no_such_table(src),
            Ok(_) => Ok(()),
            Err(e) if is_unique_violation(&e) => table_exists_error(dest),
            Err(e) => Err(sql_error("renaming the table", e)),
        }
    }

    async fn register_table(&self, ident: &TableIdent, metadata_location: String) -> Result<Table> {
        if !self.namespace_exists(ident.namespace()).await? {
            return no_such_namespace(ident.namespace());
        }
        if self.name_taken(ident).await? {
            return table_exists_error(ident);
        }
        let metadata = TableMetadata::read_from(&self.file_io, &metadata_location).await?;
        match self.insert_table_row(ident, &metadata_location).await {
            Ok(_) => self.table(ident.clone(), metadata_location, metadata),
            Err(e) if is_unique_violation(&e) => table_exists_error(ident),
            Err(e) => Err(sql_error("registering the table", e)),
        }
    }

    /// Applies `commit` to the table's current metadata, writes the new
    /// metadata file and moves the catalog row to it if the row still points
    /// at the metadata the commit was built on; otherwise a retryable
    /// commit conflict (the new file is removed).
    async fn update_table(&self, commit: TableCommit) -> Result<Table> {
        let ident = commit.identifier().clone();
        let current = self.load_table(&ident).await?;
        let current_location = current.metadata_location_result()?.to_string();
        let staged = commit.apply(current)?;
        let staged_location = MetadataLocation::from_str(staged.metadata_location_result()?)?;
        staged
            .metadata()
            .write_to(staged.file_io(), &staged_location)
            .await?;
        let staged_location = staged_location.to_string();
        let swapped = self
            .execute(
                &format!(
                    "UPDATE iceberg_tables SET metadata_location = ?, previous_metadata_location = ? \
                     WHERE catalog_name = ? AND table_namespace = ? AND table_name = ? \
                     AND metadata_location = ?{}",
                    self.tables_only()
                ),
                &[
                    &staged_location,
                    &current_location,
                    &self.name,
                    &namespace_key(ident.namespace()),
                    ident.name(),
                    &current_location,
                ],
            )
            .await;
        match swapped {
            Ok(0) => {
                let _ = self.file_io.delete(&staged_location).await;
                Err(Error::new(
                    ErrorKind::CatalogCommitConflicts,
                    format!("commit conflict on table {ident}: another writer committed first"),
                )
                .with_retryable(true))
            }
            Ok(_) => Ok(staged),
            // The outcome is unknown: the new metadata file stays.
            Err(e) => Err(sql_error("committing", e)),
        }
    }
}

/// `?` placeholders numbered as Postgres wants them (`$1`, `$2`, ...); the
/// catalog's queries have no `?` inside literals.
pub(crate) fn dollar_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 16);
    let mut n = 0;
    for c in sql.chars() {
        if c == '?' {
            n += 1;
            out.push('$');
            out.push_str(&n.to_string());
        } else {
            out.push(c);
        }
    }
    out
}
