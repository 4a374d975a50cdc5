//! TLS of the Flight SQL port: the server's certificate chain and private
//! key (PEM files, `--tls-cert` / `--tls-key`), read and checked when the
//! scheduler starts so a bad file fails the start naming it. The other
//! ports (Ballista's, the live page, metrics) stay plain: they belong
//! behind the cluster's firewall.

use std::path::PathBuf;

use datafusion::error::{DataFusionError, Result};
use tonic::transport::{Identity, Server, ServerTlsConfig};

/// The PEM files of the Flight SQL port's certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, leaf first.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
}

impl TlsFiles {
    /// Both files or neither: one alone is an error naming the other.
    pub fn from_args(cert: Option<PathBuf>, key: Option<PathBuf>) -> Result<Option<Self>> {
        match (cert, key) {
            (Some(cert), Some(key)) => Ok(Some(Self { cert, key })),
            (None, None) => Ok(None),
            (Some(_), None) => Err(config_err(
                "--tls-cert needs --tls-key (the certificate's private key)",
            )),
            (None, Some(_)) => Err(config_err(
                "--tls-key needs --tls-cert (the certificate chain it signs)",
            )),
        }
    }

    /// The server's TLS configuration, checked: unreadable files, or a
    /// certificate and key that do not make a TLS identity, are errors.
    pub fn server_config(&self) -> Result<ServerTlsConfig> {
        // The process's TLS library: more than one is linked in, so none is
        // picked by default.
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let read = |path: &PathBuf, flag: &str| {
            std::fs::read(path)
                .map_err(|e| config_err(format!("{flag} {}: cannot read it: {e}", path.display())))
        };
        let cert = read(&self.cert, "--tls-cert")?;
        let key = read(&self.key, "--tls-key")?;
        let config = ServerTlsConfig::new().identity(Identity::from_pem(cert, key));
        Server::builder().tls_config(config.clone()).map_err(|e| {
            config_err(format!(
                "--tls-cert {} / --tls-key {}: not a usable certificate and key ({e}{})",
                self.cert.display(),
                self.key.display(),
                std::error::Error::source(&e)
                    .map(|s| format!(": {s}"))
                    .unwrap_or_default()
            ))
        })?;
        Ok(config)
    }
}

fn config_err(message: impl Into<String>) -> DataFusionError {
    DataFusionError::Configuration(message.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_needs_its_key_and_files_must_hold_one() {
        let e = TlsFiles::from_args(Some("c.pem".into()), None).unwrap_err();
        assert!(e.to_string().contains("--tls-cert needs --tls-key"), "{e}");
        let e = TlsFiles::from_args(None, Some("k.pem".into())).unwrap_err();
        assert!(e.to_string().contains("--tls-key needs --tls-cert"), "{e}");
        assert_eq!(TlsFiles::from_args(None, None).unwrap(), None);

        let dir = tempfile::tempdir().unwrap();
        let missing = TlsFiles {
            cert: dir.path().join("missing.pem"),
            key: dir.path().join("key.pem"),
        };
        let e = missing.server_config().unwrap_err().to_string();
        assert!(e.contains("--tls-cert") && e.contains("missing.pem"), "{e}");
        let garbage = dir.path().join("garbage.pem");
        std::fs::write(&garbage, "not a certificate").unwrap();
        let bad = TlsFiles {
            cert: garbage.clone(),
            key: garbage,
        };
        let e = bad.server_config().unwrap_err().to_string();
        assert!(e.contains("not a usable certificate and key"), "{e}");
    }
}
