//! The documents that describe the wire formats, checked against the code that writes them:
//! docs/otlp.md's attribute tables against the attributes the OTLP mapping emits for rows with
//! every column set (both ways, with their OTLP types), its severity table against the mapping
//! and the XID catalog, and docs/schema.md's column tables against the Arrow schemas (names,
//! types, nullability, order of tables). A column or attribute added to the code without its
//! line in the docs, or documented but not written, fails here.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::support::markdown::{cells, code_spans};
use arrow_array::builder::{Int32Builder, ListBuilder};
use arrow_array::{
    ArrayRef, BooleanArray, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray,
    TimestampMicrosecondArray, UInt32Array, UInt64Array,
};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use gpuship::xid::catalog;
use gpuship_sinks::otlp::attributes::attribute_names;
use gpuship_sinks::otlp::mapping::severity;
use gpuship_sinks::otlp::OtlpMapping;
use gpuship_sinks::schema::schema_for;
use gpuship_sinks::test_support::identity;
use gpuship_sinks::EventKind;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::logs::v1::LogRecord;

const KINDS: &[EventKind] = EventKind::ALL;

fn doc(name: &str) -> String {
    let path = format!("{}/docs/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The tables of `text` whose header starts with `header`, each with the heading above it:
/// `(heading, rows)`.
fn tables(text: &str, header: &[&str]) -> Vec<(String, Vec<Vec<String>>)> {
    let mut found = Vec::new();
    let mut heading = String::new();
    let mut current: Option<Vec<Vec<String>>> = None;
    for line in text.lines() {
        if line.starts_with('#') {
            heading = line.to_string();
        }
        match (cells(line), current.as_mut()) {
            (Some(row), Some(rows)) => rows.push(row),
            (Some(row), None) if row.len() >= header.len() && row[..header.len()] == *header => {
                current = Some(Vec::new());
            }
            (None, _) if line.trim_start().starts_with('|') => {}
            (None, Some(_)) => found.push((heading.clone(), current.take().unwrap_or_default())),
            _ => {}
        }
    }
    if let Some(rows) = current {
        found.push((heading, rows));
    }
    found
}

/// One row of `schema` with every column set (lists hold one item).
/// A one-row array of `field`'s type with a value in it.
fn filler(field: &Field) -> ArrayRef {
    match field.data_type() {
        DataType::Timestamp(TimeUnit::Microsecond, tz) => Arc::new(
            TimestampMicrosecondArray::from(vec![1_795_319_000_000_000])
                .with_timezone_opt(tz.clone()),
        ),
        DataType::Int64 => Arc::new(Int64Array::from(vec![1_795_319_000_000_000_000])),
        DataType::Int32 => Arc::new(Int32Array::from(vec![7])),
        // `result` 1: a failed call, so the attributes of failures appear too.
        DataType::UInt32 => Arc::new(UInt32Array::from(vec![1])),
        DataType::UInt64 => Arc::new(UInt64Array::from(vec![4096])),
        // Below 1 (a sampled interval), so the estimates differ from the observed counts.
        DataType::Float64 => Arc::new(Float64Array::from(vec![0.25])),
        DataType::Boolean => Arc::new(BooleanArray::from(vec![true])),
        DataType::Utf8 => Arc::new(StringArray::from(vec![format!("{}-value", field.name())])),
        DataType::List(item) if item.data_type() == &DataType::Int32 => {
            let mut list = ListBuilder::new(Int32Builder::new()).with_field(item.clone());
            list.values().append_value(7);
            list.append(true);
            Arc::new(list.finish())
        }
        // A list of structs (an XID's suspects): one item with every field filled.
        DataType::List(item) if matches!(item.data_type(), DataType::Struct(_)) => {
            let DataType::Struct(fields) = item.data_type() else {
                unreachable!()
            };
            let children: Vec<ArrayRef> = fields.iter().map(|f| filler(f)).collect();
            let items = arrow_array::StructArray::new(fields.clone(), children, None);
            Arc::new(arrow_array::ListArray::new(
                item.clone(),
                arrow_buffer::OffsetBuffer::from_lengths([1]),
                Arc::new(items),
                None,
            ))
        }
        // A struct (an out-of-memory row's held memory): every field filled.
        DataType::Struct(fields) => {
            let children: Vec<ArrayRef> = fields.iter().map(|f| filler(f)).collect();
            Arc::new(arrow_array::StructArray::new(
                fields.clone(),
                children,
                None,
            ))
        }
        // The histogram is not sent as an attribute; a null stands in.
        DataType::List(_) if field.is_nullable() => {
            arrow_array::new_null_array(field.data_type(), 1)
        }
        other => panic!("{}: no filler for {other}", field.name()),
    }
}

fn full_row(schema: Arc<Schema>) -> RecordBatch {
    let columns: Vec<ArrayRef> = schema.fields().iter().map(|f| filler(f)).collect();
    RecordBatch::try_new(schema, columns).expect("batch")
}

fn record(kind: EventKind, batch: &RecordBatch) -> LogRecord {
    let mapping = OtlpMapping::new(&identity(), None, &BTreeMap::new());
    let mut request = mapping.batch_request(kind, batch, 0);
    request
        .resource_logs
        .remove(0)
        .scope_logs
        .remove(0)
        .log_records
        .remove(0)
}

fn otlp_type(value: &Value) -> &'static str {
    match value {
        Value::StringValue(_) => "Str",
        Value::IntValue(_) => "Int",
        Value::BoolValue(_) => "Bool",
        Value::DoubleValue(_) => "Double",
        Value::ArrayValue(items) => match items.values.first().and_then(|v| v.value.as_ref()) {
            Some(Value::IntValue(_)) => "Array<Int>",
            Some(Value::KvlistValue(_)) => "Array<Map>",
            _ => "Array",
        },
        Value::KvlistValue(_) => "Map",
        _ => "other",
    }
}

fn kind_of_heading(heading: &str) -> Option<EventKind> {
    [
        ("`gpu.xid`", EventKind::Xid),
        ("`cuda.call`", EventKind::Cuda),
        ("`gpu.driver.call`", EventKind::Driver),
        ("`cuda.call.stats`", EventKind::CudaStats),
        ("`cuda.memory.held`", EventKind::CudaMemory),
    ]
    .into_iter()
    .find(|(name, _)| heading.contains(name))
    .map(|(_, kind)| kind)
}

#[test]
fn otlp_attribute_tables_are_what_the_mapping_sends() {
    let text = doc("otlp.md");
    let mut documented: BTreeMap<EventKind, BTreeMap<String, (String, String)>> = BTreeMap::new();
    for (heading, rows) in tables(&text, &["Column", "Attribute", "Type"]) {
        let kind = kind_of_heading(&heading).unwrap_or_else(|| panic!("table under {heading}"));
        let table = documented.entry(kind).or_default();
        for row in rows {
            let column = code_spans(&row[0]).first().cloned().expect("column");
            let attribute = code_spans(&row[1]).first().cloned().expect("attribute");
            let previous = table.insert(attribute.clone(), (column, row[2].clone()));
            assert!(previous.is_none(), "{attribute} twice under {heading}");
        }
    }
    assert_eq!(documented.len(), KINDS.len(), "one table per kind");
    for &kind in KINDS {
        let schema = schema_for(kind);
        let sent = record(kind, &full_row(schema.clone()));
        let emitted: BTreeMap<String, &'static str> = sent
            .attributes
            .iter()
            .map(|kv| {
                let value = kv
                    .value
                    .as_ref()
                    .and_then(|v| v.value.as_ref())
                    .expect("value");
                (kv.key.clone(), otlp_type(value))
            })
            .collect();
        assert_eq!(
            emitted.len(),
            sent.attributes.len(),
            "{kind}: an attribute sent twice"
        );
        let table = &documented[&kind];
        let doc_names: BTreeSet<&String> = table.keys().collect();
        let sent_names: BTreeSet<&String> = emitted.keys().collect();
        assert_eq!(
            sent_names.difference(&doc_names).collect::<Vec<_>>(),
            Vec::<&&String>::new(),
            "{kind}: sent but not in docs/otlp.md"
        );
        assert_eq!(
            doc_names.difference(&sent_names).collect::<Vec<_>>(),
            Vec::<&&String>::new(),
            "{kind}: in docs/otlp.md but not sent"
        );
        let columns: BTreeMap<&str, &str> = attribute_names(kind)
            .iter()
            .map(|&(column, attribute)| (attribute, column))
            .chain([("error.type", "result_name")])
            .collect();
        for (attribute, (column, documented_type)) in table {
            assert_eq!(
                columns[attribute.as_str()],
                column,
                "{kind}: {attribute}'s column"
            );
            assert_eq!(
                emitted[attribute], documented_type,
                "{kind}: {attribute}'s type"
            );
        }
        // Every column is either an attribute or named as not sent.
        let section = text
            .split("#### ")
            .find(|s| kind_of_heading(s.lines().next().unwrap_or("")) == Some(kind))
            .expect("section");
        let not_sent: BTreeSet<String> = section
            .split("Not sent as attributes:")
            .nth(1)
            .map(|rest| code_spans(rest.split("\n\n").next().unwrap_or("")))
            .unwrap_or_default()
            .into_iter()
            .collect();
        for field in schema.fields() {
            let name = field.name();
            let is_attribute = table.values().any(|(column, _)| column == name);
            assert!(
                is_attribute != not_sent.contains(name),
                "{kind}: column {name} must be either in the table or in \"Not sent\", once"
            );
        }
    }
}

#[test]
fn otlp_severity_table_is_the_mapping_and_the_catalog() {
    let text = doc("otlp.md");
    let tables = tables(
        &text,
        &["Catalog severity", "SeverityNumber", "SeverityText"],
    );
    assert_eq!(tables.len(), 1);
    let mut rows: BTreeMap<Option<String>, (i32, String)> = BTreeMap::new();
    for row in &tables[0].1 {
        let severity = code_spans(&row[0]).first().cloned();
        let number: i32 = row[1].parse().expect("number");
        let text = code_spans(&row[2]).first().cloned().expect("text");
        rows.insert(severity, (number, text));
    }
    // Every severity the catalog uses has its row, and the catalog's own mapping agrees.
    let used: BTreeSet<&str> = catalog::entries().iter().map(|e| e.severity).collect();
    for severity in catalog::SEVERITIES {
        let (number, text) = &rows[&Some(severity.to_string())];
        assert_eq!(catalog::otlp_severity(severity), *number, "{severity}");
        assert_eq!(
            severity::from_catalog(Some(severity)),
            *number,
            "{severity}"
        );
        assert_eq!(severity::text(*number), text, "{severity}");
    }
    assert!(used.iter().all(|s| catalog::SEVERITIES.contains(s)));
    assert_eq!(
        rows.len(),
        catalog::SEVERITIES.len() + 1,
        "plus the absent row"
    );
    assert_eq!(
        rows[&None],
        (severity::from_catalog(None), "ERROR".to_string())
    );
    // On the wire: an XID row whose catalog severity is each of them.
    let schema = schema_for(EventKind::Xid);
    for (severity, (number, text)) in &rows {
        let mut batch = full_row(schema.clone());
        let index = schema.index_of("severity").unwrap();
        let mut columns = batch.columns().to_vec();
        columns[index] = Arc::new(StringArray::from(vec![severity.clone()]));
        batch = RecordBatch::try_new(schema.clone(), columns).unwrap();
        let sent = record(EventKind::Xid, &batch);
        assert_eq!((sent.severity_number, &sent.severity_text), (*number, text));
    }
    // The two the issue named: the catalog calls them fatal, so they go out as 21 / FATAL.
    for code in [79, 48] {
        assert_eq!(catalog::lookup(code).severity, "fatal", "XID {code}");
    }
    assert!(
        !text.contains("17 / `ERROR` (per-XID"),
        "the old, wrong sentence"
    );
}

/// The Arrow type as docs/schema.md writes it.
fn doc_type(data_type: &DataType) -> String {
    match data_type {
        DataType::Timestamp(TimeUnit::Microsecond, Some(tz)) => format!("Timestamp(µs, {tz})"),
        DataType::List(item) => format!("List<{}>", doc_type(item.data_type())),
        DataType::Struct(fields) => format!(
            "Struct<{}>",
            fields
                .iter()
                .map(|f| format!("{} {}", f.name(), doc_type(f.data_type())))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => format!("{other}"),
    }
}

#[test]
fn schema_tables_are_the_arrow_schemas() {
    let text = doc("schema.md");
    let mut documented: BTreeMap<String, Vec<(String, String, bool)>> = BTreeMap::new();
    for (heading, rows) in tables(&text, &["column", "type", "meaning"]) {
        let table = if heading.contains("Common columns") {
            "common".to_string()
        } else {
            code_spans(&heading)
                .first()
                .cloned()
                .expect("a table name in the heading")
        };
        let entries = documented.entry(table).or_default();
        for row in rows {
            let names = code_spans(&row[0]);
            let types = code_spans(&row[1]);
            let nullable = row[1].ends_with("null");
            assert!(
                types.len() == 1 || types.len() == names.len(),
                "{heading}: {row:?}: one type, or one per column"
            );
            for (i, name) in names.iter().enumerate() {
                let data_type = types.get(i).unwrap_or(&types[0]).clone();
                entries.push((name.clone(), data_type, nullable));
            }
        }
    }
    let actual = |kind: EventKind| -> BTreeMap<String, (String, bool)> {
        schema_for(kind)
            .fields()
            .iter()
            .map(|f| (f.name().clone(), (doc_type(f.data_type()), f.is_nullable())))
            .collect()
    };
    let common = &documented["common"];
    for &kind in KINDS {
        let rows: Vec<_> = common.iter().chain(&documented[kind.as_str()]).collect();
        let expected: BTreeMap<String, (String, bool)> = rows
            .iter()
            .map(|(name, data_type, nullable)| (name.clone(), (data_type.clone(), *nullable)))
            .collect();
        assert_eq!(
            expected.len(),
            rows.len(),
            "`{kind}`: a column documented twice"
        );
        assert_eq!(
            actual(kind),
            expected,
            "docs/schema.md's `{kind}` table (with the common columns) against the schema: \
             (name, (type, nullable))"
        );
    }
    assert_eq!(documented.len(), KINDS.len() + 1, "common and every kind");
}
