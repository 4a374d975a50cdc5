//! `sum` of integers that fails on overflow, as in Trino and DuckDB,
//! instead of DataFusion's `sum`, which wraps around. [`CheckedSum`] is
//! DataFusion's `sum` (same signature, result types, state and names) with
//! its BIGINT accumulators replaced by checked ones; the session registers
//! it under `sum`, and `IcemergePhysicalCodec` marks it in shipped plans so
//! that executors run it too. Sums of other types are DataFusion's own.
//! An overflow is an error naming the aggregate.

use std::any::Any;
use std::mem::size_of;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int64Array};
use arrow::buffer::NullBuffer;
use arrow::datatypes::{DataType, FieldRef, Int64Type};
use datafusion::common::ScalarValue;
use datafusion::error::Result;
use datafusion::functions_aggregate::sum::Sum;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::AggregateOrderSensitivity;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Documentation, EmitTo, GroupsAccumulator,
    ReversedUDAF, SetMonotonicity, Signature,
};
use icemerge_proto::error::invalid_input;

/// The marker of [`CheckedSum`] in a shipped plan's aggregate definition.
pub const CHECKED_SUM_MARK: &[u8] = b"icemerge.checked_sum";

/// DataFusion's `sum`, checked for BIGINT overflow.
#[derive(Debug, PartialEq, Eq, Hash, Default)]
pub struct CheckedSum {
    inner: Sum,
}

impl CheckedSum {
    /// The aggregate function to register as `sum`.
    pub fn udaf() -> Arc<AggregateUDF> {
        Arc::new(AggregateUDF::from(CheckedSum::default()))
    }
}

fn overflow(name: &str) -> datafusion::error::DataFusionError {
    invalid_input(format!("numeric overflow in {name} (Int64)"))
}

fn checked_bigint(args: &AccumulatorArgs) -> bool {
    !args.is_distinct && args.return_field.data_type() == &DataType::Int64
}

impl AggregateUDFImpl for CheckedSum {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        if checked_bigint(&args) {
            return Ok(Box::new(BigintSum {
                name: args.name.to_string(),
                sum: None,
            }));
        }
        self.inner.accumulator(args)
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        self.inner.state_fields(args)
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        self.inner.groups_accumulator_supported(args)
    }

    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        if checked_bigint(&args) {
            return Ok(Box::new(BigintGroupsSum {
                name: args.name.to_string(),
                sums: vec![],
                seen: vec![],
            }));
        }
        self.inner.create_groups_accumulator(args)
    }

    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        self.inner.create_sliding_accumulator(args)
    }

    fn reverse_expr(&self) -> ReversedUDAF {
        self.inner.reverse_expr()
    }

    fn order_sensitivity(&self) -> AggregateOrderSensitivity {
        self.inner.order_sensitivity()
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }

    fn set_monotonicity(&self, data_type: &DataType) -> SetMonotonicity {
        self.inner.set_monotonicity(data_type)
    }
}

/// One group's BIGINT sum.
#[derive(Debug)]
struct BigintSum {
    name: String,
    sum: Option<i64>,
}

impl Accumulator for BigintSum {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let values = values[0].as_primitive::<Int64Type>();
        for v in values.iter().flatten() {
            let sum = self.sum.unwrap_or(0);
            self.sum = Some(sum.checked_add(v).ok_or_else(|| overflow(&self.name))?);
        }
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.update_batch(states)
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(ScalarValue::Int64(self.sum))
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![self.evaluate()?])
    }

    fn size(&self) -> usize {
        size_of::<Self>() + self.name.len()
    }
}

/// BIGINT sums of many groups.
#[derive(Debug)]
struct BigintGroupsSum {
    name: String,
    sums: Vec<i64>,
    /// Whether the group has had a non-null value (else its sum is NULL).
    seen: Vec<bool>,
}

impl BigintGroupsSum {
    fn add(
        &mut self,
        values: &ArrayRef,
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.sums.resize(total_num_groups, 0);
        self.seen.resize(total_num_groups, false);
        let values = values.as_primitive::<Int64Type>();
        for (row, &group) in group_indices.iter().enumerate() {
            if values.is_null(row) || opt_filter.is_some_and(|f| !f.value(row) || f.is_null(row)) {
                continue;
            }
            self.sums[group] = self.sums[group]
                .checked_add(values.value(row))
                .ok_or_else(|| overflow(&self.name))?;
            self.seen[group] = true;
        }
        Ok(())
    }

    fn emit(&mut self, emit_to: EmitTo) -> ArrayRef {
        let sums = emit_to.take_needed(&mut self.sums);
        let seen = emit_to.take_needed(&mut self.seen);
        Arc::new(Int64Array::new(sums.into(), Some(NullBuffer::from(seen))))
    }
}

impl GroupsAccumulator for BigintGroupsSum {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.add(&values[0], group_indices, opt_filter, total_num_groups)
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.add(&values[0], group_indices, opt_filter, total_num_groups)
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        Ok(self.emit(emit_to))
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        Ok(vec![self.emit(emit_to)])
    }

    fn size(&self) -> usize {
        self.sums.capacity() * size_of::<i64>() + self.seen.capacity() + self.name.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{Field, Schema};
    use datafusion::physical_expr::expressions::col;

    fn run(values: Vec<Option<i64>>, groups: Vec<usize>) -> Result<ArrayRef> {
        let schema = Schema::new(vec![Field::new("v", DataType::Int64, true)]);
        let return_field: FieldRef = Arc::new(Field::new("sum(v)", DataType::Int64, true));
        let expr = col("v", &schema)?;
        let args = AccumulatorArgs {
            return_field,
            schema: &schema,
            ignore_nulls: false,
            order_bys: &[],
            is_reversed: false,
            name: "sum(v)",
            is_distinct: false,
            exprs: &[expr],
            expr_fields: &[],
        };
        let mut acc = CheckedSum::default().create_groups_accumulator(args)?;
        let n = groups.iter().max().map_or(0, |m| m + 1);
        let array: ArrayRef = Arc::new(Int64Array::from(values));
        acc.update_batch(&[array], &groups, None, n)?;
        acc.evaluate(EmitTo::All)
    }

    #[test]
    fn bigint_overflow_is_an_error_and_null_groups_stay_null() {
        let out = run(vec![Some(1), None, Some(i64::MAX), None], vec![0, 1, 0, 2]);
        let err = out.unwrap_err().to_string();
        assert!(err.contains("numeric overflow in sum(v) (Int64)"), "{err}");
        let out = run(vec![Some(1), None, Some(5), Some(-7)], vec![0, 1, 0, 2]).unwrap();
        let out = out.as_primitive::<Int64Type>();
        assert_eq!(
            out.iter().collect::<Vec<_>>(),
            vec![Some(6), None, Some(-7)]
        );
    }
}
