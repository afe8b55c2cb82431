//! One record batch as Kafka messages: the payload in the sink's encoding, the key rendered from
//! the key template, and the rows each message carries (so a failed message's rows can be
//! retried or spooled exactly).

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{RecordBatch, UInt32Array};
use arrow_schema::ArrowError;

use crate::encode::{arrow_ipc, json::JsonRows, Encoding};
use crate::otlp::OtlpMapping;
use crate::template::{RowKeys, Template};
use crate::EventKind;

/// Which rows of the batch a message carries.
#[derive(Debug, Clone)]
pub enum MessageRows {
    /// One row.
    One(u32),
    /// Several rows (a batch encoding), in order.
    Many(Arc<[u32]>),
}

impl MessageRows {
    /// Number of rows.
    pub fn len(&self) -> usize {
        match self {
            MessageRows::One(_) => 1,
            MessageRows::Many(rows) => rows.len(),
        }
    }

    /// True when the message carries no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends the row indices to `out`.
    pub fn extend_into(&self, out: &mut Vec<u32>) {
        match self {
            MessageRows::One(row) => out.push(*row),
            MessageRows::Many(rows) => out.extend_from_slice(rows),
        }
    }
}

/// One message ready to produce.
#[derive(Debug)]
pub struct Message {
    /// Message key.
    pub key: String,
    /// Encoded payload.
    pub payload: Vec<u8>,
    /// Event time of the first row, milliseconds since the epoch (the message timestamp).
    pub timestamp_ms: i64,
    /// The rows it carries.
    pub rows: MessageRows,
}

/// Encodes batches into messages for one sink.
pub struct MessageEncoder {
    encoding: Encoding,
    key: Template,
    /// The key is the same for every row (no column placeholder): batch encodings then need
    /// no grouping.
    key_is_constant: bool,
    max_rows_per_message: usize,
    max_message_bytes: usize,
    otlp: OtlpMapping,
}

impl MessageEncoder {
    /// An encoder for `encoding` with the key template `key`.
    pub fn new(
        encoding: Encoding,
        key: Template,
        max_rows_per_message: usize,
        max_message_bytes: usize,
        otlp: OtlpMapping,
    ) -> Self {
        let key_is_constant = key.is_constant(&["kind", "host", "boot_id"]);
        Self {
            encoding,
            key,
            key_is_constant,
            max_rows_per_message: max_rows_per_message.max(1),
            max_message_bytes,
            otlp,
        }
    }

    /// The messages for `batch`, in row order within each key.
    pub fn encode(
        &self,
        kind: EventKind,
        batch: &RecordBatch,
        observed_ns: u64,
    ) -> Result<Vec<Message>, ArrowError> {
        // Looked up once per batch: the JSON encoding asks for it per event.
        let times = {
            use arrow_array::cast::AsArray;
            batch
                .column_by_name("time_ns")
                .and_then(|c| c.as_primitive_opt::<arrow_array::types::Int64Type>())
        };
        let time_ms = |row: usize| -> i64 { times.map_or(0, |t| t.value(row) / 1_000_000) };
        let keys = RowKeys::new(&self.key, kind, batch);
        if self.encoding.per_event() {
            let mut rows = JsonRows::new(batch, None)?;
            let mut messages = Vec::with_capacity(batch.num_rows());
            let mut key = String::new();
            for row in 0..batch.num_rows() {
                keys.render(row, &mut key);
                let mut payload = Vec::with_capacity(512);
                rows.write_row(row, &mut payload);
                messages.push(Message {
                    key: key.clone(),
                    payload,
                    timestamp_ms: time_ms(row),
                    rows: MessageRows::One(row as u32),
                });
            }
            return Ok(messages);
        }
        // Batch encodings: group rows by key, keep row order within a group.
        let groups: Vec<(String, Vec<u32>)> = if self.key_is_constant || batch.num_rows() == 0 {
            let mut key = String::new();
            keys.render(0, &mut key);
            vec![(key, (0..batch.num_rows() as u32).collect())]
        } else {
            let mut order: Vec<(String, Vec<u32>)> = Vec::new();
            let mut index: HashMap<String, usize> = HashMap::new();
            let mut key = String::new();
            for row in 0..batch.num_rows() {
                keys.render(row, &mut key);
                match index.get(&key) {
                    Some(&at) => order[at].1.push(row as u32),
                    None => {
                        index.insert(key.clone(), order.len());
                        order.push((key.clone(), vec![row as u32]));
                    }
                }
            }
            order
        };
        let mut messages = Vec::new();
        for (key, rows) in groups {
            for chunk in rows.chunks(self.max_rows_per_message) {
                self.encode_rows(
                    kind,
                    batch,
                    observed_ns,
                    &key,
                    chunk,
                    &time_ms,
                    &mut messages,
                )?;
            }
        }
        Ok(messages)
    }

    /// Encodes `rows` as one message, or splits them in halves while the message is too big.
    #[allow(clippy::too_many_arguments)]
    fn encode_rows(
        &self,
        kind: EventKind,
        batch: &RecordBatch,
        observed_ns: u64,
        key: &str,
        rows: &[u32],
        time_ms: &dyn Fn(usize) -> i64,
        out: &mut Vec<Message>,
    ) -> Result<(), ArrowError> {
        let mut payload = Vec::new();
        match self.encoding {
            Encoding::ArrowIpc => {
                let selected = if rows.len() == batch.num_rows() {
                    batch.clone()
                } else {
                    let indices = UInt32Array::from(rows.to_vec());
                    arrow_select::take::take_record_batch(batch, &indices)?
                };
                arrow_ipc::write_stream(&selected, &mut payload)?;
            }
            Encoding::OtlpProto => {
                use prost::Message as _;
                let mut records = Vec::with_capacity(rows.len());
                self.otlp
                    .append_records(kind, batch, observed_ns, Some(rows), &mut records);
                self.otlp
                    .request(records)
                    .encode(&mut payload)
                    .map_err(|e| ArrowError::ExternalError(Box::new(e)))?;
            }
            Encoding::Json => unreachable!("json is encoded per event"),
        }
        if payload.len() > self.max_message_bytes && rows.len() > 1 {
            let (first, second) = rows.split_at(rows.len() / 2);
            self.encode_rows(kind, batch, observed_ns, key, first, time_ms, out)?;
            return self.encode_rows(kind, batch, observed_ns, key, second, time_ms, out);
        }
        out.push(Message {
            key: key.to_string(),
            payload,
            timestamp_ms: time_ms(rows[0] as usize),
            rows: MessageRows::Many(rows.into()),
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{cuda_batch, identity, xid_batch_with, xid_record};
    use std::collections::BTreeMap;

    fn encoder(encoding: Encoding, key: &str, max_rows: usize, max_bytes: usize) -> MessageEncoder {
        MessageEncoder::new(
            encoding,
            Template::parse(key, super::super::config::KEY_PLACEHOLDERS).unwrap(),
            max_rows,
            max_bytes,
            OtlpMapping::new(&identity(), None, &BTreeMap::new()),
        )
    }

    fn three_xids() -> RecordBatch {
        xid_batch_with(&[
            xid_record(79, "0000:3b:00.0", "a"),
            xid_record(31, "0000:86:00.0", "b"),
            xid_record(48, "0000:3b:00.0", "c"),
        ])
        .records
    }

    #[test]
    fn json_is_one_message_per_row_with_its_own_key() {
        let messages = encoder(Encoding::Json, "{host}/{pci_bus_id}", 100, 1 << 20)
            .encode(EventKind::Xid, &three_xids(), 0)
            .unwrap();
        let keys: Vec<&str> = messages.iter().map(|m| m.key.as_str()).collect();
        assert_eq!(keys, ["h/0000:3b:00.0", "h/0000:86:00.0", "h/0000:3b:00.0"]);
        let codes: Vec<u64> = messages
            .iter()
            .map(|m| {
                serde_json::from_slice::<serde_json::Value>(&m.payload).unwrap()["code"]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        assert_eq!(codes, [79, 31, 48]);
        assert_eq!(messages[0].timestamp_ms, 1_700_000_000_123);
    }

    #[test]
    fn batch_encodings_group_rows_by_key_in_order() {
        let messages = encoder(Encoding::ArrowIpc, "{host}/{pci_bus_id}", 100, 1 << 20)
            .encode(EventKind::Xid, &three_xids(), 0)
            .unwrap();
        assert_eq!(messages.len(), 2);
        assert_eq!(messages[0].key, "h/0000:3b:00.0");
        let mut rows = Vec::new();
        messages[0].rows.extend_into(&mut rows);
        assert_eq!(rows, [0, 2]);
        let reader =
            ::arrow_ipc::reader::StreamReader::try_new(messages[0].payload.as_slice(), None)
                .unwrap();
        let batches: Vec<RecordBatch> = reader.map(|b| b.unwrap()).collect();
        assert_eq!(batches[0].num_rows(), 2);
        assert_eq!(messages[1].key, "h/0000:86:00.0");
        assert_eq!(messages[1].rows.len(), 1);
    }

    #[test]
    fn big_batches_are_split_by_rows_and_by_bytes() {
        let batch = cuda_batch(1000, 0).records;
        let by_rows = encoder(Encoding::OtlpProto, "{host}", 300, 1 << 20)
            .encode(EventKind::Cuda, &batch, 0)
            .unwrap();
        assert_eq!(
            by_rows.iter().map(|m| m.rows.len()).collect::<Vec<_>>(),
            [300, 300, 300, 100]
        );
        // A one-row Arrow IPC message of `cuda` is about 10 KB (schema and buffer padding).
        let by_bytes = encoder(Encoding::ArrowIpc, "{host}", 1000, 16 * 1024)
            .encode(EventKind::Cuda, &batch, 0)
            .unwrap();
        assert!(by_bytes.len() > 1);
        assert!(by_bytes.iter().all(|m| m.payload.len() <= 16 * 1024));
        let mut rows = Vec::new();
        for message in &by_bytes {
            message.rows.extend_into(&mut rows);
        }
        assert_eq!(rows, (0..1000).collect::<Vec<u32>>());
    }

    #[test]
    fn cuda_messages_are_keyed_by_the_gpu_of_their_call() {
        use crate::schema::{CallGpu, CallObjects, CudaBatchBuilder, CudaRow};
        let gpu = |bus: &str| CallGpu {
            uuid: format!("GPU-{bus}"),
            pci_bus_id: Some(bus.to_string()),
            index: Some(0),
        };
        let (a, b) = (gpu("0000:3b:00.0"), gpu("0000:86:00.0"));
        let mut builder = CudaBatchBuilder::new(identity(), 3);
        for call_gpu in [Some(&a), Some(&b), None] {
            builder.append(&CudaRow {
                objects: CallObjects {
                    gpu: call_gpu,
                    ..CallObjects::default()
                },
                ..crate::test_support::cuda_row()
            });
        }
        let batch = builder.finish().unwrap();
        let messages = encoder(Encoding::Json, "{host}/{pci_bus_id}", 100, 1 << 20)
            .encode(EventKind::Cuda, &batch, 0)
            .unwrap();
        let keys: Vec<&str> = messages.iter().map(|m| m.key.as_str()).collect();
        assert_eq!(keys, ["h/0000:3b:00.0", "h/0000:86:00.0", "h/"]);
    }
}
