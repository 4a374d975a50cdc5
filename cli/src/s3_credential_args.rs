//! The S3 credential flags: the CLI's and the scheduler's for their own
//! reads and writes of an `s3://` warehouse, and each executor's own (plans
//! never carry credentials).

/// S3 credentials (unset: the S3 client's own lookup on this machine:
/// environment, profile files, instance role).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct S3CredentialArgs {
    /// S3 access key id for an s3:// warehouse.
    #[arg(long, value_name = "ID", env = "AWS_ACCESS_KEY_ID")]
    pub s3_access_key_id: Option<String>,

    /// S3 secret access key for an s3:// warehouse.
    #[arg(
        long,
        value_name = "KEY",
        env = "AWS_SECRET_ACCESS_KEY",
        hide_env_values = true
    )]
    pub s3_secret_access_key: Option<String>,

    /// S3 session token (temporary credentials) for an s3:// warehouse.
    #[arg(
        long,
        value_name = "TOKEN",
        env = "AWS_SESSION_TOKEN",
        hide_env_values = true
    )]
    pub s3_session_token: Option<String>,
}
