//! The copy-on-write floor: the time to read and rewrite exactly the files a
//! case touches (those holding matched keys) with plain Parquet — decode
//! every row, encode it again with the compression icemerge writes (zstd
//! level 1) — and nothing else: no join, no commit. Files are spread over
//! the available cores, as a merge engine could.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Result;
use arrow::record_batch::RecordBatchReader;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

/// Reads `input` and writes it again to `output`; returns bytes written.
fn rewrite(input: &Path, output: &Path) -> Result<u64> {
    let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(input)?)?.build()?;
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(1)?))
        .build();
    let mut writer = ArrowWriter::try_new(File::create(output)?, reader.schema(), Some(props))?;
    for batch in reader {
        writer.write(&batch?)?;
    }
    writer.close()?;
    Ok(std::fs::metadata(output)?.len())
}

/// Rewrites `files` into `scratch` over `threads` threads; returns seconds
/// and bytes written.
pub fn measure(files: &[PathBuf], scratch: &Path, threads: usize) -> Result<(f64, u64)> {
    std::fs::create_dir_all(scratch)?;
    let start = Instant::now();
    let threads = threads.max(1).min(files.len().max(1));
    let written = std::thread::scope(|scope| -> Result<u64> {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || -> Result<u64> {
                    let mut bytes = 0;
                    for (i, f) in files.iter().enumerate().skip(t).step_by(threads) {
                        bytes += rewrite(f, &scratch.join(format!("floor-{i}.parquet")))?;
                    }
                    Ok(bytes)
                })
            })
            .collect();
        let mut total = 0;
        for h in handles {
            total += h.join().expect("floor thread")?;
        }
        Ok(total)
    })?;
    let seconds = start.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir_all(scratch);
    Ok((seconds, written))
}

/// `runs` measurements of `files` on every core, in a scratch directory
/// under `work`: their seconds, and the bytes the last wrote.
pub fn measure_runs(files: &[PathBuf], work: &Path, runs: usize) -> Result<(Vec<f64>, u64)> {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2);
    let mut seconds = vec![];
    let mut bytes = 0;
    for _ in 0..runs {
        let (s, b) = measure(files, &work.join("floor-scratch"), threads)?;
        seconds.push(s);
        bytes = b;
    }
    Ok((seconds, bytes))
}
