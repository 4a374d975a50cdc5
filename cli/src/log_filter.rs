//! The log filter of icemerge's commands: `ICEMERGE_LOG` (tracing's
//! `EnvFilter` syntax), else the command's default; in every case without
//! the S3 signer's lines below errors (its debug lines print the
//! credentials it loaded).

use tracing_subscriber::EnvFilter;

/// Targets kept to errors whatever `ICEMERGE_LOG` says: they log secrets
/// at debug level.
const SECRET_LOGGING: [&str; 2] = ["reqsign_core=error", "reqsign=error"];

/// `ICEMERGE_LOG`, else `default`, with the secret-logging targets capped.
pub fn log_filter(default: &str) -> EnvFilter {
    let mut filter =
        EnvFilter::try_from_env("ICEMERGE_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    for directive in SECRET_LOGGING {
        filter = filter.add_directive(directive.parse().expect("a valid directive"));
    }
    filter
}
