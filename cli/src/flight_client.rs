//! The connection `icemerge --scheduler` opens to a scheduler's Flight SQL
//! port: a Flight client whose every call carries the bearer token when one
//! is given, over TLS for a `grpc+tls://` (or `https://`) address. Used to
//! run statements (`remote`) and to poll progress (`progress`).

use arrow_flight::flight_service_client::FlightServiceClient;
use datafusion::error::DataFusionError;
use icemerge_proto::error::{invalid_input, io_error};
use icemerge_proto::limits::MAX_MESSAGE_BYTES;
use std::path::Path;
use tonic::metadata::MetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic::{Request, Status};

/// A Flight client with the bearer token (and the session name) on every
/// call.
pub type FlightClient = FlightServiceClient<InterceptedService<Channel, CallHeaders>>;

/// Adds the bearer token and the session name to every call.
#[derive(Clone)]
pub struct CallHeaders {
    authorization: Option<MetadataValue<tonic::metadata::Ascii>>,
    /// `x-icemerge-session`: the scheduler session the calls run in
    /// (without it: this connection's own).
    session: Option<MetadataValue<tonic::metadata::Ascii>>,
}

impl tonic::service::Interceptor for CallHeaders {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(value) = &self.authorization {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        if let Some(value) = &self.session {
            request
                .metadata_mut()
                .insert("x-icemerge-session", value.clone());
        }
        Ok(request)
    }
}

/// Connects to `address`: `HOST:PORT`, `grpc://HOST:PORT` (or `http://`)
/// for plain TCP, `grpc+tls://HOST:PORT` (or `https://`) for TLS. TLS
/// trusts the system's root certificates, or only `tls_ca` (a PEM file)
/// when given; a bare `HOST:PORT` with `tls_ca` means TLS.
pub async fn connect(
    address: &str,
    token: Option<&str>,
    tls_ca: Option<&Path>,
    session: Option<&str>,
) -> Result<FlightClient, DataFusionError> {
    let (url, tls) = match address.split_once("://") {
        Some(("grpc+tls" | "https", rest)) => (format!("https://{rest}"), true),
        Some(("grpc" | "grpc+tcp" | "http", rest)) => {
            if tls_ca.is_some() {
                return Err(invalid_input(format!(
                    "--tls-ca is for TLS connections: use grpc+tls://{rest} (not {address})"
                )));
            }
            (format!("http://{rest}"), false)
        }
        Some((scheme, _)) => {
            return Err(invalid_input(format!(
                "--scheduler: unknown scheme '{scheme}://' in '{address}': use HOST:PORT, \
                 grpc://HOST:PORT or grpc+tls://HOST:PORT"
            )))
        }
        None if tls_ca.is_some() => (format!("https://{address}"), true),
        None => (format!("http://{address}"), false),
    };
    let mut endpoint = Endpoint::from_shared(url.clone())
        .map_err(|e| invalid_input(format!("--scheduler: invalid address '{address}': {e}")))?;
    if tls {
        let config = match tls_ca {
            Some(path) => {
                let pem = std::fs::read(path).map_err(|e| {
                    invalid_input(format!("--tls-ca {}: cannot read it: {e}", path.display()))
                })?;
                ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem))
            }
            None => ClientTlsConfig::new().with_native_roots(),
        };
        endpoint = endpoint
            .tls_config(config)
            .map_err(|e| invalid_input(format!("--scheduler {address}: TLS: {e}")))?;
    }
    let channel = endpoint.connect().await.map_err(|e| {
        io_error(format!(
            "cannot connect to the icemerge scheduler at {address}: {e}{}",
            source_text(&e)
        ))
    })?;
    let header = match token {
        Some(token) => Some(
            format!("Bearer {token}")
                .parse()
                .map_err(|_| invalid_input("--token: the token must be printable ASCII"))?,
        ),
        None => None,
    };
    let session =
        match session {
            Some(name) => Some(name.parse().map_err(|_| {
                invalid_input("--session: the session name must be printable ASCII")
            })?),
            None => None,
        };
    Ok(FlightServiceClient::with_interceptor(
        channel,
        CallHeaders {
            authorization: header,
            session,
        },
    )
    .max_decoding_message_size(MAX_MESSAGE_BYTES)
    .max_encoding_message_size(MAX_MESSAGE_BYTES))
}

fn source_text(e: &dyn std::error::Error) -> String {
    let mut text = String::new();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
