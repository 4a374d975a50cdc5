//! `icemerge_insert_route(routes, v1, v2, ...)`: the writer route of a row a
//! MERGE inserts (it has no data file to be routed by). The route is a hash
//! of the inserted values, modulo `routes`, as text: the same row always
//! gets the same route, on every engine and every attempt of a task, so a
//! re-run task cannot send rows to other writers than the first run did.
//! The hash uses fixed seeds (DataFusion's hash functions over the values,
//! as its hash repartitioning does). The session registers the function;
//! `IcemergePhysicalCodec` marks it in shipped plans so that executors run
//! it too.

use std::any::Any;
use std::sync::Arc;

use ahash::RandomState;
use arrow::array::{ArrayRef, StringBuilder};
use arrow::datatypes::DataType;
use datafusion::common::hash_utils::create_hashes;
use datafusion::common::ScalarValue;
use datafusion::error::Result;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use icemerge_proto::error::invalid_input;

/// The function's SQL name.
pub const INSERT_ROUTE: &str = "icemerge_insert_route";

/// The marker of [`InsertRoute`] in a shipped plan's function definition.
pub const INSERT_ROUTE_MARK: &[u8] = b"icemerge.insert_route";

/// Fixed seeds: routes must not change between processes or runs.
const SEEDS: (u64, u64, u64, u64) = (
    0x6963_656d_6572_6765,
    0x696e_7365_7274_5f72,
    0x6f75_7465_5f73_6565,
    0x6473_5f66_6978_6564,
);

/// See the module doc.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct InsertRoute {
    signature: Signature,
}

impl Default for InsertRoute {
    fn default() -> Self {
        Self {
            signature: Signature::variadic_any(Volatility::Immutable),
        }
    }
}

impl InsertRoute {
    /// The function to register in a session.
    pub fn udf() -> Arc<ScalarUDF> {
        Arc::new(ScalarUDF::from(InsertRoute::default()))
    }
}

impl ScalarUDFImpl for InsertRoute {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn name(&self) -> &str {
        INSERT_ROUTE
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let Some((routes, values)) = args.args.split_first() else {
            return Err(invalid_input(format!(
                "{INSERT_ROUTE} takes the number of routes and at least one value"
            )));
        };
        let routes = match routes {
            ColumnarValue::Scalar(ScalarValue::Float64(Some(n))) if *n >= 1.0 => *n as u64,
            ColumnarValue::Scalar(ScalarValue::Int64(Some(n))) if *n >= 1 => *n as u64,
            other => {
                return Err(invalid_input(format!(
                "{INSERT_ROUTE}: the number of routes must be a positive constant, not {other:?}"
            )))
            }
        };
        // One route: every row's, with nothing to hash.
        if routes == 1 {
            return Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some("0".into()))));
        }
        let arrays: Vec<ArrayRef> = values
            .iter()
            .map(|v| v.to_array(rows))
            .collect::<Result<_>>()?;
        let mut hashes = vec![0u64; rows];
        if !arrays.is_empty() {
            let state = RandomState::with_seeds(SEEDS.0, SEEDS.1, SEEDS.2, SEEDS.3);
            create_hashes(&arrays, &state, &mut hashes)?;
        }
        let mut out = StringBuilder::with_capacity(rows, rows * 4);
        for hash in hashes {
            out.append_value((hash % routes).to_string());
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, Int64Array, StringArray};
    use arrow::datatypes::Field;
    use datafusion::config::ConfigOptions;

    fn routes(n: f64, keys: Vec<i64>) -> Vec<String> {
        let rows = keys.len();
        let keys: ArrayRef = Arc::new(Int64Array::from(keys));
        let args = ScalarFunctionArgs {
            args: vec![
                ColumnarValue::Scalar(ScalarValue::Float64(Some(n))),
                ColumnarValue::Array(keys),
            ],
            arg_fields: vec![
                Arc::new(Field::new("n", DataType::Float64, false)),
                Arc::new(Field::new("k", DataType::Int64, true)),
            ],
            number_rows: rows,
            return_field: Arc::new(Field::new("r", DataType::Utf8, false)),
            config_options: Arc::new(ConfigOptions::default()),
        };
        let out = InsertRoute::default()
            .invoke_with_args(args)
            .unwrap()
            .into_array(rows)
            .unwrap();
        let out = out.as_any().downcast_ref::<StringArray>().unwrap();
        (0..out.len()).map(|i| out.value(i).to_string()).collect()
    }

    #[test]
    fn routes_are_the_same_for_the_same_values_and_spread_over_all_routes() {
        let keys: Vec<i64> = (0..1000).collect();
        let first = routes(4.0, keys.clone());
        assert_eq!(first, routes(4.0, keys));
        let distinct: std::collections::BTreeSet<&String> = first.iter().collect();
        assert_eq!(
            distinct.into_iter().cloned().collect::<Vec<_>>(),
            ["0", "1", "2", "3"]
        );
        assert_eq!(routes(1.0, vec![5, 6, 7]), ["0", "0", "0"]);
    }
}
