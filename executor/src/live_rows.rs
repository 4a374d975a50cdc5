//! Reading one data file's live rows in file order, each with its ORIGINAL
//! position in the file (0-based, as Iceberg position deletes count): the
//! read MERGE's row-id scan and the copy-on-write rewrite share.
//!
//! iceberg's Arrow reader reads the file whole, or the runs of row groups
//! `crate::row_groups` kept (each run a byte range whose first row's
//! position is known), with no row filtering, so positions are counted
//! exactly; the delete files are taken off its task and applied here
//! (`crate::deletes`), after positions are known. Columns compared by
//! equality deletes are read too and dropped again.

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch};
use arrow::compute::filter;
use datafusion::error::Result;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use iceberg::arrow::ArrowReaderBuilder;
use iceberg::io::FileIO;
use iceberg::scan::FileScanTask;
use iceberg::Runtime;

use datafusion::physical_plan::metrics::Count;

use crate::deletes::DataFileDeletes;
use crate::iceberg_err;
use crate::row_groups::RowGroupSelection;
use crate::scan_exec::StorageBytes;

/// A batch of live rows and their positions in the data file.
pub struct LiveBatch {
    /// The task's projected columns, as the file stores them.
    pub batch: RecordBatch,
    /// One per row, increasing.
    pub positions: Int64Array,
}

/// The live rows of `task`'s data file (its projected columns), given the
/// `deletes` that apply to it. `task.deletes` and `task.predicate` are not
/// used: every row is read and only `deletes` remove rows. The bytes read
/// from storage are added to `bytes`.
pub fn read_live_rows(
    file_io: FileIO,
    task: FileScanTask,
    deletes: DataFileDeletes,
    batch_size: usize,
    bytes: Count,
) -> Result<BoxStream<'static, Result<LiveBatch>>> {
    read_live_rows_in(
        file_io,
        task,
        deletes,
        batch_size,
        bytes,
        RowGroupSelection::All,
    )
}

/// The live rows of the row groups `selection` names (see
/// [`read_live_rows`]), each with its position in the whole file.
pub fn read_live_rows_in(
    file_io: FileIO,
    task: FileScanTask,
    deletes: DataFileDeletes,
    batch_size: usize,
    bytes: Count,
    selection: RowGroupSelection,
) -> Result<BoxStream<'static, Result<LiveBatch>>> {
    let runs = match selection {
        RowGroupSelection::All => vec![(task.start, task.length, 0)],
        RowGroupSelection::Runs { runs, .. } => runs
            .into_iter()
            .map(|r| (r.start, r.length, r.first_row))
            .collect(),
    };
    let deletes = Arc::new(deletes);
    // Each run's reader starts when the run before it has ended.
    Ok(futures::stream::iter(runs)
        .map(move |(start, length, first_row)| {
            let mut task = task.clone();
            task.start = start;
            task.length = length;
            read_run(
                file_io.clone(),
                task,
                deletes.clone(),
                first_row,
                batch_size,
                bytes.clone(),
            )
        })
        .try_flatten()
        .boxed())
}

/// The live rows of the byte range `task.start..task.start + task.length`
/// (the whole file when both are those of the whole file), whose first row
/// is at position `first_row` of the file.
fn read_run(
    file_io: FileIO,
    mut task: FileScanTask,
    deletes: Arc<DataFileDeletes>,
    first_row: i64,
    batch_size: usize,
    bytes: Count,
) -> Result<BoxStream<'static, Result<LiveBatch>>> {
    let projected = task.project_field_ids.len();
    let mut positions_of_extra = vec![];
    for id in deletes.equality_field_ids() {
        match task.project_field_ids.iter().position(|&p| p == id) {
            Some(i) => positions_of_extra.push((id, i)),
            None => {
                positions_of_extra.push((id, task.project_field_ids.len()));
                task.project_field_ids.push(id);
            }
        }
    }
    // No column wanted: iceberg's reader would read them all; read the
    // cheapest (dropped below with the other extra columns).
    if task.project_field_ids.is_empty() {
        if let Some(id) = crate::scan_exec::cheapest_column(&task.schema) {
            task.project_field_ids.push(id);
        }
    }
    task.deletes = vec![];
    task.predicate = None;
    let reader = ArrowReaderBuilder::new(file_io, Runtime::try_current().map_err(iceberg_err)?)
        .with_batch_size(batch_size)
        .with_data_file_concurrency_limit(1)
        .with_row_group_filtering_enabled(false)
        .with_row_selection_enabled(false)
        .build();
    let result = reader
        .read(futures::stream::iter([Ok(task)]).boxed())
        .map_err(iceberg_err)?;
    let mut io = StorageBytes::new(result.metrics().clone(), bytes);
    let batches = result.stream();
    let mut start: i64 = first_row;
    let keep: Vec<usize> = (0..projected).collect();
    Ok(batches
        .map(move |batch| {
            io.update();
            let batch = batch.map_err(iceberg_err)?;
            let rows = batch.num_rows();
            let positions = Int64Array::from_iter_values(start..start + rows as i64);
            let column = |id: i32| -> Option<ArrayRef> {
                positions_of_extra
                    .iter()
                    .find(|(f, _)| *f == id)
                    .map(|(_, i)| batch.column(*i).clone())
            };
            let live = deletes.live(start, rows, &column)?;
            start += rows as i64;
            let batch = batch.project(&keep)?;
            Ok(match live {
                None => LiveBatch { batch, positions },
                Some(mask) => LiveBatch {
                    batch: arrow::compute::filter_record_batch(&batch, &mask)?,
                    positions: filter(&positions, &mask)?
                        .as_any()
                        .downcast_ref::<Int64Array>()
                        .expect("filtered Int64Array")
                        .clone(),
                },
            })
        })
        .filter(|b| {
            // Batches whose every row was deleted carry nothing.
            futures::future::ready(!matches!(b, Ok(b) if b.batch.num_rows() == 0))
        })
        .boxed())
}
