//! Opening the warehouse's storage from plain properties, so that executors
//! can rebuild the coordinator's `FileIO` from what travels in a plan, and
//! the secrets among those properties, which never travel: a plan carries
//! the store's endpoint, region and addressing; each process that runs it
//! adds its own credentials (`IcemergePhysicalCodec::with_credentials`), or
//! the S3 client finds them itself (environment, profile, instance role).

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

/// Storage (`FileIO`) properties as operators hold them: a map whose Debug
/// output hides the secrets' values, so a plan printed at any log level
/// shows none.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct StorageProps(pub HashMap<String, String>);

impl std::ops::Deref for StorageProps {
    type Target = HashMap<String, String>;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl From<HashMap<String, String>> for StorageProps {
    fn from(props: HashMap<String, String>) -> Self {
        Self(props)
    }
}

impl std::fmt::Debug for StorageProps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut entries: Vec<_> = self.0.iter().collect();
        entries.sort();
        f.debug_map()
            .entries(entries.into_iter().map(|(k, v)| {
                let shown = if SECRET_PROPS.contains(&k.as_str()) {
                    "****"
                } else {
                    v.as_str()
                };
                (k, shown)
            }))
            .finish()
    }
}

/// The `FileIO` properties that are secrets.
pub const SECRET_PROPS: [&str; 3] = [
    iceberg::io::S3_ACCESS_KEY_ID,
    iceberg::io::S3_SECRET_ACCESS_KEY,
    iceberg::io::S3_SESSION_TOKEN,
];

/// S3 credentials as `FileIO` properties (the ones given and not empty).
pub fn s3_credentials(
    access_key_id: Option<&str>,
    secret_access_key: Option<&str>,
    session_token: Option<&str>,
) -> HashMap<String, String> {
    SECRET_PROPS
        .into_iter()
        .zip([access_key_id, secret_access_key, session_token])
        .filter_map(|(key, value)| {
            Some((
                key.to_string(),
                value.filter(|v| !v.is_empty())?.to_string(),
            ))
        })
        .collect()
}

/// `props` without its secrets (what a plan may carry).
pub fn without_secrets(props: &HashMap<String, String>) -> HashMap<String, String> {
    props
        .iter()
        .filter(|(key, _)| !SECRET_PROPS.contains(&key.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Only the secrets of `props` (the credentials a process adds to plans).
pub fn secrets_of(props: &HashMap<String, String>) -> HashMap<String, String> {
    props
        .iter()
        .filter(|(key, _)| SECRET_PROPS.contains(&key.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The properties a `FileIO` was built with.
pub fn file_io_props(file_io: &FileIO) -> HashMap<String, String> {
    file_io.config().props().clone()
}
