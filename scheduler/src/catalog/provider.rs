//! The Iceberg catalog as DataFusion's catalog: namespaces are schemas,
//! tables load as `IcebergTableProvider`s at their current snapshot, and
//! `"t$snapshots"`, `"t$files"`, `"t$partitions"`, `"t$history"`,
//! `"t$refs"` and `"t$manifests"` are the system tables of table `t`.
//! Tables registered by the session itself (`CREATE EXTERNAL TABLE`) live in
//! memory beside the Iceberg tables of the same schema.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use super::{history_tables, system_tables};
use async_trait::async_trait;
use datafusion::catalog::{CatalogProvider, MemTable, SchemaProvider};
use datafusion::datasource::TableProvider;
use datafusion::error::Result;
use iceberg::{Catalog, NamespaceIdent, TableIdent};
use icemerge_executor::iceberg_err;

use super::table::IcebergTableProvider;
use icemerge_proto::error::invalid_input;

type LocalTables = Arc<RwLock<HashMap<String, HashMap<String, Arc<dyn TableProvider>>>>>;

/// DataFusion view of the Iceberg catalog.
#[derive(Debug)]
pub struct IcebergCatalogProvider {
    catalog: Arc<dyn Catalog>,
    file_io_props: HashMap<String, String>,
    local: LocalTables,
    namespaces: RwLock<Vec<String>>,
}

impl IcebergCatalogProvider {
    pub fn new(catalog: Arc<dyn Catalog>, file_io_props: HashMap<String, String>) -> Self {
        Self {
            catalog,
            file_io_props,
            local: Default::default(),
            namespaces: Default::default(),
        }
    }

    /// Whether `schema` holds tables the session registered itself
    /// (`CREATE EXTERNAL TABLE`), which need no Iceberg namespace.
    pub fn has_local_schema(&self, schema: &str) -> bool {
        self.local.read().expect("lock").contains_key(schema)
    }

    /// Re-reads the namespace list (used for `schema_names`).
    pub async fn refresh(&self) -> Result<()> {
        let names = self
            .catalog
            .list_namespaces(None)
            .await
            .map_err(iceberg_err)?
            .into_iter()
            .map(|ns| ns.to_url_string())
            .collect();
        *self.namespaces.write().expect("lock") = names;
        Ok(())
    }

    /// The tables of schema `schema`, sorted: its Iceberg tables, then the
    /// ones the session registered itself (`true` beside those).
    pub async fn tables(&self, schema: &str) -> Result<Vec<(String, bool)>> {
        let mut tables = vec![];
        if self
            .namespaces
            .read()
            .expect("lock")
            .iter()
            .any(|n| n == schema)
        {
            let ns = NamespaceIdent::from_strs(schema.split('.')).map_err(iceberg_err)?;
            let idents = self.catalog.list_tables(&ns).await.map_err(iceberg_err)?;
            tables.extend(idents.into_iter().map(|t| (t.name, false)));
        }
        if let Some(local) = self.local.read().expect("lock").get(schema) {
            tables.extend(local.keys().map(|name| (name.clone(), true)));
        }
        tables.sort();
        Ok(tables)
    }
}

impl CatalogProvider for IcebergCatalogProvider {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn schema_names(&self) -> Vec<String> {
        let mut names = self.namespaces.read().expect("lock").clone();
        for name in self.local.read().expect("lock").keys() {
            if !names.contains(name) {
                names.push(name.clone());
            }
        }
        names.sort();
        names
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        Some(Arc::new(IcebergSchemaProvider {
            catalog: self.catalog.clone(),
            namespace: name.to_string(),
            file_io_props: self.file_io_props.clone(),
            local: self.local.clone(),
        }))
    }
}

/// One namespace.
#[derive(Debug)]
pub struct IcebergSchemaProvider {
    catalog: Arc<dyn Catalog>,
    namespace: String,
    file_io_props: HashMap<String, String>,
    local: LocalTables,
}

impl IcebergSchemaProvider {
    fn ident(&self, table: &str) -> Result<TableIdent> {
        let ns = NamespaceIdent::from_strs(self.namespace.split('.')).map_err(iceberg_err)?;
        Ok(TableIdent::new(ns, table.to_string()))
    }

    fn local_table(&self, name: &str) -> Option<Arc<dyn TableProvider>> {
        self.local
            .read()
            .expect("lock")
            .get(&self.namespace)?
            .get(name)
            .cloned()
    }

    async fn load(&self, name: &str) -> Result<Option<iceberg::table::Table>> {
        let ident = self.ident(name)?;
        // A missing namespace reads as a missing table here (DataFusion also
        // probes names that turn out to be table functions); the session
        // names the missing namespace in its error.
        if !self
            .catalog
            .namespace_exists(ident.namespace())
            .await
            .map_err(iceberg_err)?
        {
            return Ok(None);
        }
        if !self
            .catalog
            .table_exists(&ident)
            .await
            .map_err(iceberg_err)?
        {
            return Ok(None);
        }
        Ok(Some(
            self.catalog.load_table(&ident).await.map_err(iceberg_err)?,
        ))
    }
}

#[async_trait]
impl SchemaProvider for IcebergSchemaProvider {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn table_names(&self) -> Vec<String> {
        self.local
            .read()
            .expect("lock")
            .get(&self.namespace)
            .map(|t| t.keys().cloned().collect())
            .unwrap_or_default()
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        if let Some(local) = self.local_table(name) {
            return Ok(Some(local));
        }
        if let Some((base, kind)) = name.rsplit_once('$') {
            let Some(table) = self.load(base).await? else {
                return Ok(None);
            };
            let batch = match kind {
                "snapshots" => system_tables::snapshots_batch(&table)?,
                "files" => system_tables::files_batch(&table).await?,
                "entries" => system_tables::entries_batch(&table).await?,
                "partitions" => system_tables::partitions_batch(&table).await?,
                "history" => history_tables::history_batch(&table)?,
                "refs" => history_tables::refs_batch(&table)?,
                "manifests" => history_tables::manifests_batch(&table).await?,
                other => {
                    return Err(invalid_input(format!(
                        "unknown system table '${other}' of '{base}': expected $snapshots, $files, \
                         $entries, $partitions, $history, $refs or $manifests"
                    )))
                }
            };
            let mem = MemTable::try_new(batch.schema(), vec![vec![batch]])?;
            return Ok(Some(Arc::new(mem)));
        }
        let Some(table) = self.load(name).await? else {
            return Ok(None);
        };
        let qualified = format!("{}.{}", self.namespace, name);
        Ok(Some(Arc::new(IcebergTableProvider::try_new(
            qualified,
            table,
            self.file_io_props.clone(),
        )?)))
    }

    fn register_table(
        &self,
        name: String,
        table: Arc<dyn TableProvider>,
    ) -> Result<Option<Arc<dyn TableProvider>>> {
        Ok(self
            .local
            .write()
            .expect("lock")
            .entry(self.namespace.clone())
            .or_default()
            .insert(name, table))
    }

    fn deregister_table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        Ok(self
            .local
            .write()
            .expect("lock")
            .get_mut(&self.namespace)
            .and_then(|t| t.remove(name)))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.local_table(name).is_some()
    }
}
