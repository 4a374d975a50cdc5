//! The messages that carry icemerge's physical plan nodes between the
//! coordinator and executors (through Ballista's plan codec).
//!
//! They are protobuf (prost) messages declared in Rust, so the build needs no
//! protobuf compiler. Field numbers are the contract: never reuse one.

use std::collections::HashMap;

/// Envelope for every icemerge physical operator that crosses the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PhysicalNode {
    #[prost(oneof = "physical_node::Node", tags = "1, 2, 3, 4, 5, 6, 7")]
    pub node: Option<physical_node::Node>,
}

pub mod physical_node {
    /// One variant per operator.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Node {
        #[prost(message, tag = "1")]
        Scan(super::ScanNode),
        #[prost(message, tag = "2")]
        Write(super::WriteNode),
        /// `CopyOnWriteWriterExec` (MERGE's writer), same fields as a write.
        #[prost(message, tag = "3")]
        MergeWrite(super::WriteNode),
        /// `MergeOnReadWriterExec` (MERGE's writer in merge-on-read mode),
        /// same fields as a write.
        #[prost(message, tag = "4")]
        MergeOnReadWrite(super::WriteNode),
        /// `StageProbeExec`: the top of a stage of the stage graph.
        #[prost(message, tag = "5")]
        StageProbe(super::StageProbeNode),
        /// `SortChangesByFileExec`: the copy-on-write writer's input order
        /// (its input is its one child).
        #[prost(message, tag = "6")]
        SortChangesByFile(super::SortChangesByFileNode),
        /// `BatchSlicesExec`: a join's oversized batches cut to the batch
        /// size (no field: its input is its one child).
        #[prost(message, tag = "7")]
        BatchSlices(super::BatchSlicesNode),
    }
}

/// How executors open the warehouse: the FileIO properties.
#[derive(Clone, PartialEq, prost::Message)]
pub struct FileIoProps {
    #[prost(map = "string, string", tag = "1")]
    pub props: HashMap<String, String>,
}

/// A group of data files read by one task.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ScanTaskGroup {
    /// Each entry is one iceberg `FileScanTask` as JSON.
    #[prost(string, repeated, tag = "1")]
    pub tasks_json: Vec<String>,
}

/// `IcebergScanExec`: a distributed scan of one Iceberg table snapshot.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ScanNode {
    /// The table, for display.
    #[prost(string, tag = "1")]
    pub table: String,
    /// Output schema (datafusion-proto `Schema`, encoded).
    #[prost(bytes = "vec", tag = "2")]
    pub schema: Vec<u8>,
    #[prost(message, optional, tag = "3")]
    pub file_io: Option<FileIoProps>,
    /// One group per output partition (task).
    #[prost(message, repeated, tag = "4")]
    pub groups: Vec<ScanTaskGroup>,
    /// Files pruned at plan time (for metrics and EXPLAIN).
    #[prost(uint64, tag = "5")]
    pub files_pruned: u64,
    /// Pushed-down predicate, for display.
    #[prost(string, tag = "6")]
    pub predicate: String,
    #[prost(uint64, optional, tag = "7")]
    pub limit: Option<u64>,
    /// Emit the row id columns `_file` and `_pos`.
    #[prost(bool, tag = "8")]
    pub row_ids: bool,
    /// Predicate from a MERGE source's key values that pruned files, for display.
    #[prost(string, tag = "9")]
    pub dynamic_predicate: String,
    /// A MERGE's target scan (with or without row ids).
    #[prost(bool, tag = "10")]
    pub merge_target: bool,
}

/// `IcebergWriteExec`: writes its input as data files of one table.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WriteNode {
    #[prost(string, tag = "1")]
    pub table: String,
    /// Table metadata JSON (schema, partition spec, location, properties).
    #[prost(string, tag = "2")]
    pub table_metadata_json: String,
    #[prost(message, optional, tag = "3")]
    pub file_io: Option<FileIoProps>,
    /// Unique per statement; file names add the task and attempt.
    #[prost(string, tag = "4")]
    pub write_id: String,
    /// MERGE writer: the record count of every data file the target scan
    /// reads, so that a file whose every row is deleted is dropped unread.
    #[prost(map = "string, uint64", tag = "5")]
    pub file_rows: HashMap<String, u64>,
    /// MERGE writer: the delete files (iceberg `FileScanTaskDeleteFile`s as
    /// a JSON array) of every data file the target scan reads that has any.
    #[prost(map = "string, string", tag = "6")]
    pub file_deletes_json: HashMap<String, String>,
}

/// `StageProbeExec`: measures the stage it tops (its input is the stage).
#[derive(Clone, PartialEq, prost::Message)]
pub struct StageProbeNode {
    /// The stage's id in the statement's stage graph.
    #[prost(uint64, tag = "1")]
    pub stage: u64,
}

/// `SortChangesByFileExec`: a MERGE's changes sorted by data file, its
/// inserts passed through.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SortChangesByFileNode {
    /// The data files the changes can name (those the target scan reads),
    /// in path order: the sort's key is a file's place in this list.
    #[prost(string, repeated, tag = "1")]
    pub files: Vec<String>,
}

/// `BatchSlicesExec`: batches above the batch size cut to it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct BatchSlicesNode {}
