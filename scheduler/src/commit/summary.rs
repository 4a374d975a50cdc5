//! The new snapshot's summary: what the action adds and removes, partition
//! summaries, running totals, and the action's own properties.

use std::collections::{HashMap, HashSet};

use iceberg::spec::{
    DataFile, Operation, PartitionSpecRef, SchemaRef, SnapshotSummaryCollector, Summary,
    TableMetadata, TableProperties,
};

/// A removed data file with the schema and spec its manifest was written with.
pub(crate) struct RemovedFile<'a> {
    pub file: &'a DataFile,
    pub schema: SchemaRef,
    pub spec: PartitionSpecRef,
}

/// The summary of a snapshot on top of `metadata`'s current one that adds
/// `added` (in the current schema and default spec) and removes `removed`
/// (a path counted once). The computed `added-*`/`deleted-*`/`total-*`
/// properties win over `properties`.
pub(crate) fn snapshot_summary<'a>(
    metadata: &TableMetadata,
    operation: Operation,
    properties: HashMap<String, String>,
    added: &[DataFile],
    removed: impl IntoIterator<Item = RemovedFile<'a>>,
) -> Summary {
    let mut collector = SnapshotSummaryCollector::default();
    collector.set_partition_summary_limit(partition_summary_limit(metadata));
    let schema = metadata.current_schema();
    let spec = metadata.default_partition_spec();
    for file in added {
        collector.add_file(file, schema.clone(), spec.clone());
    }
    let mut counted: HashSet<&str> = HashSet::new();
    for removed in removed {
        if counted.insert(removed.file.file_path()) {
            collector.remove_file(removed.file, removed.schema, removed.spec);
        }
    }
    let mut properties = properties;
    properties.extend(collector.build());
    let previous = metadata.current_snapshot().map(|s| s.summary());
    update_totals(&mut properties, previous);
    Summary {
        operation,
        additional_properties: properties,
    }
}

fn partition_summary_limit(metadata: &TableMetadata) -> u64 {
    metadata
        .properties()
        .get(TableProperties::PROPERTY_WRITE_PARTITION_SUMMARY_LIMIT)
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(TableProperties::PROPERTY_WRITE_PARTITION_SUMMARY_LIMIT_DEFAULT)
}

/// `total-*` = previous total + added - removed, as iceberg does; a total is
/// left out when the previous snapshot does not have it (unknown), and is
/// counted from 0 for the first snapshot.
fn update_totals(properties: &mut HashMap<String, String>, previous: Option<&Summary>) {
    const TOTALS: [(&str, &str, &str); 6] = [
        ("total-data-files", "added-data-files", "deleted-data-files"),
        (
            "total-delete-files",
            "added-delete-files",
            "removed-delete-files",
        ),
        ("total-records", "added-records", "deleted-records"),
        ("total-files-size", "added-files-size", "removed-files-size"),
        (
            "total-position-deletes",
            "added-position-deletes",
            "removed-position-deletes",
        ),
        (
            "total-equality-deletes",
            "added-equality-deletes",
            "removed-equality-deletes",
        ),
    ];
    let get = |map: &HashMap<String, String>, key: &str| -> Option<u64> {
        match map.get(key) {
            None => Some(0),
            Some(v) => v.parse::<u64>().ok(),
        }
    };
    for (total, added, removed) in TOTALS {
        let previous_total = match previous {
            None => Some(0),
            Some(summary) => summary
                .additional_properties
                .get(total)
                .and_then(|v| v.parse::<u64>().ok()),
        };
        let value = previous_total.and_then(|prev| {
            let added = get(properties, added)?;
            let removed = get(properties, removed)?;
            (prev + added).checked_sub(removed)
        });
        match value {
            Some(value) => {
                properties.insert(total.to_string(), value.to_string());
            }
            None => {
                properties.remove(total);
            }
        }
    }
}
