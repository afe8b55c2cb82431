//! Iceberg schemas as JSON (the metadata file's `schemas`, read back) and the name mapping
//! readers match the files' columns by.

use serde_json::{json, Value};

use super::{IcebergField, IcebergType};

pub(super) fn type_json(ty: &IcebergType) -> Value {
    match ty {
        IcebergType::Primitive(p) => Value::String((*p).to_string()),
        IcebergType::List {
            element_id,
            element_required,
            element,
        } => json!({
            "type": "list",
            "element-id": element_id,
            "element-required": element_required,
            "element": type_json(element),
        }),
        IcebergType::Struct(fields) => json!({
            "type": "struct",
            "fields": fields.iter().map(field_json).collect::<Vec<_>>(),
        }),
    }
}

pub(super) fn field_json(field: &IcebergField) -> Value {
    json!({
        "id": field.id,
        "name": field.name,
        "required": field.required,
        "type": type_json(&field.ty),
    })
}

pub(super) fn fields_from_json(value: &Value) -> Result<Vec<IcebergField>, String> {
    value
        .as_array()
        .ok_or("fields is not a list")?
        .iter()
        .map(|f| {
            Ok(IcebergField {
                id: f["id"].as_i64().ok_or("a field without id")? as i32,
                name: f["name"]
                    .as_str()
                    .ok_or("a field without name")?
                    .to_string(),
                required: f["required"].as_bool().unwrap_or(false),
                ty: type_from_json(&f["type"])?,
            })
        })
        .collect()
}

pub(super) fn type_from_json(value: &Value) -> Result<IcebergType, String> {
    if let Some(name) = value.as_str() {
        return PRIMITIVES
            .iter()
            .find(|p| **p == name)
            .map(|p| IcebergType::Primitive(p))
            .ok_or_else(|| format!("type {name} is not one gpuship writes"));
    }
    match value["type"].as_str() {
        Some("list") => Ok(IcebergType::List {
            element_id: value["element-id"]
                .as_i64()
                .ok_or("a list without element-id")? as i32,
            element_required: value["element-required"].as_bool().unwrap_or(false),
            element: Box::new(type_from_json(&value["element"])?),
        }),
        Some("struct") => Ok(IcebergType::Struct(fields_from_json(&value["fields"])?)),
        other => Err(format!("type {other:?} is not one gpuship writes")),
    }
}

/// Every primitive [`primitive`] gives.
const PRIMITIVES: [&str; 10] = [
    "boolean",
    "int",
    "long",
    "float",
    "double",
    "string",
    "binary",
    "date",
    "timestamptz",
    "timestamp",
];

pub(super) fn mapping_of_field(field: &IcebergField) -> Value {
    mapping(field.id, vec![field.name.clone()], &field.ty)
}

pub(super) fn mapping(id: i32, names: Vec<String>, ty: &IcebergType) -> Value {
    let mut entry = json!({"field-id": id, "names": names});
    match ty {
        IcebergType::Primitive(_) => {}
        IcebergType::List {
            element_id,
            element,
            ..
        } => {
            entry["fields"] = json!([mapping(
                *element_id,
                vec!["element".into(), "item".into()],
                element
            )]);
        }
        IcebergType::Struct(fields) => {
            entry["fields"] = Value::Array(fields.iter().map(mapping_of_field).collect());
        }
    }
    entry
}
