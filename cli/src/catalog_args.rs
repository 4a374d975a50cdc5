//! The catalog and warehouse flags shared by `icemerge` and
//! `icemerge-scheduler`: warehouse, catalog URI and name, and the S3
//! settings of an `s3://` warehouse.

use std::path::PathBuf;

use icemerge_scheduler::{CatalogOptions, S3Options};

#[path = "s3_credential_args.rs"]
mod s3_credential_args;
pub use s3_credential_args::S3CredentialArgs;

/// Where tables live and which catalog lists them.
#[derive(Debug, Clone, clap::Args)]
pub struct CatalogArgs {
    /// Warehouse: table data and metadata. A directory (created if missing;
    /// it also holds the default SQLite catalog, catalog.db) or
    /// s3://BUCKET/PREFIX (needs --catalog-uri; see the --s3-* flags).
    #[arg(
        long,
        value_name = "DIR|s3://BUCKET/PREFIX",
        env = "ICEMERGE_WAREHOUSE",
        default_value = "./warehouse"
    )]
    pub warehouse: PathBuf,

    /// Catalog database: sqlite://PATH or postgres://USER:PASSWORD@HOST/DB
    /// [default: sqlite://<warehouse>/catalog.db]
    #[arg(long, value_name = "URI", env = "ICEMERGE_CATALOG_URI")]
    pub catalog_uri: Option<String>,

    /// Catalog name: the catalog_name of the catalog database's rows this
    /// catalog reads and writes (Spark's JdbcCatalog writes the name of the
    /// Spark catalog) and the first part of three-part table names.
    #[arg(
        long,
        value_name = "NAME",
        env = "ICEMERGE_CATALOG_NAME",
        default_value = icemerge_scheduler::DEFAULT_CATALOG_NAME
    )]
    pub catalog_name: String,

    /// Endpoint of an S3-compatible store for an s3:// warehouse, e.g.
    /// http://127.0.0.1:9000 [default: AWS S3]
    #[arg(long, value_name = "URL", env = "AWS_ENDPOINT_URL")]
    pub s3_endpoint: Option<String>,

    /// S3 region of an s3:// warehouse (also read from AWS_DEFAULT_REGION).
    #[arg(long, value_name = "REGION", env = "AWS_REGION")]
    pub s3_region: Option<String>,

    #[command(flatten)]
    pub credentials: S3CredentialArgs,

    /// Path-style S3 requests (http://endpoint/bucket/key) [default: true
    /// with --s3-endpoint, false for AWS S3]
    #[arg(long, value_name = "BOOL")]
    pub s3_path_style_access: Option<bool>,
}

impl CatalogArgs {
    /// The catalog options these flags give.
    pub fn options(&self) -> CatalogOptions {
        CatalogOptions {
            warehouse: self.warehouse.clone(),
            catalog_uri: self.catalog_uri.clone(),
            catalog_name: self.catalog_name.clone(),
            s3: S3Options {
                endpoint: self.s3_endpoint.clone(),
                region: self
                    .s3_region
                    .clone()
                    .or_else(|| std::env::var("AWS_DEFAULT_REGION").ok()),
                access_key_id: self.credentials.s3_access_key_id.clone(),
                secret_access_key: self.credentials.s3_secret_access_key.clone(),
                session_token: self.credentials.s3_session_token.clone(),
                path_style_access: self.s3_path_style_access,
            },
        }
    }
}
