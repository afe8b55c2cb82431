//! Named ring records (a kernel getter's call and the name it took), hand-built.

use super::*;
use crate::decode::record_bytes;
use crate::enrich::Clocks;
use crate::sources::functions::FunctionTable;

fn named(name: &[u8], len: u32, flags: u32) -> cuda_named_event {
    let mut event = cuda_named_event {
        call: cuda_event {
            record_kind: gpuship_record_kind::GPUSHIP_RECORD_CUDA_NAMED.0,
            pid: 7,
            tid: 8,
            valid: gpuship_arg_valid::GPUSHIP_ARG_HANDLE.0
                | gpuship_arg_valid::GPUSHIP_ARG_PARENT_HANDLE.0,
            handle: u64::MAX,
            parent_handle: 0x4d00,
            ..Default::default()
        },
        name_ptr: 0x7fff_0000_1000,
        name_len: len,
        name_flags: flags,
        ..Default::default()
    };
    for (dst, src) in event.name.iter_mut().zip(name) {
        *dst = *src as i8;
    }
    event
}

#[test]
fn a_named_record_is_a_call_and_its_name() {
    let raw = record_bytes(&named(b"_Z10wild_writePi", 16, 0));
    let event = cuda_event(&raw).unwrap();
    let name = record_name(&raw, &event).unwrap().unwrap();
    assert_eq!(name.bytes, b"_Z10wild_writePi");
    assert_eq!(name.address, 0x7fff_0000_1000);
    assert!(!name.maybe_truncated && !name.unreadable);
    let decoder = Decoder::new(
        Clocks::fixed(0, 0),
        FunctionTable::from_names(["cuLibraryGetKernel"]),
    );
    let row = decoder.cuda_row(&event, "").unwrap();
    assert_eq!(row.objects.handle, Some(u64::MAX));
    assert_eq!(row.objects.parent_handle, Some(0x4d00));
    // A plain record has no name; its handles are null unless their bits say otherwise.
    let mut plain = event;
    plain.record_kind = gpuship_record_kind::GPUSHIP_RECORD_CUDA.0;
    plain.valid = 0;
    assert_eq!(record_name(&record_bytes(&plain), &plain).unwrap(), None);
    let row = decoder.cuda_row(&plain, "").unwrap();
    assert_eq!(
        (row.objects.handle, row.objects.parent_handle),
        (None, None)
    );
}

#[test]
fn flags_say_cut_or_unreadable() {
    let full = vec![b'x'; 4095];
    let raw = record_bytes(&named(&full, 4095, 1));
    let event = cuda_event(&raw).unwrap();
    let name = record_name(&raw, &event).unwrap().unwrap();
    assert_eq!(name.bytes.len(), 4095);
    assert!(name.maybe_truncated);
    let raw = record_bytes(&named(b"", 0, 2));
    let event = cuda_event(&raw).unwrap();
    let name = record_name(&raw, &event).unwrap().unwrap();
    assert!(name.unreadable && name.bytes.is_empty());
}

#[test]
fn a_bad_named_record_is_an_error_not_a_panic() {
    // A length beyond the buffer.
    for len in [4096, u32::MAX] {
        let raw = record_bytes(&named(b"k", len, 0));
        let event = cuda_event(&raw).unwrap();
        assert!(matches!(
            record_name(&raw, &event),
            Err(DecodeError::FieldOverrun {
                field: "name_len",
                ..
            })
        ));
    }
    // A named kind on a record only as long as a plain one.
    let raw = record_bytes(&named(b"k", 1, 0));
    let short = &raw[..std::mem::size_of::<cuda_event>()];
    let event = cuda_event(short).unwrap();
    assert!(matches!(
        record_name(short, &event),
        Err(DecodeError::TooShort { .. })
    ));
    // Every prefix: rejected or decoded, never a panic.
    for len in 0..raw.len() {
        if let Ok(event) = cuda_event(&raw[..len]) {
            let _ = record_name(&raw[..len], &event);
        }
    }
}
