//! Equality delete files: each row deletes every row of the data files it
//! applies to whose values in the file's equality columns (`equality_ids`)
//! are the same (NULL equal to NULL, as Iceberg defines it).

use std::collections::HashSet;

use arrow::array::{ArrayRef, BooleanArray};
use arrow::datatypes::DataType;
use arrow::row::{RowConverter, SortField};
use datafusion::error::Result;
use futures::TryStreamExt;
use iceberg::arrow::type_to_arrow_type;
use iceberg::io::FileIO;
use iceberg::scan::FileScanTaskDeleteFile;
use iceberg::spec::Schema;

use super::parquet_file::{read_columns, Wanted};
use crate::iceberg_err;
use icemerge_proto::error::{internal, invalid_input, unsupported};

/// The deleted value tuples of one equality delete file.
pub struct EqualityDeletes {
    /// The equality columns, by field id, in the file's order.
    field_ids: Vec<i32>,
    /// Their types in the table's current schema; both sides are cast to them.
    types: Vec<DataType>,
    converter: RowConverter,
    deleted: HashSet<Box<[u8]>>,
}

impl EqualityDeletes {
    /// Reads `delete`, whose columns are those of `schema` named by its
    /// equality ids.
    pub(super) async fn load(
        file_io: &FileIO,
        delete: &FileScanTaskDeleteFile,
        schema: &Schema,
    ) -> Result<Self> {
        let path = &delete.file_path;
        let field_ids = delete.equality_ids.clone().unwrap_or_default();
        if field_ids.is_empty() {
            return Err(invalid_input(format!(
                "equality delete file {path} has no equality field ids"
            )));
        }
        let mut names = Vec::with_capacity(field_ids.len());
        let mut types = Vec::with_capacity(field_ids.len());
        for &id in &field_ids {
            let field = schema.as_struct().field_by_id(id).ok_or_else(|| {
                unsupported(format!(
                    "equality delete file {path} compares field id {id}, which is not a \
                     top-level column of the table's current schema"
                ))
            })?;
            if !field.field_type.is_primitive() {
                return Err(unsupported(format!(
                    "equality delete file {path} compares column '{}' of type {}: only \
                     primitive columns are supported",
                    field.name, field.field_type
                )));
            }
            names.push(field.name.clone());
            types.push(type_to_arrow_type(&field.field_type).map_err(iceberg_err)?);
        }
        let wanted: Vec<Wanted> = field_ids
            .iter()
            .zip(&names)
            .map(|(&field_id, name)| Wanted { field_id, name })
            .collect();
        let converter = RowConverter::new(types.iter().cloned().map(SortField::new).collect())?;
        let mut out = Self {
            field_ids,
            types,
            converter,
            deleted: HashSet::new(),
        };
        let mut batches = read_columns(file_io, path, delete.file_size_in_bytes, &wanted).await?;
        while let Some(batch) = batches.try_next().await? {
            let rows = out.rows(batch.columns())?;
            out.deleted.extend(
                rows.iter()
                    .map(|row| row.as_ref().to_vec().into_boxed_slice()),
            );
        }
        Ok(out)
    }

    /// The equality columns, by field id.
    pub fn field_ids(&self) -> &[i32] {
        &self.field_ids
    }

    /// For each row of `columns` (the equality columns of a data file's
    /// batch, in [`field_ids`](Self::field_ids) order): is it deleted?
    pub fn matches(&self, columns: &[ArrayRef]) -> Result<BooleanArray> {
        let rows = self.rows(columns)?;
        Ok(rows
            .iter()
            .map(|row| Some(self.deleted.contains(row.as_ref())))
            .collect())
    }

    fn rows(&self, columns: &[ArrayRef]) -> Result<arrow::row::Rows> {
        if columns.len() != self.types.len() {
            return Err(internal(format!(
                "equality deletes compare {} columns, got {}",
                self.types.len(),
                columns.len()
            )));
        }
        let cast = columns
            .iter()
            .zip(&self.types)
            .map(|(c, t)| Ok(arrow::compute::cast(c, t)?))
            .collect::<Result<Vec<_>>>()?;
        Ok(self.converter.convert_columns(&cast)?)
    }
}
