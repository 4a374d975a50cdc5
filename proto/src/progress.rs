//! The `icemerge.progress` Flight action: what the scheduler answers about
//! the statement running now, and what `icemerge --scheduler` draws its
//! per-stage progress bars from. JSON in the action result's body.

use serde::{Deserialize, Serialize};

/// The name of the progress action.
pub const PROGRESS_ACTION: &str = "icemerge.progress";

/// One stage of the running job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageProgress {
    pub stage: usize,
    /// Ballista's stage state: Unresolved, Resolved, Running, Successful, Failed.
    pub status: String,
    /// Tasks finished.
    pub done: usize,
    /// Tasks of the stage (None until it runs).
    pub total: Option<usize>,
}

/// The answer of the progress action.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct JobProgressReport {
    pub job: Option<String>,
    pub stages: Vec<StageProgress>,
}
