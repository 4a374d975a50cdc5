//! Removing the files of a write that will not be committed: a failed task
//! deletes its own files, a failed statement deletes every file carrying its
//! write id (after a failure on a cluster, again over the next half minute,
//! for tasks the executors were still finishing). Data files are named
//! `<write id>-<task>-<attempt>-...`.
//!
//! A local warehouse (`file:///path`, `file:/path` as Hadoop and so Spark
//! write it, or a bare absolute path) is walked directory by
//! directory. An `s3://` warehouse is listed recursively and the matching
//! objects are deleted through opendal's S3 service, with the S3 settings
//! this process registered for the location ([`register_storage`]: the
//! coordinator when it opens the catalog, an executor whenever it builds a
//! `FileIO` from the properties shipped in a plan). A location on any other
//! scheme, or an object store this process has no settings for, is left
//! alone (and logged): nothing is deleted there.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use futures::TryStreamExt;
use iceberg::spec::TableMetadata;
use opendal::services::S3Config;
use opendal::{Configurator, Operator};

/// Where a table's data files go (`write.data.path`, else `<location>/data`).
pub fn data_location(metadata: &TableMetadata) -> String {
    metadata
        .properties()
        .get("write.data.path")
        .cloned()
        .unwrap_or_else(|| format!("{}/data", metadata.location().trim_end_matches('/')))
}

/// The name prefix of the files one task of a write writes:
/// `<write id>-<task>-<attempt>`, the attempt a fresh id, so that a task
/// run again never overwrites or keeps its earlier attempt's files.
pub fn task_file_prefix(write_id: &str, partition: usize) -> String {
    format!(
        "{write_id}-{partition:05}-{}",
        uuid::Uuid::new_v4().simple()
    )
}

/// Deletes every file under `data_location` whose name starts with `prefix`.
/// Returns how many were deleted.
pub fn delete_files_with_prefix(data_location: &str, prefix: &str) -> usize {
    delete_files_with_prefix_except(data_location, prefix, &[])
}

/// When a statement failed on a cluster, the delays after which its files
/// are looked for again: a task that an executor was still running (or
/// aborting) at the first pass may close a file after it.
const LATE_SWEEPS: [Duration; 6] = [
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(4),
    Duration::from_secs(8),
    Duration::from_secs(16),
];

/// As [`delete_files_with_prefix`], and again in the background at each of
/// [`LATE_SWEEPS`] (about half a minute in all) when called inside a tokio
/// runtime. For a failed statement whose tasks ran on executors that may
/// still be finishing them. Returns how many files the first pass deleted.
pub fn delete_files_with_prefix_now_and_later(data_location: &str, prefix: &str) -> usize {
    let deleted = delete_files_with_prefix(data_location, prefix);
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        let (location, prefix) = (data_location.to_string(), prefix.to_string());
        runtime.spawn(async move {
            for delay in LATE_SWEEPS {
                tokio::time::sleep(delay).await;
                let (l, p) = (location.clone(), prefix.clone());
                let late = tokio::task::spawn_blocking(move || delete_files_with_prefix(&l, &p))
                    .await
                    .unwrap_or(0);
                if late > 0 {
                    tracing::info!("removed {late} file(s) named '{prefix}*' written after the statement failed");
                }
            }
        });
    }
    deleted
}

/// As [`delete_files_with_prefix`], sparing the files at the locations in
/// `keep` (full paths as in the manifest).
pub fn delete_files_with_prefix_except(data_location: &str, prefix: &str, keep: &[&str]) -> usize {
    if let Some(root) = local_path(data_location) {
        return delete_local(root, prefix, keep);
    }
    if is_s3(data_location) {
        let Some(props) = storage_props(data_location) else {
            tracing::warn!(
                "no S3 settings registered for '{data_location}': files named '{prefix}*' were not removed"
            );
            return 0;
        };
        let location = data_location.to_string();
        let prefix_owned = prefix.to_string();
        let keep: Vec<String> = keep.iter().map(|k| normalize_s3(k)).collect();
        let outcome = run_blocking(async move {
            tokio::time::timeout(
                Duration::from_secs(120),
                delete_s3(&location, &prefix_owned, &keep, &props),
            )
            .await
            .unwrap_or_else(|_| Err("timed out after 120 s".to_string()))
        });
        return match outcome {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(
                    "removing files named '{prefix}*' under '{data_location}' failed: {e}"
                );
                0
            }
        };
    }
    tracing::warn!(
        "cannot list '{data_location}' (not a local or s3:// location): files named '{prefix}*' were not removed"
    );
    0
}

fn delete_local(root: &Path, prefix: &str, keep: &[&str]) -> usize {
    let mut deleted = 0;
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if entry.file_name().to_string_lossy().starts_with(prefix)
                && !keep.iter().any(|k| local_path(k) == Some(path.as_path()))
                && std::fs::remove_file(&path).is_ok()
            {
                deleted += 1;
            }
        }
    }
    deleted
}

/// The local path of a local location: `file:///path`, `file:/path` (one
/// slash: Hadoop's spelling, which Spark and other Java engines write),
/// `file://localhost/path`, or a bare absolute path. `None` for any other
/// location (another scheme, a host other than localhost, a relative path).
pub fn local_path(location: &str) -> Option<&Path> {
    let path = match location.strip_prefix("file:") {
        None => location,
        Some(rest) => match rest.strip_prefix("//") {
            // file://AUTHORITY/path: an empty authority or localhost
            Some(after) => match after.find('/') {
                Some(0) => after,
                Some(at) if &after[..at] == "localhost" => &after[at..],
                _ => return None,
            },
            None => rest,
        },
    };
    path.starts_with('/').then(|| Path::new(path))
}

fn is_s3(location: &str) -> bool {
    location.starts_with("s3://") || location.starts_with("s3a://")
}

/// `s3a://b/k` → `s3://b/k`.
fn normalize_s3(location: &str) -> String {
    match location.strip_prefix("s3a://") {
        Some(rest) => format!("s3://{rest}"),
        None => location.to_string(),
    }
}

/// Storage settings by location prefix ("" applies to every location).
type Registry = Mutex<Vec<(String, HashMap<String, String>)>>;

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| Mutex::new(Vec::new()))
}

/// Records the storage properties (`s3.endpoint`, credentials, ...) to use
/// when listing and deleting under `location` (`""`: anywhere without a
/// more specific entry). Properties without any `s3.` key are not recorded.
/// A later registration for the same location replaces the earlier one.
pub fn register_storage(location: &str, props: &HashMap<String, String>) {
    if !props.keys().any(|k| k.starts_with("s3.")) {
        return;
    }
    let location = normalize_s3(location.trim_end_matches('/'));
    let mut entries = registry().lock().unwrap_or_else(|e| e.into_inner());
    match entries.iter_mut().find(|(l, _)| *l == location) {
        Some(entry) => {
            if entry.1 != *props {
                entry.1 = props.clone();
            }
        }
        None => entries.push((location, props.clone())),
    }
}

/// The registered properties with the longest location prefix of `location`.
fn storage_props(location: &str) -> Option<HashMap<String, String>> {
    let location = normalize_s3(location);
    let entries = registry().lock().unwrap_or_else(|e| e.into_inner());
    entries
        .iter()
        .filter(|(prefix, _)| {
            prefix.is_empty() || location == *prefix || location.starts_with(&format!("{prefix}/"))
        })
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|(_, props)| props.clone())
}

/// An opendal S3 operator for the bucket of `location` (`s3://bucket/key`)
/// configured from iceberg's FileIO properties, and the key part.
pub fn s3_operator(
    location: &str,
    props: &HashMap<String, String>,
) -> Result<(Operator, String), String> {
    let location = normalize_s3(location);
    let rest = location
        .strip_prefix("s3://")
        .ok_or_else(|| format!("'{location}' is not an s3:// location"))?;
    let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(format!("'{location}': no bucket"));
    }
    let truthy = |key: &str| {
        props
            .get(key)
            .is_some_and(|v| matches!(v.to_lowercase().as_str(), "true" | "t" | "1" | "on"))
    };
    let mut config = S3Config::default();
    config.bucket = bucket.to_string();
    config.endpoint = props.get(iceberg::io::S3_ENDPOINT).cloned();
    config.region = props
        .get(iceberg::io::S3_REGION)
        .or_else(|| props.get(iceberg::io::CLIENT_REGION))
        .cloned();
    config.access_key_id = props.get(iceberg::io::S3_ACCESS_KEY_ID).cloned();
    config.secret_access_key = props.get(iceberg::io::S3_SECRET_ACCESS_KEY).cloned();
    config.session_token = props.get(iceberg::io::S3_SESSION_TOKEN).cloned();
    // iceberg's default, as in its own S3 storage: virtual-hosted style
    // unless path-style access is asked for.
    config.enable_virtual_host_style = !truthy(iceberg::io::S3_PATH_STYLE_ACCESS);
    let operator = Operator::new(config.into_builder())
        .map_err(|e| e.to_string())?
        .finish();
    Ok((operator, key.trim_matches('/').to_string()))
}

async fn delete_s3(
    location: &str,
    prefix: &str,
    keep: &[String],
    props: &HashMap<String, String>,
) -> Result<usize, String> {
    let (operator, root) = s3_operator(location, props)?;
    let bucket = operator.info().name().to_string();
    let dir = if root.is_empty() {
        String::new()
    } else {
        format!("{root}/")
    };
    let mut lister = operator
        .lister_with(&dir)
        .recursive(true)
        .await
        .map_err(|e| e.to_string())?;
    let mut doomed = vec![];
    while let Some(entry) = lister.try_next().await.map_err(|e| e.to_string())? {
        if !entry.metadata().is_file() || !entry.name().starts_with(prefix) {
            continue;
        }
        let full = format!("s3://{bucket}/{}", entry.path());
        if !keep.contains(&full) {
            doomed.push(entry.path().to_string());
        }
    }
    let mut deleted = 0;
    for path in doomed {
        operator.delete(&path).await.map_err(|e| e.to_string())?;
        deleted += 1;
    }
    Ok(deleted)
}

/// Runs `future` to completion from synchronous code that may itself be on
/// a tokio runtime: on a thread of its own with a fresh runtime.
fn run_blocking<T: Send>(
    future: impl std::future::Future<Output = Result<T, String>> + Send,
) -> Result<T, String> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| e.to_string())?
                    .block_on(future)
            })
            .join()
            .unwrap_or_else(|_| Err("cleanup thread panicked".to_string()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_locations() {
        let local = |l: &str| local_path(l).map(|p| p.to_str().unwrap().to_string());
        assert_eq!(local("file:///wh/t/data").as_deref(), Some("/wh/t/data"));
        assert_eq!(local("file:/wh/t/data").as_deref(), Some("/wh/t/data"));
        assert_eq!(local("file://localhost/wh/t").as_deref(), Some("/wh/t"));
        assert_eq!(local("/wh/t").as_deref(), Some("/wh/t"));
        assert_eq!(local("file://host/wh/t"), None);
        assert_eq!(local("file:wh/t"), None);
        assert_eq!(local("wh/t"), None);
        assert_eq!(local("s3://b/wh"), None);
    }

    #[test]
    fn removes_files_of_either_local_spelling() {
        let dir = tempfile::TempDir::new().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir_all(data.join("p=1")).unwrap();
        for name in [
            "w1-a.parquet",
            "p=1/w1-b.parquet",
            "p=1/w1-keep.parquet",
            "w2-c.parquet",
        ] {
            std::fs::write(data.join(name), b"x").unwrap();
        }
        let keep = format!("file:{}/p=1/w1-keep.parquet", data.display());
        let one_slash = format!("file:{}", data.display());
        assert_eq!(
            delete_files_with_prefix_except(&one_slash, "w1-", &[&keep]),
            2
        );
        assert!(data.join("p=1/w1-keep.parquet").exists());
        let three_slashes = format!("file://{}", data.display());
        assert_eq!(delete_files_with_prefix(&three_slashes, "w2-"), 1);
        assert!(!data.join("w2-c.parquet").exists());
    }

    #[tokio::test]
    async fn a_file_closed_after_the_first_pass_is_removed_by_a_later_one() {
        let dir = tempfile::TempDir::new().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(data.join("w3-early.parquet"), b"x").unwrap();
        std::fs::write(data.join("w4-other.parquet"), b"x").unwrap();
        let location = data.display().to_string();
        assert_eq!(delete_files_with_prefix_now_and_later(&location, "w3-"), 1);
        // A task that was still running writes its file after the first pass.
        std::fs::write(data.join("w3-late.parquet"), b"x").unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while data.join("w3-late.parquet").exists() {
            assert!(std::time::Instant::now() < deadline, "late file stayed");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(data.join("w4-other.parquet").exists());
    }

    #[test]
    fn settings_by_longest_prefix() {
        let props =
            |endpoint: &str| HashMap::from([("s3.endpoint".to_string(), endpoint.to_string())]);
        register_storage("", &props("http://any"));
        register_storage("s3://bucket-cleanup-test/wh/", &props("http://wh"));
        register_storage("file:///tmp/x", &HashMap::new());
        let endpoint = |location: &str| storage_props(location).map(|p| p["s3.endpoint"].clone());
        assert_eq!(
            endpoint("s3://bucket-cleanup-test/wh/ns/t/data").as_deref(),
            Some("http://wh")
        );
        assert_eq!(
            endpoint("s3a://bucket-cleanup-test/wh").as_deref(),
            Some("http://wh")
        );
        assert_eq!(
            endpoint("s3://bucket-cleanup-test/wh2/t").as_deref(),
            Some("http://any")
        );
    }

    #[test]
    fn operator_from_props() {
        let props = HashMap::from([
            ("s3.endpoint".to_string(), "http://127.0.0.1:1".to_string()),
            ("s3.region".to_string(), "us-east-1".to_string()),
            ("s3.path-style-access".to_string(), "true".to_string()),
        ]);
        let (operator, key) = s3_operator("s3://bkt/wh/ns/t/data/", &props).unwrap();
        assert_eq!(operator.info().name(), "bkt");
        assert_eq!(key, "wh/ns/t/data");
        assert!(s3_operator("s3:///x", &props).is_err());
        assert!(s3_operator("file:///x", &props).is_err());
    }
}
