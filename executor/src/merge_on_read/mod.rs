//! MERGE's writer, stage D, on a table in merge-on-read mode:
//! `MergeOnReadWriterExec`. Fed by the same join / classify stage as the
//! copy-on-write writer (`crate::merge_writer`), with the same input (the
//! merge rows of one writer partition; every row of a touched data file in
//! the same partition). No data file is rewritten: inserted rows and the
//! new values of updated rows go to new data files; the original positions
//! of deleted and updated rows go to position delete files, one per touched
//! data file, sorted by position. A target row acted on twice fails the
//! statement (duplicate match). The output is the partition's commit
//! fragment (`icemerge_proto::fragment`), committed as a row delta.
//!
//! - `exec.rs`: the plan node;
//! - `sink.rs`: one partition's writer;
//! - `position_delete_writer.rs`: one position delete file.

mod exec;
mod position_delete_writer;
mod sink;

pub use exec::MergeOnReadWriterExec;
