use super::json::type_json;
use std::sync::Arc;

use super::*;

fn v1() -> Schema {
    Schema::new(vec![
        Field::new(
            "time",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
        ),
        Field::new("host", DataType::Utf8, false),
        Field::new("code", DataType::UInt32, true),
        Field::new(
            "pids",
            DataType::List(Arc::new(Field::new("item", DataType::Int32, true))),
            true,
        ),
    ])
}

fn v2() -> Schema {
    let mut fields: Vec<Field> = v1().fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new(
        "suspects",
        DataType::List(Arc::new(Field::new(
            "item",
            DataType::Struct(Fields::from(vec![
                Field::new("time_ns", DataType::Int64, false),
                Field::new("handle", DataType::UInt64, true),
            ])),
            true,
        ))),
        true,
    ));
    fields.push(Field::new("required_later", DataType::Boolean, false));
    Schema::new(fields)
}

#[test]
fn a_first_schema_numbers_every_field_depth_first_and_keeps_required_columns() {
    let mut last = 0;
    let schema = IcebergSchema::evolve(None, &v1(), 1, &mut last).unwrap();
    assert_eq!(last, 5);
    assert_eq!(
        schema.to_json(),
        json!({"type": "struct", "schema-id": 1, "fields": [
            {"id": 1, "name": "time", "required": true, "type": "timestamptz"},
            {"id": 2, "name": "host", "required": true, "type": "string"},
            {"id": 3, "name": "code", "required": false, "type": "long"},
            {"id": 4, "name": "pids", "required": false, "type": {
                "type": "list", "element-id": 5, "element-required": false,
                "element": "int"}},
        ]})
    );
    assert_eq!(schema.max_field_id(), 5);
    assert_eq!(IcebergSchema::from_json(&schema.to_json()).unwrap(), schema);
}

#[test]
fn a_later_version_keeps_every_id_and_adds_optional_columns_after_them() {
    let mut last = 0;
    let first = IcebergSchema::evolve(None, &v1(), 6, &mut last).unwrap();
    let second = IcebergSchema::evolve(Some(&first), &v2(), 7, &mut last).unwrap();
    assert_eq!(second.schema_id, 7);
    assert_eq!(&second.fields[..4], &first.fields[..]);
    let suspects = &second.fields[4];
    assert_eq!((suspects.id, suspects.required), (6, false));
    assert_eq!(
        type_json(&suspects.ty),
        json!({"type": "list", "element-id": 7, "element-required": false, "element": {
            "type": "struct", "fields": [
                {"id": 8, "name": "time_ns", "required": true, "type": "long"},
                {"id": 9, "name": "handle", "required": false, "type": "long"}]}})
    );
    // A column added to a table with rows is optional, whatever the files say.
    assert_eq!(
        (second.fields[5].id, second.fields[5].required),
        (10, false)
    );
    assert_eq!(last, 10);
    // Files of the older version bring nothing: the schema stays, with its id.
    let again = IcebergSchema::evolve(Some(&second), &v1(), 6, &mut last).unwrap();
    assert_eq!(again, second);
    assert_eq!(last, 10);
    assert_eq!(IcebergSchema::from_json(&second.to_json()).unwrap(), second);
}

#[test]
fn a_changed_or_unsupported_type_is_an_error_naming_the_column() {
    let mut last = 0;
    let first = IcebergSchema::evolve(None, &v1(), 1, &mut last).unwrap();
    let changed = Schema::new(vec![Field::new("code", DataType::Utf8, true)]);
    assert_eq!(
        IcebergSchema::evolve(Some(&first), &changed, 2, &mut last),
        Err(SchemaError::TypeChanged {
            column: "code".into(),
            table: "long".into(),
            found: "Utf8".into()
        })
    );
    let odd = Schema::new(vec![Field::new(
        "d",
        DataType::Duration(TimeUnit::Second),
        true,
    )]);
    assert!(matches!(
        IcebergSchema::evolve(None, &odd, 1, &mut last),
        Err(SchemaError::Unsupported { column, .. }) if column == "d"
    ));
}

#[test]
fn the_name_mapping_finds_list_elements_under_both_names() {
    let mut last = 0;
    let schema = IcebergSchema::evolve(None, &v1(), 1, &mut last).unwrap();
    assert_eq!(
        schema.name_mapping()[3],
        json!({"field-id": 4, "names": ["pids"], "fields": [
            {"field-id": 5, "names": ["element", "item"]}]})
    );
}

#[test]
fn every_kind_of_the_lake_has_an_iceberg_schema() {
    for &kind in gpuship_model::EventKind::ALL {
        let arrow = crate::engine::kind_schema(kind);
        let mut last = 0;
        let schema = IcebergSchema::evolve(None, &arrow, 7, &mut last)
            .unwrap_or_else(|e| panic!("{kind}: {e}"));
        assert_eq!(schema.field_id("time"), Some(1), "{kind}");
        assert_eq!(schema.max_field_id(), last, "{kind}");
    }
}
