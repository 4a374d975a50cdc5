//! The Parquet settings of a table's data files, from its
//! `write.parquet.*` properties (Iceberg's names, as Spark and Trino read
//! them; `row-group-limit` is PyIceberg's). Every writer of data files
//! (INSERT, the MERGE writers, compaction) uses them; CREATE and ALTER
//! TABLE check them first, so a bad value is refused before it is stored.
//!
//! | property | meaning | unset |
//! |---|---|---|
//! | `write.parquet.row-group-size-bytes` | a row group ends at about this many bytes | no byte limit |
//! | `write.parquet.row-group-limit` | at most this many rows per row group | 1,048,576 rows |
//! | `write.parquet.page-size-bytes` | data pages end at about this size | 1 MiB |
//! | `write.parquet.page-row-limit` | at most this many rows per data page | 20,000 |
//! | `write.parquet.dict-size-bytes` | a column's dictionary page size before plain encoding takes over | 64 KiB |
//! | `write.parquet.compression-codec` | `zstd`, `snappy`, `gzip`, `lz4`, `brotli`, `uncompressed` (or `none`) | `zstd` |
//! | `write.parquet.compression-level` | the codec's level (zstd 1–22, gzip 0–9, brotli 0–11) | zstd 1 |
//!
//! Position delete files take the same settings, each overridden by its
//! `write.delete.parquet.*` twin when set (Iceberg's rule).
//!
//! The 64 KiB dictionary default (Iceberg's is 2 MiB) makes high-cardinality
//! columns (keys, amounts) fall back to plain encoding early, which keeps
//! rewrites from spending their time hashing values into dictionaries.

use std::collections::HashMap;

use datafusion::error::Result;
use parquet::basic::{BrotliLevel, Compression, GzipLevel, ZstdLevel};
use parquet::file::properties::WriterProperties;

use icemerge_proto::error::invalid_input;

pub const ROW_GROUP_SIZE_BYTES: &str = "write.parquet.row-group-size-bytes";
pub const ROW_GROUP_LIMIT: &str = "write.parquet.row-group-limit";
pub const PAGE_SIZE_BYTES: &str = "write.parquet.page-size-bytes";
pub const PAGE_ROW_LIMIT: &str = "write.parquet.page-row-limit";
pub const DICT_SIZE_BYTES: &str = "write.parquet.dict-size-bytes";
pub const COMPRESSION_CODEC: &str = "write.parquet.compression-codec";
pub const COMPRESSION_LEVEL: &str = "write.parquet.compression-level";

/// A column's dictionary page limit when the table sets none.
const DICTIONARY_PAGE_LIMIT: usize = 64 * 1024;
/// The zstd level when the table sets none.
const DEFAULT_ZSTD_LEVEL: i32 = 1;

/// The writer properties of `table`'s data files. A value that is not a
/// positive number, an unknown codec or a level the codec does not have is
/// an error naming the table, the property and the value.
pub fn data_file_properties(
    table: &str,
    properties: &HashMap<String, String>,
) -> Result<WriterProperties> {
    writer_properties(
        table,
        &Settings {
            properties,
            deletes: false,
        },
    )
}

/// The writer properties of `table`'s delete files: its data files' ones,
/// each overridden by its `write.delete.parquet.*` twin.
pub fn delete_file_properties(
    table: &str,
    properties: &HashMap<String, String>,
) -> Result<WriterProperties> {
    writer_properties(
        table,
        &Settings {
            properties,
            deletes: true,
        },
    )
}

/// Checks `table`'s data and delete file settings (CREATE and ALTER TABLE).
pub fn check_parquet_properties(table: &str, properties: &HashMap<String, String>) -> Result<()> {
    data_file_properties(table, properties)?;
    delete_file_properties(table, properties)?;
    Ok(())
}

/// A table's properties as one kind of file reads them.
struct Settings<'a> {
    properties: &'a HashMap<String, String>,
    /// Delete files: a `write.delete.parquet.*` twin wins.
    deletes: bool,
}

impl Settings<'_> {
    /// The value of `key` and the property it came from.
    fn get(&self, key: &str) -> Option<(String, &String)> {
        if self.deletes {
            let twin = key.replacen("write.parquet.", "write.delete.parquet.", 1);
            if let Some(value) = self.properties.get(&twin) {
                return Some((twin, value));
            }
        }
        self.properties.get(key).map(|v| (key.to_string(), v))
    }
}

fn writer_properties(table: &str, settings: &Settings) -> Result<WriterProperties> {
    let size = |key: &str| -> Result<Option<usize>> {
        let Some((key, value)) = settings.get(key) else {
            return Ok(None);
        };
        match value.trim().parse::<usize>() {
            Ok(n) if n > 0 => Ok(Some(n)),
            _ => Err(invalid_input(format!(
                "table {table}: table property '{key}' = '{value}': expected a positive \
                 whole number"
            ))),
        }
    };
    let mut builder = WriterProperties::builder()
        .set_compression(compression(table, settings)?)
        .set_dictionary_page_size_limit(size(DICT_SIZE_BYTES)?.unwrap_or(DICTIONARY_PAGE_LIMIT));
    if let Some(bytes) = size(ROW_GROUP_SIZE_BYTES)? {
        builder = builder.set_max_row_group_bytes(Some(bytes));
    }
    if let Some(rows) = size(ROW_GROUP_LIMIT)? {
        builder = builder.set_max_row_group_row_count(Some(rows));
    }
    if let Some(bytes) = size(PAGE_SIZE_BYTES)? {
        builder = builder.set_data_page_size_limit(bytes);
    }
    if let Some(rows) = size(PAGE_ROW_LIMIT)? {
        builder = builder.set_data_page_row_count_limit(rows);
    }
    Ok(builder.build())
}

/// The codec and level the table's properties name.
fn compression(table: &str, settings: &Settings) -> Result<Compression> {
    let codec = settings.get(COMPRESSION_CODEC);
    let codec_key = codec
        .as_ref()
        .map_or(COMPRESSION_CODEC.to_string(), |(k, _)| k.clone());
    let codec = codec.map(|(_, c)| c.trim().to_ascii_lowercase());
    let level_key = settings
        .get(COMPRESSION_LEVEL)
        .map_or(COMPRESSION_LEVEL.to_string(), |(k, _)| k);
    let level = match settings.get(COMPRESSION_LEVEL) {
        None => None,
        Some((key, value)) => Some(value.trim().parse::<i32>().map_err(|_| {
            invalid_input(format!(
                "table {table}: table property '{key}' = '{value}': expected a whole number"
            ))
        })?),
    };
    let bad_level = |codec: &str, range: &str| {
        invalid_input(format!(
            "table {table}: table property '{level_key}' = '{}': {codec} takes levels {range}",
            level.unwrap_or_default()
        ))
    };
    let no_level = |codec: &str| -> Result<()> {
        match level {
            Some(_) => Err(invalid_input(format!(
                "table {table}: table property '{level_key}' is set, but '{codec_key}' = \
                 '{codec}' has no levels"
            ))),
            None => Ok(()),
        }
    };
    Ok(match codec.as_deref().unwrap_or("zstd") {
        "zstd" => Compression::ZSTD(
            ZstdLevel::try_new(level.unwrap_or(DEFAULT_ZSTD_LEVEL))
                .map_err(|_| bad_level("zstd", "1 to 22"))?,
        ),
        "gzip" => Compression::GZIP(match level {
            None => GzipLevel::default(),
            Some(l) => u32::try_from(l)
                .ok()
                .and_then(|l| GzipLevel::try_new(l).ok())
                .ok_or_else(|| bad_level("gzip", "0 to 9"))?,
        }),
        "brotli" => Compression::BROTLI(match level {
            None => BrotliLevel::default(),
            Some(l) => u32::try_from(l)
                .ok()
                .and_then(|l| BrotliLevel::try_new(l).ok())
                .ok_or_else(|| bad_level("brotli", "0 to 11"))?,
        }),
        "snappy" => {
            no_level("snappy")?;
            Compression::SNAPPY
        }
        "lz4" => {
            no_level("lz4")?;
            Compression::LZ4_RAW
        }
        "uncompressed" | "none" => {
            no_level("uncompressed")?;
            Compression::UNCOMPRESSED
        }
        other => {
            return Err(invalid_input(format!(
                "table {table}: table property '{codec_key}' = '{other}': expected zstd, \
                 snappy, gzip, lz4, brotli or uncompressed"
            )))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use parquet::basic::Compression;
    use parquet::schema::types::ColumnPath;

    fn props(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_and_set_values_reach_the_writer() {
        let any = ColumnPath::from("c");
        let default = data_file_properties("db.t", &HashMap::new()).unwrap();
        assert_eq!(
            default.compression(&any),
            Compression::ZSTD(ZstdLevel::try_new(1).unwrap())
        );
        assert_eq!(default.dictionary_page_size_limit(), 64 * 1024);
        assert_eq!(default.max_row_group_bytes(), None);

        let set = data_file_properties(
            "db.t",
            &props(&[
                (ROW_GROUP_SIZE_BYTES, "1048576"),
                (ROW_GROUP_LIMIT, "5000"),
                (PAGE_SIZE_BYTES, "65536"),
                (PAGE_ROW_LIMIT, "1000"),
                (DICT_SIZE_BYTES, "2097152"),
                (COMPRESSION_CODEC, "GZIP"),
                (COMPRESSION_LEVEL, "6"),
            ]),
        )
        .unwrap();
        assert_eq!(set.max_row_group_bytes(), Some(1048576));
        assert_eq!(set.max_row_group_row_count(), Some(5000));
        assert_eq!(set.data_page_size_limit(), 65536);
        assert_eq!(set.data_page_row_count_limit(), 1000);
        assert_eq!(set.dictionary_page_size_limit(), 2097152);
        assert_eq!(
            set.compression(&any),
            Compression::GZIP(GzipLevel::try_new(6).unwrap())
        );
        let snappy = data_file_properties("db.t", &props(&[(COMPRESSION_CODEC, "snappy")]));
        assert_eq!(snappy.unwrap().compression(&any), Compression::SNAPPY);
    }

    #[test]
    fn delete_files_take_their_twins_over_the_data_settings() {
        let any = ColumnPath::from("c");
        let p = props(&[
            (COMPRESSION_CODEC, "gzip"),
            ("write.delete.parquet.compression-codec", "snappy"),
            (ROW_GROUP_LIMIT, "100"),
        ]);
        let deletes = delete_file_properties("db.t", &p).unwrap();
        assert_eq!(deletes.compression(&any), Compression::SNAPPY);
        assert_eq!(deletes.max_row_group_row_count(), Some(100));
        let bad = props(&[("write.delete.parquet.compression-codec", "lzo")]);
        assert!(delete_file_properties("db.t", &bad).is_err());
    }

    #[test]
    fn bad_values_are_refused_by_name() {
        let error = |pairs: &[(&str, &str)]| {
            data_file_properties("db.t", &props(pairs))
                .unwrap_err()
                .to_string()
        };
        let e = error(&[(ROW_GROUP_LIMIT, "0")]);
        assert!(e.contains("'write.parquet.row-group-limit' = '0'"), "{e}");
        let e = error(&[(PAGE_SIZE_BYTES, "1MB")]);
        assert!(e.contains("positive whole number"), "{e}");
        let e = error(&[(COMPRESSION_CODEC, "lzo")]);
        assert!(e.contains("'lzo'") && e.contains("expected zstd"), "{e}");
        let e = error(&[(COMPRESSION_LEVEL, "40")]);
        assert!(e.contains("zstd takes levels 1 to 22"), "{e}");
        let e = error(&[(COMPRESSION_CODEC, "snappy"), (COMPRESSION_LEVEL, "3")]);
        assert!(e.contains("has no levels"), "{e}");
        assert!(e.contains("db.t"), "{e}");
    }
}
