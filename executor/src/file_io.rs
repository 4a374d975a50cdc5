//! Opening the warehouse's storage from plain properties, so that executors
//! can rebuild the coordinator's `FileIO` from what travels in a plan.

use std::collections::HashMap;
use std::sync::Arc;

use iceberg::io::{FileIO, FileIOBuilder};
use iceberg_storage_opendal::OpenDalResolvingStorageFactory;

/// Builds a `FileIO` that resolves `file://` and `s3://` locations. S3
/// settings among `props` are also registered for the cleanup of
/// uncommitted files ([`crate::cleanup::register_storage`]).
pub fn file_io_from_props(props: &HashMap<String, String>) -> FileIO {
    crate::cleanup::register_storage("", props);
    FileIOBuilder::new(Arc::new(OpenDalResolvingStorageFactory::new()))
        .with_props(props.clone())
        .build()
}

/// The properties a `FileIO` was built with.
pub fn file_io_props(file_io: &FileIO) -> HashMap<String, String> {
    file_io.config().props().clone()
}
