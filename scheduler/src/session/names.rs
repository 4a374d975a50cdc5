//! Table and namespace names: `[catalog.]namespace.table` or `table` as an
//! Iceberg identifier, unquoted names lower-cased, unqualified names in
//! namespace [`DEFAULT_NAMESPACE`]; and the check that a namespace exists.

use datafusion::error::{DataFusionError, Result};
use datafusion::sql::sqlparser::ast::ObjectName;
use iceberg::{NamespaceIdent, TableIdent};
use icemerge_executor::iceberg_err;

use super::Session;

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
                return Err(DataFusionError::Plan(format!(
                    "unknown catalog '{c}': this session's catalog is '{}'",
                    self.catalog.name
                )))
            }
            _ => {
                return Err(DataFusionError::Plan(format!(
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
            return Err(DataFusionError::Plan(format!(
                "schema (namespace) '{}' does not exist",
                ns.to_url_string()
            )));
        }
        Ok(())
    }

    /// "table 'icemerge.ns.t' not found" where `ns` does not exist becomes
    /// "schema (namespace) 'ns' does not exist".
    pub(super) async fn name_missing_namespace(&self, e: DataFusionError) -> DataFusionError {
        let message = e.to_string();
        let Some(rest) = message.split("table '").nth(1) else {
            return e;
        };
        let Some(name) = rest
            .split("' not found")
            .next()
            .filter(|_| rest.contains("' not found"))
        else {
            return e;
        };
        let parts: Vec<&str> = name.split('.').collect();
        let namespace = match parts.as_slice() {
            [_, ns, _] | [ns, _] => ns.to_string(),
            _ => return e,
        };
        match self
            .catalog
            .catalog
            .namespace_exists(&NamespaceIdent::new(namespace.clone()))
            .await
        {
            Ok(false) => {
                DataFusionError::Plan(format!("schema (namespace) '{namespace}' does not exist"))
            }
            _ => e,
        }
    }
}
