//! Where the CLI's statements run: an embedded session (local DataFusion or
//! the in-process cluster) or a remote `icemerge-scheduler` over Flight SQL.
//! Ctrl-C during a statement on a cluster cancels it: the remote call is
//! dropped (the scheduler then cancels the statement's job), or the
//! in-process cluster's job is cancelled; either way the statement commits
//! nothing and its written files are deleted. On the local engine Ctrl-C
//! ends the process as usual.

use datafusion::error::DataFusionError;
use icemerge_proto::error::cancelled;
use icemerge_scheduler::engine::CANCELLED;
use icemerge_scheduler::{Session, StatementOutput};

use crate::remote::RemoteSession;

/// The engine behind the CLI.
// One per process: the size of its variants does not matter.
#[allow(clippy::large_enum_variant)]
pub enum Backend {
    Embedded(Session),
    Remote(RemoteSession),
}

fn cancelled_by_ctrl_c() -> DataFusionError {
    cancelled(format!("{CANCELLED} (Ctrl-C)"))
}

impl Backend {
    /// Runs one statement.
    pub async fn execute_one(&self, sql: &str) -> Result<StatementOutput, DataFusionError> {
        match self {
            Backend::Embedded(session) if session.cluster().is_some() => {
                let run = session.execute_one(sql);
                tokio::pin!(run);
                tokio::select! {
                    result = &mut run => result,
                    _ = tokio::signal::ctrl_c() => {
                        eprintln!("cancelling...");
                        // Let the statement finish failing (and clean up).
                        let (result, _) = tokio::join!(run, session.cancel());
                        result.and(Err(cancelled_by_ctrl_c()))
                    }
                }
            }
            Backend::Embedded(session) => session.execute_one(sql).await,
            Backend::Remote(remote) => {
                tokio::select! {
                    result = remote.execute_one(sql) => result,
                    _ = tokio::signal::ctrl_c() => Err(cancelled_by_ctrl_c()),
                }
            }
        }
    }
}
