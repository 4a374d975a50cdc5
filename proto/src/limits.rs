//! Limits every icemerge gRPC / Flight service and client agrees on, and
//! the executors' heartbeat the scheduler's executor timeout is held to.

/// Largest gRPC message (plans, task status, Flight data) sent or accepted.
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;

/// How often an executor tells the scheduler it is alive.
pub const EXECUTOR_HEARTBEAT_SECONDS: u64 = 5;

/// The shortest executor timeout the scheduler accepts: two missed
/// heartbeats, so that a busy executor is not declared lost for one late
/// beat.
pub const MIN_EXECUTOR_TIMEOUT_SECONDS: u64 = 2 * EXECUTOR_HEARTBEAT_SECONDS;
