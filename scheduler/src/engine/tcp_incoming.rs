//! Connections accepted by icemerge's gRPC servers (Ballista scheduler,
//! executors' shuffle service, Flight SQL), with Nagle's algorithm off.
//!
//! A server given its own listener does not apply the builder's
//! `tcp_nodelay`: every accepted socket kept Nagle on, so a response sent
//! as several small HTTP/2 frames waited for the client's delayed ACK
//! (40 ms on Linux) — once per task status report, shuffle fetch and
//! Flight SQL call.

use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;

/// The connections `listener` accepts, each with `TCP_NODELAY` set.
pub fn no_delay(listener: TcpListener) -> TcpIncoming {
    TcpIncoming::from(listener).with_nodelay(Some(true))
}
