//! An Iceberg table's metadata file (`metadata/v<N>.metadata.json`, format version 2): what
//! the table holds now (its schemas, its one partition spec `hour(time)`, its snapshots) and
//! how the next snapshot is made from the last. Free of storage: [`super::table`] reads and
//! writes these files.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::avro::{PARTITION_FIELD, PARTITION_FIELD_ID};
use super::schema::IcebergSchema;

/// The snapshot summary key that names the compaction markers whose files a snapshot added,
/// one per line: how a rerun knows what the table holds already.
pub const MARKERS_KEY: &str = "gpuship.markers";

/// A snapshot of the table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Snapshot {
    /// Its id.
    pub snapshot_id: i64,
    /// The snapshot it was made from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_snapshot_id: Option<i64>,
    /// Its sequence number.
    #[serde(default)]
    pub sequence_number: i64,
    /// When it was committed.
    pub timestamp_ms: i64,
    /// Its manifest list's location.
    pub manifest_list: String,
    /// `operation` and counts; [`MARKERS_KEY`] for the markers it added.
    #[serde(default)]
    pub summary: BTreeMap<String, String>,
    /// The schema current when it was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_id: Option<i32>,
}

/// One `snapshot-log` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct SnapshotLogEntry {
    /// The snapshot.
    pub snapshot_id: i64,
    /// When it became current.
    pub timestamp_ms: i64,
}

/// One `metadata-log` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct MetadataLogEntry {
    /// An earlier metadata file.
    pub metadata_file: String,
    /// When it was written.
    pub timestamp_ms: i64,
}

/// The metadata file's content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct TableMetadata {
    /// 2.
    pub format_version: u8,
    /// The table's id.
    pub table_uuid: String,
    /// The table's folder (`.../iceberg/<kind>`).
    pub location: String,
    /// The highest sequence number given.
    #[serde(default)]
    pub last_sequence_number: i64,
    /// When the file was written.
    pub last_updated_ms: i64,
    /// The highest field id given.
    pub last_column_id: i32,
    /// Every schema the table had, oldest first.
    pub schemas: Vec<Value>,
    /// The current one.
    pub current_schema_id: i32,
    /// `hour(time)`.
    pub partition_specs: Vec<Value>,
    /// 0.
    pub default_spec_id: i32,
    /// 1000.
    pub last_partition_id: i32,
    /// The name mapping and gpuship's own keys.
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// The current snapshot; absent before the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_snapshot_id: Option<i64>,
    /// Every snapshot kept.
    #[serde(default)]
    pub snapshots: Vec<Snapshot>,
    /// Which snapshot was current when.
    #[serde(default)]
    pub snapshot_log: Vec<SnapshotLogEntry>,
    /// The earlier metadata files.
    #[serde(default)]
    pub metadata_log: Vec<MetadataLogEntry>,
    /// None, and host then time (how compacted files are sorted).
    #[serde(default)]
    pub sort_orders: Vec<Value>,
    /// 1.
    #[serde(default)]
    pub default_sort_order_id: i32,
    /// `main`, at the current snapshot.
    #[serde(default)]
    pub refs: BTreeMap<String, Value>,
}

impl TableMetadata {
    /// A table with no snapshot, whose first schema is `schema`.
    pub fn new(table_uuid: String, location: String, schema: &IcebergSchema, now_ms: i64) -> Self {
        let time = schema.field_id("time").unwrap_or(1);
        let mut sort_fields = Vec::new();
        for name in ["host", "time"] {
            if let Some(id) = schema.field_id(name) {
                sort_fields.push(json!({"transform": "identity", "source-id": id,
                    "direction": "asc", "null-order": "nulls-first"}));
            }
        }
        TableMetadata {
            format_version: 2,
            table_uuid,
            location,
            last_sequence_number: 0,
            last_updated_ms: now_ms,
            last_column_id: schema.max_field_id(),
            schemas: vec![schema.to_json()],
            current_schema_id: schema.schema_id,
            partition_specs: vec![json!({"spec-id": 0, "fields": partition_fields(time)})],
            default_spec_id: 0,
            last_partition_id: PARTITION_FIELD_ID,
            properties: name_mapping_property(schema),
            current_snapshot_id: None,
            snapshots: Vec::new(),
            snapshot_log: Vec::new(),
            metadata_log: Vec::new(),
            sort_orders: vec![
                json!({"order-id": 0, "fields": []}),
                json!({"order-id": 1, "fields": sort_fields}),
            ],
            default_sort_order_id: 1,
            refs: BTreeMap::new(),
        }
    }

    /// The current schema.
    pub fn current_schema(&self) -> Result<IcebergSchema, String> {
        let value = self
            .schemas
            .iter()
            .find(|s| s["schema-id"].as_i64() == Some(i64::from(self.current_schema_id)))
            .ok_or_else(|| format!("no schema {}", self.current_schema_id))?;
        IcebergSchema::from_json(value)
    }

    /// The partition spec's fields as the manifests' header holds them.
    pub fn partition_spec_fields(&self) -> Value {
        self.partition_specs
            .first()
            .map(|spec| spec["fields"].clone())
            .unwrap_or_else(|| json!([]))
    }

    /// Makes `schema` current (added unless the table has it already; the name mapping
    /// follows).
    pub fn set_schema(&mut self, schema: &IcebergSchema) {
        if !self
            .schemas
            .iter()
            .any(|s| s["schema-id"].as_i64() == Some(i64::from(schema.schema_id)))
        {
            self.schemas.push(schema.to_json());
        }
        self.current_schema_id = schema.schema_id;
        self.last_column_id = self.last_column_id.max(schema.max_field_id());
        self.properties.extend(name_mapping_property(schema));
    }

    /// The snapshot now current.
    pub fn current_snapshot(&self) -> Option<&Snapshot> {
        let id = self.current_snapshot_id?;
        self.snapshots.iter().find(|s| s.snapshot_id == id)
    }

    /// The markers every snapshot added (their files are in the table).
    pub fn committed_markers(&self) -> BTreeSet<String> {
        self.snapshots
            .iter()
            .filter_map(|s| s.summary.get(MARKERS_KEY))
            .flat_map(|markers| markers.lines().map(str::to_string))
            .collect()
    }

    /// Makes `snapshot` current: its sequence number, the logs and `main` follow.
    /// `previous_file` is the metadata file this one replaces.
    pub fn add_snapshot(&mut self, snapshot: Snapshot, previous_file: Option<(String, i64)>) {
        self.last_sequence_number = snapshot.sequence_number;
        self.last_updated_ms = snapshot.timestamp_ms;
        self.current_snapshot_id = Some(snapshot.snapshot_id);
        self.snapshot_log.push(SnapshotLogEntry {
            snapshot_id: snapshot.snapshot_id,
            timestamp_ms: snapshot.timestamp_ms,
        });
        if let Some((metadata_file, timestamp_ms)) = previous_file {
            self.metadata_log.push(MetadataLogEntry {
                metadata_file,
                timestamp_ms,
            });
        }
        self.refs.insert(
            "main".into(),
            json!({"snapshot-id": snapshot.snapshot_id, "type": "branch"}),
        );
        self.snapshots.push(snapshot);
    }
}

/// What an append adds, for its snapshot's summary.
pub struct AppendSummary<'a> {
    /// Data files added.
    pub files: usize,
    /// Their rows.
    pub rows: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Hours they fall in.
    pub partitions: usize,
    /// Manifests the previous snapshot listed.
    pub manifests_replaced: usize,
    /// Whether those were merged into one ([`super::merge`]).
    pub merged: bool,
    /// The compaction markers whose files these are.
    pub markers: Vec<&'a str>,
}

impl AppendSummary<'_> {
    /// The snapshot summary: Iceberg's counts, totals carried on from `previous`, and
    /// [`MARKERS_KEY`].
    pub fn summary(&self, previous: Option<&Snapshot>) -> BTreeMap<String, String> {
        let total = |key: &str, added: u64| {
            let before = previous
                .and_then(|s| s.summary.get(key))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
            (key.to_string(), (before + added).to_string())
        };
        let (merged, replaced) = (self.merged, self.manifests_replaced);
        [
            ("operation".to_string(), "append".to_string()),
            ("added-data-files".into(), self.files.to_string()),
            ("added-records".into(), self.rows.to_string()),
            ("added-files-size".into(), self.bytes.to_string()),
            (
                "changed-partition-count".into(),
                self.partitions.to_string(),
            ),
            total("total-data-files", self.files as u64),
            total("total-records", self.rows),
            total("total-files-size", self.bytes),
            ("total-delete-files".into(), "0".into()),
            ("total-position-deletes".into(), "0".into()),
            ("total-equality-deletes".into(), "0".into()),
            (
                "manifests-created".into(),
                (1 + usize::from(merged)).to_string(),
            ),
            (
                "manifests-kept".into(),
                if merged { 0 } else { replaced }.to_string(),
            ),
            (
                "manifests-replaced".into(),
                if merged { replaced } else { 0 }.to_string(),
            ),
            (MARKERS_KEY.into(), self.markers.join("\n")),
        ]
        .into_iter()
        .collect()
    }
}

fn partition_fields(time_id: i32) -> Value {
    json!([{"name": PARTITION_FIELD, "transform": "hour", "source-id": time_id,
        "field-id": PARTITION_FIELD_ID}])
}

fn name_mapping_property(schema: &IcebergSchema) -> BTreeMap<String, String> {
    BTreeMap::from([(
        "schema.name-mapping.default".to_string(),
        schema.name_mapping().to_string(),
    )])
}

#[cfg(test)]
mod tests {
    use arrow_schema::{DataType, Field, Schema, TimeUnit};

    use super::*;

    fn schema() -> IcebergSchema {
        let arrow = Schema::new(vec![
            Field::new(
                "time",
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                false,
            ),
            Field::new("host", DataType::Utf8, false),
        ]);
        IcebergSchema::evolve(None, &arrow, 7, &mut 0).unwrap()
    }

    fn snapshot(id: i64, parent: Option<i64>, sequence: i64, markers: &str) -> Snapshot {
        Snapshot {
            snapshot_id: id,
            parent_snapshot_id: parent,
            sequence_number: sequence,
            timestamp_ms: 1_000 + sequence,
            manifest_list: format!("file:///t/metadata/snap-{id}.avro"),
            summary: BTreeMap::from([
                ("operation".into(), "append".into()),
                (MARKERS_KEY.into(), markers.into()),
            ]),
            schema_id: Some(7),
        }
    }

    #[test]
    fn a_new_table_partitions_by_hour_of_time_and_sorts_by_host_then_time() {
        let table = TableMetadata::new("u".into(), "file:///t".into(), &schema(), 5);
        let text = serde_json::to_value(&table).unwrap();
        assert_eq!(text["format-version"], 2);
        assert_eq!(text["last-column-id"], 2);
        assert_eq!(
            text["partition-specs"][0]["fields"][0],
            json!({"name": "time_hour", "transform": "hour", "source-id": 1, "field-id": 1000})
        );
        assert_eq!(text["sort-orders"][1]["fields"][0]["source-id"], 2);
        assert_eq!(text["sort-orders"][1]["fields"][1]["source-id"], 1);
        // No snapshot yet: no current-snapshot-id at all (readers then read no rows).
        assert!(text.get("current-snapshot-id").is_none());
        assert!(text["properties"]["schema.name-mapping.default"]
            .as_str()
            .unwrap()
            .contains("\"names\":[\"host\"]"));
        let back: TableMetadata = serde_json::from_value(text).unwrap();
        assert_eq!(back, table);
    }

    #[test]
    fn snapshots_chain_and_name_every_marker_they_added() {
        let mut table = TableMetadata::new("u".into(), "file:///t".into(), &schema(), 5);
        table.add_snapshot(snapshot(11, None, 1, "cuda/a/_compaction-1.json"), None);
        table.add_snapshot(
            snapshot(
                12,
                Some(11),
                2,
                "cuda/b/_compaction-2.json\ncuda/c/_compaction-2.json",
            ),
            Some(("file:///t/metadata/v2.metadata.json".into(), 1_001)),
        );
        assert_eq!(table.current_snapshot().unwrap().snapshot_id, 12);
        assert_eq!(table.last_sequence_number, 2);
        assert_eq!(table.refs["main"]["snapshot-id"], 12);
        assert_eq!(table.metadata_log.len(), 1);
        assert_eq!(
            table.committed_markers().into_iter().collect::<Vec<_>>(),
            [
                "cuda/a/_compaction-1.json",
                "cuda/b/_compaction-2.json",
                "cuda/c/_compaction-2.json"
            ]
        );
    }
}
