//! The catalog pointer swap of a commit: a compare-and-swap of a table's
//! metadata location in the SQL catalog's `iceberg_tables`.
//!
//! This is the same guarded UPDATE that icemerge's own SQL catalog runs for
//! metadata-only commits (`catalog/sql_catalog.rs`, e.g. ALTER TABLE), and
//! that Iceberg Java's `JdbcCatalog` and PyIceberg's `SqlCatalog` run, so
//! commits from all of them serialise on the same row: the UPDATE only matches while the row still points at the
//! metadata file the commit was built on. Zero rows updated means another
//! writer committed first.
//!
//! Connection pools are cached per catalog URI, so repeated commits do not
//! reconnect. Every SQLite connection waits up to the catalog's
//! `SQLITE_BUSY_TIMEOUT` for another process's lock on the database file
//! instead of failing with "database is locked".

use crate::catalog::sql_catalog::dollar_placeholders;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::catalog::redact;
use crate::catalog::sql_catalog::wait_for_sqlite_locks;
use datafusion::error::{DataFusionError, Result};
use iceberg::TableIdent;
use icemerge_proto::error::{internal, invalid_input, io_error};
use sqlx::any::{install_default_drivers, AnyPoolOptions};
use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyPool, Row};

/// Pools by catalog URI.
static POOLS: OnceLock<Mutex<HashMap<String, AnyPool>>> = OnceLock::new();

fn pools() -> &'static Mutex<HashMap<String, AnyPool>> {
    POOLS.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Placeholder style of a catalog URI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BindStyle {
    /// `?` (SQLite).
    QMark,
    /// `$1..$N` (Postgres).
    DollarNumeric,
}

fn bind_style(uri: &str) -> Result<BindStyle> {
    if uri.starts_with("sqlite:") {
        Ok(BindStyle::QMark)
    } else if uri.starts_with("postgres:") || uri.starts_with("postgresql:") {
        Ok(BindStyle::DollarNumeric)
    } else {
        Err(invalid_input(format!(
            "unsupported catalog URI '{}': expected sqlite://... or postgres://...",
            redact(uri)
        )))
    }
}

/// Rewrites `?` placeholders for the URI's database (the queries here have
/// no `?` inside literals).
fn placeholders(sql: &str, style: BindStyle) -> String {
    match style {
        BindStyle::QMark => sql.to_string(),
        BindStyle::DollarNumeric => dollar_placeholders(sql),
    }
}

fn sql_err(uri: &str, what: &str, e: sqlx::Error) -> DataFusionError {
    io_error(format!("catalog '{}': {what}: {e}", redact(uri)))
}

async fn pool_for(uri: &str) -> Result<AnyPool> {
    if let Some(pool) = pools().lock().unwrap_or_else(|e| e.into_inner()).get(uri) {
        return Ok(pool.clone());
    }
    install_default_drivers();
    let sqlite = bind_style(uri)? == BindStyle::QMark;
    let pool = AnyPoolOptions::new()
        .after_connect(move |conn, _| {
            Box::pin(async move {
                if sqlite {
                    wait_for_sqlite_locks(conn).await?;
                }
                Ok(())
            })
        })
        .max_connections(4)
        .min_connections(0)
        .idle_timeout(Duration::from_secs(30))
        .acquire_timeout(Duration::from_secs(30))
        .test_before_acquire(true)
        .connect(uri)
        .await
        .map_err(|e| sql_err(uri, "cannot connect", e))?;
    let mut pools = pools().lock().unwrap_or_else(|e| e.into_inner());
    // Another task may have connected meanwhile: keep the first pool.
    Ok(pools.entry(uri.to_string()).or_insert(pool).clone())
}

fn evict(uri: &str, pool: &AnyPool) {
    // Dropping a healthy pool another task just cached only costs a reconnect.
    pools()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(uri);
    let pool = pool.clone();
    tokio::spawn(async move { pool.close().await });
}

/// A connection from the cached pool; if the cached pool cannot hand one
/// out (e.g. it was created on a runtime that has since shut down), it is
/// dropped and a fresh pool is tried once. Nothing has been sent to the
/// database at that point, so retrying is safe.
async fn connection(uri: &str) -> Result<PoolConnection<Any>> {
    let pool = pool_for(uri).await?;
    match pool.acquire().await {
        Ok(conn) => Ok(conn),
        Err(first) => {
            tracing::debug!(
                "catalog pool for '{}' failed ({first}); reconnecting",
                redact(uri)
            );
            evict(uri, &pool);
            let pool = pool_for(uri).await?;
            pool.acquire()
                .await
                .map_err(|e| sql_err(uri, "cannot get a connection", e))
        }
    }
}

/// Points `ident` at `new_location` if, and only if, the catalog still
/// points it at `expected`; records `expected` as the previous location.
///
/// Returns `Ok(false)` when no row was updated: another writer committed
/// first (or the table was dropped or renamed). An `Err` means the outcome
/// is unknown to this function (the statement may or may not have run);
/// [`current_metadata_location`] tells.
pub async fn swap_metadata_location(
    uri: &str,
    catalog_name: &str,
    ident: &TableIdent,
    expected: &str,
    new_location: &str,
) -> Result<bool> {
    let style = bind_style(uri)?;
    let sql = placeholders(
        "UPDATE iceberg_tables \
         SET metadata_location = ?, previous_metadata_location = ? \
         WHERE catalog_name = ? AND table_namespace = ? AND table_name = ? \
         AND metadata_location = ?",
        style,
    );
    let namespace = ident.namespace().join(".");
    let mut conn = connection(uri).await?;
    let result = sqlx::query(&sql)
        .bind(new_location)
        .bind(expected)
        .bind(catalog_name)
        .bind(namespace.as_str())
        .bind(ident.name())
        .bind(expected)
        .execute(&mut *conn)
        .await
        .map_err(|e| {
            sql_err(
                uri,
                &format!("cannot update the metadata location of {ident}"),
                e,
            )
        })?;
    match result.rows_affected() {
        0 => Ok(false),
        1 => Ok(true),
        n => Err(internal(format!(
            "catalog '{}': updating the metadata location of {ident} changed {n} rows",
            redact(uri)
        ))),
    }
}

/// The metadata location the catalog currently records for `ident`
/// (`None` when there is no such table).
pub async fn current_metadata_location(
    uri: &str,
    catalog_name: &str,
    ident: &TableIdent,
) -> Result<Option<String>> {
    let style = bind_style(uri)?;
    let sql = placeholders(
        "SELECT metadata_location FROM iceberg_tables \
         WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?",
        style,
    );
    let namespace = ident.namespace().join(".");
    let mut conn = connection(uri).await?;
    let row = sqlx::query(&sql)
        .bind(catalog_name)
        .bind(namespace.as_str())
        .bind(ident.name())
        .fetch_optional(&mut *conn)
        .await
        .map_err(|e| {
            sql_err(
                uri,
                &format!("cannot read the metadata location of {ident}"),
                e,
            )
        })?;
    match row {
        None => Ok(None),
        Some(row) => row
            .try_get::<Option<String>, _>(0)
            .map_err(|e| sql_err(uri, "cannot read metadata_location", e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholder_styles() {
        assert_eq!(
            placeholders("a = ? AND b = ?", BindStyle::QMark),
            "a = ? AND b = ?"
        );
        assert_eq!(
            placeholders("a = ? AND b = ?", BindStyle::DollarNumeric),
            "a = $1 AND b = $2"
        );
        assert_eq!(
            bind_style("sqlite:///x/catalog.db?mode=rwc").unwrap(),
            BindStyle::QMark
        );
        assert_eq!(
            bind_style("postgres://u:p@h/db").unwrap(),
            BindStyle::DollarNumeric
        );
        assert_eq!(
            bind_style("postgresql://h/db").unwrap(),
            BindStyle::DollarNumeric
        );
        assert!(bind_style("mysql://h/db").is_err());
    }
}
