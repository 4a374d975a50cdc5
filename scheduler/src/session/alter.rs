//! `ALTER TABLE ... SET / UNSET TBLPROPERTIES`: one metadata commit (the
//! catalog row's compare-and-swap through the SQL catalog), after the
//! resulting properties are checked as CREATE TABLE checks them (Iceberg's
//! property values, isolation levels, write modes against the format
//! version). Reserved properties are refused; `format-version` may only be
//! restated, not changed.

use datafusion::error::Result;
use datafusion::sql::sqlparser::ast::ObjectName;
use iceberg::spec::{FormatVersion, TableProperties};
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use icemerge_executor::iceberg_err;
use icemerge_planner::alter_table::{AlterTableProperties, PropertyChange};
use icemerge_planner::merge::ident_value;
use icemerge_planner::write_mode::validate_modes;

use crate::commit::check_isolation_properties;

use super::{Session, StatementOutput};
use icemerge_proto::error::{already_exists, invalid_input, not_found, unsupported};

impl Session {
    /// Sets or unsets table properties in one metadata commit.
    pub(super) async fn alter_table_properties(
        &self,
        alter: AlterTableProperties,
    ) -> Result<StatementOutput> {
        let ident = self.object_ident(&alter.table)?;
        self.ensure_namespace(ident.namespace()).await?;
        let catalog = &self.catalog.catalog;
        if !catalog.table_exists(&ident).await.map_err(iceberg_err)? {
            return Err(not_found(format!(
                "ALTER TABLE: table '{ident}' does not exist"
            )));
        }
        if let PropertyChange::RenameTo(to) = &alter.change {
            return self.rename_table(&ident, to).await;
        }
        let table = catalog.load_table(&ident).await.map_err(iceberg_err)?;
        let version = table.metadata().format_version();
        let mut properties = table.metadata().properties().clone();
        let mut action = Transaction::new(&table).update_table_properties();
        match alter.change {
            PropertyChange::Set(pairs) => {
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
            PropertyChange::RenameTo(_) => unreachable!("renamed above"),
            PropertyChange::Unset { keys, if_exists } => {
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
        }
        TableProperties::try_from(&properties).map_err(|e| {
            invalid_input(format!(
                "ALTER TABLE {ident}: invalid table property: {}",
                e.message()
            ))
        })?;
        check_isolation_properties(&properties, &ident.to_string())?;
        validate_modes(&ident.to_string(), &properties, version)?;
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
