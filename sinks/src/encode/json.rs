//! Events as JSON objects, one per row, with the Parquet column names as keys, so a jq filter,
//! a stream processor and a DuckDB query over Parquet all use the same names.
//!
//! Every column is present in every object (`null` when the value is absent), timestamps are
//! RFC 3339 strings in UTC, integers are JSON numbers. Values are encoded by `arrow-json`.

use std::sync::{Arc, LazyLock};

use arrow_array::cast::AsArray;
use arrow_array::types::TimestampMicrosecondType;
use arrow_array::{Array, PrimitiveArray, RecordBatch};
use arrow_json::writer::{make_encoder, Encoder, EncoderFactory, EncoderOptions, NullableEncoder};
use arrow_schema::{ArrowError, DataType, FieldRef, TimeUnit};

use crate::EventKind;

static OPTIONS: LazyLock<EncoderOptions> = LazyLock::new(|| {
    EncoderOptions::default()
        .with_explicit_nulls(true)
        .with_encoder_factory(Arc::new(UtcTimestamps))
});

/// Writes our `Timestamp(Microsecond, "UTC")` columns as RFC 3339 strings. arrow-json would
/// need the chrono-tz time zone database for a named zone; every gpuship time is UTC.
#[derive(Debug)]
struct UtcTimestamps;

impl EncoderFactory for UtcTimestamps {
    fn make_default_encoder<'a>(
        &self,
        _field: &'a FieldRef,
        array: &'a dyn Array,
        _options: &'a EncoderOptions,
    ) -> Result<Option<NullableEncoder<'a>>, ArrowError> {
        match array.data_type() {
            DataType::Timestamp(TimeUnit::Microsecond, _) => {
                let array = array.as_primitive::<TimestampMicrosecondType>();
                Ok(Some(NullableEncoder::new(
                    Box::new(MicrosecondsUtc(array)),
                    array.nulls().cloned(),
                )))
            }
            _ => Ok(None),
        }
    }
}

struct MicrosecondsUtc<'a>(&'a PrimitiveArray<TimestampMicrosecondType>);

impl Encoder for MicrosecondsUtc<'_> {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        use std::io::Write as _;
        let micros = self.0.value(idx);
        match chrono::DateTime::from_timestamp_micros(micros) {
            Some(time) => {
                let _ = write!(out, "\"{}\"", time.format("%Y-%m-%dT%H:%M:%S%.6fZ"));
            }
            None => {
                let _ = write!(out, "{micros}");
            }
        }
    }
}

/// Encodes the rows of one batch.
pub struct JsonRows<'a> {
    /// `{"kind":"xid",` or `{`: what every object starts with.
    opening: Vec<u8>,
    /// `"name":` for each column, the first without a leading comma.
    keys: Vec<Vec<u8>>,
    columns: Vec<NullableEncoder<'a>>,
    rows: usize,
}

impl<'a> JsonRows<'a> {
    /// Prepares encoders for every column of `batch`. With `kind`, each object starts with a
    /// `"kind"` member (for streams that mix kinds, like a JSON lines file).
    pub fn new(batch: &'a RecordBatch, kind: Option<EventKind>) -> Result<Self, ArrowError> {
        let schema = batch.schema_ref();
        let mut opening = b"{".to_vec();
        if let Some(kind) = kind {
            opening.extend_from_slice(format!("\"kind\":\"{kind}\"").as_bytes());
        }
        let mut keys = Vec::with_capacity(schema.fields().len());
        let mut columns = Vec::with_capacity(schema.fields().len());
        for (index, field) in schema.fields().iter().enumerate() {
            let mut key = Vec::new();
            if index > 0 || kind.is_some() {
                key.push(b',');
            }
            serde_json::to_writer(&mut key, field.name()).expect("string to memory");
            key.push(b':');
            keys.push(key);
            columns.push(make_encoder(field, batch.column(index).as_ref(), &OPTIONS)?);
        }
        Ok(Self {
            opening,
            keys,
            columns,
            rows: batch.num_rows(),
        })
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.rows
    }

    /// True when the batch has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// Appends row `row` as one JSON object (no trailing newline) to `out`.
    pub fn write_row(&mut self, row: usize, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.opening);
        for (key, column) in self.keys.iter().zip(self.columns.iter_mut()) {
            out.extend_from_slice(key);
            if column.is_null(row) {
                out.extend_from_slice(b"null");
            } else {
                column.encode(row, out);
            }
        }
        out.push(b'}');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{cuda_batch, xid_batch_with, xid_record};

    fn objects(batch: &RecordBatch, kind: Option<EventKind>) -> Vec<serde_json::Value> {
        let mut rows = JsonRows::new(batch, kind).unwrap();
        (0..rows.len())
            .map(|row| {
                let mut out = Vec::new();
                rows.write_row(row, &mut out);
                serde_json::from_slice(&out).unwrap()
            })
            .collect()
    }

    #[test]
    fn every_column_is_a_key_with_its_value() {
        let batch = cuda_batch(3, 700).records;
        let objects = objects(&batch, None);
        assert_eq!(objects.len(), 3);
        let names: Vec<&str> = batch
            .schema_ref()
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        for object in &objects {
            let keys: Vec<&str> = object
                .as_object()
                .unwrap()
                .keys()
                .map(|k| k.as_str())
                .collect();
            let mut expected = names.clone();
            expected.sort_unstable();
            let mut keys = keys;
            keys.sort_unstable();
            assert_eq!(keys, expected);
        }
        for (row, object) in objects.iter().enumerate() {
            assert_eq!(object["time_ns"], row as i64);
            assert_eq!(object["pid"], 1);
            assert_eq!(object["function"], "cuLaunchKernel");
            assert_eq!(object["result"], 700);
            assert_eq!(object["bytes"], row as u64);
            assert_eq!(object["device_ptr"], serde_json::Value::Null);
            assert_eq!(object["host"], "h");
        }
    }

    #[test]
    fn timestamps_are_rfc3339_utc_and_kind_leads_when_asked() {
        let batch = xid_batch_with(&[xid_record(79, "0000:3b:00.0", "fell off")]).records;
        let objects = objects(&batch, Some(EventKind::Xid));
        let mut out = Vec::new();
        JsonRows::new(&batch, Some(EventKind::Xid))
            .unwrap()
            .write_row(0, &mut out);
        assert!(
            out.starts_with(b"{\"kind\":\"xid\",\"time\":"),
            "{}",
            String::from_utf8_lossy(&out)
        );
        assert_eq!(objects[0]["kind"], "xid");
        assert_eq!(objects[0]["time"], "2023-11-14T22:13:20.123456Z");
        assert_eq!(objects[0]["time_ns"], 1_700_000_000_123_456_789_i64);
        assert_eq!(objects[0]["code"], 79);
        assert_eq!(objects[0]["pci_bus_id"], "0000:3b:00.0");
        assert_eq!(objects[0]["message_truncated"], false);
    }

    #[test]
    fn strings_are_escaped() {
        let message = "quote \" and \\ and \n newline \u{1}";
        let batch = xid_batch_with(&[xid_record(13, "0000:3b:00.0", message)]).records;
        assert_eq!(objects(&batch, None)[0]["message"], message);
    }
}
