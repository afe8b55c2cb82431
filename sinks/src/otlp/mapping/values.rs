//! One Arrow cell as an OTLP attribute value: strings, booleans, integers and doubles as themselves,
//! lists as arrays, structs (an XID's suspects) as key-value lists.

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int32Type, Int64Type, UInt32Type, UInt64Type};
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, ArrayValue, KeyValue, KeyValueList};

/// An attribute value for one cell; None for nulls.
pub(super) fn attribute_value(column: &ArrayRef, row: usize) -> Option<Value> {
    if column.is_null(row) {
        return None;
    }
    Some(match column.data_type() {
        DataType::Utf8 => Value::StringValue(column.as_string::<i32>().value(row).to_string()),
        DataType::Boolean => Value::BoolValue(column.as_boolean().value(row)),
        DataType::Int32 => Value::IntValue(column.as_primitive::<Int32Type>().value(row).into()),
        DataType::Int64 => Value::IntValue(column.as_primitive::<Int64Type>().value(row)),
        DataType::UInt32 => Value::IntValue(column.as_primitive::<UInt32Type>().value(row).into()),
        // OTLP integers are signed 64-bit; device pointers and sizes fit (user space < 2^63).
        DataType::UInt64 => Value::IntValue(column.as_primitive::<UInt64Type>().value(row) as i64),
        DataType::Float64 => Value::DoubleValue(column.as_primitive::<Float64Type>().value(row)),
        DataType::List(_) => {
            let items = column.as_list::<i32>().value(row);
            Value::ArrayValue(ArrayValue {
                values: (0..items.len())
                    .filter_map(|i| attribute_value(&items, i))
                    .map(|value| AnyValue { value: Some(value) })
                    .collect(),
            })
        }
        // A struct (an XID's suspect kernel): its non-null fields as a key-value list.
        DataType::Struct(fields) => {
            let item = column.as_struct();
            Value::KvlistValue(KeyValueList {
                values: fields
                    .iter()
                    .zip(item.columns())
                    .filter_map(|(field, child)| {
                        Some(KeyValue {
                            key: field.name().clone(),
                            value: Some(AnyValue {
                                value: Some(attribute_value(child, row)?),
                            }),
                            ..Default::default()
                        })
                    })
                    .collect(),
            })
        }
        _ => return None,
    })
}
