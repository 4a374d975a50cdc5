//! The Flight SQL front door of the `icemerge-scheduler` process: clients
//! (the `icemerge --scheduler` CLI, ADBC / JDBC Flight SQL drivers) send SQL
//! statements; each runs on the coordinator's [`Session`] (planning, Ballista
//! jobs, commit) and its output goes back as Arrow record batches.
//!
//! Protocol mapping:
//! - `GetFlightInfo(CommandStatementQuery)` runs the statement; rows come back
//!   through `DoGet` on the returned ticket (once; a result not fetched within
//!   [`RESULT_TTL`] is dropped). A query's job has ended when `GetFlightInfo`
//!   answers, but only its first batch is on the coordinator: `DoGet`
//!   streams the others from the executors as the client reads them
//!   (`total_records` is then -1; the executors keep them for
//!   [`RESULT_RETENTION`]). INSERT and MERGE sent as a query return their
//!   count row (MERGE: its metrics row), EXPLAIN its text, exactly as the
//!   embedded CLI prints them. DDL returns no endpoint and an empty schema;
//!   its message is the FlightInfo's `app_metadata` (UTF-8).
//! - `DoPut(CommandStatementUpdate)` runs the statement and returns the update
//!   count: the `count` column of INSERT / MERGE, 0 for DDL, and the number
//!   of rows for any statement that returns rows.
//! - `GetSqlInfo` reports the server name and version; `GetCatalogs`,
//!   `GetDbSchemas`, `GetTables` (with schemas) and `GetTableTypes` list
//!   the catalog (`flight_sql_catalog`).
//! - Prepared statements (`prepared_statements`): `CreatePreparedStatement`
//!   takes any statement with `?` or `$n` placeholders and reports, as
//!   best it can before a run (`Session::describe`), a query's rows'
//!   schema and each parameter's type; `DoPut` of
//!   `CommandPreparedStatementQuery` binds one row of values and
//!   `GetFlightInfo` of it runs the statement as a query; `DoPut` of
//!   `CommandPreparedStatementUpdate` runs it once per row of the values
//!   sent (or bound) and returns the summed update count.
//! - Action `icemerge.progress` returns JSON `{"job": id|null, "stages":
//!   [{"stage", "status", "done", "total"}]}` for the statement running now
//!   (the CLI's progress bars).
//!
//! TLS: with a certificate (`--tls-cert`, `--tls-key`; module `tls`) the
//! port speaks only TLS.
//!
//! Auth: with a token configured, an interceptor refuses every call whose
//! `authorization` header is not `Bearer <token>` with `Unauthenticated`
//! before any handler (and so any statement) runs.
//!
//! Every statement is recorded in the [`StatementLog`] the live page and
//! the metrics read. `SHOW STATEMENTS` and `CANCEL STATEMENT <id>` are
//! answered from that log (`statement_control`) without being logged or
//! waiting for a turn.
//!
//! Each client has a session of its own (`client_sessions`): its SET state,
//! its statements run in order; statements of different clients run at the
//! same time. A client that cancels its call (drops the request), or
//! `CANCEL STATEMENT` from another client, cancels the statement's Ballista
//! job; the statement then commits nothing.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use arrow::array::{Array, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::ipc::writer::IpcWriteOptions;
use arrow::record_batch::RecordBatch;
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightServiceServer;
use arrow_flight::sql::metadata::{SqlInfoData, SqlInfoDataBuilder};
use arrow_flight::sql::server::{FlightSqlService, PeekableFlightDataStream};
use arrow_flight::sql::{
    ActionClosePreparedStatementRequest, ActionCreatePreparedStatementRequest,
    ActionCreatePreparedStatementResult, CommandGetCatalogs, CommandGetDbSchemas,
    CommandGetSqlInfo, CommandGetTableTypes, CommandGetTables, CommandPreparedStatementQuery,
    CommandPreparedStatementUpdate, CommandStatementQuery, CommandStatementUpdate,
    DoPutPreparedStatementResult, ProstMessageExt, SqlInfo, TicketStatementQuery,
};
use arrow_flight::{
    Action, FlightDescriptor, FlightEndpoint, FlightInfo, HandshakeRequest, HandshakeResponse,
    IpcMessage, SchemaAsIpc, Ticket,
};
use datafusion::error::DataFusionError;
use datafusion::execution::SendableRecordBatchStream;
use futures::{Stream, StreamExt, TryStreamExt};
use prost::Message;
use tokio::net::TcpListener;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::ServerTlsConfig;
use tonic::{Request, Response, Status, Streaming};

use icemerge_planner::statement_commands::StatementCommand;
use icemerge_proto::error::{cancelled, ErrorKind, IcemergeError};
use icemerge_proto::limits::MAX_MESSAGE_BYTES;
use icemerge_proto::progress::{JobProgressReport, PROGRESS_ACTION};

use super::auth::Auth;
use super::client_sessions::{client_of, ClientSessions};
use super::flight_sql_catalog;
use super::prepared_statements::PreparedStatements;
use super::progress::JobProgress;
use super::statement_control::run_command;
use super::statement_log::{StatementEnd, StatementLog};
use crate::engine::{Rows, CANCELLED, RESULT_RETENTION};
use crate::session::{Session, StatementOutput};

/// How long an unfetched query result is kept.
pub const RESULT_TTL: Duration = Duration::from_secs(600);

/// Serves Flight SQL on `listener` until an error.
pub async fn serve_flight_sql(
    listener: TcpListener,
    sessions: Arc<ClientSessions>,
    auth: Auth,
    progress: Option<JobProgress>,
    log: StatementLog,
    tls: Option<ServerTlsConfig>,
) -> Result<(), tonic::transport::Error> {
    let mut service = IcemergeFlightSql::new(sessions);
    service.progress = progress;
    service.log = log;
    let service = FlightServiceServer::new(service)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let service = InterceptedService::new(service, move |request| auth.check(request));
    let mut server = tonic::transport::Server::builder();
    if let Some(tls) = tls {
        server = server.tls_config(tls)?;
    }
    server
        .add_service(service)
        .serve_with_incoming(crate::engine::tcp_incoming::no_delay(listener))
        .await
}

/// A query's rows waiting for `DoGet`: the batches here, then (on the
/// cluster) the rest, still on the executors.
struct StoredResult {
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
    rest: Option<SendableRecordBatchStream>,
    created: Instant,
}

/// The Flight SQL service over the coordinator's sessions.
pub struct IcemergeFlightSql {
    sessions: Arc<ClientSessions>,
    results: Mutex<HashMap<String, StoredResult>>,
    progress: Option<JobProgress>,
    /// Every statement sent, for the live page.
    log: StatementLog,
    prepared: PreparedStatements,
}

impl IcemergeFlightSql {
    pub fn new(sessions: Arc<ClientSessions>) -> Self {
        Self {
            sessions,
            results: Mutex::new(HashMap::new()),
            progress: None,
            log: StatementLog::default(),
            prepared: PreparedStatements::default(),
        }
    }

    /// The session of the client sending `request`.
    async fn client_session<T>(&self, request: &Request<T>) -> Result<Arc<Session>, Status> {
        let client = self.sessions.of(&client_of(request)).await;
        Ok(client.map_err(statement_error)?.session.clone())
    }

    /// Runs `sql` as a query: its rows wait under a ticket for `DoGet`
    /// (past the first batch, on the executors: the count is then not
    /// known, -1).
    async fn query_info(
        &self,
        client: &str,
        sql: &str,
        descriptor: FlightDescriptor,
    ) -> Result<FlightInfo, Status> {
        let (output, rest) = self.run_streaming(client, sql, Rows::Stream).await?;
        let info = match output {
            StatementOutput::Rows { schema, batches } => {
                let rows = match &rest {
                    Some(_) => -1,
                    None => batches.iter().map(|b| b.num_rows() as i64).sum(),
                };
                let handle = self.store(schema.clone(), batches, rest);
                let ticket = TicketStatementQuery {
                    statement_handle: handle.into_bytes().into(),
                };
                FlightInfo::new()
                    .try_with_schema(&schema)
                    .map_err(arrow_status)?
                    .with_endpoint(
                        FlightEndpoint::new()
                            .with_ticket(Ticket::new(ticket.as_any().encode_to_vec())),
                    )
                    .with_total_records(rows)
            }
            StatementOutput::Done { message } => FlightInfo::new()
                .try_with_schema(&Schema::empty())
                .map_err(arrow_status)?
                .with_total_records(0)
                .with_app_metadata(message.into_bytes()),
        };
        Ok(info.with_descriptor(descriptor))
    }

    /// Runs a statement to completion in its own task. If the caller goes
    /// away first (the client cancelled the call, e.g. Ctrl-C in the CLI),
    /// or `CANCEL STATEMENT` names it, the statement's job is cancelled: it
    /// then fails, commits nothing and deletes the files it wrote. A
    /// statement cancelled while queued never runs. It runs on the
    /// session of `client`, after that client's earlier statements.
    async fn run(&self, client: &str, sql: &str) -> Result<StatementOutput, Status> {
        Ok(self.run_streaming(client, sql, Rows::Gather).await?.0)
    }

    /// `run`, a query's rows handed back as `rows` says (`Rows::Stream`:
    /// past the first batch, as a stream from the executors).
    async fn run_streaming(
        &self,
        client: &str,
        sql: &str,
        rows: Rows,
    ) -> Result<(StatementOutput, Option<SendableRecordBatchStream>), Status> {
        if let Some(command) = StatementCommand::parse(sql).map_err(statement_error)? {
            let output = run_command(command, &self.log).await;
            return Ok((output.map_err(statement_error)?, None));
        }
        let client_session = self.sessions.of(client).await.map_err(statement_error)?;
        let id = self.log.submit(sql, client);
        let cancel = self.log.cancel_signal(id).expect("a statement just logged");
        let mut queued = EndQueuedOnDrop {
            log: Some(self.log.clone()),
            id,
        };
        let turn = tokio::select! {
            turn = client_session.turn.clone().lock_owned() => turn,
            _ = cancel.notified() => {
                queued.log = None;
                let e = cancelled(format!("{CANCELLED} while queued (statement {id})"));
                self.log.finish(id, StatementEnd {
                    error: Some(e.to_string()),
                    cancelled: true,
                    ..Default::default()
                });
                return Err(statement_error(e));
            }
        };
        queued.log = None;
        tracing::info!(statement = %sql, id, client, "running");
        let session = client_session.session.clone();
        let sql = sql.to_string();
        let log = self.log.clone();
        let progress = self.progress.clone();
        let statement = tokio::spawn(async move {
            let _turn = turn;
            let plans_before = session.plans_started();
            log.start(id, plans_before);
            let output = {
                let run = session.execute_one_with(&sql, rows);
                // CANCEL STATEMENT: cancelled as when the client goes away,
                // while the statement goes on to fail on its usual path.
                // Dropped with the statement's end, before its turn is
                // given up: it cannot reach the next statement.
                let cancel_on_request = async {
                    cancel.notified().await;
                    tracing::info!(id, "CANCEL STATEMENT: cancelling");
                    let unnamed = async {
                        // By now no new job starts (the session refuses
                        // to submit one once asked to cancel).
                        tokio::time::sleep(UNNAMED_JOB_GRACE).await;
                        if session.running_job_id().is_none() {
                            if let Some(progress) = &progress {
                                cancel_unnamed_jobs(progress, id, &session.job_name()).await;
                            }
                        }
                    };
                    let (cancelled, ()) = tokio::join!(session.cancel(), unnamed);
                    match cancelled {
                        Ok(job) => tracing::info!(id, job = ?job, "cancelled"),
                        Err(e) => tracing::warn!(id, "cancelling failed: {e}"),
                    }
                };
                tokio::pin!(run, cancel_on_request);
                tokio::select! {
                    biased;
                    output = &mut run => output,
                    () = &mut cancel_on_request => run.await,
                }
            };
            // Recorded before the turn is given up: the session's last run
            // is this statement's.
            let ran_plan = session.plans_started() > plans_before;
            // A failed statement's run may not have been recorded: its
            // plan as it started is.
            let document = match (ran_plan, output.is_ok()) {
                (false, _) => None,
                (true, true) => session.last_run(),
                (true, false) => session.current_run().map(|run| run.document.clone()),
            };
            let job = ran_plan.then(|| session.last_job_id()).flatten();
            let result = output.as_ref().ok().map(|(o, _)| o);
            log.finish(
                id,
                StatementEnd {
                    error: output.as_ref().err().map(|e| e.to_string()),
                    cancelled: output
                        .as_ref()
                        .is_err_and(|e| IcemergeError::kind_of(e) == Some(ErrorKind::Cancelled)),
                    document,
                    job,
                    commit_attempts: result.and_then(|o| o.figure("commit_attempts")),
                    reexecutions: result.and_then(|o| o.figure("reexecutions")),
                },
            );
            output
        });
        let mut guard = CancelOnDrop {
            session: Some(client_session.session.clone()),
        };
        let result = statement.await;
        guard.session = None;
        match result {
            Ok(output) => output.map_err(statement_error),
            Err(e) => Err(Status::internal(format!("the statement panicked: {e}"))),
        }
    }

    fn store(
        &self,
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
        rest: Option<SendableRecordBatchStream>,
    ) -> String {
        let handle = uuid::Uuid::new_v4().to_string();
        let mut results = self.results.lock().expect("results lock");
        results.retain(|_, r| r.created.elapsed() < RESULT_TTL);
        results.insert(
            handle.clone(),
            StoredResult {
                schema,
                batches,
                rest,
                created: Instant::now(),
            },
        );
        handle
    }
}

/// How long `CANCEL STATEMENT` lets the session cancel its job by id
/// before cancelling the live jobs it cannot name.
const UNNAMED_JOB_GRACE: Duration = Duration::from_millis(500);

/// Cancels the jobs live on this scheduler named after the statement's
/// session (`job_name`), when the session does not know its job's id yet
/// (`JobProgress::live_jobs`).
async fn cancel_unnamed_jobs(progress: &JobProgress, id: u64, job_name: &str) {
    match progress.live_jobs(job_name).await {
        Ok(jobs) => {
            for job in jobs {
                match progress.cancel(&job).await {
                    Ok(()) => tracing::info!(id, job = %job, "CANCEL STATEMENT: job cancelled"),
                    Err(e) => tracing::warn!(id, "CANCEL STATEMENT: {e}"),
                }
            }
        }
        Err(e) => tracing::warn!(id, "CANCEL STATEMENT: cannot list the jobs: {e}"),
    }
}

/// Ends a statement in the log as cancelled when its client goes away
/// while it waits for its turn (armed until it gets one).
struct EndQueuedOnDrop {
    log: Option<StatementLog>,
    id: u64,
}

impl Drop for EndQueuedOnDrop {
    fn drop(&mut self) {
        if let Some(log) = self.log.take() {
            log.finish(
                self.id,
                StatementEnd {
                    error: Some(format!(
                        "{CANCELLED}: the client went away while it was queued"
                    )),
                    cancelled: true,
                    ..Default::default()
                },
            );
        }
    }
}

/// Cancels the session's running statement when dropped while armed.
struct CancelOnDrop {
    session: Option<Arc<Session>>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(session) = self.session.take() {
            tracing::info!("client went away: cancelling its statement");
            tokio::spawn(async move {
                match session.cancel().await {
                    Ok(Some(job)) => tracing::info!(job = %job, "cancelled"),
                    Ok(None) => tracing::info!("no running job to cancel"),
                    Err(e) => tracing::warn!("cancelling failed: {e}"),
                }
            });
        }
    }
}

/// A failed statement: the message is the error as the embedded CLI shows
/// it; the status code says its kind (`icemerge --scheduler` turns it back
/// into that kind).
fn statement_error(e: DataFusionError) -> Status {
    let message = e.to_string();
    match IcemergeError::kind_of(&e) {
        Some(ErrorKind::InvalidInput) => Status::invalid_argument(message),
        Some(ErrorKind::NotFound) => Status::not_found(message),
        Some(ErrorKind::AlreadyExists) => Status::already_exists(message),
        Some(ErrorKind::Conflict) => Status::aborted(message),
        Some(ErrorKind::Cancelled) => Status::cancelled(message),
        Some(ErrorKind::Unsupported) => Status::unimplemented(message),
        Some(ErrorKind::OutOfMemory) => Status::resource_exhausted(message),
        Some(ErrorKind::Io | ErrorKind::Internal) => Status::internal(message),
        None => match e {
            DataFusionError::Plan(_)
            | DataFusionError::SQL(..)
            | DataFusionError::SchemaError(..)
            | DataFusionError::NotImplemented(_)
            | DataFusionError::Configuration(_) => Status::invalid_argument(message),
            _ => Status::internal(message),
        },
    }
}

/// `schema` as Flight SQL sends one inside a message: IPC-encapsulated.
fn ipc_schema(schema: &Schema) -> Result<bytes::Bytes, Status> {
    let IpcMessage(bytes) = SchemaAsIpc::new(schema, &IpcWriteOptions::default())
        .try_into()
        .map_err(arrow_status)?;
    Ok(bytes)
}

/// A prepared statement's parameters as a schema: `$1`, `$2`, ... of the
/// types inferred, `Null` where none was.
fn parameter_schema(types: &[Option<DataType>]) -> Schema {
    Schema::new(
        types
            .iter()
            .enumerate()
            .map(|(i, t)| {
                Field::new(
                    format!("${}", i + 1),
                    t.clone().unwrap_or(DataType::Null),
                    true,
                )
            })
            .collect::<Vec<_>>(),
    )
}

fn arrow_status(e: arrow::error::ArrowError) -> Status {
    Status::internal(format!("cannot encode the result: {e}"))
}

fn sql_info() -> &'static SqlInfoData {
    static INFO: OnceLock<SqlInfoData> = OnceLock::new();
    INFO.get_or_init(|| {
        let mut builder = SqlInfoDataBuilder::new();
        builder.append(SqlInfo::FlightSqlServerName, "icemerge");
        builder.append(SqlInfo::FlightSqlServerVersion, env!("CARGO_PKG_VERSION"));
        builder.append(SqlInfo::FlightSqlServerArrowVersion, "58");
        builder.append(SqlInfo::FlightSqlServerReadOnly, false);
        builder.build().expect("static SqlInfo data")
    })
}

type FlightStream =
    Pin<Box<dyn Stream<Item = Result<arrow_flight::FlightData, Status>> + Send + 'static>>;

fn encode(schema: SchemaRef, batches: Vec<RecordBatch>) -> FlightStream {
    encode_stream(
        schema,
        futures::stream::iter(batches.into_iter().map(Ok)).boxed(),
    )
}

/// `rows` as Flight data, read as the client reads; an error ends the
/// stream as the statement error it is.
fn encode_stream(
    schema: SchemaRef,
    rows: futures::stream::BoxStream<'static, datafusion::error::Result<RecordBatch>>,
) -> FlightStream {
    let rows = rows.map_err(|e| FlightError::Tonic(Box::new(statement_error(e))));
    let stream = FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .build(rows)
        .map_err(Status::from);
    Box::pin(stream)
}

/// The `FlightInfo` of a metadata command: one endpoint whose ticket is the
/// command itself.
fn metadata_info(
    schema: &Schema,
    command: Vec<u8>,
    request: Request<FlightDescriptor>,
) -> Result<Response<FlightInfo>, Status> {
    let info = FlightInfo::new()
        .try_with_schema(schema)
        .map_err(arrow_status)?
        .with_endpoint(FlightEndpoint::new().with_ticket(Ticket::new(command)))
        .with_descriptor(request.into_inner());
    Ok(Response::new(info))
}

/// The parameter values a `DoPut` carries: its record batches as one
/// (`None` when it sends no rows).
async fn parameter_values(stream: PeekableFlightDataStream) -> Result<Option<RecordBatch>, Status> {
    let batches: Vec<RecordBatch> =
        FlightRecordBatchStream::new_from_flight_data(stream.map_err(FlightError::from))
            .try_collect()
            .await
            .map_err(|e| {
                Status::invalid_argument(format!("cannot read the parameter values: {e}"))
            })?;
    let Some(first) = batches.first() else {
        return Ok(None);
    };
    let values = arrow::compute::concat_batches(&first.schema(), &batches)
        .map_err(|e| Status::invalid_argument(format!("cannot read the parameter values: {e}")))?;
    Ok((values.num_rows() > 0 || values.num_columns() > 0).then_some(values))
}

/// The update count of a statement's output (see the module docs).
fn update_count(output: &StatementOutput) -> i64 {
    match output {
        StatementOutput::Done { .. } => 0,
        StatementOutput::Rows { schema, batches } => {
            let counted = schema.fields().first().is_some_and(|f| f.name() == "count");
            let first = batches.iter().find(|b| b.num_rows() > 0);
            match (counted, first) {
                (true, Some(batch)) => batch
                    .column(0)
                    .as_any()
                    .downcast_ref::<UInt64Array>()
                    .filter(|a| !a.is_null(0))
                    .map(|a| a.value(0) as i64)
                    .unwrap_or(0),
                _ => output.row_count() as i64,
            }
        }
    }
}

#[tonic::async_trait]
impl FlightSqlService for IcemergeFlightSql {
    type FlightService = IcemergeFlightSql;

    async fn do_handshake(
        &self,
        _request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<
        Response<Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>>>,
        Status,
    > {
        // Reaching here means the interceptor accepted the call (or no token
        // is configured): there is no session token to hand out.
        let response = HandshakeResponse {
            protocol_version: 0,
            payload: Default::default(),
        };
        Ok(Response::new(Box::pin(futures::stream::iter([Ok(
            response,
        )]))))
    }

    async fn get_flight_info_statement(
        &self,
        query: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let client = client_of(&request);
        let info = self
            .query_info(&client, &query.query, request.into_inner())
            .await?;
        Ok(Response::new(info))
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        _request: Request<Ticket>,
    ) -> Result<
        Response<<Self as arrow_flight::flight_service_server::FlightService>::DoGetStream>,
        Status,
    > {
        let handle = String::from_utf8_lossy(&ticket.statement_handle).to_string();
        let stored = self
            .results
            .lock()
            .expect("results lock")
            .remove(&handle)
            .ok_or_else(|| {
                Status::not_found(format!(
                    "no result for ticket '{handle}': it was already fetched or has expired"
                ))
            })?;
        let first = futures::stream::iter(stored.batches.into_iter().map(Ok::<_, DataFusionError>));
        let rows = match stored.rest {
            None => first.boxed(),
            Some(rest) => first
                .chain(rest.map_err(|e| {
                    DataFusionError::Execution(format!(
                        "reading the query's rows from the executors (they keep them for {} s \
                         after the query's job ends): {e}",
                        RESULT_RETENTION.as_secs()
                    ))
                }))
                .boxed(),
        };
        Ok(Response::new(encode_stream(stored.schema, rows)))
    }

    async fn do_put_statement_update(
        &self,
        command: CommandStatementUpdate,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let output = self.run(&client_of(&request), &command.query).await?;
        Ok(update_count(&output))
    }

    async fn get_flight_info_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder(sql_info()).schema();
        let ticket = Ticket::new(query.as_any().encode_to_vec());
        let info = FlightInfo::new()
            .try_with_schema(&schema)
            .map_err(arrow_status)?
            .with_endpoint(FlightEndpoint::new().with_ticket(ticket))
            .with_descriptor(request.into_inner());
        Ok(Response::new(info))
    }

    async fn do_get_sql_info(
        &self,
        query: CommandGetSqlInfo,
        _request: Request<Ticket>,
    ) -> Result<
        Response<<Self as arrow_flight::flight_service_server::FlightService>::DoGetStream>,
        Status,
    > {
        let builder = query.into_builder(sql_info());
        let schema = builder.schema();
        let batch = builder
            .build()
            .map_err(|e| Status::internal(format!("SqlInfo: {e}")))?;
        Ok(Response::new(encode(schema, vec![batch])))
    }

    async fn get_flight_info_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.into_builder().schema();
        metadata_info(&schema, query.as_any().encode_to_vec(), request)
    }

    async fn do_get_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<Ticket>,
    ) -> Result<
        Response<<Self as arrow_flight::flight_service_server::FlightService>::DoGetStream>,
        Status,
    > {
        let batch = flight_sql_catalog::catalogs(&*self.client_session(&request).await?, query)
            .map_err(statement_error)?;
        Ok(Response::new(encode(batch.schema(), vec![batch])))
    }

    async fn get_flight_info_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder().schema();
        metadata_info(&schema, query.as_any().encode_to_vec(), request)
    }

    async fn do_get_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<Ticket>,
    ) -> Result<
        Response<<Self as arrow_flight::flight_service_server::FlightService>::DoGetStream>,
        Status,
    > {
        let batch = flight_sql_catalog::db_schemas(&*self.client_session(&request).await?, query)
            .await
            .map_err(statement_error)?;
        Ok(Response::new(encode(batch.schema(), vec![batch])))
    }

    async fn get_flight_info_tables(
        &self,
        query: CommandGetTables,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder().schema();
        metadata_info(&schema, query.as_any().encode_to_vec(), request)
    }

    async fn do_get_tables(
        &self,
        query: CommandGetTables,
        request: Request<Ticket>,
    ) -> Result<
        Response<<Self as arrow_flight::flight_service_server::FlightService>::DoGetStream>,
        Status,
    > {
        let batch = flight_sql_catalog::tables(&*self.client_session(&request).await?, query)
            .await
            .map_err(statement_error)?;
        Ok(Response::new(encode(batch.schema(), vec![batch])))
    }

    async fn get_flight_info_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.into_builder().schema();
        metadata_info(&schema, query.as_any().encode_to_vec(), request)
    }

    async fn do_get_table_types(
        &self,
        query: CommandGetTableTypes,
        _request: Request<Ticket>,
    ) -> Result<
        Response<<Self as arrow_flight::flight_service_server::FlightService>::DoGetStream>,
        Status,
    > {
        let batch = flight_sql_catalog::table_types(query).map_err(statement_error)?;
        Ok(Response::new(encode(batch.schema(), vec![batch])))
    }

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        request: Request<Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        let session = self.client_session(&request).await?;
        let (handle, placeholders) = self
            .prepared
            .create(&query.query)
            .map_err(statement_error)?;
        // A best guess (`Session::describe`): the values bound are sent
        // with their own types, which the statement then takes.
        let shape = session
            .describe(&placeholders.numbered(&query.query), placeholders.count())
            .await;
        let dataset_schema = match &shape.rows {
            Some(rows) => ipc_schema(rows)?,
            None => Default::default(),
        };
        let parameter_schema = match placeholders.count() {
            0 => Default::default(),
            _ => ipc_schema(&parameter_schema(&shape.parameters))?,
        };
        Ok(ActionCreatePreparedStatementResult {
            prepared_statement_handle: handle.into_bytes().into(),
            dataset_schema,
            parameter_schema,
        })
    }

    async fn do_put_prepared_statement_query(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<DoPutPreparedStatementResult, Status> {
        let handle = String::from_utf8_lossy(&query.prepared_statement_handle).to_string();
        if let Some(values) = parameter_values(request.into_inner()).await? {
            self.prepared
                .bind(&handle, values)
                .map_err(statement_error)?;
        }
        Ok(DoPutPreparedStatementResult {
            prepared_statement_handle: Some(query.prepared_statement_handle),
        })
    }

    async fn get_flight_info_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let handle = String::from_utf8_lossy(&query.prepared_statement_handle).to_string();
        let sql = self.prepared.query(&handle).map_err(statement_error)?;
        let client = client_of(&request);
        let info = self.query_info(&client, &sql, request.into_inner()).await?;
        Ok(Response::new(info))
    }

    async fn do_put_prepared_statement_update(
        &self,
        query: CommandPreparedStatementUpdate,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let handle = String::from_utf8_lossy(&query.prepared_statement_handle).to_string();
        let client = client_of(&request);
        let values = parameter_values(request.into_inner()).await?;
        let statements = self
            .prepared
            .updates(&handle, values)
            .map_err(statement_error)?;
        let mut count = 0;
        for sql in statements {
            count += update_count(&self.run(&client, &sql).await?);
        }
        Ok(count)
    }

    async fn do_action_close_prepared_statement(
        &self,
        query: ActionClosePreparedStatementRequest,
        _request: Request<Action>,
    ) -> Result<(), Status> {
        self.prepared
            .close(&String::from_utf8_lossy(&query.prepared_statement_handle));
        Ok(())
    }

    async fn do_action_fallback(
        &self,
        request: Request<Action>,
    ) -> Result<
        Response<<Self as arrow_flight::flight_service_server::FlightService>::DoActionStream>,
        Status,
    > {
        if request.get_ref().r#type != PROGRESS_ACTION {
            return Err(Status::invalid_argument(format!(
                "unknown action '{}'",
                request.get_ref().r#type
            )));
        }
        let mut report = JobProgressReport {
            job: self
                .sessions
                .get(&client_of(&request))
                .and_then(|s| s.session.running_job_id()),
            stages: vec![],
        };
        if let (Some(job), Some(progress)) = (&report.job, &self.progress) {
            // A job just submitted may not be visible yet: no stages then.
            report.stages = progress.stages(job).await.unwrap_or_default();
        }
        let body =
            serde_json::to_vec(&report).map_err(|e| Status::internal(format!("progress: {e}")))?;
        let result = arrow_flight::Result { body: body.into() };
        Ok(Response::new(Box::pin(futures::stream::iter([Ok(result)]))))
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{DataType, Field};

    fn request(header: Option<&str>) -> Request<()> {
        let mut request = Request::new(());
        if let Some(h) = header {
            request
                .metadata_mut()
                .insert("authorization", h.parse().unwrap());
        }
        request
    }

    #[test]
    fn auth_requires_the_exact_bearer_token() {
        let auth = Auth {
            token: Some("s3cret".into()),
        };
        let code = |h| auth.check(request(h)).map(|_| ()).map_err(|s| s.code());
        assert_eq!(code(None), Err(tonic::Code::Unauthenticated));
        assert_eq!(
            code(Some("Bearer wrong")),
            Err(tonic::Code::Unauthenticated)
        );
        assert_eq!(
            code(Some("Bearer s3cret2")),
            Err(tonic::Code::Unauthenticated)
        );
        assert_eq!(
            code(Some("Basic s3cret")),
            Err(tonic::Code::Unauthenticated)
        );
        assert_eq!(code(Some("Bearer s3cret")), Ok(()));
        let open = Auth::default();
        assert!(open.check(request(None)).is_ok());
    }

    #[test]
    fn update_counts() {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "count",
            DataType::UInt64,
            false,
        )]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(UInt64Array::from(vec![7u64]))],
        )
        .unwrap();
        let counted = StatementOutput::Rows {
            schema,
            batches: vec![batch],
        };
        assert_eq!(update_count(&counted), 7);
        let done = StatementOutput::Done {
            message: "CREATE TABLE".into(),
        };
        assert_eq!(update_count(&done), 0);
    }
}
