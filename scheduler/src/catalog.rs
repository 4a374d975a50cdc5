//! Opening the Iceberg SQL catalog (SQLite by default, Postgres for a
//! cluster) and the warehouse it points at.
//!
//! The catalog tables are iceberg-catalog-sql's (`iceberg_tables`,
//! `iceberg_namespace_properties`), the same that PyIceberg's `SqlCatalog`
//! uses: open the same database in PyIceberg with the catalog name
//! [`DEFAULT_CATALOG_NAME`] and both see the same tables.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::error::{DataFusionError, Result};
use iceberg::{Catalog, CatalogBuilder};
use iceberg_catalog_sql::{SqlBindStyle, SqlCatalogBuilder};
use iceberg_storage_opendal::OpenDalResolvingStorageFactory;

/// The catalog name recorded in the catalog database (PyIceberg: `SqlCatalog("icemerge", ...)`).
pub const DEFAULT_CATALOG_NAME: &str = "icemerge";

/// Where the catalog and the data live.
#[derive(Debug, Clone)]
pub struct CatalogOptions {
    /// Warehouse directory (data and metadata files); created if missing.
    pub warehouse: PathBuf,
    /// `sqlite://...` or `postgres://...`; default `sqlite://<warehouse>/catalog.db`.
    pub catalog_uri: Option<String>,
}

impl Default for CatalogOptions {
    fn default() -> Self {
        Self {
            warehouse: PathBuf::from("warehouse"),
            catalog_uri: None,
        }
    }
}

/// An open catalog plus the storage properties executors need.
#[derive(Debug, Clone)]
pub struct OpenCatalog {
    pub catalog: Arc<dyn Catalog>,
    pub name: String,
    pub warehouse_location: String,
    pub file_io_props: HashMap<String, String>,
    /// The catalog database URI (for the commit's compare-and-swap).
    pub uri: String,
}

/// Opens (creating if needed) the warehouse directory and the SQL catalog.
pub async fn open_catalog(options: &CatalogOptions) -> Result<OpenCatalog> {
    let warehouse = absolute(&options.warehouse)?;
    std::fs::create_dir_all(&warehouse).map_err(|e| {
        DataFusionError::Configuration(format!(
            "cannot create warehouse directory '{}': {e}",
            warehouse.display()
        ))
    })?;
    let warehouse_location = format!("file://{}", warehouse.display());
    let uri = match &options.catalog_uri {
        Some(uri) => uri.clone(),
        None => format!("sqlite://{}/catalog.db?mode=rwc", warehouse.display()),
    };
    let bind_style = if uri.starts_with("sqlite:") {
        SqlBindStyle::QMark
    } else if uri.starts_with("postgres:") || uri.starts_with("postgresql:") {
        SqlBindStyle::DollarNumeric
    } else {
        return Err(DataFusionError::Configuration(format!(
            "unsupported catalog URI '{uri}': expected sqlite://... or postgres://..."
        )));
    };
    let file_io_props = HashMap::new();
    let catalog = SqlCatalogBuilder::default()
        .uri(uri.clone())
        .warehouse_location(warehouse_location.clone())
        .sql_bind_style(bind_style)
        .with_storage_factory(Arc::new(OpenDalResolvingStorageFactory::new()))
        .load(DEFAULT_CATALOG_NAME, file_io_props.clone())
        .await
        .map_err(|e| {
            DataFusionError::Configuration(format!("cannot open catalog '{}': {e}", redact(&uri)))
        })?;
    Ok(OpenCatalog {
        catalog: Arc::new(catalog),
        name: DEFAULT_CATALOG_NAME.to_string(),
        warehouse_location,
        file_io_props,
        uri,
    })
}

fn absolute(path: &Path) -> Result<PathBuf> {
    if path.is_absolute() {
        return Ok(path.to_path_buf());
    }
    let cwd = std::env::current_dir().map_err(|e| {
        DataFusionError::Configuration(format!("cannot read current directory: {e}"))
    })?;
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
