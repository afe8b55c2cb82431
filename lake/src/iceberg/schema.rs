//! Iceberg schemas made from the Arrow schemas of the files a table holds: every column, list
//! element and struct field gets a field id, kept by name from one schema to the next, so a
//! table's schemas are Iceberg schema evolution of gpuship's schema versions (columns are only
//! ever added, docs/schema.md). Also the table's name mapping (`schema.name-mapping.default`):
//! the Parquet files carry no field ids, so readers match columns by name through it.
//!
//! Arrow types without an Iceberg counterpart widen: unsigned 8/16-bit integers to `int`,
//! `UInt32` to `long` (both exact); `UInt64` to `long`, exact up to 2^63 - 1 (the agent's
//! UInt64 columns hold handles, addresses below 2^57, byte counts and counters, docs/schema.md).

mod json;

use arrow_schema::{DataType, Field, Fields, Schema, TimeUnit};
use serde_json::{json, Value};

use json::{field_json, fields_from_json, mapping_of_field};

/// An Iceberg type.
#[derive(Debug, Clone, PartialEq)]
pub enum IcebergType {
    /// `boolean`, `int`, `long`, `double`, `string`, `timestamptz`, ...
    Primitive(&'static str),
    /// A list whose element has its own field id.
    List {
        /// The element's field id.
        element_id: i32,
        /// The element may be null when false.
        element_required: bool,
        /// The element's type.
        element: Box<IcebergType>,
    },
    /// A struct of named fields.
    Struct(Vec<IcebergField>),
}

/// A field of a schema or struct.
#[derive(Debug, Clone, PartialEq)]
pub struct IcebergField {
    /// Field id, unique in the table over all its schemas.
    pub id: i32,
    /// Column name.
    pub name: String,
    /// Never null when true.
    pub required: bool,
    /// Its type.
    pub ty: IcebergType,
}

/// One schema of a table.
#[derive(Debug, Clone, PartialEq)]
pub struct IcebergSchema {
    /// The schema's id in the table (gpuship's schema version of the files that brought it).
    pub schema_id: i32,
    /// Top-level columns.
    pub fields: Vec<IcebergField>,
}

/// A column Iceberg cannot hold, or one whose type changed between two schemas.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SchemaError {
    /// The Arrow type has no Iceberg type.
    #[error("column {column}: Arrow type {data_type} has no Iceberg type")]
    Unsupported {
        /// Dotted path of the column.
        column: String,
        /// The Arrow type.
        data_type: String,
    },
    /// The files hold a column of another type than the table's.
    #[error("column {column} is {found} in the files and {table} in the table")]
    TypeChanged {
        /// Dotted path of the column.
        column: String,
        /// Its type in the table.
        table: String,
        /// Its type in the files.
        found: String,
    },
}

impl IcebergSchema {
    /// The schema for files of `arrow`, keeping the ids of `previous` (the table's current
    /// schema) for the columns it has and numbering new ones after `last_column_id` (raised to
    /// the last id used). Columns of `previous` the files lack stay, in their place; new
    /// columns come after them and are optional whatever the files say (Iceberg adds no
    /// required column to a table that has rows). Returns `previous` unchanged (its id kept)
    /// when the files bring nothing new.
    pub fn evolve(
        previous: Option<&IcebergSchema>,
        arrow: &Schema,
        schema_id: i32,
        last_column_id: &mut i32,
    ) -> Result<IcebergSchema, SchemaError> {
        let mut ids = IdSource {
            last: last_column_id,
        };
        let fields = merge_fields(
            previous.map(|p| p.fields.as_slice()),
            arrow.fields(),
            "",
            &mut ids,
        )?;
        match previous {
            Some(previous) if previous.fields == fields => Ok(previous.clone()),
            _ => Ok(IcebergSchema { schema_id, fields }),
        }
    }

    /// The field id of the top-level column `name`.
    pub fn field_id(&self, name: &str) -> Option<i32> {
        self.fields.iter().find(|f| f.name == name).map(|f| f.id)
    }

    /// The schema as the table metadata's JSON holds it.
    pub fn to_json(&self) -> Value {
        json!({
            "type": "struct",
            "schema-id": self.schema_id,
            "fields": self.fields.iter().map(field_json).collect::<Vec<_>>(),
        })
    }

    /// The schema read back from [`Self::to_json`]'s form.
    pub fn from_json(value: &Value) -> Result<IcebergSchema, String> {
        let schema_id = value["schema-id"]
            .as_i64()
            .ok_or("a schema without schema-id")? as i32;
        Ok(IcebergSchema {
            schema_id,
            fields: fields_from_json(&value["fields"])?,
        })
    }

    /// The largest field id in the schema.
    pub fn max_field_id(&self) -> i32 {
        fn max_of(fields: &[IcebergField]) -> i32 {
            fields.iter().map(max_in_field).max().unwrap_or(0)
        }
        fn max_in_type(ty: &IcebergType) -> i32 {
            match ty {
                IcebergType::Primitive(_) => 0,
                IcebergType::List {
                    element_id,
                    element,
                    ..
                } => (*element_id).max(max_in_type(element)),
                IcebergType::Struct(fields) => max_of(fields),
            }
        }
        fn max_in_field(field: &IcebergField) -> i32 {
            field.id.max(max_in_type(&field.ty))
        }
        max_of(&self.fields)
    }

    /// The name mapping readers use to find each field in files without field ids: a list's
    /// element under `element` (Iceberg's and Spark's name) or `item` (arrow-rs's, which wrote
    /// the files).
    pub fn name_mapping(&self) -> Value {
        Value::Array(self.fields.iter().map(mapping_of_field).collect())
    }
}

struct IdSource<'a> {
    last: &'a mut i32,
}

impl IdSource<'_> {
    fn next(&mut self) -> i32 {
        *self.last += 1;
        *self.last
    }
}

fn merge_fields(
    previous: Option<&[IcebergField]>,
    arrow: &Fields,
    parent: &str,
    ids: &mut IdSource,
) -> Result<Vec<IcebergField>, SchemaError> {
    let mut out: Vec<IcebergField> = previous.map(<[_]>::to_vec).unwrap_or_default();
    let is_new_table_level = previous.is_none();
    for field in arrow {
        let path = join(parent, field.name());
        match out.iter_mut().find(|f| f.name == *field.name()) {
            Some(existing) => {
                existing.ty = merge_type(Some(&existing.ty), field.data_type(), &path, ids)?;
            }
            None => {
                let id = ids.next();
                let ty = merge_type(None, field.data_type(), &path, ids)?;
                out.push(IcebergField {
                    id,
                    name: field.name().clone(),
                    // Only the fields of a struct seen for the first time may be required.
                    required: is_new_table_level && !field.is_nullable(),
                    ty,
                });
            }
        }
    }
    Ok(out)
}

fn merge_type(
    previous: Option<&IcebergType>,
    arrow: &DataType,
    path: &str,
    ids: &mut IdSource,
) -> Result<IcebergType, SchemaError> {
    let changed = |table: &IcebergType| SchemaError::TypeChanged {
        column: path.to_string(),
        table: type_name(table),
        found: arrow.to_string(),
    };
    match arrow {
        DataType::List(element) | DataType::LargeList(element) => match previous {
            None => Ok(new_list(element, path, ids)?),
            Some(IcebergType::List {
                element_id,
                element_required,
                element: previous_element,
            }) => Ok(IcebergType::List {
                element_id: *element_id,
                element_required: *element_required,
                element: Box::new(merge_type(
                    Some(previous_element),
                    element.data_type(),
                    &join(path, "element"),
                    ids,
                )?),
            }),
            Some(other) => Err(changed(other)),
        },
        DataType::Struct(fields) => {
            match previous {
                None => Ok(IcebergType::Struct(new_struct(fields, path, ids)?)),
                Some(IcebergType::Struct(previous_fields)) => Ok(IcebergType::Struct(
                    merge_fields(Some(previous_fields), fields, path, ids)?,
                )),
                Some(other) => Err(changed(other)),
            }
        }
        DataType::Dictionary(_, value) => merge_type(previous, value, path, ids),
        other => {
            let name = primitive(other).ok_or_else(|| SchemaError::Unsupported {
                column: path.to_string(),
                data_type: other.to_string(),
            })?;
            match previous {
                None => Ok(IcebergType::Primitive(name)),
                Some(IcebergType::Primitive(p)) if *p == name => Ok(IcebergType::Primitive(name)),
                // Iceberg's one promotion that files of a wider type can bring.
                Some(IcebergType::Primitive("int")) if name == "long" => {
                    Ok(IcebergType::Primitive("long"))
                }
                Some(other) => Err(changed(other)),
            }
        }
    }
}

fn new_list(element: &Field, path: &str, ids: &mut IdSource) -> Result<IcebergType, SchemaError> {
    let element_id = ids.next();
    let ty = merge_type(None, element.data_type(), &join(path, "element"), ids)?;
    Ok(IcebergType::List {
        element_id,
        element_required: !element.is_nullable(),
        element: Box::new(ty),
    })
}

fn new_struct(
    fields: &Fields,
    path: &str,
    ids: &mut IdSource,
) -> Result<Vec<IcebergField>, SchemaError> {
    // Ids are given to a struct's own fields first, then to what they hold (as Iceberg's
    // reference implementation numbers a new schema).
    let ids_here: Vec<i32> = fields.iter().map(|_| ids.next()).collect();
    fields
        .iter()
        .zip(ids_here)
        .map(|(field, id)| {
            Ok(IcebergField {
                id,
                name: field.name().clone(),
                required: !field.is_nullable(),
                ty: merge_type(None, field.data_type(), &join(path, field.name()), ids)?,
            })
        })
        .collect()
}

/// The Iceberg primitive of an Arrow type, widened where Iceberg lacks it (module doc).
fn primitive(data_type: &DataType) -> Option<&'static str> {
    Some(match data_type {
        DataType::Boolean => "boolean",
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::UInt8 | DataType::UInt16 => {
            "int"
        }
        DataType::Int64 | DataType::UInt32 | DataType::UInt64 => "long",
        DataType::Float16 | DataType::Float32 => "float",
        DataType::Float64 => "double",
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "string",
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => "binary",
        DataType::Date32 => "date",
        DataType::Timestamp(TimeUnit::Microsecond, Some(_)) => "timestamptz",
        DataType::Timestamp(TimeUnit::Microsecond, None) => "timestamp",
        _ => return None,
    })
}

fn join(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_string()
    } else {
        format!("{parent}.{name}")
    }
}

fn type_name(ty: &IcebergType) -> String {
    match ty {
        IcebergType::Primitive(p) => (*p).to_string(),
        IcebergType::List { .. } => "list".into(),
        IcebergType::Struct(_) => "struct".into(),
    }
}

#[cfg(test)]
mod tests;
