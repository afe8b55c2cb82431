//! The columns of the roll-up rows that are computed from their groups (sums, extremes, the
//! summed histogram and what is read from it); the others are the groups' first rows.

use std::sync::Arc;

use arrow_array::{Array, ArrayRef, Float64Array, Int64Array, ListArray, StructArray, UInt64Array};
use arrow_buffer::{NullBuffer, OffsetBuffer};
use arrow_schema::{ArrowError, DataType};

use super::Group;
use crate::views::histogram::Durations;

/// The column `name` of the roll-up rows built from `groups`, cast to `data_type`; `None` for a
/// column taken from the first rows.
pub(super) fn summed_column(
    name: &str,
    data_type: &DataType,
    groups: &[Group],
) -> Result<Option<ArrayRef>, ArrowError> {
    let u64s = |value: fn(&Group) -> Option<u64>| -> ArrayRef {
        Arc::new(groups.iter().map(value).collect::<UInt64Array>())
    };
    let array: ArrayRef = match name {
        "time" => Arc::new(groups.iter().map(|g| g.last_time).collect::<Int64Array>()),
        "time_ns" => Arc::new(
            groups
                .iter()
                .map(|g| g.last_time_ns)
                .collect::<Int64Array>(),
        ),
        "interval_ns" => u64s(|g| g.interval_ns),
        "calls" => u64s(|g| Some(g.calls)),
        "bytes_sum" => u64s(|g| g.bytes_sum),
        "calls_estimated" => u64s(|g| g.calls_estimated),
        "bytes_estimated" => u64s(|g| g.bytes_estimated),
        "duration_sum_ns" => u64s(|g| g.duration_sum_ns),
        "duration_min_ns" => u64s(|g| g.duration_min_ns),
        "duration_max_ns" => u64s(|g| g.duration_max_ns),
        "duration_p50_ns" => u64s(|g| quantile(g, 0.5)),
        "duration_p99_ns" => u64s(|g| quantile(g, 0.99)),
        "observed_fraction" => Arc::new(
            groups
                .iter()
                .map(|g| match g.calls_estimated {
                    Some(estimated) if estimated > 0 => Some(g.calls as f64 / estimated as f64),
                    Some(_) => Some(1.0),
                    None => None,
                })
                .collect::<Float64Array>(),
        ),
        "duration_buckets" => return buckets_column(data_type, groups).map(Some),
        _ => return Ok(None),
    };
    if array.data_type() == data_type {
        return Ok(Some(array));
    }
    arrow_cast::cast(&array, data_type).map(Some)
}

/// The group's `q` quantile from its summed histogram, as the agent reads one row's.
fn quantile(group: &Group, q: f64) -> Option<u64> {
    if !group.has_buckets {
        return None;
    }
    let mut durations = Durations::default();
    durations.add_row(
        group
            .buckets
            .iter()
            .map(|(&(from, to), &calls)| (from, to, calls)),
        (group.duration_min_ns, group.duration_max_ns),
        group.duration_sum_ns,
        group.calls,
    );
    durations.quantile(q)
}

/// The summed histograms as a `duration_buckets` column of `data_type` (a list of
/// `from_ns, to_ns, calls` structs); null for a group whose rows had none.
fn buckets_column(data_type: &DataType, groups: &[Group]) -> Result<ArrayRef, ArrowError> {
    let DataType::List(item) = data_type else {
        return Err(ArrowError::SchemaError(format!(
            "duration_buckets is {data_type}, not a list"
        )));
    };
    let DataType::Struct(fields) = item.data_type() else {
        return Err(ArrowError::SchemaError(format!(
            "duration_buckets holds {}, not structs",
            item.data_type()
        )));
    };
    let entries = || groups.iter().flat_map(|g| g.buckets.iter());
    let mut children: Vec<ArrayRef> = Vec::with_capacity(fields.len());
    for field in fields.iter() {
        let values: UInt64Array = match field.name().as_str() {
            "from_ns" => entries().map(|(&(from, _), _)| from).collect(),
            "to_ns" => entries().map(|(&(_, to), _)| to).collect(),
            "calls" => entries().map(|(_, &calls)| calls).collect(),
            other => {
                return Err(ArrowError::SchemaError(format!(
                    "duration_buckets has an unknown field {other}"
                )))
            }
        };
        children.push(arrow_cast::cast(&values, field.data_type())?);
    }
    let values = StructArray::try_new(fields.clone(), children, None)?;
    let offsets = OffsetBuffer::from_lengths(groups.iter().map(|g| g.buckets.len()));
    let valid = NullBuffer::from(groups.iter().map(|g| g.has_buckets).collect::<Vec<_>>());
    Ok(Arc::new(ListArray::try_new(
        item.clone(),
        offsets,
        Arc::new(values),
        Some(valid),
    )?))
}
