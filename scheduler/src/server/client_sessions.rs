//! The coordinator's sessions, one per client: each Flight SQL connection
//! (or each value of the `x-icemerge-session` header, for clients that
//! spread one session over several connections) gets a [`Session`] of its
//! own, a sibling of the scheduler's first session: the same catalog,
//! engine and memory budget, its own SET state, session tables and running
//! statement. Statements of one client run in order (its turn); those of
//! different clients run at the same time.
//!
//! A client's session is dropped [`IDLE`] after its last statement.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use datafusion::error::Result;
use tonic::Request;

use crate::session::Session;

/// The header naming a client's session explicitly.
pub const SESSION_HEADER: &str = "x-icemerge-session";

/// How long an idle client's session is kept.
pub const IDLE: Duration = Duration::from_secs(3600);

/// One client's session.
pub struct ClientSession {
    pub session: Arc<Session>,
    /// Held while one of the client's statements runs.
    pub turn: Arc<tokio::sync::Mutex<()>>,
    last_used: Mutex<Instant>,
}

impl ClientSession {
    fn idle(&self) -> bool {
        self.turn.try_lock().is_ok() && self.last_used.lock().expect("lock").elapsed() > IDLE
    }
}

/// The sessions of the scheduler's clients.
pub struct ClientSessions {
    /// The scheduler's first session: every client's session is its
    /// sibling.
    template: Arc<Session>,
    open: Mutex<HashMap<String, Arc<ClientSession>>>,
}

impl ClientSessions {
    pub fn new(template: Arc<Session>) -> Self {
        Self {
            template,
            open: Mutex::new(HashMap::new()),
        }
    }

    /// The session of client `client` (see [`client_of`]), opened on its
    /// first statement.
    pub async fn of(&self, client: &str) -> Result<Arc<ClientSession>> {
        if let Some(open) = self.get(client) {
            *open.last_used.lock().expect("lock") = Instant::now();
            return Ok(open);
        }
        let session = Arc::new(self.template.sibling().await?);
        let mut open = self.open.lock().expect("client sessions");
        open.retain(|_, s| !s.idle());
        let entry = open.entry(client.to_string()).or_insert_with(|| {
            tracing::info!(client, "new client session");
            Arc::new(ClientSession {
                session,
                turn: Arc::new(tokio::sync::Mutex::new(())),
                last_used: Mutex::new(Instant::now()),
            })
        });
        Ok(entry.clone())
    }

    /// The session of `client`, if it has one.
    pub fn get(&self, client: &str) -> Option<Arc<ClientSession>> {
        self.open
            .lock()
            .expect("client sessions")
            .get(client)
            .cloned()
    }
}

/// The client a call comes from: its `x-icemerge-session` header, else its
/// connection (the peer's address).
pub fn client_of<T>(request: &Request<T>) -> String {
    if let Some(named) = request
        .metadata()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
    {
        return format!("session {named}");
    }
    match request.remote_addr() {
        Some(peer) => format!("connection {peer}"),
        None => "connection unknown".to_string(),
    }
}
