//! A test hook, off unless `icemerge.test_pause_before_commit` names a
//! directory: a MERGE (or `rewrite_data_files`, `rewrite_manifests`) whose job has finished
//! stops before its commit until the test says go, so a test can commit a
//! concurrent snapshot at a known point instead of racing for one. A
//! statement cancelled while paused stops waiting (its caller then fails
//! it before the commit).

use std::path::Path;
use std::time::{Duration, Instant};

use datafusion::error::Result;
use icemerge_proto::error::io_error;

/// How long a paused MERGE waits for `go` before failing.
const PAUSE_LIMIT: Duration = Duration::from_secs(120);

/// Creates `<dir>/paused` and waits until `<dir>/go` exists or `stop()`
/// says so; returns at once when `go` is already there (a re-executed
/// statement does not pause again).
pub(crate) async fn pause_before_commit(dir: &str, stop: &(dyn Fn() -> bool + Sync)) -> Result<()> {
    let dir = Path::new(dir);
    let go = dir.join("go");
    if go.exists() {
        return Ok(());
    }
    std::fs::write(dir.join("paused"), b"")
        .map_err(|e| io_error(format!("test pause in {}: {e}", dir.display())))?;
    let deadline = Instant::now() + PAUSE_LIMIT;
    while !go.exists() && !stop() {
        if Instant::now() > deadline {
            return Err(io_error(format!(
                "test pause in {}: no 'go' within {PAUSE_LIMIT:?}",
                dir.display()
            )));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}
