//! Fuzzing of the kmsg record and XID line parsers: any bytes as a `/dev/kmsg` record and any
//! text as a message parse or are rejected with a bounded error, never panic; XID lines built
//! from random bus ids, codes at the u32 limits, pids and process names (quotes, newlines,
//! backslashes, invalid UTF-8), escaped as the kernel escapes them, parse back to those values.
//!
//! A short budget runs with the unit tests; `PROPTEST_CASES=N` runs N cases per property
//! (docs/fuzzing.md). Failing seeds are kept in
//! `proptest-regressions/sources/kmsg/parse/fuzz_tests.txt`.

use proptest::prelude::*;

use super::*;
use crate::enrich::{Clocks, GpuDirectory};

/// Cases per property in the normal test run, unless `PROPTEST_CASES` says otherwise.
const SHORT_BUDGET: u32 = 1024;

fn budget() -> ProptestConfig {
    let mut config = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = SHORT_BUDGET;
    }
    config
}

/// An error quotes at most `MAX_QUOTED_CHARS` of the line plus a short token, each character
/// escaped as `{:?}` does (`\u{10ffff}` at most): its text stays bounded whatever the input.
const MAX_ERROR_CHARS: usize = (MAX_QUOTED_CHARS + MAX_QUOTED_TOKEN_CHARS + 2) * 10 + 200;

/// The kernel's `/dev/kmsg` escaping: control bytes, bytes >= 0x7f and `\` as `\xNN`.
fn kernel_escape(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    for &b in bytes {
        if !(b' '..0x7f).contains(&b) || b == b'\\' {
            out.extend(format!("\\x{b:02x}").bytes());
        } else {
            out.push(b);
        }
    }
    out
}

/// A bus id as the driver may spell it, and the normalized form the parser must return.
fn bus_id() -> impl Strategy<Value = (String, String)> {
    let prefix = prop_oneof![Just(""), Just("PCI:"), Just("pci:")];
    let domain = prop::option::of("[0-9a-fA-F]{1,8}");
    let parts = (
        "[0-9a-fA-F]{1,2}",
        "[0-9a-fA-F]{1,2}",
        prop::option::of("[0-9a-fA-F]"),
    );
    (prefix, domain, parts).prop_map(|(prefix, domain, (bus, device, function))| {
        let mut raw = String::from(prefix);
        if let Some(domain) = &domain {
            raw.push_str(&format!("{domain}:"));
        }
        raw.push_str(&format!("{bus}:{device}"));
        if let Some(function) = &function {
            raw.push_str(&format!(".{function}"));
        }
        let domain = domain.unwrap_or_else(|| "0000".into());
        let function = function.unwrap_or_else(|| "0".into());
        let normal = format!("{domain:0>4}:{bus:0>2}:{device:0>2}.{function}").to_lowercase();
        (raw, normal)
    })
}

/// A code around the interesting values: small, near the catalog's range, at the u32 limits.
fn code() -> impl Strategy<Value = u32> {
    prop_oneof![
        0u32..200,
        Just(u32::MAX),
        Just(u32::MAX - 1),
        Just(0),
        any::<u32>()
    ]
}

/// `pid=` values: numbers (any i32) and the driver's spellings of "unknown".
fn pid() -> impl Strategy<Value = (String, Option<i32>)> {
    prop_oneof![
        any::<i32>().prop_map(|p| (p.to_string(), Some(p))),
        Just(("'<unknown>'".to_string(), None)),
        Just(("<unknown>".to_string(), None)),
    ]
}

/// Process name bytes: quotes, newlines, backslashes, escapes, invalid UTF-8; never the ", "
/// the driver separates fields with, which no parser could tell from a separator.
fn name() -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![
        Just(b'"'),
        Just(b'\''),
        Just(b'\n'),
        Just(b'\\'),
        Just(b'x'),
        Just(0xffu8),
        Just(0xc3u8),
        b'a'..=b'z',
        any::<u8>(),
    ];
    prop::collection::vec(byte, 1..24).prop_filter("no field separator", |name| {
        !name.windows(2).any(|w| w == b", ") && !name.ends_with(b",")
    })
}

/// The driver's text after the fields: starts with a letter that begins no field name.
fn message() -> impl Strategy<Value = Vec<u8>> {
    (b'A'..=b'Z', prop::collection::vec(any::<u8>(), 0..80)).prop_map(|(first, mut rest)| {
        rest.insert(0, first);
        rest
    })
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

proptest! {
    #![proptest_config(budget())]

    #[test]
    fn any_bytes_as_a_kmsg_record_parse_or_are_rejected(raw in prop::collection::vec(any::<u8>(), 0..400)) {
        match parse_record(&raw) {
            Ok(record) => {
                prop_assert!(record.level < 8);
                if let Err(err) = parse_xid(&record.message) {
                    prop_assert!(err.to_string().chars().count() <= MAX_ERROR_CHARS);
                }
            }
            Err(err) => prop_assert!(err.to_string().chars().count() <= MAX_ERROR_CHARS, "{err}"),
        }
    }

    #[test]
    fn any_header_and_text_after_the_marker_parse_or_are_rejected(
        header in "[0-9]{0,5},[0-9]{0,21},[0-9]{0,21}(,[-a-z=0-9]{0,8}){0,2}",
        tail in prop::collection::vec(any::<u8>(), 0..300),
    ) {
        let mut raw = format!("{header};NVRM: Xid ").into_bytes();
        raw.extend(&tail);
        if let Ok(record) = parse_record(&raw) {
            prop_assert!(record.message.starts_with("NVRM: Xid "));
            match parse_xid(&record.message) {
                Ok(xid) => prop_assert!(xid.is_some()),
                Err(err) => prop_assert!(err.to_string().chars().count() <= MAX_ERROR_CHARS, "{err}"),
            }
        }
    }

    #[test]
    fn any_text_as_a_message_parses_or_is_rejected(text in "(.|\n){0,200}", marker in any::<bool>()) {
        let text = if marker { format!("NVRM: Xid {text}") } else { text };
        match parse_xid(&text) {
            Ok(None) => prop_assert!(!text.contains("NVRM: Xid")),
            Ok(Some(xid)) => prop_assert!(xid.pci_bus_id.len() <= 16, "{xid:?}"),
            Err(err) => prop_assert!(err.to_string().chars().count() <= MAX_ERROR_CHARS, "{err}"),
        }
    }

    #[test]
    fn structured_xid_records_parse_back_to_their_values(
        (prio, seq, ts) in (0u32..2048, any::<u64>(), any::<u64>()),
        (raw_bus, bus) in bus_id(),
        mig in prop::option::of((any::<u32>(), any::<u32>())),
        code in code(),
        fields in prop::option::of((pid(), name())),
        text in message(),
        trailer in prop_oneof![Just(""), Just("\n"), Just("\n SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\n")],
    ) {
        let mut line = format!("NVRM: Xid ({raw_bus}");
        if let Some((gi, ci)) = mig {
            line.push_str(&format!(" GPU-I:{gi:02} GPU-CI:{ci:02}"));
        }
        line.push_str(&format!("): {code}, "));
        let mut line = line.into_bytes();
        if let Some(((pid_text, _), name)) = &fields {
            line.extend(format!("pid={pid_text}, name=").bytes());
            line.extend(name);
            line.extend(b", ");
        }
        line.extend(&text);
        let mut raw = format!("{prio},{seq},{ts},-;").into_bytes();
        raw.extend(kernel_escape(&line));
        raw.extend(trailer.bytes());

        let record = parse_record(&raw).expect("a valid record");
        prop_assert_eq!((record.facility, record.level), ((prio >> 3) as u8, (prio & 7) as u8));
        prop_assert_eq!((record.seq, record.timestamp_us), (seq, ts));
        prop_assert_eq!(&*record.message, lossy(&line));
        let xid = parse_xid(&record.message).expect("a valid XID line").expect("an XID line");
        prop_assert_eq!(&xid.pci_bus_id, &bus);
        prop_assert_eq!(xid.code, code);
        prop_assert_eq!((xid.mig_gpu_instance, xid.mig_compute_instance), (mig.map(|m| m.0), mig.map(|m| m.1)));
        let (want_pid, want_comm) = match &fields {
            Some(((_, pid), name)) => {
                let name = lossy(name);
                (*pid, (name != "<unknown>").then_some(name))
            }
            None => (None, None),
        };
        // The row's time: after the offset, saturating, never wrapped before 1970.
        let row = super::super::xid_record(&record, xid.clone(), &Clocks::fixed(0, 7), &GpuDirectory::default());
        let want_time = i64::try_from(ts).unwrap_or(i64::MAX).saturating_mul(1_000).saturating_add(7);
        prop_assert_eq!(row.time_ns, want_time);
        prop_assert_eq!(xid.pid, want_pid);
        prop_assert_eq!(xid.comm, want_comm);
        let message = lossy(&text);
        prop_assert_eq!(xid.message, message.trim_end());
    }

    #[test]
    fn codes_past_u32_are_overflow_errors(
        code in (u64::from(u32::MAX) + 1)..=u64::MAX,
        zeros in 0usize..3,
        (raw_bus, _) in bus_id(),
    ) {
        let line = format!("NVRM: Xid ({raw_bus}): {}{code}, x", "0".repeat(zeros));
        let err = parse_xid(&line).expect_err("too big for u32");
        prop_assert!(matches!(err, XidLineError::CodeOverflow { .. }), "{err:?}");
        // Leading zeros alone never overflow.
        let line = format!("NVRM: Xid ({raw_bus}): {}{}, x", "0".repeat(zeros), u32::MAX);
        prop_assert_eq!(parse_xid(&line).expect("fits").map(|x| x.code), Some(u32::MAX));
    }
}

/// Found by `structured_xid_records_parse_back_to_their_values`: a kmsg timestamp past
/// `i64::MAX` microseconds wrapped to a time before 1970.
#[test]
fn regression_kmsg_timestamp_past_i64_saturates() {
    let raw = format!("3,1,{},-;NVRM: Xid (PCI:0000:3b:00): 79, x", 1u64 << 63);
    let record = parse_record(raw.as_bytes()).expect("a valid record");
    let xid = parse_xid(&record.message)
        .expect("an XID")
        .expect("an XID line");
    let row =
        super::super::xid_record(&record, xid, &Clocks::fixed(0, 0), &GpuDirectory::default());
    assert_eq!(row.time_ns, i64::MAX);
}
