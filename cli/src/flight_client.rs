//! The connection `icemerge --scheduler` opens to a scheduler's Flight SQL
//! port: a Flight client whose every call carries the bearer token when one
//! is given. Used to run statements (`remote`) and to poll progress
//! (`progress`).

use arrow_flight::flight_service_client::FlightServiceClient;
use datafusion::error::DataFusionError;
use icemerge_proto::error::{invalid_input, io_error};
use icemerge_proto::limits::MAX_MESSAGE_BYTES;
use tonic::metadata::MetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Status};

/// A Flight client with the bearer token on every call.
pub type FlightClient = FlightServiceClient<InterceptedService<Channel, BearerToken>>;

/// Adds the bearer token to every call.
#[derive(Clone)]
pub struct BearerToken(Option<MetadataValue<tonic::metadata::Ascii>>);

impl tonic::service::Interceptor for BearerToken {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

/// Connects to `address` (`HOST:PORT` or `http://HOST:PORT`).
pub async fn connect(address: &str, token: Option<&str>) -> Result<FlightClient, DataFusionError> {
    let url = if address.contains("://") {
        address.to_string()
    } else {
        format!("http://{address}")
    };
    let endpoint = Endpoint::from_shared(url.clone())
        .map_err(|e| invalid_input(format!("--scheduler: invalid address '{address}': {e}")))?;
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
    Ok(
        FlightServiceClient::with_interceptor(channel, BearerToken(header))
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES),
    )
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
