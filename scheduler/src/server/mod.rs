//! The `icemerge-scheduler` process: the coordinator's servers.
//!
//! - `scheduler_process`: starts the Ballista scheduler (gRPC + REST on one
//!   port) and the Flight SQL server over one coordinator `Session`;
//! - `ledger_service`: Ballista's scheduler service with task statuses and
//!   executor liveness recorded for the coordinator;
//! - `flight_sql`: the Flight SQL front door for clients;
//! - `auth`: the bearer-token check of the Flight SQL and HTTP ports;
//! - `progress`: per-stage progress of the running job;
//! - `statement_log`: the statements clients sent, running and recent;
//! - `statement_control`: `SHOW STATEMENTS` and `CANCEL STATEMENT <id>`;
//! - `live_page`: the HTML page of those statements and their stage graphs;
//! - `metrics`: Prometheus metrics and their `/metrics` endpoint.

pub mod auth;
pub mod flight_sql;
mod ledger_service;
pub mod live_page;
pub mod metrics;
pub mod progress;
pub mod scheduler_process;
pub mod statement_control;
pub mod statement_log;

pub use auth::Auth;
pub use scheduler_process::{check_bind, start, RunningScheduler, SchedulerProcessOptions};
