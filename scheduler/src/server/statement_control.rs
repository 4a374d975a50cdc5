//! `SHOW STATEMENTS` and `CANCEL STATEMENT <id>` on the scheduler
//! (`icemerge_planner::statement_commands`): answered by the Flight SQL
//! service from the [`StatementLog`] without waiting for a turn on the
//! session, so they work while a statement runs; they are not logged
//! themselves.
//!
//! Cancelling asks the log ([`StatementLog::request_cancel`]); the
//! statement's runner in `flight_sql` then does what a client going away
//! does (`Session::cancel`: the Ballista job is cancelled, a MERGE held
//! before its commit stops; a job whose id the session has not learnt yet
//! is cancelled through Ballista's REST handler), and the statement fails
//! on its usual path,
//! committing nothing and deleting what it wrote. A queued statement is
//! failed without running. `CANCEL STATEMENT` answers once the statement
//! has ended (or after [`CANCEL_WAIT`]).

use std::sync::Arc;
use std::time::Duration;

use arrow::array::{ArrayRef, Int64Array, StringArray, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use datafusion::error::Result;
use icemerge_planner::statement_commands::StatementCommand;
use icemerge_proto::error::{invalid_input, not_found};

use super::statement_log::{now_ms, StatementLog, StatementState, KEPT};
use crate::engine::CANCELLED;
use crate::session::StatementOutput;

/// How long `CANCEL STATEMENT` waits for the statement to end.
pub const CANCEL_WAIT: Duration = Duration::from_secs(60);

/// Runs a statement command against the log.
pub async fn run_command(command: StatementCommand, log: &StatementLog) -> Result<StatementOutput> {
    match command {
        StatementCommand::Show => Ok(show_statements(log)),
        StatementCommand::Cancel(id) => cancel_statement(log, id).await,
    }
}

/// One row per statement kept, newest first: `id`, `state`, `kind`,
/// `elapsed_ms`, `job`, `sql`, `error`.
fn show_statements(log: &StatementLog) -> StatementOutput {
    let statements = log.list();
    let now = now_ms();
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::UInt64, false),
        Field::new("state", DataType::Utf8, false),
        Field::new("kind", DataType::Utf8, false),
        Field::new("elapsed_ms", DataType::Int64, false),
        Field::new("job", DataType::Utf8, true),
        Field::new("sql", DataType::Utf8, false),
        Field::new("error", DataType::Utf8, true),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(UInt64Array::from_iter_values(
            statements.iter().map(|s| s.id),
        )),
        Arc::new(StringArray::from_iter_values(
            statements.iter().map(|s| state_word(s.state)),
        )),
        Arc::new(StringArray::from_iter_values(
            statements.iter().map(|s| s.kind.label()),
        )),
        Arc::new(Int64Array::from_iter_values(
            statements.iter().map(|s| s.elapsed_ms(now)),
        )),
        Arc::new(StringArray::from_iter(
            statements.iter().map(|s| s.job.as_deref()),
        )),
        Arc::new(StringArray::from_iter_values(
            statements.iter().map(|s| s.sql.as_str()),
        )),
        Arc::new(StringArray::from_iter(
            statements.iter().map(|s| s.error.as_deref()),
        )),
    ];
    let batch = RecordBatch::try_new(schema.clone(), columns).expect("columns match the schema");
    StatementOutput::Rows {
        schema,
        batches: vec![batch],
    }
}

fn state_word(state: StatementState) -> &'static str {
    match state {
        StatementState::Queued => "queued",
        StatementState::Running => "running",
        StatementState::Succeeded => "succeeded",
        StatementState::Failed => "failed",
    }
}

async fn cancel_statement(log: &StatementLog, id: u64) -> Result<StatementOutput> {
    let said = format!("CANCEL STATEMENT {id}");
    match log.request_cancel(id) {
        None => Err(not_found(format!(
            "{said}: this scheduler has no statement {id} \
             (SHOW STATEMENTS lists the live ones and the last {KEPT} ended)"
        ))),
        Some(state @ (StatementState::Succeeded | StatementState::Failed)) => {
            Err(invalid_input(format!(
                "{said}: statement {id} already {}; only a queued or running statement can be cancelled",
                state_word(state)
            )))
        }
        Some(StatementState::Queued | StatementState::Running) => {
            match log.wait_ended(id, CANCEL_WAIT).await {
                None => Ok(StatementOutput::done(format!(
                    "{said}: asked to stop; it has not ended yet (SHOW STATEMENTS shows when it has)"
                ))),
                Some(s) if s.state == StatementState::Succeeded => Err(invalid_input(format!(
                    "{said}: statement {id} succeeded before it could be cancelled"
                ))),
                Some(s) => match s.error.as_deref() {
                    Some(error) if error.contains(CANCELLED) => {
                        Ok(StatementOutput::done(format!("{said}: cancelled")))
                    }
                    error => Ok(StatementOutput::done(format!(
                        "{said}: it failed before it could be cancelled: {}",
                        error.unwrap_or_default()
                    ))),
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::statement_log::StatementEnd;

    #[tokio::test]
    async fn refuses_unknown_and_ended_statements_by_id() {
        let log = StatementLog::default();
        let err = run_command(StatementCommand::Cancel(7), &log)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("CANCEL STATEMENT 7: this scheduler has no statement 7"),
            "{err}"
        );
        let id = log.submit("SELECT 1", "test");
        log.start(id, 0);
        log.finish(id, StatementEnd::default());
        let err = run_command(StatementCommand::Cancel(id), &log)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("statement {id} already succeeded")),
            "{err}"
        );
        let shown = run_command(StatementCommand::Show, &log).await.unwrap();
        assert_eq!(shown.row_count(), 1);
    }
}
