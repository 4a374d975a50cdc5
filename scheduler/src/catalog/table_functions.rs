//! `read_parquet('path')` and `read_csv('path')`: files outside the catalog
//! as table sources, usable wherever a table is (SELECT, INSERT, MERGE
//! USING). A path may be a file, a directory or a glob.

use std::sync::Arc;

use datafusion::catalog::{TableFunctionImpl, TableProvider};
use datafusion::common::ScalarValue;
use datafusion::datasource::file_format::csv::CsvFormat;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::file_format::FileFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::error::Result;
use datafusion::logical_expr::Expr;
use datafusion::prelude::{SessionConfig, SessionContext};
use icemerge_proto::error::invalid_input;

/// Which file format a table function reads.
#[derive(Debug, Clone, Copy)]
pub enum FileKind {
    Parquet,
    Csv,
}

/// A `read_<format>(path)` table function.
#[derive(Debug)]
pub struct ReadFileFunction {
    pub kind: FileKind,
    pub config: SessionConfig,
}

impl ReadFileFunction {
    pub fn name(&self) -> &'static str {
        match self.kind {
            FileKind::Parquet => "read_parquet",
            FileKind::Csv => "read_csv",
        }
    }
}

impl TableFunctionImpl for ReadFileFunction {
    fn call(&self, args: &[Expr]) -> Result<Arc<dyn TableProvider>> {
        let path = match args {
            [Expr::Literal(ScalarValue::Utf8(Some(p)), _)] => p.clone(),
            _ => {
                return Err(invalid_input(format!(
                    "{}() takes one argument: a path string, e.g. {}('data/file')",
                    self.name(),
                    self.name()
                )))
            }
        };
        let format: Arc<dyn FileFormat> = match self.kind {
            FileKind::Parquet => Arc::new(ParquetFormat::default()),
            FileKind::Csv => Arc::new(CsvFormat::default().with_has_header(true)),
        };
        let extension = match self.kind {
            FileKind::Parquet => ".parquet",
            FileKind::Csv => ".csv",
        };
        let absolute = std::path::absolute(&path)
            .map_err(|e| invalid_input(format!("{}('{path}'): {e}", self.name())))?;
        let is_dir = absolute.is_dir();
        if !is_dir && !path.contains('*') && !absolute.exists() {
            return Err(invalid_input(format!(
                "{}('{path}'): no such file or directory",
                self.name()
            )));
        }
        let url = ListingTableUrl::parse(absolute.to_string_lossy())?;
        // Statistics from the files' footers (Parquet: rows and bytes), so
        // that a join builds its hash table on the smaller side.
        let options = ListingOptions::new(format)
            .with_file_extension(if is_dir { extension } else { "" })
            .with_collect_stat(true);
        let config = self.config.clone();
        let name = self.name();
        // Schema inference reads file footers: async work inside a sync call.
        tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(async move {
                let ctx = SessionContext::new_with_config(config);
                let state = ctx.state();
                let schema = options
                    .infer_schema(&state, &url)
                    .await
                    .map_err(|e| invalid_input(format!("{name}('{path}'): {e}")))?;
                let table_config = ListingTableConfig::new(url)
                    .with_listing_options(options)
                    .with_schema(schema);
                Ok(Arc::new(ListingTable::try_new(table_config)?) as Arc<dyn TableProvider>)
            })
        })
    }
}
