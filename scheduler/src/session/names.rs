//! Table and namespace names: `[catalog.]namespace.table` or `table` as an
//! Iceberg identifier, unquoted names lower-cased, unqualified names in
//! namespace [`DEFAULT_NAMESPACE`]; and the check that a namespace exists.

use datafusion::common::TableReference;
use datafusion::error::{DataFusionError, Result};
use datafusion::sql::parser::DFParser;
use datafusion::sql::sqlparser::ast::ObjectName;
use datafusion::sql::sqlparser::dialect::GenericDialect;
use iceberg::{NamespaceIdent, TableIdent};
use icemerge_executor::iceberg_err;

use super::Session;
use icemerge_proto::error::{invalid_input, not_found};

/// The namespace of unqualified table names.
pub const DEFAULT_NAMESPACE: &str = "default";

/// `ident` as a double-quoted SQL identifier.
pub(crate) fn quote(ident: &str) -> String {
    format!("\"{}\"", ident.replace('"', "\"\""))
}

impl Session {
    /// `ns.t` (as a writer node names its table) → identifier.
    pub(super) fn table_ident(&self, qualified: &str) -> Result<TableIdent> {
        let parts: Vec<String> = qualified.split('.').map(str::to_string).collect();
        self.ident_from_parts(&parts)
    }

    /// `[catalog.]namespace.table` or `table` → identifier.
    pub(super) fn ident_from_parts(&self, parts: &[String]) -> Result<TableIdent> {
        let (namespace, table) = match parts {
            [t] => (DEFAULT_NAMESPACE.to_string(), t.clone()),
            [ns, t] => (ns.clone(), t.clone()),
            [c, ns, t] if *c == self.catalog.name => (ns.clone(), t.clone()),
            [c, _, _] => {
                return Err(not_found(format!(
                    "unknown catalog '{c}': this session's catalog is '{}'",
                    self.catalog.name
                )))
            }
            _ => {
                return Err(invalid_input(format!(
                    "invalid table name '{}'",
                    parts.join(".")
                )))
            }
        };
        Ok(TableIdent::new(NamespaceIdent::new(namespace), table))
    }

    /// A name as written in SQL → identifier.
    pub(super) fn object_ident(&self, name: &ObjectName) -> Result<TableIdent> {
        let parts: Vec<String> = name
            .0
            .iter()
            .map(|p| {
                p.as_ident()
                    .map(|i| {
                        if i.quote_style.is_some() {
                            i.value.clone()
                        } else {
                            i.value.to_lowercase()
                        }
                    })
                    .unwrap_or_else(|| p.to_string())
            })
            .collect();
        self.ident_from_parts(&parts)
    }

    /// Fails naming `ns` when it does not exist.
    pub(super) async fn ensure_namespace(&self, ns: &NamespaceIdent) -> Result<()> {
        if !self
            .catalog
            .catalog
            .namespace_exists(ns)
            .await
            .map_err(iceberg_err)?
        {
            return Err(not_found(format!(
                "schema (namespace) '{}' does not exist",
                ns.to_url_string()
            )));
        }
        Ok(())
    }

    /// After a statement failed: when a table it names lives in a namespace
    /// that does not exist, that is the error to report ("schema
    /// (namespace) 'ns' does not exist") rather than DataFusion's "table not
    /// found". `None` when every named namespace exists (or the statement
    /// cannot be read back).
    pub(super) async fn missing_namespace(&self, sql: &str) -> Option<DataFusionError> {
        let mut statements = DFParser::parse_sql_with_dialect(sql, &GenericDialect {}).ok()?;
        let statement = statements.pop_front()?;
        let state = self.ctx.state();
        let references = state.resolve_table_references(&statement).ok()?;
        let options = state.config().options();
        let (default_catalog, default_schema) = (
            options.catalog.default_catalog.as_str(),
            options.catalog.default_schema.as_str(),
        );
        for reference in references {
            // A table function (`generate_series(...)`) is listed as a
            // reference in the default schema; it names no namespace.
            let is_function = matches!(&reference, TableReference::Bare { table }
                if state.table_functions().contains_key(table.as_ref()));
            if is_function {
                continue;
            }
            let resolved = reference.resolve(default_catalog, default_schema);
            if *resolved.catalog != self.catalog.name
                || resolved.schema.eq_ignore_ascii_case("information_schema")
                || self.provider.has_local_schema(&resolved.schema)
            {
                continue;
            }
            let namespace = NamespaceIdent::new(resolved.schema.to_string());
            if let Ok(false) = self.catalog.catalog.namespace_exists(&namespace).await {
                return Some(not_found(format!(
                    "schema (namespace) '{}' does not exist",
                    resolved.schema
                )));
            }
        }
        None
    }
}
