//! The `icemerge-scheduler` process: the coordinator's servers.
//!
//! - `scheduler_process`: starts the Ballista scheduler (gRPC + REST on one
//!   port) and the Flight SQL server over one coordinator `Session`;
//! - `ledger_service`: Ballista's scheduler service with task statuses and
//!   executor liveness recorded for the coordinator;
//! - `flight_sql`: the Flight SQL front door for clients;
//! - `client_sessions`: the coordinator's sessions, one per client;
//! - `flight_sql_catalog`: its metadata calls (catalogs, schemas, tables);
//! - `prepared_statements`: its prepared statements and their parameters;
//! - `auth`: the bearer-token check of the Flight SQL and HTTP ports;
//! - `progress`: per-stage progress of the running job;
//! - `statement_log`: the statements clients sent, running and recent;
//! - `statement_control`: `SHOW STATEMENTS` and `CANCEL STATEMENT <id>`;
//! - `live_page`: the HTML page of those statements and their stage graphs;
//! - `metrics`: Prometheus metrics and their `/metrics` endpoint;
//! - `tls`: the Flight SQL port's certificate.

pub mod auth;
pub mod client_sessions;
pub mod flight_sql;
pub mod flight_sql_catalog;
mod ledger_service;
pub mod live_page;
pub mod metrics;
pub mod prepared_statements;
pub mod progress;
pub mod scheduler_process;
pub mod statement_control;
pub mod statement_log;
pub mod tls;

pub use auth::Auth;
pub use scheduler_process::{check_bind, start, RunningScheduler, SchedulerProcessOptions};
pub use tls::TlsFiles;
