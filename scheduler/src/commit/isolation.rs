//! Isolation levels of row-level writes, as Iceberg's table properties
//! `write.merge.isolation-level`, `write.update.isolation-level` and
//! `write.delete.isolation-level` set them for Spark: `serializable` (the
//! default) or `snapshot`. Any other value is refused, at CREATE TABLE and
//! when a statement reads it.

use std::collections::HashMap;
use std::fmt;

use datafusion::error::Result;
use icemerge_proto::error::invalid_input;

/// The property that sets a MERGE's isolation level.
pub const MERGE_ISOLATION_LEVEL: &str = "write.merge.isolation-level";
/// The property that sets an UPDATE's isolation level.
pub const UPDATE_ISOLATION_LEVEL: &str = "write.update.isolation-level";
/// The property that sets a DELETE's isolation level.
pub const DELETE_ISOLATION_LEVEL: &str = "write.delete.isolation-level";

/// How much of what other writers committed meanwhile a statement tolerates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IsolationLevel {
    /// New data files that could hold rows the statement's filter matches
    /// are a conflict too: the outcome is that of some serial order.
    #[default]
    Serializable,
    /// Only changes to the files the statement read and rewrote conflict;
    /// rows added meanwhile are not seen.
    Snapshot,
}

impl fmt::Display for IsolationLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IsolationLevel::Serializable => "serializable",
            IsolationLevel::Snapshot => "snapshot",
        })
    }
}

impl IsolationLevel {
    /// The level `property` sets in `properties` (default serializable);
    /// `table` names the table in the error of a bad value.
    pub fn of(properties: &HashMap<String, String>, property: &str, table: &str) -> Result<Self> {
        match properties.get(property) {
            None => Ok(IsolationLevel::default()),
            Some(value) => parse(value).ok_or_else(|| bad_value(table, property, value)),
        }
    }
}

fn parse(value: &str) -> Option<IsolationLevel> {
    match value.trim().to_ascii_lowercase().as_str() {
        "serializable" => Some(IsolationLevel::Serializable),
        "snapshot" => Some(IsolationLevel::Snapshot),
        _ => None,
    }
}

fn bad_value(table: &str, property: &str, value: &str) -> datafusion::error::DataFusionError {
    invalid_input(format!(
        "table {table}: invalid value '{value}' for table property '{property}': expected \
         'serializable' or 'snapshot'"
    ))
}

/// Refuses a bad value of any of the three isolation-level properties.
pub fn check_isolation_properties(properties: &HashMap<String, String>, table: &str) -> Result<()> {
    for property in [
        MERGE_ISOLATION_LEVEL,
        UPDATE_ISOLATION_LEVEL,
        DELETE_ISOLATION_LEVEL,
    ] {
        IsolationLevel::of(properties, property, table)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use icemerge_proto::error::{ErrorKind, IcemergeError};

    fn props(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn levels_default_to_serializable_and_refuse_other_values() {
        let none = props(&[]);
        assert_eq!(
            IsolationLevel::of(&none, MERGE_ISOLATION_LEVEL, "db.t").unwrap(),
            IsolationLevel::Serializable
        );
        let snapshot = props(&[(MERGE_ISOLATION_LEVEL, "Snapshot")]);
        assert_eq!(
            IsolationLevel::of(&snapshot, MERGE_ISOLATION_LEVEL, "db.t").unwrap(),
            IsolationLevel::Snapshot
        );
        let bad = props(&[(DELETE_ISOLATION_LEVEL, "read-committed")]);
        assert!(IsolationLevel::of(&bad, MERGE_ISOLATION_LEVEL, "db.t").is_ok());
        let err = check_isolation_properties(&bad, "db.t").unwrap_err();
        assert_eq!(IcemergeError::kind_of(&err), Some(ErrorKind::InvalidInput));
        let text = err.to_string();
        assert!(
            text.contains("read-committed") && text.contains(DELETE_ISOLATION_LEVEL),
            "{text}"
        );
    }
}
