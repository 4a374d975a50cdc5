//! DDL statements, run against the catalog directly: `CREATE SCHEMA`,
//! `DROP SCHEMA`, `CREATE TABLE [AS SELECT]`, `DROP TABLE` (which purges
//! the table's files, as Trino does).
//!
//! The table property `format-version` (Spark's; `format_version` is
//! Trino's spelling) is not stored: it chooses the new table's Iceberg format
//! version, 1 or 2 (default 2).

use std::collections::HashMap;

use arrow::datatypes::Schema;
use datafusion::error::Result;
use datafusion::sql::sqlparser::ast::ObjectName;
use iceberg::arrow::arrow_schema_to_schema_auto_assign_ids;
use iceberg::spec::{FormatVersion, TableProperties};
use iceberg::{NamespaceIdent, TableCreation};
use icemerge_executor::iceberg_err;
use icemerge_executor::parquet_properties::check_parquet_properties;
use icemerge_planner::ddl::{self, CreateTable};
use icemerge_planner::write_mode::validate_modes;

use crate::commit::check_isolation_properties;

use super::names::quote;
use super::{Session, StatementOutput};
use icemerge_proto::error::{already_exists, invalid_input, not_found};

impl Session {
    pub(super) async fn create_schema(
        &self,
        name: &str,
        if_not_exists: bool,
    ) -> Result<StatementOutput> {
        let name = name.trim_matches('"').to_string();
        let ns = NamespaceIdent::new(name.clone());
        let catalog = &self.catalog.catalog;
        if catalog.namespace_exists(&ns).await.map_err(iceberg_err)? {
            if if_not_exists {
                return Ok(StatementOutput::done(format!(
                    "schema {name} already exists"
                )));
            }
            return Err(already_exists(format!(
                "schema (namespace) '{name}' already exists"
            )));
        }
        catalog
            .create_namespace(&ns, Default::default())
            .await
            .map_err(iceberg_err)?;
        self.provider.refresh().await?;
        Ok(StatementOutput::done(format!("CREATE SCHEMA {name}")))
    }

    pub(super) async fn drop_schemas(
        &self,
        names: &[ObjectName],
        if_exists: bool,
    ) -> Result<StatementOutput> {
        for name in names {
            let ns = NamespaceIdent::new(name.to_string().trim_matches('"').to_string());
            if !self
                .catalog
                .catalog
                .namespace_exists(&ns)
                .await
                .map_err(iceberg_err)?
            {
                if if_exists {
                    continue;
                }
                return Err(not_found(format!(
                    "schema (namespace) '{name}' does not exist"
                )));
            }
            self.catalog
                .catalog
                .drop_namespace(&ns)
                .await
                .map_err(iceberg_err)?;
        }
        self.provider.refresh().await?;
        Ok(StatementOutput::done("DROP SCHEMA"))
    }

    pub(super) async fn drop_tables(
        &self,
        names: &[ObjectName],
        if_exists: bool,
    ) -> Result<StatementOutput> {
        for name in names {
            let ident = self.object_ident(name)?;
            if !if_exists {
                self.ensure_namespace(ident.namespace()).await?;
            }
            let exists = self
                .catalog
                .catalog
                .table_exists(&ident)
                .await
                .unwrap_or(false);
            if !exists {
                if if_exists {
                    continue;
                }
                return Err(not_found(format!("table '{ident}' does not exist")));
            }
            // Like Trino, DROP TABLE removes the data and metadata files too.
            self.catalog
                .catalog
                .purge_table(&ident)
                .await
                .map_err(iceberg_err)?;
        }
        Ok(StatementOutput::done("DROP TABLE"))
    }

    pub(super) async fn create_table(&self, create: CreateTable) -> Result<StatementOutput> {
        let ident = self.ident_from_parts(&create.name)?;
        self.ensure_namespace(ident.namespace()).await?;
        if self
            .catalog
            .catalog
            .table_exists(&ident)
            .await
            .map_err(iceberg_err)?
        {
            if create.if_not_exists {
                return Ok(StatementOutput::done(format!(
                    "table {ident} already exists"
                )));
            }
            return Err(already_exists(format!("table '{ident}' already exists")));
        }
        let schema = match (&create.query, create.columns.is_empty()) {
            (_, false) => ddl::build_schema(&create.columns)?,
            (Some(query), true) => self.query_schema(&ident, query).await?,
            (None, true) => {
                return Err(invalid_input(format!(
                    "CREATE TABLE {ident}: no columns given"
                )));
            }
        };
        let spec = ddl::build_partition_spec(&schema, &create.partition_by)?;
        let mut properties: HashMap<String, String> = create.properties.iter().cloned().collect();
        let format_version = take_format_version(&ident, &mut properties)?;
        if let Some(reserved) = TableProperties::RESERVED_PROPERTIES
            .iter()
            .find(|key| properties.contains_key(**key))
        {
            return Err(invalid_input(format!(
                "CREATE TABLE {ident}: table property '{reserved}' is reserved: Iceberg \
                 sets it itself"
            )));
        }
        TableProperties::try_from(&properties).map_err(|e| {
            invalid_input(format!(
                "CREATE TABLE {ident}: invalid table property: {}",
                e.message()
            ))
        })?;
        check_isolation_properties(&properties, &ident.to_string())?;
        validate_modes(&ident.to_string(), &properties, format_version)?;
        check_parquet_properties(&ident.to_string(), &properties)?;
        let creation = TableCreation::builder()
            .name(ident.name().to_string())
            .schema(schema)
            .partition_spec(spec)
            .properties(properties)
            .format_version(format_version)
            .build();
        self.catalog
            .catalog
            .create_table(ident.namespace(), creation)
            .await
            .map_err(iceberg_err)?;
        let Some(query) = create.query else {
            return Ok(StatementOutput::done(format!("CREATE TABLE {ident}")));
        };
        let insert = format!(
            "INSERT INTO {}.{} {query}",
            quote(&ident.namespace().to_url_string()),
            quote(ident.name())
        );
        match Box::pin(self.execute_one(&insert)).await {
            Ok(out) => Ok(out),
            Err(e) => {
                let _ = self.catalog.catalog.drop_table(&ident).await;
                Err(e)
            }
        }
    }

    /// The Iceberg schema of a CTAS query's output (every column nullable).
    async fn query_schema(
        &self,
        ident: &iceberg::TableIdent,
        query: &str,
    ) -> Result<iceberg::spec::Schema> {
        let df = self.ctx.sql(query).await?;
        let nullable = Schema::new(
            df.schema()
                .as_arrow()
                .fields()
                .iter()
                .map(|f| f.as_ref().clone().with_nullable(true))
                .collect::<Vec<_>>(),
        );
        arrow_schema_to_schema_auto_assign_ids(&nullable).map_err(|e| {
            invalid_input(format!(
                "CREATE TABLE {ident} AS: unsupported column type: {e}"
            ))
        })
    }
}

/// Takes `format-version` (Spark / Iceberg) or `format_version` (Trino) out
/// of `properties`: the format version of the new table, V2 when absent.
fn take_format_version(
    ident: &iceberg::TableIdent,
    properties: &mut HashMap<String, String>,
) -> Result<FormatVersion> {
    let given: Vec<(&str, String)> = ["format-version", "format_version"]
        .into_iter()
        .filter_map(|key| properties.remove(key).map(|value| (key, value)))
        .collect();
    let (key, value) = match given.as_slice() {
        [] => return Ok(FormatVersion::V2),
        [one] => one,
        _ => {
            return Err(invalid_input(format!(
                "CREATE TABLE {ident}: give the format version once, as 'format-version' or \
                 'format_version', not both"
            )))
        }
    };
    match value.as_str() {
        "1" => Ok(FormatVersion::V1),
        "2" => Ok(FormatVersion::V2),
        "3" => Err(invalid_input(format!(
            "CREATE TABLE {ident}: table property '{key}' = '3': icemerge does not write \
             format v3 tables (format versions 1 and 2 are supported)"
        ))),
        other => Err(invalid_input(format!(
            "CREATE TABLE {ident}: invalid value '{other}' for table property '{key}': \
             expected 1 or 2"
        ))),
    }
}
