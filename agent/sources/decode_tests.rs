//! Decoder tests on hand-built records.

use std::sync::Arc;

use gpuship_sinks::schema::{CudaRow, LaunchDims, XidRecord, XidSource};

use crate::bpf::cuda::types::{cuda_event, gpuship_arg_valid, gpuship_record_kind};
use crate::bpf::xid::types::xid_event;
use crate::decode::{c_chars, record_bytes, DecodeError};
use crate::enrich::{Clocks, GpuDirectory};
use crate::sources::cuda::decode::{cuda_event, Decoder as CudaDecoder};
use crate::sources::cuda::plan::FunctionTable;
use crate::sources::xid_tracepoint::decode::xid_record;
use gpuship_sinks::schema::GpuIdentity;

/// The CUDA decoder and the XID tracepoint's decoding with one set of clocks and GPUs, as
/// these tests use them (each source decodes its own records).
struct Decoder {
    cuda: CudaDecoder,
    clocks: Clocks,
    gpus: Arc<GpuDirectory>,
}

impl Decoder {
    fn new(clocks: Clocks, functions: FunctionTable, gpus: Arc<GpuDirectory>) -> Self {
        Self {
            cuda: CudaDecoder::new(clocks, functions),
            clocks,
            gpus,
        }
    }

    fn cuda_row<'a>(
        &'a self,
        event: &cuda_event,
        comm: &'a str,
    ) -> Result<CudaRow<'a>, DecodeError> {
        self.cuda.cuda_row(event, comm)
    }

    fn xid_record(&self, raw: &[u8]) -> Result<XidRecord, DecodeError> {
        xid_record(raw, &self.clocks, &self.gpus)
    }
}

fn decoder() -> Decoder {
    Decoder::new(
        Clocks::fixed(1_000_000_000, 0),
        FunctionTable::from_names(["cuMemAlloc_v2", "cuLaunchKernel"]),
        Arc::new(GpuDirectory::default()),
    )
}

fn comm(text: &str) -> [i8; 16] {
    let mut out = [0i8; 16];
    for (dst, src) in out.iter_mut().zip(text.bytes()) {
        *dst = src as i8;
    }
    out
}

fn alloc_event() -> cuda_event {
    cuda_event {
        record_kind: gpuship_record_kind::GPUSHIP_RECORD_CUDA.0,
        function_id: 0,
        start_boot_ns: 5,
        duration_ns: 700,
        pid: 42,
        tid: 43,
        result: 2,
        valid: gpuship_arg_valid::GPUSHIP_ARG_BYTES.0,
        bytes: 1 << 40,
        comm: comm("trainer"),
        ..Default::default()
    }
}

#[test]
fn cuda_record_becomes_a_row() {
    let raw = record_bytes(&alloc_event());
    let event = cuda_event(&raw).unwrap();
    let name = c_chars(&event.comm);
    let decoder = decoder();
    let row = decoder.cuda_row(&event, &name).unwrap();
    assert_eq!(row.time_ns, 1_000_000_005);
    assert_eq!(
        (row.pid, row.tid, row.comm, row.function),
        (42, 43, "trainer", "cuMemAlloc_v2")
    );
    assert_eq!(
        (row.result, row.result_name),
        (2, "CUDA_ERROR_OUT_OF_MEMORY")
    );
    assert_eq!(row.bytes, Some(1 << 40));
    assert_eq!((row.device_ptr, row.stream, row.launch), (None, None, None));
}

#[test]
fn launch_dims_are_decoded_when_flagged() {
    let mut event = alloc_event();
    event.function_id = 1;
    event.valid = gpuship_arg_valid::GPUSHIP_ARG_LAUNCH.0 | gpuship_arg_valid::GPUSHIP_ARG_STREAM.0;
    event.grid = [120, 2, 1];
    event.block = [256, 1, 1];
    event.shared_mem_bytes = 1024;
    event.stream = 0x5000;
    let decoder = decoder();
    let row = decoder.cuda_row(&event, "x").unwrap();
    assert_eq!(
        row.launch,
        Some(LaunchDims {
            grid: [120, 2, 1],
            block: [256, 1, 1],
            shared_mem_bytes: 1024,
            registers_only: false,
        })
    );
    assert_eq!(row.stream, Some(0x5000));
    assert_eq!(row.bytes, None);
}

#[test]
fn register_only_launches_have_grid_and_block_xy() {
    let mut event = alloc_event();
    event.function_id = 1;
    event.valid = gpuship_arg_valid::GPUSHIP_ARG_GRID.0;
    event.grid = [120, 2, 1];
    event.block = [256, 4, 0];
    let decoder = decoder();
    let row = decoder.cuda_row(&event, "x").unwrap();
    assert_eq!(
        row.launch,
        Some(LaunchDims {
            grid: [120, 2, 1],
            block: [256, 4, 0],
            shared_mem_bytes: 0,
            registers_only: true,
        })
    );
    assert_eq!(row.stream, None);
}

#[test]
fn malformed_records_are_errors_not_panics() {
    let raw = record_bytes(&alloc_event());
    assert!(matches!(
        cuda_event(&raw[..10]),
        Err(DecodeError::TooShort { len: 10, .. })
    ));
    assert!(matches!(
        cuda_event(&[]),
        Err(DecodeError::TooShort { len: 0, .. })
    ));
    let mut wrong = alloc_event();
    wrong.record_kind = 7;
    assert!(matches!(
        cuda_event(&record_bytes(&wrong)),
        Err(DecodeError::WrongKind { found: 7, .. })
    ));
    let mut unknown = alloc_event();
    unknown.function_id = 99;
    assert_eq!(
        decoder().cuda_row(&unknown, "x").unwrap_err(),
        DecodeError::UnknownFunction(99)
    );
    // Every prefix of a valid record and garbage of every length is rejected or decoded, never a panic.
    for len in 0..raw.len() + 8 {
        let mut bytes = raw.clone();
        bytes.resize(len, 0xAB);
        let _ = cuda_event(&bytes);
        let _ = decoder().xid_record(&bytes);
    }
}

#[test]
fn xid_tracepoint_record_is_enriched_with_the_gpu() {
    let mut event = xid_event {
        record_kind: gpuship_record_kind::GPUSHIP_RECORD_XID.0,
        error_code: 31,
        boot_time_ns: 10,
        pid: 7,
        tid: 7,
        comm: comm("irq/97-nvidia"),
        ..Default::default()
    };
    let dev = b"0000:00:06.0";
    let msg = b"channel 0x0000000a, intr 00000000. MMU Fault";
    for (dst, &src) in event.dev.iter_mut().zip(dev) {
        *dst = src as i8;
    }
    for (dst, &src) in event.msg.iter_mut().zip(msg) {
        *dst = src as i8;
    }
    event.dev_len = dev.len() as u16;
    event.msg_len = msg.len() as u16;
    let dir = tempfile::tempdir().unwrap();
    let gpu_dir = dir.path().join("0000:00:06.0");
    std::fs::create_dir_all(&gpu_dir).unwrap();
    std::fs::write(
        gpu_dir.join("information"),
        "Model: \t NVIDIA H200\nGPU UUID: \t GPU-abc\nBus Location: \t 0000:00:06.0\n",
    )
    .unwrap();
    let decoder = Decoder::new(
        Clocks::fixed(100, 0),
        FunctionTable::default(),
        Arc::new(GpuDirectory::load(dir.path())),
    );
    let record = decoder.xid_record(&record_bytes(&event)).unwrap();
    assert_eq!(record.code, 31);
    assert_eq!(record.time_ns, 110);
    assert_eq!(record.pci_bus_id, "0000:00:06.0");
    assert_eq!(
        record.message,
        "channel 0x0000000a, intr 00000000. MMU Fault"
    );
    assert_eq!(
        record.gpu.as_deref(),
        Some(&GpuIdentity {
            uuid: "GPU-abc".into(),
            model: "NVIDIA H200".into(),
            index: 0,
            minor: None,
        })
    );
    assert_eq!(record.reporter_comm.as_deref(), Some("irq/97-nvidia"));
    assert_eq!((record.pid, record.source), (None, XidSource::Tracepoint));
    assert!(!record.message_truncated);
}

#[test]
fn thread_names_are_text_whatever_their_bytes() {
    let chars = |bytes: &[u8]| bytes.iter().map(|&b| b as i8).collect::<Vec<i8>>();
    // NUL-padded, as the kernel writes them.
    assert_eq!(c_chars(&comm("trainer")), "trainer");
    assert!(matches!(
        c_chars(&comm("trainer")),
        std::borrow::Cow::Borrowed(_)
    ));
    // All 16 bytes used, no NUL.
    assert_eq!(c_chars(&chars(b"0123456789abcdef")), "0123456789abcdef");
    assert_eq!(c_chars(&chars(b"\0junk")), "");
    // Invalid UTF-8 (a name cut inside a multi-byte character) is replaced, not rejected.
    assert_eq!(c_chars(&chars(b"gpu\xe2\x82\0")), "gpu\u{fffd}");
    assert_eq!(c_chars(&chars(b"\xff\xfeok\0")), "\u{fffd}\u{fffd}ok");
}
