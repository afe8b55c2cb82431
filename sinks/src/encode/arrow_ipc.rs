//! One record batch as a self-contained Arrow IPC stream (schema, the batch, end marker), so
//! each Kafka message can be read on its own with any Arrow reader
//! (`pyarrow.ipc.open_stream(message.value())`). The schema carries the schema-version metadata.

use arrow_array::RecordBatch;
use arrow_ipc::writer::StreamWriter;
use arrow_schema::ArrowError;

/// Appends `batch` as an IPC stream to `out`.
pub fn write_stream(batch: &RecordBatch, out: &mut Vec<u8>) -> Result<(), ArrowError> {
    let mut writer = StreamWriter::try_new(out, batch.schema_ref())?;
    writer.write(batch)?;
    writer.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_ipc::reader::StreamReader;

    #[test]
    fn a_stream_reads_back_as_the_same_batch() {
        let batch = crate::test_support::cuda_batch(5, 2).records;
        let mut bytes = Vec::new();
        write_stream(&batch, &mut bytes).unwrap();
        let reader = StreamReader::try_new(bytes.as_slice(), None).unwrap();
        assert_eq!(
            reader
                .schema()
                .metadata()
                .get(crate::schema::SCHEMA_VERSION_KEY),
            Some(&crate::schema::SCHEMA_VERSION.to_string())
        );
        let batches: Vec<RecordBatch> = reader.map(|b| b.unwrap()).collect();
        assert_eq!(batches, vec![batch]);
    }
}
