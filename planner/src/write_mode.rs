//! How a table's row-level changes are written: its `write.merge.mode`,
//! `write.update.mode` and `write.delete.mode` properties (Iceberg's names,
//! read as Spark and Trino read them), each `copy-on-write` (the default:
//! touched data files are rewritten) or `merge-on-read` (position delete
//! files are written beside new data files; no data file is rewritten).
//! Values are validated where a table is created, and again where a MERGE
//! reads them (another engine may have set them).

use std::collections::HashMap;
use std::fmt;

use datafusion::error::Result;
use iceberg::spec::FormatVersion;
use icemerge_proto::error::{invalid_input, unsupported};

/// The property MERGE reads.
pub const MERGE_MODE: &str = "write.merge.mode";
/// The property UPDATE reads.
pub const UPDATE_MODE: &str = "write.update.mode";
/// The property DELETE reads.
pub const DELETE_MODE: &str = "write.delete.mode";

const PROPERTIES: [&str; 3] = [MERGE_MODE, UPDATE_MODE, DELETE_MODE];

/// A row-level write mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WriteMode {
    #[default]
    CopyOnWrite,
    MergeOnRead,
}

impl WriteMode {
    /// The property value naming this mode.
    pub fn as_str(self) -> &'static str {
        match self {
            WriteMode::CopyOnWrite => "copy-on-write",
            WriteMode::MergeOnRead => "merge-on-read",
        }
    }
}

impl fmt::Display for WriteMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The mode `properties` set in `property` (default copy-on-write), for a
/// table of `format_version` named `table`. An unknown value, or
/// merge-on-read on a format-version 1 table (which has no delete files),
/// is an error naming the property and the value.
pub fn mode_of(
    table: &str,
    properties: &HashMap<String, String>,
    property: &str,
    format_version: FormatVersion,
) -> Result<WriteMode> {
    let Some(value) = properties.get(property) else {
        return Ok(WriteMode::CopyOnWrite);
    };
    let mode = match value.to_ascii_lowercase().as_str() {
        "copy-on-write" => WriteMode::CopyOnWrite,
        "merge-on-read" => WriteMode::MergeOnRead,
        _ => {
            return Err(invalid_input(format!(
                "table {table}: invalid value '{value}' for table property '{property}': \
                 expected 'copy-on-write' or 'merge-on-read'"
            )))
        }
    };
    match (mode, format_version) {
        (WriteMode::MergeOnRead, FormatVersion::V1) => Err(invalid_input(format!(
            "table {table}: '{property}' = 'merge-on-read' needs format-version 2 (format-version \
             1 tables have no delete files)"
        ))),
        (WriteMode::MergeOnRead, FormatVersion::V3) => Err(unsupported(format!(
            "table {table}: '{property}' = 'merge-on-read' on a format-version 3 table needs \
             deletion vectors, which icemerge does not write"
        ))),
        _ => Ok(mode),
    }
}

/// Checks every write-mode property of `properties` (see [`mode_of`]).
pub fn validate_modes(
    table: &str,
    properties: &HashMap<String, String>,
    format_version: FormatVersion,
) -> Result<()> {
    for property in PROPERTIES {
        mode_of(table, properties, property, format_version)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn default_is_copy_on_write() {
        let mode = mode_of("db.t", &props(&[]), MERGE_MODE, FormatVersion::V2).unwrap();
        assert_eq!(mode, WriteMode::CopyOnWrite);
    }

    #[test]
    fn both_values_are_read() {
        let p = props(&[
            (MERGE_MODE, "merge-on-read"),
            (UPDATE_MODE, "copy-on-write"),
        ]);
        assert_eq!(
            mode_of("db.t", &p, MERGE_MODE, FormatVersion::V2).unwrap(),
            WriteMode::MergeOnRead
        );
        assert_eq!(
            mode_of("db.t", &p, UPDATE_MODE, FormatVersion::V2).unwrap(),
            WriteMode::CopyOnWrite
        );
        assert!(validate_modes("db.t", &p, FormatVersion::V2).is_ok());
    }

    #[test]
    fn an_unknown_value_names_property_and_value() {
        let p = props(&[(DELETE_MODE, "merge-on-write")]);
        let err = validate_modes("db.t", &p, FormatVersion::V2)
            .unwrap_err()
            .to_string();
        assert!(err.contains("'write.delete.mode'"), "{err}");
        assert!(err.contains("'merge-on-write'"), "{err}");
    }

    #[test]
    fn merge_on_read_needs_format_version_2() {
        let p = props(&[(MERGE_MODE, "merge-on-read")]);
        let err = validate_modes("db.t", &p, FormatVersion::V1)
            .unwrap_err()
            .to_string();
        assert!(err.contains("needs format-version 2"), "{err}");
        let p = props(&[(MERGE_MODE, "copy-on-write")]);
        assert!(validate_modes("db.t", &p, FormatVersion::V1).is_ok());
    }
}
