//! Tests of the kmsg record and XID line parsers.

use super::*;

const XID_31: &str = "NVRM: Xid (PCI:0000:00:06): 31, pid=468, name=python3, channel 0x0000000a, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC1 GPCCLIENT_T1_8 faulted @ 0x7f00_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE";

/// Renders an XID as `bus|code|pid|comm|message` (`-` for None) so each
/// case fits on a line of the tables below.
fn render(line: &str) -> String {
    match parse_xid(line) {
        Ok(Some(x)) => {
            let (bus, code, msg) = (x.pci_bus_id, x.code, x.message);
            let pid = x.pid.map_or("-".into(), |p| p.to_string());
            let comm = x.comm.unwrap_or_else(|| "-".into());
            format!("{bus}|{code}|{pid}|{comm}|{msg}")
        }
        other => format!("not an XID: {other:?}"),
    }
}

#[test]
fn real_driver_formats_and_edge_shapes() {
    let cases = [
        ("NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.", "0000:3b:00.0|79|-|-|GPU has fallen off the bus."),
        (XID_31, "0000:00:06.0|31|468|python3|channel 0x0000000a, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC1 GPCCLIENT_T1_8 faulted @ 0x7f00_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE"),
        ("NVRM: Xid (PCI:0000:ca:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.", "0000:ca:00.0|79|-|-|GPU has fallen off the bus."),
        ("NVRM: Xid (PCI:0000:18:00): 13, Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address", "0000:18:00.0|13|-|-|Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address"),
        ("NVRM: Xid (PCI:0000:18:00): 48, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.", "0000:18:00.0|48|-|-|An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0."),
        ("NVRM: Xid (PCI:0000:86:00): 94, pid=2112, name=pt_main_thread, Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x2c003", "0000:86:00.0|94|2112|pt_main_thread|Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x2c003"),
        ("NVRM: Xid (PCI:0000:18:00.0): 119, Timeout after 6s of waiting for RPC response from GPU0 GSP! ...", "0000:18:00.0|119|-|-|Timeout after 6s of waiting for RPC response from GPU0 GSP! ..."),
        ("NVRM: Xid (0000:03:00): 13, 0001 00000000 000090c0 00001b0c 00000000 00000000", "0000:03:00.0|13|-|-|0001 00000000 000090c0 00001b0c 00000000 00000000"),
        ("NVRM: Xid (PCI:0001:00:00): 62, pid=999, name=nvidia-smi, 0 (0000) ...", "0001:00:00.0|62|999|nvidia-smi|0 (0000) ..."),
        // Kernel-added prefixes, odd spacing, and shapes at the edges.
        ("[12345.678] NVRM: Xid (PCI:0000:3B:00): 79, GPU has fallen off the bus.\n", "0000:3b:00.0|79|-|-|GPU has fallen off the bus."),
        ("nvidia 0000:3b:00.0: NVRM: Xid (PCI:0000:3b:00): 79", "0000:3b:00.0|79|-|-|"),
        ("NVRM: Xid (PCI:0000:3b:00): 79, ", "0000:3b:00.0|79|-|-|"),
        ("NVRM: Xid (03:00.0): 43, pid=7, name=my app, x", "0000:03:00.0|43|7|my app|x"),
        ("NVRM: Xid (PCI:0000:3b:00): 43, pid=7, name=tail", "0000:3b:00.0|43|7|tail|"),
        ("NVRM: Xid (PCI:10000:3b:00.0) 45, x", "10000:3b:00.0|45|-|-|x"),
        ("NVRM: Xid (PCI:0000:3b:00): 4294967295", "0000:3b:00.0|4294967295|-|-|"),
    ];
    for (line, expected) in cases {
        assert_eq!(render(line), expected, "{line}");
    }
}

#[test]
fn non_xid_lines_are_none() {
    for line in [
        "NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64 580.159.04",
        "NVRM: GPU at PCI:0000:3b:00: GPU-8f6c7b2a-0000-0000-0000-000000000000",
        "usb 1-1: new high-speed USB device",
        "",
    ] {
        assert_eq!(parse_xid(line), Ok(None), "{line}");
    }
}

#[test]
fn malformed_xid_lines_are_errors_quoting_the_line() {
    let cases = [
        ("NVRM: Xid PCI:0000:3b:00: 79", "MissingOpenParen {"),
        ("NVRM: Xid (PCI:0000:3b:00: 79, x", "MissingCloseParen {"),
        ("NVRM: Xid (): 79, x", "EmptyBusId {"),
        ("NVRM: Xid (PCI:): 79, x", "EmptyBusId {"),
        (
            "NVRM: Xid (PCI:3b:zz): 79, x",
            r#"InvalidBusId { bus_id: "PCI:3b:zz""#,
        ),
        ("NVRM: Xid (PCI:0000:3b:00:00:00): 79", "InvalidBusId {"),
        ("NVRM: Xid (PCI:0000:3b:00): , x", "MissingCode {"),
        ("NVRM: Xid (PCI:0000:3b:00):", "MissingCode {"),
        (
            "NVRM: Xid (3b:00): 7x9, x",
            r#"NonNumericCode { code: "7x9""#,
        ),
        (
            "NVRM: Xid (3b:00): 4294967296, x",
            r#"CodeOverflow { code: "4294967296""#,
        ),
    ];
    for (line, expected) in cases {
        let err = parse_xid(line).expect_err(line);
        assert!(format!("{err:?}").starts_with(expected), "{line}: {err:?}");
        assert!(err.to_string().contains(&format!("{line:?}")), "{err}");
    }
}

#[test]
fn error_display_truncates_long_lines() {
    let line = format!("NVRM: Xid (PCI:0000:3b:00): {}", "é".repeat(500));
    let text = parse_xid(&line).expect_err("non-numeric").to_string();
    assert!(text.contains("NVRM: Xid (PCI:0000:3b:00)"), "{text}");
    assert!(text.contains('…'), "{text}");
    assert!(text.chars().count() < 300, "{text}");
}

fn header(r: &KmsgRecord<'_>) -> (u8, u8, u64, u64) {
    (r.facility, r.level, r.seq, r.timestamp_us)
}

#[test]
fn parse_record_full_raw_record() {
    let raw = b"4,1234,5678901,-,caller=T42;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=a\\x5cb, GPU has\\x0afallen \\xzz\n SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\n";
    let rec = parse_record(raw).expect("valid record");
    assert_eq!(header(&rec), (0, 4, 1234, 5678901));
    let want = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=a\\b, GPU has\nfallen \\xzz";
    assert_eq!(rec.message, want);
    let want = "0000:3b:00.0|79|1|a\\b|GPU has\nfallen \\xzz";
    assert_eq!(render(&rec.message), want);

    let rec = parse_record(b"30,7,9;hello").expect("no flags, no newline");
    assert_eq!(header(&rec), (3, 6, 7, 9));
    assert!(matches!(rec.message, Cow::Borrowed("hello")));
    let rec = parse_record(b"6,1,2,-;bad \\xff byte\n").expect("lossy");
    assert_eq!(rec.message, "bad \u{fffd} byte");
}

#[test]
fn parse_record_errors() {
    let cases: [(&[u8], &str); 7] = [
        (b"", "Empty"),
        (b"6,1,2,-\n;x", r#"MissingSeparator { text: "6,1,2,-" }"#),
        (b"6,1;x", r#"MissingField { field: "TS_USEC" }"#),
        (b"6,abc,2,-;x", r#"BadField { field: "SEQ", text: "abc" }"#),
        (b"2048,1,2;x", r#"BadField { field: "PRIO", text: "2048" }"#),
        (b";x", r#"BadField { field: "PRIO", text: "" }"#),
        (
            b"6,1,\xff;x",
            "BadField { field: \"TS_USEC\", text: \"\u{fffd}\" }",
        ),
    ];
    for (raw, expected) in cases {
        let got = format!("{:?}", parse_record(raw));
        assert_eq!(got, format!("Err({expected})"));
    }
}

#[test]
fn prefixes_and_mutations_never_panic() {
    let raw = format!("6,100,200,-;[1.0] {XID_31}\\x0a\\xc3\\xa9\n SUBSYSTEM=pci\n");
    let raw = raw.as_bytes();
    for end in 0..=raw.len() {
        if let Ok(rec) = parse_record(&raw[..end]) {
            let _ = parse_xid(&rec.message);
        }
    }
    for end in 0..=XID_31.len() {
        let _ = XID_31.get(..end).map(parse_xid);
    }
    // Deterministic byte mutations: a cheap stand-in for a fuzzer.
    const LCG_MUL: u64 = 6_364_136_223_846_793_005;
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..5000 {
        let mut bytes = raw.to_vec();
        for _ in 0..4 {
            state = state.wrapping_mul(LCG_MUL).wrapping_add(1);
            let pos = (state >> 33) as usize % bytes.len();
            bytes[pos] = (state >> 17) as u8;
        }
        if let Ok(rec) = parse_record(&bytes) {
            let _ = parse_xid(&rec.message);
        }
    }
}
