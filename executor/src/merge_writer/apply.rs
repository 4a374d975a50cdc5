//! Applying a touched data file's changes to one batch read from it: a pure
//! function (no I/O). The batch holds some of the file's live rows, with
//! their positions in the file (increasing; rows deleted earlier by delete
//! files leave gaps); the changes that fall in its range are given sorted by
//! position; updated rows come from the batches of merge rows the writer
//! kept.

use arrow::array::{Array, BooleanArray, RecordBatch};
use arrow::compute::{filter_record_batch, interleave};
use arrow::datatypes::SchemaRef;
use datafusion::error::Result;
use icemerge_proto::error::internal;

/// What happens to one row of a touched file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Change {
    Delete,
    /// Replace with row `row` of kept batch `batch`.
    Update {
        batch: usize,
        row: usize,
    },
}

/// The result of applying changes to one batch.
#[derive(Debug)]
pub(super) struct Applied {
    /// The rows to write in the batch's place; `None` when every row was
    /// deleted.
    pub batch: Option<RecordBatch>,
    /// Rows kept as they were.
    pub copied: usize,
    pub updated: usize,
    pub deleted: usize,
}

/// Applies `changes` (sorted by position, within the range of `positions`)
/// to `batch`, whose row `i` is at position `positions[i]` of the file. A
/// change at a position that is not in `positions` is not applied (and not
/// counted). A batch without changes is passed through as it is, one with
/// deletes only is filtered, others are interleaved with the updated rows
/// they take from `kept`, whose columns must have the batch's types.
pub(super) fn apply(
    batch: RecordBatch,
    positions: &[i64],
    changes: &[(i64, &Change)],
    kept: &[RecordBatch],
) -> Result<Applied> {
    if changes.is_empty() {
        return Ok(Applied {
            copied: batch.num_rows(),
            batch: Some(batch),
            updated: 0,
            deleted: 0,
        });
    }
    if changes.iter().all(|(_, c)| matches!(c, Change::Delete)) {
        return delete_only(&batch, positions, changes);
    }
    update_and_delete(&batch, positions, changes, kept)
}

/// The batch without the deleted rows.
fn delete_only(
    batch: &RecordBatch,
    positions: &[i64],
    changes: &[(i64, &Change)],
) -> Result<Applied> {
    let rows = batch.num_rows();
    let mut keep = vec![true; rows];
    let mut deleted = 0;
    let mut changed = changes.iter().peekable();
    for (row, pos) in positions.iter().enumerate() {
        while changed.next_if(|(p, _)| p < pos).is_some() {}
        if changed.next_if(|(p, _)| p == pos).is_some() {
            keep[row] = false;
            deleted += 1;
        }
    }
    let copied = rows - deleted;
    let batch = (copied > 0)
        .then(|| filter_record_batch(batch, &BooleanArray::from(keep)))
        .transpose()?;
    Ok(Applied {
        batch,
        copied,
        updated: 0,
        deleted,
    })
}

/// The batch with deleted rows left out and updated rows taken from `kept`.
fn update_and_delete(
    batch: &RecordBatch,
    positions: &[i64],
    changes: &[(i64, &Change)],
    kept: &[RecordBatch],
) -> Result<Applied> {
    let rows = batch.num_rows();
    // Source 0 is this batch; 1.. the kept batches this batch takes from.
    let mut sources: Vec<usize> = vec![];
    let mut indices: Vec<(usize, usize)> = Vec::with_capacity(rows);
    let (mut updated, mut deleted) = (0, 0);
    let mut changed = changes.iter().peekable();
    for (row, pos) in positions.iter().enumerate() {
        while changed.next_if(|(p, _)| p < pos).is_some() {}
        match changed.next_if(|(p, _)| p == pos) {
            None => indices.push((0, row)),
            Some((_, Change::Delete)) => deleted += 1,
            Some((_, Change::Update { batch, row })) => {
                updated += 1;
                indices.push((1 + source_index(&mut sources, *batch), *row));
            }
        }
    }
    let copied = indices.iter().filter(|(b, _)| *b == 0).count();
    let batch = if indices.is_empty() {
        None
    } else {
        let batches: Vec<&RecordBatch> = std::iter::once(batch)
            .chain(sources.iter().map(|&k| &kept[k]))
            .collect();
        Some(take_rows(batch.schema(), &batches, &indices)?)
    };
    Ok(Applied {
        batch,
        copied,
        updated,
        deleted,
    })
}

/// Where kept batch `batch` is among `sources`, the kept batches rows are
/// taken from (added at the end when it is not there yet).
fn source_index(sources: &mut Vec<usize>, batch: usize) -> usize {
    sources.iter().position(|&b| b == batch).unwrap_or_else(|| {
        sources.push(batch);
        sources.len() - 1
    })
}

/// The rows `indices` ((batch, row) pairs) of `batches`, whose columns have
/// the types of `schema`'s.
fn take_rows(
    schema: SchemaRef,
    batches: &[&RecordBatch],
    indices: &[(usize, usize)],
) -> Result<RecordBatch> {
    let columns = (0..schema.fields().len())
        .map(|c| {
            let arrays: Vec<&dyn Array> = batches.iter().map(|b| b.column(c).as_ref()).collect();
            interleave(&arrays, indices)
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// Rows of a file every row of which is updated, in file order:
/// `changes` (sorted by position), each an update taking its row from
/// `kept`. No row of the file is needed.
pub(super) fn updated_rows(
    changes: &[(i64, &Change)],
    kept: &[RecordBatch],
) -> Result<RecordBatch> {
    let mut sources: Vec<usize> = vec![];
    let mut indices = Vec::with_capacity(changes.len());
    for (pos, change) in changes {
        let Change::Update { batch, row } = change else {
            return Err(internal(format!(
                "MERGE: a delete at position {pos} among a file's updates"
            )));
        };
        indices.push((source_index(&mut sources, *batch), *row));
    }
    let Some(&first) = sources.first() else {
        return Err(internal("MERGE: updates without updated rows"));
    };
    let batches: Vec<&RecordBatch> = sources.iter().map(|&k| &kept[k]).collect();
    take_rows(kept[first].schema(), &batches, &indices)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{AsArray, Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Int64Type, Schema};

    use super::*;

    /// A batch of a data file: `id` and `v`, one row per `(id, v)`.
    fn batch(rows: &[(i64, &str)]) -> RecordBatch {
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("v", DataType::Utf8, true),
        ]);
        RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.1))),
            ],
        )
        .unwrap()
    }

    /// Ten rows read at file position 100: ids 0..10, values "o0".."o9".
    fn file_batch() -> RecordBatch {
        let values: Vec<String> = (0..10).map(|i| format!("o{i}")).collect();
        let rows: Vec<(i64, &str)> = (0..10).map(|i| (i, values[i as usize].as_str())).collect();
        batch(&rows)
    }

    fn kept() -> Vec<RecordBatch> {
        vec![
            batch(&[(0, "a0"), (1, "a1"), (2, "a2")]),
            batch(&[(3, "b0"), (4, "b1")]),
        ]
    }

    fn rows(batch: &RecordBatch) -> Vec<(i64, String)> {
        let ids = batch.column(0).as_primitive::<Int64Type>();
        let values = batch.column(1).as_string::<i32>();
        (0..batch.num_rows())
            .map(|i| (ids.value(i), values.value(i).to_string()))
            .collect()
    }

    /// Positions 100..110: the batch's rows follow each other in the file.
    fn contiguous() -> Vec<i64> {
        (100..110).collect()
    }

    fn run(changes: &[(i64, Change)]) -> Applied {
        let changes: Vec<(i64, &Change)> = changes.iter().map(|(p, c)| (*p, c)).collect();
        apply(file_batch(), &contiguous(), &changes, &kept()).unwrap()
    }

    fn counts(applied: &Applied) -> (usize, usize, usize) {
        (applied.copied, applied.updated, applied.deleted)
    }

    fn ids(applied: &Applied) -> Vec<i64> {
        rows(applied.batch.as_ref().unwrap())
            .into_iter()
            .map(|r| r.0)
            .collect()
    }

    #[test]
    fn no_change_passes_the_batch_through() {
        let original = file_batch();
        let applied = apply(original.clone(), &contiguous(), &[], &kept()).unwrap();
        assert_eq!(counts(&applied), (10, 0, 0));
        assert_eq!(applied.batch.unwrap(), original);
    }

    #[test]
    fn deletes_only() {
        let applied = run(&[(102, Change::Delete), (105, Change::Delete)]);
        assert_eq!(counts(&applied), (8, 0, 2));
        assert_eq!(ids(&applied), vec![0, 1, 3, 4, 6, 7, 8, 9]);
    }

    #[test]
    fn updates_only() {
        let applied = run(&[
            (101, Change::Update { batch: 1, row: 0 }),
            (104, Change::Update { batch: 0, row: 2 }),
            (107, Change::Update { batch: 1, row: 1 }),
        ]);
        assert_eq!(counts(&applied), (7, 3, 0));
        let out = rows(applied.batch.as_ref().unwrap());
        assert_eq!(out.len(), 10);
        assert_eq!(out[1], (3, "b0".to_string()));
        assert_eq!(out[4], (2, "a2".to_string()));
        assert_eq!(out[7], (4, "b1".to_string()));
        assert_eq!(out[0], (0, "o0".to_string()));
        assert_eq!(out[9], (9, "o9".to_string()));
    }

    #[test]
    fn updates_and_deletes() {
        let applied = run(&[
            (102, Change::Delete),
            (103, Change::Update { batch: 0, row: 1 }),
            (108, Change::Delete),
        ]);
        assert_eq!(counts(&applied), (7, 1, 2));
        let out = rows(applied.batch.as_ref().unwrap());
        let ids: Vec<i64> = out.iter().map(|r| r.0).collect();
        assert_eq!(ids, vec![0, 1, 1, 4, 5, 6, 7, 9]);
        assert_eq!(out[2].1, "a1");
    }

    #[test]
    fn changes_at_the_first_and_last_rows() {
        let applied = run(&[(100, Change::Delete), (109, Change::Delete)]);
        assert_eq!(counts(&applied), (8, 0, 2));
        assert_eq!(ids(&applied), (1..9).collect::<Vec<_>>());

        let applied = run(&[
            (100, Change::Update { batch: 0, row: 0 }),
            (109, Change::Update { batch: 1, row: 1 }),
        ]);
        assert_eq!(counts(&applied), (8, 2, 0));
        let out = rows(applied.batch.as_ref().unwrap());
        assert_eq!(out[0], (0, "a0".to_string()));
        assert_eq!(out[9], (4, "b1".to_string()));

        let applied = run(&[
            (100, Change::Update { batch: 1, row: 0 }),
            (109, Change::Delete),
        ]);
        assert_eq!(counts(&applied), (8, 1, 1));
        let out = rows(applied.batch.as_ref().unwrap());
        assert_eq!(out.len(), 9);
        assert_eq!(out[0], (3, "b0".to_string()));
        assert_eq!(out[8], (8, "o8".to_string()));
    }

    #[test]
    fn every_row_deleted_gives_no_batch() {
        let all: Vec<(i64, Change)> = (100..110).map(|p| (p, Change::Delete)).collect();
        let applied = run(&all);
        assert_eq!(counts(&applied), (0, 0, 10));
        assert!(applied.batch.is_none());

        // Every row but an updated one deleted: that one row is left.
        let mut mixed: Vec<(i64, Change)> = (100..109).map(|p| (p, Change::Delete)).collect();
        mixed.push((109, Change::Update { batch: 0, row: 0 }));
        let applied = run(&mixed);
        assert_eq!(counts(&applied), (0, 1, 9));
        assert_eq!(ids(&applied), vec![0]);
    }

    #[test]
    fn rows_deleted_earlier_leave_gaps_in_the_positions() {
        // Ten live rows at even positions 200, 202, ..., 218 (the odd ones
        // were deleted by a delete file); a change at an odd position is
        // not applied.
        let positions: Vec<i64> = (0..10).map(|i| 200 + 2 * i).collect();
        let changes = [
            (202, Change::Delete),
            (203, Change::Delete),
            (210, Change::Update { batch: 1, row: 0 }),
            (218, Change::Delete),
        ];
        let changes: Vec<(i64, &Change)> = changes.iter().map(|(p, c)| (*p, c)).collect();
        let applied = apply(file_batch(), &positions, &changes, &kept()).unwrap();
        assert_eq!(counts(&applied), (7, 1, 2));
        let out = rows(applied.batch.as_ref().unwrap());
        let kept_ids: Vec<i64> = out.iter().map(|r| r.0).collect();
        assert_eq!(kept_ids, vec![0, 2, 3, 4, 3, 6, 7, 8]);
        assert_eq!(out[4].1, "b0");

        let deletes = [(201, Change::Delete), (204, Change::Delete)];
        let deletes: Vec<(i64, &Change)> = deletes.iter().map(|(p, c)| (*p, c)).collect();
        let applied = apply(file_batch(), &positions, &deletes, &kept()).unwrap();
        assert_eq!(counts(&applied), (9, 0, 1));
        assert_eq!(ids(&applied), vec![0, 1, 3, 4, 5, 6, 7, 8, 9]);
    }

    #[test]
    fn a_file_every_row_of_which_is_updated_is_built_from_the_updates_alone() {
        let changes = [
            (0, Change::Update { batch: 1, row: 1 }),
            (1, Change::Update { batch: 0, row: 2 }),
            (2, Change::Update { batch: 1, row: 0 }),
            (3, Change::Update { batch: 0, row: 0 }),
            (4, Change::Update { batch: 0, row: 1 }),
        ];
        let changes: Vec<(i64, &Change)> = changes.iter().map(|(p, c)| (*p, c)).collect();
        let batch = updated_rows(&changes, &kept()).unwrap();
        let values: Vec<String> = rows(&batch).into_iter().map(|r| r.1).collect();
        assert_eq!(values, vec!["b1", "a2", "b0", "a0", "a1"]);
    }

    #[test]
    fn a_delete_among_updates_of_a_fully_updated_file_is_refused() {
        let changes = [
            (0, Change::Update { batch: 0, row: 0 }),
            (1, Change::Delete),
        ];
        let changes: Vec<(i64, &Change)> = changes.iter().map(|(p, c)| (*p, c)).collect();
        let err = updated_rows(&changes, &kept()).unwrap_err();
        assert!(err.to_string().contains("a delete at position 1"), "{err}");
    }
}
