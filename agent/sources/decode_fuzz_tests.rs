//! Fuzzing of the ring-record decoder: any bytes, of any length, offered as a record of each
//! kind decode or are rejected, never panic; valid records built from random field values
//! (type limits included) decode to exactly those values.
//!
//! A short budget runs with the unit tests; `PROPTEST_CASES=N` runs N cases per property
//! (docs/fuzzing.md). Failing seeds are kept in `proptest-regressions/sources/decode_fuzz_tests.txt`.

use proptest::prelude::*;

use std::sync::Arc;

use gpuship_sinks::schema::{CudaRow, LaunchDims, XidRecord, XidSource};

use crate::bpf::cuda::types::cuda_event as CudaEvent;
use crate::bpf::cuda::types::{cuda_event, gpuship_arg_valid, gpuship_record_kind};
use crate::bpf::driver::types::driver_event;
use crate::bpf::xid::types::{gpuship_xid_flag, xid_event};
use crate::decode::{c_chars, record_bytes, DecodeError};
use crate::enrich::{Clocks, GpuDirectory};
use crate::sources::cuda::decode::{cuda_event, Decoder as CudaDecoder, NOT_CAPTURED};
use crate::sources::driver::decode::driver_row;
use crate::sources::driver::devices::DeviceNames;
use crate::sources::driver::requests;
use crate::sources::functions::FunctionTable;
use crate::sources::xid_tracepoint::decode::xid_record;
use gpuship_model::cuda_results::result_name;

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

/// Cases per property in the normal test run, unless `PROPTEST_CASES` says otherwise.
const SHORT_BUDGET: u32 = 512;

fn budget() -> ProptestConfig {
    let mut config = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = SHORT_BUDGET;
    }
    config
}

const FUNCTIONS: [&str; 3] = ["cuMemAlloc_v2", "cuLaunchKernel", "cuMemcpyHtoD_v2"];
const SLOT_FUNCTIONS: usize = 8;

fn decoder(offset: i64) -> Decoder {
    Decoder::new(
        Clocks::fixed(offset, 0),
        FunctionTable::from_names(FUNCTIONS),
        Arc::new(GpuDirectory::default()),
    )
}

/// Slots 0, 2, 4, ... name a function; the odd ones are free.
fn slot_functions() -> Vec<Option<String>> {
    (0..SLOT_FUNCTIONS)
        .map(|slot| (slot % 2 == 0).then(|| format!("nv_slot_fn_{slot}")))
        .collect()
}

/// Device names that never come from this machine's /sys or /dev.
fn no_devices() -> DeviceNames {
    DeviceNames::new("/nonexistent/sys/dev/char", "/nonexistent/dev")
}

/// Where the decoder must put a BPF boot timestamp: after the offset, saturating, and never a
/// wrapped (negative) value for a timestamp past `i64::MAX`.
fn expected_time(boot_ns: u64, offset: i64) -> i64 {
    i64::try_from(boot_ns)
        .unwrap_or(i64::MAX)
        .saturating_add(offset)
}

fn to_chars<const N: usize>(bytes: &[u8]) -> [i8; N] {
    let mut out = [0i8; N];
    for (dst, &src) in out.iter_mut().zip(bytes) {
        *dst = src as i8;
    }
    out
}

/// What `c_chars` must make of these bytes: up to the first NUL, invalid UTF-8 replaced.
fn text_of(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// Any bytes, often starting with the tag the decoder looks for so that the checks after the
/// tag are reached too.
fn record_like(tag: u32, max_len: usize) -> impl Strategy<Value = Vec<u8>> {
    (
        prop::collection::vec(any::<u8>(), 0..max_len),
        any::<bool>(),
    )
        .prop_map(move |(mut bytes, tagged)| {
            if tagged && bytes.len() >= 4 {
                bytes[..4].copy_from_slice(&tag.to_ne_bytes());
            }
            bytes
        })
}

/// Every byte of a valid comm, NUL included, any length up to the array's.
fn comm_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..=16)
}

fn cuda_values() -> impl Strategy<Value = CudaEvent> {
    let ids = (0..FUNCTIONS.len() as u32, any::<u64>(), any::<u64>());
    let who = (any::<u32>(), any::<u32>(), any::<u32>(), 0u32..16);
    let args = (any::<u64>(), any::<u64>(), any::<u64>());
    let launch = (any::<[u32; 3]>(), any::<[u32; 3]>(), any::<u32>());
    (ids, who, args, launch, comm_bytes()).prop_map(
        |(
            (function_id, start_boot_ns, duration_ns),
            (pid, tid, result, valid),
            args,
            launch,
            comm,
        )| {
            CudaEvent {
                record_kind: gpuship_record_kind::GPUSHIP_RECORD_CUDA.0,
                function_id,
                start_boot_ns,
                duration_ns,
                pid,
                tid,
                result,
                valid,
                bytes: args.0,
                device_ptr: args.1,
                stream: args.2,
                grid: launch.0,
                block: launch.1,
                shared_mem_bytes: launch.2,
                comm: to_chars(&comm),
                ..Default::default()
            }
        },
    )
}

proptest! {
    #![proptest_config(budget())]

    #[test]
    fn any_bytes_as_a_cuda_record_decode_or_are_rejected(
        raw in record_like(gpuship_record_kind::GPUSHIP_RECORD_CUDA.0, 2 * std::mem::size_of::<CudaEvent>()),
        offset in any::<i64>(),
    ) {
        let decoder = decoder(offset);
        if let Ok(event) = cuda_event(&raw) {
            prop_assert!(raw.len() >= std::mem::size_of::<CudaEvent>());
            let comm = c_chars(&event.comm);
            match decoder.cuda_row(&event, &comm) {
                Ok(row) => prop_assert!((event.function_id as usize) < FUNCTIONS.len(), "{row:?}"),
                Err(err) => prop_assert_eq!(err, DecodeError::UnknownFunction(event.function_id)),
            }
        }
    }

    #[test]
    fn any_bytes_as_an_xid_record_decode_or_are_rejected(
        raw in record_like(gpuship_record_kind::GPUSHIP_RECORD_XID.0, 2 * std::mem::size_of::<xid_event>()),
        offset in any::<i64>(),
    ) {
        match decoder(offset).xid_record(&raw) {
            Ok(record) => {
                prop_assert!(raw.len() >= std::mem::size_of::<xid_event>());
                prop_assert!(record.pci_bus_id.len() <= 4 * 32 && record.message.len() <= 4 * 512);
            }
            Err(DecodeError::TooShort { len, .. }) => prop_assert_eq!(len, raw.len()),
            Err(err) => prop_assert!(matches!(err, DecodeError::WrongKind { .. }), "{err}"),
        }
    }

    #[test]
    fn any_bytes_as_a_driver_record_decode_or_are_rejected(
        raw in record_like(gpuship_record_kind::GPUSHIP_RECORD_DRIVER.0, 2 * std::mem::size_of::<driver_event>()),
        hook in prop::option::of(prop_oneof![0u32..=(SLOT_FUNCTIONS as u32 + 1), any::<u32>()]),
    ) {
        let mut raw = raw;
        // The hook field follows the tag: aim it at the ioctl hook and the slots often.
        if let (Some(hook), Some(field)) = (hook, raw.get_mut(4..8)) {
            field.copy_from_slice(&hook.to_ne_bytes());
        }
        let result = driver_row(&raw, &Clocks::fixed(0, 0), &slot_functions(), &mut no_devices());
        if let Err(err) = result {
            prop_assert!(
                matches!(err, DecodeError::TooShort { .. } | DecodeError::WrongKind { .. } | DecodeError::UnknownHook(_)),
                "{err}"
            );
        }
    }

    #[test]
    fn valid_cuda_records_round_trip(event in cuda_values(), offset in any::<i64>(), tail in prop::collection::vec(any::<u8>(), 0..8)) {
        let mut raw = record_bytes(&event);
        // Longer records (a newer ABI's extra fields) decode the same.
        raw.extend(tail);
        let decoded = cuda_event(&raw).expect("a valid record");
        let comm = c_chars(&decoded.comm);
        let decoder = decoder(offset);
        let row = decoder.cuda_row(&decoded, &comm).expect("a known function");
        let valid = |flag: gpuship_arg_valid| event.valid & flag.0 != 0;
        prop_assert_eq!(row.time_ns, expected_time(event.start_boot_ns, offset));
        prop_assert_eq!((row.pid as u32, row.tid as u32), (event.pid, event.tid));
        prop_assert_eq!(row.comm, text_of(&record_bytes(&event.comm)));
        prop_assert_eq!(row.function, FUNCTIONS[event.function_id as usize]);
        prop_assert_eq!(row.duration_ns, event.duration_ns);
        if event.result == NOT_CAPTURED {
            prop_assert_eq!((row.result, row.result_name), (0, "NOT_CAPTURED"));
        } else {
            prop_assert_eq!((row.result, row.result_name), (event.result, result_name(event.result)));
        }
        prop_assert_eq!(row.bytes, valid(gpuship_arg_valid::GPUSHIP_ARG_BYTES).then_some(event.bytes));
        prop_assert_eq!(row.device_ptr, valid(gpuship_arg_valid::GPUSHIP_ARG_DEVICE_PTR).then_some(event.device_ptr));
        prop_assert_eq!(row.stream, valid(gpuship_arg_valid::GPUSHIP_ARG_STREAM).then_some(event.stream));
        // Every launch field with LAUNCH; the register ones with GRID alone (block z and the
        // shared memory are then nulls in the batch).
        let full = valid(gpuship_arg_valid::GPUSHIP_ARG_LAUNCH);
        let launch = LaunchDims { grid: event.grid, block: event.block, shared_mem_bytes: event.shared_mem_bytes, registers_only: !full };
        prop_assert_eq!(row.launch, (full || valid(gpuship_arg_valid::GPUSHIP_ARG_GRID)).then_some(launch));
    }

    #[test]
    fn valid_xid_records_round_trip(
        (code, boot_ns, pid, tid, flags) in (any::<u32>(), any::<u64>(), any::<u32>(), any::<u32>(), any::<u32>()),
        bus in "[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\\.[0-7]",
        msg in prop::collection::vec(1u8..=255, 0..=512),
        comm in comm_bytes(),
        offset in any::<i64>(),
    ) {
        let event = xid_event {
            record_kind: gpuship_record_kind::GPUSHIP_RECORD_XID.0,
            error_code: code,
            boot_time_ns: boot_ns,
            pid,
            tid,
            dev_len: bus.len() as u16,
            msg_len: msg.len() as u16,
            flags,
            comm: to_chars(&comm),
            dev: to_chars(bus.as_bytes()),
            msg: to_chars(&msg),
        };
        let record = decoder(offset).xid_record(&record_bytes(&event)).expect("a valid record");
        let message = String::from_utf8_lossy(&msg).trim_end().to_string();
        prop_assert_eq!(record.code, code);
        prop_assert_eq!(record.time_ns, expected_time(boot_ns, offset));
        prop_assert_eq!(&record.pci_bus_id, &bus.to_lowercase());
        prop_assert_eq!(&record.message, &message);
        prop_assert_eq!(record.raw_tracepoint, Some(format!("Xid (PCI:{}): {code}, {message}", bus.to_lowercase())));
        prop_assert_eq!(record.reporter_pid.map(|p| p as u32), Some(pid));
        prop_assert_eq!(record.reporter_comm, Some(text_of(&comm)));
        prop_assert_eq!(record.message_truncated, flags & gpuship_xid_flag::GPUSHIP_XID_MSG_TRUNCATED.0 != 0);
        prop_assert_eq!(record.source, XidSource::Tracepoint);
    }

    #[test]
    fn valid_driver_records_round_trip(
        (hook, boot_ns, duration_ns, ret) in (0u32..=SLOT_FUNCTIONS as u32, any::<u64>(), any::<u64>(), any::<i64>()),
        (pid, tid, fd, request) in (any::<u32>(), any::<u32>(), any::<u32>(), any::<u32>()),
        (major, minor) in (any::<u32>(), any::<u32>()),
        comm in comm_bytes(),
        offset in any::<i64>(),
    ) {
        let event = driver_event {
            record_kind: gpuship_record_kind::GPUSHIP_RECORD_DRIVER.0,
            hook,
            start_boot_ns: boot_ns,
            duration_ns,
            pid,
            tid,
            ret,
            fd,
            request,
            major,
            minor,
            comm: to_chars(&comm),
        };
        let slots = slot_functions();
        let result = driver_row(&record_bytes(&event), &Clocks::fixed(offset, 0), &slots, &mut no_devices());
        let slot = hook.checked_sub(1).map(|s| s as usize);
        let Some(slot) = slot else {
            // The ioctl hook.
            let row = result.expect("an ioctl record");
            let decoded = requests::decode(request, None);
            prop_assert_eq!(row.time_ns, expected_time(boot_ns, offset));
            prop_assert_eq!((row.pid as u32, row.tid as u32, row.fd.map(|f| f as u32)), (pid, tid, Some(fd)));
            prop_assert_eq!((row.major, row.minor, row.request, row.result), (Some(major), Some(minor), Some(request), Some(ret)));
            prop_assert_eq!((row.request_nr, row.request_size), (Some(decoded.nr), decoded.size));
            prop_assert_eq!((row.duration_ns, row.hook.as_str(), row.device), (duration_ns, "ioctl", None));
            prop_assert_eq!(row.comm, text_of(&comm));
            return Ok(());
        };
        match slots.get(slot).cloned().flatten() {
            Some(function) => {
                let row = result.expect("a slot that names a function");
                prop_assert_eq!(row.hook, function);
                prop_assert_eq!(row.time_ns, expected_time(boot_ns, offset));
                prop_assert_eq!((row.pid as u32, row.tid as u32, row.duration_ns), (pid, tid, duration_ns));
                prop_assert_eq!((row.fd, row.request, row.result), (None, None, None));
            }
            None => prop_assert_eq!(result.unwrap_err(), DecodeError::UnknownHook(hook)),
        }
    }
}

/// Found by the round-trip properties: a boot timestamp past `i64::MAX` (a corrupt record)
/// wrapped to a time before 1970 in every record kind.
#[test]
fn regression_boot_time_past_i64_saturates() {
    let event = CudaEvent {
        record_kind: gpuship_record_kind::GPUSHIP_RECORD_CUDA.0,
        start_boot_ns: 1 << 63,
        ..Default::default()
    };
    let decoder = decoder(0);
    let row = decoder.cuda_row(&event, "x").expect("function 0 is known");
    assert_eq!(row.time_ns, i64::MAX);
    let xid = xid_event {
        record_kind: gpuship_record_kind::GPUSHIP_RECORD_XID.0,
        boot_time_ns: u64::MAX,
        ..Default::default()
    };
    let record = decoder
        .xid_record(&record_bytes(&xid))
        .expect("a valid record");
    assert_eq!(record.time_ns, i64::MAX);
    let driver = driver_event {
        record_kind: gpuship_record_kind::GPUSHIP_RECORD_DRIVER.0,
        start_boot_ns: (1 << 63) + 5,
        ..Default::default()
    };
    let clocks = Clocks::fixed(-10, 0);
    let row =
        driver_row(&record_bytes(&driver), &clocks, &[], &mut no_devices()).expect("an ioctl");
    assert_eq!(row.time_ns, i64::MAX - 10);
}
