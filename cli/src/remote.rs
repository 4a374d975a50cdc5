//! The client side of `icemerge --scheduler HOST:PORT`: sends each statement
//! to a running `icemerge-scheduler`'s Flight SQL port (a
//! `CommandStatementQuery`) and turns the answer back into the same
//! [`StatementOutput`] the embedded engine produces, so every output format
//! prints identically. With a token, every call carries
//! `authorization: Bearer <token>`. While a statement runs, per-stage
//! progress bars are drawn when enabled (see `progress`).

use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::error::FlightError;
use arrow_flight::sql::{CommandStatementQuery, ProstMessageExt};
use arrow_flight::FlightDescriptor;
use datafusion::error::DataFusionError;
use futures::TryStreamExt;
use icemerge_proto::error::{
    already_exists, cancelled, conflict, internal, invalid_input, io_error, not_found,
    out_of_memory, unsupported,
};
use icemerge_scheduler::StatementOutput;
use prost::Message;
use std::sync::Arc;
use tonic::{Code, Status};

use crate::flight_client::{self, FlightClient};

/// A connection to an icemerge scheduler's Flight SQL port.
pub struct RemoteSession {
    address: String,
    client: FlightClient,
    /// Draw per-stage progress bars while a statement runs.
    pub progress: bool,
}

impl RemoteSession {
    /// Connects to `address` (see `flight_client::connect`).
    pub async fn connect(
        address: &str,
        token: Option<&str>,
        tls_ca: Option<&std::path::Path>,
        session: Option<&str>,
    ) -> Result<Self, DataFusionError> {
        let client = flight_client::connect(address, token, tls_ca, session).await?;
        Ok(Self {
            address: address.to_string(),
            client,
            progress: false,
        })
    }

    /// Runs one statement on the scheduler and fetches its output.
    pub async fn execute_one(&self, sql: &str) -> Result<StatementOutput, DataFusionError> {
        let mut client = self.client.clone();
        let command = CommandStatementQuery {
            query: sql.to_string(),
            transaction_id: None,
        };
        let descriptor = FlightDescriptor::new_cmd(command.as_any().encode_to_vec());
        let bars = self
            .progress
            .then(|| crate::progress::ProgressBars::start(self.client.clone()));
        let info = client
            .get_flight_info(descriptor)
            .await
            .map_err(|s| self.status_error(s))?
            .into_inner();
        drop(bars);
        if info.endpoint.is_empty() {
            return Ok(StatementOutput::Done {
                message: String::from_utf8_lossy(&info.app_metadata).to_string(),
            });
        }
        let schema = Arc::new(
            info.clone()
                .try_decode_schema()
                .map_err(|e| internal(format!("invalid result schema: {e}")))?,
        );
        let mut batches = vec![];
        for endpoint in info.endpoint {
            let ticket = endpoint
                .ticket
                .ok_or_else(|| internal("the scheduler sent an endpoint without a ticket"))?;
            let stream = client
                .do_get(ticket)
                .await
                .map_err(|s| self.status_error(s))?
                .into_inner()
                .map_err(|s| FlightError::Tonic(Box::new(s)));
            let mut decoded = FlightRecordBatchStream::new_from_flight_data(stream);
            while let Some(batch) = decoded.try_next().await.map_err(|e| match e {
                FlightError::Tonic(status) => self.status_error(*status),
                other => io_error(format!("cannot read the result: {other}")),
            })? {
                batches.push(batch);
            }
        }
        Ok(StatementOutput::Rows {
            schema: if batches.is_empty() {
                schema
            } else {
                batches[0].schema()
            },
            batches,
        })
    }

    /// A failed call as the error the CLI prints, of the kind its status
    /// code says.
    fn status_error(&self, status: Status) -> DataFusionError {
        let message = status.message().to_string();
        match status.code() {
            Code::Unauthenticated => invalid_input(format!(
                "the scheduler at {} refused the call (Unauthenticated): {message}",
                self.address
            )),
            Code::Unavailable => io_error(format!(
                "cannot reach the icemerge scheduler at {}: {message}",
                self.address
            )),
            _ if message.is_empty() => internal(format!("the scheduler failed: {status}")),
            Code::InvalidArgument => invalid_input(message),
            Code::NotFound => not_found(message),
            Code::AlreadyExists => already_exists(message),
            Code::Aborted => conflict(message),
            Code::Cancelled => cancelled(message),
            Code::Unimplemented => unsupported(message),
            Code::ResourceExhausted => out_of_memory(message),
            _ => internal(message),
        }
    }
}
