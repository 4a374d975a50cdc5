//! `ALTER TABLE`: each statement is one metadata commit (the catalog row's
//! compare-and-swap). `SET / UNSET TBLPROPERTIES` checks the resulting
//! properties as CREATE TABLE checks them (Iceberg's property values,
//! isolation levels, write modes against the format version); reserved
//! properties are refused and `format-version` may only be restated.
//! Column changes build the new schema in `alter_schema.rs`, partition
//! field changes the new spec in `alter_partition.rs`; both commit through
//! `commit::commit_metadata_change`, which re-checks them on the table's
//! latest metadata when another writer committed first; so does `WRITE
//! ORDERED BY` (the sort order in `alter_sort_order.rs`). `RENAME TO` is the
//! catalog's rename.

use std::collections::HashMap;

use datafusion::error::Result;
use datafusion::sql::sqlparser::ast::ObjectName;
use iceberg::spec::{FormatVersion, TableProperties};
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use icemerge_executor::iceberg_err;
use icemerge_executor::parquet_properties::check_parquet_properties;
use icemerge_planner::alter_table::{AlterTable, TableChange, WriteOrder};
use icemerge_planner::merge::ident_value;
use icemerge_planner::write_mode::validate_modes;

use crate::commit::{check_isolation_properties, commit_metadata_change};

use super::alter_partition::evolve_spec;
use super::alter_schema::evolve_schema;
use super::alter_sort_order::{sort_order, DISTRIBUTION_MODE};

use super::{Session, StatementOutput};
use icemerge_proto::error::{already_exists, invalid_input, not_found, unsupported};

impl Session {
    /// Runs one `ALTER TABLE` as one metadata commit.
    pub(super) async fn alter_table(&self, alter: AlterTable) -> Result<StatementOutput> {
        let ident = self.object_ident(&alter.table)?;
        self.ensure_namespace(ident.namespace()).await?;
        let catalog = &self.catalog.catalog;
        if !catalog.table_exists(&ident).await.map_err(iceberg_err)? {
            return Err(not_found(format!(
                "ALTER TABLE: table '{ident}' does not exist"
            )));
        }
        match &alter.change {
            TableChange::RenameTo(to) => return self.rename_table(&ident, to).await,
            TableChange::SetProperties(_) | TableChange::UnsetProperties { .. } => {}
            TableChange::AddColumns(_)
            | TableChange::DropColumns { .. }
            | TableChange::RenameColumn { .. }
            | TableChange::AlterColumn { .. } => {
                return self.alter_schema(&ident, &alter.change).await
            }
            TableChange::AddPartitionField { .. }
            | TableChange::DropPartitionField(_)
            | TableChange::ReplacePartitionField { .. } => {
                return self.alter_partition_spec(&ident, &alter.change).await
            }
            TableChange::WriteOrder(write) => return self.alter_write_order(&ident, write).await,
        }
        let table = catalog.load_table(&ident).await.map_err(iceberg_err)?;
        let version = table.metadata().format_version();
        let mut properties = table.metadata().properties().clone();
        let mut action = Transaction::new(&table).update_table_properties();
        match alter.change {
            TableChange::SetProperties(pairs) => {
                for (key, value) in pairs {
                    if is_format_version(&key) {
                        check_same_version(&ident, &key, &value, version)?;
                        continue;
                    }
                    refuse_reserved(&ident, &key)?;
                    properties.insert(key.clone(), value.clone());
                    action = action.set(key, value);
                }
            }
            TableChange::UnsetProperties { keys, if_exists } => {
                for key in keys {
                    refuse_reserved(&ident, &key)?;
                    if properties.remove(&key).is_none() {
                        if if_exists {
                            continue;
                        }
                        return Err(invalid_input(format!(
                            "ALTER TABLE {ident} UNSET TBLPROPERTIES: table property '{key}' \
                             is not set (UNSET TBLPROPERTIES IF EXISTS ignores it)"
                        )));
                    }
                    action = action.remove(key);
                }
            }
            _ => unreachable!("only property changes reach here"),
        }
        TableProperties::try_from(&properties).map_err(|e| {
            invalid_input(format!(
                "ALTER TABLE {ident}: invalid table property: {}",
                e.message()
            ))
        })?;
        check_isolation_properties(&properties, &ident.to_string())?;
        validate_modes(&ident.to_string(), &properties, version)?;
        check_parquet_properties(&ident.to_string(), &properties)?;
        let transaction = action
            .apply(Transaction::new(&table))
            .map_err(iceberg_err)?;
        transaction
            .commit(catalog.as_ref())
            .await
            .map_err(iceberg_err)?;
        Ok(StatementOutput::done(format!("ALTER TABLE {ident}")))
    }
}

impl Session {
    /// A column change: the new schema becomes the table's current one
    /// (nothing is committed when the schema stays as it is).
    async fn alter_schema(
        &self,
        ident: &iceberg::TableIdent,
        change: &TableChange,
    ) -> Result<StatementOutput> {
        let name = ident.to_string();
        commit_metadata_change(&self.catalog, ident, |table, builder| match evolve_schema(
            &name,
            table.metadata(),
            change,
        )? {
            Some(schema) => builder
                .add_schema(schema)
                .and_then(|b| b.set_current_schema(-1))
                .map_err(iceberg_err),
            None => Ok(builder),
        })
        .await?;
        Ok(StatementOutput::done(format!("ALTER TABLE {ident}")))
    }

    /// A partition field change: the new spec becomes the table's default
    /// one (files already written keep theirs).
    async fn alter_partition_spec(
        &self,
        ident: &iceberg::TableIdent,
        change: &TableChange,
    ) -> Result<StatementOutput> {
        let name = ident.to_string();
        commit_metadata_change(&self.catalog, ident, |table, builder| {
            let spec = evolve_spec(&name, table.metadata(), change)?;
            builder
                .add_partition_spec(spec)
                .and_then(|b| b.set_default_partition_spec(-1))
                .map_err(|e| invalid_input(format!("ALTER TABLE {name}: {}", e.message())))
        })
        .await?;
        Ok(StatementOutput::done(format!("ALTER TABLE {ident}")))
    }

    /// `WRITE ... ORDERED BY` and its siblings: the new sort order becomes
    /// the table's default and `write.distribution-mode` is set, in one
    /// metadata commit.
    async fn alter_write_order(
        &self,
        ident: &iceberg::TableIdent,
        write: &WriteOrder,
    ) -> Result<StatementOutput> {
        let name = ident.to_string();
        commit_metadata_change(&self.catalog, ident, |table, builder| {
            let order = sort_order(&name, table.metadata(), write)?;
            let mode = HashMap::from([(
                DISTRIBUTION_MODE.to_string(),
                write.distribution.to_string(),
            )]);
            builder
                .add_sort_order(order)
                .and_then(|b| b.set_default_sort_order(-1))
                .and_then(|b| b.set_properties(mode))
                .map_err(|e| invalid_input(format!("ALTER TABLE {name}: {}", e.message())))
        })
        .await?;
        Ok(StatementOutput::done(format!("ALTER TABLE {ident}")))
    }

    /// `ALTER TABLE ident RENAME TO to`: the catalog row is renamed (the
    /// metadata and data files stay where they are, as in Iceberg). A
    /// one-part new name stays in the table's namespace.
    async fn rename_table(
        &self,
        ident: &iceberg::TableIdent,
        to: &ObjectName,
    ) -> Result<StatementOutput> {
        let dest = match to.0.as_slice() {
            [name] => iceberg::TableIdent::new(
                ident.namespace().clone(),
                name.as_ident()
                    .map(ident_value)
                    .unwrap_or_else(|| name.to_string()),
            ),
            _ => self.object_ident(to)?,
        };
        self.ensure_namespace(dest.namespace()).await?;
        let catalog = &self.catalog.catalog;
        if catalog.table_exists(&dest).await.map_err(iceberg_err)? {
            return Err(already_exists(format!(
                "ALTER TABLE {ident} RENAME TO {dest}: table '{dest}' already exists"
            )));
        }
        catalog
            .rename_table(ident, &dest)
            .await
            .map_err(iceberg_err)?;
        self.provider.refresh().await?;
        Ok(StatementOutput::done(format!(
            "ALTER TABLE {ident} RENAME TO {dest}"
        )))
    }
}

fn is_format_version(key: &str) -> bool {
    key == "format-version" || key == "format_version"
}

/// `format-version` restated as the table has it is accepted (nothing
/// changes); changing it is refused.
fn check_same_version(
    ident: &iceberg::TableIdent,
    key: &str,
    value: &str,
    version: FormatVersion,
) -> Result<()> {
    let current = match version {
        FormatVersion::V1 => "1",
        FormatVersion::V2 => "2",
        FormatVersion::V3 => "3",
    };
    if value == current {
        return Ok(());
    }
    Err(unsupported(format!(
        "ALTER TABLE {ident}: table property '{key}' = '{value}': changing the format \
         version (now {current}) is not supported"
    )))
}

fn refuse_reserved(ident: &iceberg::TableIdent, key: &str) -> Result<()> {
    if TableProperties::RESERVED_PROPERTIES.contains(&key) {
        return Err(invalid_input(format!(
            "ALTER TABLE {ident}: table property '{key}' is reserved: Iceberg sets it itself"
        )));
    }
    Ok(())
}
