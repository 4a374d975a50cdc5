//! Limits every icemerge gRPC / Flight service and client agrees on.

/// Largest gRPC message (plans, task status, Flight data) sent or accepted.
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;
