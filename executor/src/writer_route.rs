//! The writer route: which writer partition each merge row goes to.
//!
//! Every change to one data file must reach one writer; the writer exchange
//! hash-partitions on the merge rows' route (the data file's path, or an
//! insert route for an inserted row). Hashed paths spread unevenly: 40 files
//! over two writers land 23 / 17 as often as not, and the writer stage of a
//! full rewrite lasts as long as its busiest writer. [`WriterRouteExpr`]
//! gives each data file the target scan reads a writer of its own choosing
//! — the files in decreasing record count, each to the writer with the
//! fewest rows so far — and maps the path to a number the exchange's hash
//! sends to that writer (both engines' exchanges hash with DataFusion's
//! fixed repartition seeds). The plan computes it in a projection below the
//! exchange, which hashes it as a plain column: Ballista ships a shuffle's
//! hash expressions with DataFusion's own codec. An inserted row's route is
//! a number below the routes its inserts spread over
//! (`crate::insert_route`): route `k` goes to writer `k` modulo the
//! writers, so that two routes never share a writer while another has
//! none; any other text maps to a hash of it. The route of a row depends on
//! the plan alone, so a task run again routes every row as its first run
//! did.

use std::any::Any;
use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use ahash::RandomState;
use arrow::array::{Array, ArrayRef, AsArray, UInt64Array};
use arrow::datatypes::{DataType, Schema};
use arrow::record_batch::RecordBatch;
use datafusion::common::hash_utils::create_hashes;
use datafusion::error::Result;
use datafusion::logical_expr::ColumnarValue;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::repartition::REPARTITION_RANDOM_STATE;
use icemerge_proto::error::internal;

use crate::merge_writer::{file_views, per_path};

/// Fixed seeds of the hash of a route that is not a data file.
const SEEDS: (u64, u64, u64, u64) = (
    0x7772_6974_6572_5f72,
    0x6f75_7465_5f6f_7468,
    0x6572_5f72_6f75_7465,
    0x735f_6669_7865_6421,
);

/// See the module doc.
#[derive(Debug, Clone)]
pub struct WriterRouteExpr {
    /// The merge rows' route column.
    route: Arc<dyn PhysicalExpr>,
    /// Writer partitions of the exchange.
    writers: usize,
    /// The writer of each data file, in path order (what travels in plans).
    assigned: Vec<(String, usize)>,
    /// The value each data file's path maps to: it hashes to its writer.
    values: HashMap<String, u64, RandomState>,
    /// For each writer, a value that hashes to it.
    landing: Vec<u64>,
}

impl WriterRouteExpr {
    /// The route of `files` (path, record count) over `writers`: each file
    /// to the writer with the fewest rows so far, largest files first.
    pub fn balanced(
        route: Arc<dyn PhysicalExpr>,
        files: &[(String, u64)],
        writers: usize,
    ) -> Result<Self> {
        Self::new(route, balance(files, writers), writers)
    }

    /// The route sending each of `assigned`'s paths to its writer (below
    /// `writers`).
    pub fn new(
        route: Arc<dyn PhysicalExpr>,
        mut assigned: Vec<(String, usize)>,
        writers: usize,
    ) -> Result<Self> {
        let writers = writers.max(1);
        if let Some((path, w)) = assigned.iter().find(|(_, w)| *w >= writers) {
            return Err(internal(format!(
                "writer route: data file {path} assigned to writer {w} of {writers}"
            )));
        }
        assigned.sort();
        let landing = values_landing_on(writers)?;
        let values = assigned
            .iter()
            .map(|(path, w)| (path.clone(), landing[*w]))
            .collect();
        Ok(Self {
            route,
            writers,
            assigned,
            values,
            landing,
        })
    }

    /// Writer partitions of the exchange.
    pub fn writers(&self) -> usize {
        self.writers
    }

    /// Each data file's writer, in path order.
    pub fn assigned(&self) -> &[(String, usize)] {
        &self.assigned
    }

    /// The value of each route in `routes` (strings, or a dictionary of
    /// them).
    fn values_of(&self, routes: &ArrayRef) -> Result<UInt64Array> {
        if let DataType::Dictionary(_, _) = routes.data_type() {
            let dictionary = routes.as_any_dictionary();
            let values = self.values_of(dictionary.values())?;
            let keys = dictionary.keys();
            return Ok(dictionary
                .normalized_keys()
                .into_iter()
                .enumerate()
                .map(|(i, k)| (keys.is_valid(i) && values.is_valid(k)).then(|| values.value(k)))
                .collect());
        }
        let views = file_views(routes)?;
        let other = RandomState::with_seeds(SEEDS.0, SEEDS.1, SEEDS.2, SEEDS.3);
        let values = per_path(&views, |route| {
            Ok(route.map(|r| match self.values.get(r) {
                Some(value) => *value,
                None => match r.parse::<u64>() {
                    Ok(insert) => self.landing[(insert % self.writers as u64) as usize],
                    Err(_) => other.hash_one(r),
                },
            }))
        })?;
        Ok(UInt64Array::from(values))
    }
}

/// `files` (path, record count) spread over `writers`: largest first, each
/// to the writer with the fewest rows so far (the lowest such writer).
fn balance(files: &[(String, u64)], writers: usize) -> Vec<(String, usize)> {
    let writers = writers.max(1);
    let mut order: Vec<&(String, u64)> = files.iter().collect();
    order.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    order.dedup_by(|a, b| a.0 == b.0);
    let mut load = vec![0u64; writers];
    order
        .into_iter()
        .map(|(path, rows)| {
            let w = (0..writers).min_by_key(|&w| (load[w], w)).unwrap_or(0);
            load[w] += rows.max(&1);
            (path.clone(), w)
        })
        .collect()
}

/// For each writer partition `p` of `writers`, the smallest value the
/// exchange's hash sends to `p`.
fn values_landing_on(writers: usize) -> Result<Vec<u64>> {
    let mut landing: Vec<Option<u64>> = vec![None; writers];
    let mut next = 0u64;
    // Each value lands on a given writer with probability 1/writers: a few
    // rounds of 64 candidates per writer find them all.
    while landing.iter().any(Option::is_none) {
        if next > 1 << 24 {
            return Err(internal(format!(
                "writer route: no value found that hashes to each of {writers} writers"
            )));
        }
        let candidates: Vec<u64> = (next..next + 64 * writers as u64).collect();
        let mut hashes = vec![0u64; candidates.len()];
        let array: ArrayRef = Arc::new(UInt64Array::from(candidates.clone()));
        create_hashes(
            [&array],
            REPARTITION_RANDOM_STATE.random_state(),
            &mut hashes,
        )?;
        for (value, hash) in candidates.iter().zip(&hashes) {
            let slot = &mut landing[(hash % writers as u64) as usize];
            slot.get_or_insert(*value);
        }
        next += candidates.len() as u64;
    }
    Ok(landing.into_iter().map(|v| v.unwrap_or_default()).collect())
}

impl fmt::Display for WriterRouteExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "writer_route({})", self.route)
    }
}

impl PartialEq for WriterRouteExpr {
    fn eq(&self, other: &Self) -> bool {
        self.route.eq(&other.route)
            && self.writers == other.writers
            && self.assigned == other.assigned
    }
}

impl Eq for WriterRouteExpr {}

impl Hash for WriterRouteExpr {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.route.hash(state);
        self.writers.hash(state);
        self.assigned.hash(state);
    }
}

impl PhysicalExpr for WriterRouteExpr {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn data_type(&self, _input_schema: &Schema) -> Result<DataType> {
        Ok(DataType::UInt64)
    }

    fn nullable(&self, input_schema: &Schema) -> Result<bool> {
        self.route.nullable(input_schema)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let routes = self.route.evaluate(batch)?.into_array(batch.num_rows())?;
        Ok(ColumnarValue::Array(Arc::new(self.values_of(&routes)?)))
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.route]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        let [route]: [Arc<dyn PhysicalExpr>; 1] = children
            .try_into()
            .map_err(|_| internal("the writer route takes one child"))?;
        Ok(Arc::new(Self {
            route,
            ..(*self).clone()
        }))
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "writer_route(")?;
        self.route.fmt_sql(f)?;
        write!(f, ")")
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::{DictionaryArray, StringArray, StringViewArray};
    use arrow::datatypes::{Field, Int32Type};
    use datafusion::physical_expr::expressions::Column;
    use datafusion::physical_plan::metrics::Time;
    use datafusion::physical_plan::repartition::BatchPartitioner;

    use super::*;

    fn route_column() -> Arc<dyn PhysicalExpr> {
        Arc::new(Column::new("route", 0))
    }

    fn batch(routes: ArrayRef) -> RecordBatch {
        let schema = Schema::new(vec![Field::new("route", routes.data_type().clone(), true)]);
        RecordBatch::try_new(Arc::new(schema), vec![routes]).unwrap()
    }

    /// The writer partition DataFusion's hash partitioner sends each row of
    /// `batch` to, partitioning on `expr` over `writers`.
    fn partitions_of(expr: &WriterRouteExpr, batch: RecordBatch, writers: usize) -> Vec<usize> {
        let routes = batch.column(0).clone();
        let mut partitioner = BatchPartitioner::new_hash_partitioner(
            vec![Arc::new(expr.clone()) as Arc<dyn PhysicalExpr>],
            writers,
            Time::new(),
        );
        let mut of_row = vec![usize::MAX; batch.num_rows()];
        let with_index = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("route", routes.data_type().clone(), true),
                Field::new("row", DataType::UInt64, false),
            ])),
            vec![
                routes,
                Arc::new(UInt64Array::from_iter_values(0..batch.num_rows() as u64)),
            ],
        )
        .unwrap();
        partitioner
            .partition(with_index, |partition, part| {
                for row in part
                    .column(1)
                    .as_primitive::<arrow::datatypes::UInt64Type>()
                    .values()
                {
                    of_row[*row as usize] = partition;
                }
                Ok(())
            })
            .unwrap();
        of_row
    }

    #[test]
    fn files_are_balanced_by_their_rows() {
        // Ten files of 100 rows and one of 500 over three writers: the big
        // file alone on one writer, the others five and five.
        let mut files: Vec<(String, u64)> = (0..10).map(|i| (format!("f{i}"), 100)).collect();
        files.push(("big".into(), 500));
        let assigned = balance(&files, 3);
        let mut load = [0u64; 3];
        for (path, w) in &assigned {
            load[*w] += files.iter().find(|(p, _)| p == path).unwrap().1;
        }
        assert_eq!(assigned.len(), 11);
        load.sort();
        assert_eq!(load, [500, 500, 500]);
        // Forty equal files over two writers: twenty each.
        let forty: Vec<(String, u64)> = (0..40).map(|i| (format!("p{i:02}"), 7)).collect();
        let assigned = balance(&forty, 2);
        assert_eq!(assigned.iter().filter(|(_, w)| *w == 0).count(), 20);
    }

    #[test]
    fn the_exchange_sends_each_file_to_its_writer() {
        for writers in [1, 2, 3, 4, 7, 16] {
            let files: Vec<(String, u64)> = (0..40)
                .map(|i| (format!("s3://w/data/{i:05}-0-1a2b.parquet"), 1000 + i))
                .collect();
            let expr = WriterRouteExpr::balanced(route_column(), &files, writers).unwrap();
            let paths: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
            // Each path twice, as a join's output repeats them; then inserts.
            let mut rows: Vec<Option<&str>> =
                paths.iter().chain(&paths).map(|p| Some(*p)).collect();
            rows.extend([Some("3"), Some("0"), None]);
            let expected: HashMap<&str, usize> = expr
                .assigned()
                .iter()
                .map(|(p, w)| (p.as_str(), *w))
                .collect();
            let string: ArrayRef = Arc::new(StringArray::from(rows.clone()));
            let view: ArrayRef = Arc::new(StringViewArray::from(rows.clone()));
            let dictionary: ArrayRef =
                Arc::new(rows.iter().copied().collect::<DictionaryArray<Int32Type>>());
            let mut seen = vec![];
            for routes in [string, view, dictionary] {
                let of_row = partitions_of(&expr, batch(routes), writers);
                for (row, route) in rows.iter().enumerate() {
                    if let Some(w) = route.and_then(|r| expected.get(r)) {
                        assert_eq!(of_row[row], *w, "{route:?} over {writers} writers");
                    }
                }
                seen.push(of_row);
            }
            // Every representation of a route goes to the same writer;
            // insert routes 3 and 0 to writers 3 and 0 modulo the writers.
            assert_eq!(seen[0], seen[1]);
            assert_eq!(seen[0], seen[2]);
            let n = rows.len();
            assert_eq!(seen[0][n - 3], 3 % writers);
            assert_eq!(seen[0][n - 2], 0);
            // The files are spread: each writer has 40 / writers of them.
            for w in 0..writers {
                let n = expected.values().filter(|&&x| x == w).count();
                assert!(
                    n == 40 / writers || n == 40 / writers + 1,
                    "{n} files on {w}"
                );
            }
        }
    }

    #[test]
    fn a_writer_beyond_the_exchange_is_refused() {
        let err = WriterRouteExpr::new(route_column(), vec![("f".into(), 2)], 2).unwrap_err();
        assert!(
            err.to_string()
                .contains("data file f assigned to writer 2 of 2"),
            "{err}"
        );
    }
}
