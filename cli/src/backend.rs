//! Where the CLI's statements run: an embedded session (local DataFusion or
//! the in-process cluster) or a remote `icemerge-scheduler` over Flight SQL.

use datafusion::error::DataFusionError;
use icemerge_scheduler::{Session, StatementOutput};

use crate::remote::RemoteSession;

/// The engine behind the CLI.
pub enum Backend {
    Embedded(Session),
    Remote(RemoteSession),
}

impl Backend {
    /// Runs one statement.
    pub async fn execute_one(&self, sql: &str) -> Result<StatementOutput, DataFusionError> {
        match self {
            Backend::Embedded(session) => session.execute_one(sql).await,
            Backend::Remote(remote) => remote.execute_one(sql).await,
        }
    }
}
