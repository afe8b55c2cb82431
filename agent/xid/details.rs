//! Fields worth columns, decoded from the driver's XID message text: the page fault of XID 31
//! (engine, address, fault and access type), the channel, ECC locations, the recovery action of
//! XID 154, the GSP function of XIDs 119/120, MIG instances and "caused by previous Xid".
//! Text that does not match leaves the fields empty; decoding never fails.

use gpuship_sinks::schema::XidDetails;

/// Decodes what `message` (the text after the code, without pid/name) says about XID `code`.
pub fn decode(code: u32, message: &str) -> XidDetails {
    let mut details = XidDetails {
        channel: channel(message),
        caused_by_xid: after(message, "previous Xid")
            .or_else(|| after(message, "previous XID"))
            .and_then(leading_number),
        ..Default::default()
    };
    (details.mig_gpu_instance, details.mig_compute_instance) = mig(message);
    match code {
        31 => page_fault(message, &mut details),
        94 | 95 => contained_error(message, &mut details),
        48 | 63 | 64 | 92 | 140 => details.ecc_location = ecc_location(message),
        154 => {
            details.recovery_action = after(message, " to ")
                .and_then(|rest| between(rest, "(", ")"))
                .map(str::to_string)
        }
        119 | 120 => {
            details.gsp_function = after(message, "function ")
                .and_then(|rest| between(rest, "(", ")"))
                .map(str::to_string)
                .or_else(|| {
                    after(message, "GSP task ").map(|rest| {
                        rest.split([',', '@'])
                            .next()
                            .unwrap_or(rest)
                            .trim()
                            .to_string()
                    })
                })
        }
        _ => {}
    }
    details
}

fn after<'a>(text: &'a str, marker: &str) -> Option<&'a str> {
    text.find(marker)
        .map(|at| text[at + marker.len()..].trim_start())
}

fn between<'a>(text: &'a str, open: &str, close: &str) -> Option<&'a str> {
    let start = text.find(open)? + open.len();
    let end = start + text[start..].find(close)?;
    Some(text[start..end].trim()).filter(|s| !s.is_empty())
}

fn leading_number(text: &str) -> Option<u32> {
    let digits: String = text
        .trim_start_matches([':', ' '])
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// `channel 0x0000000a` (newer drivers) or `Ch 00000008` (older ones), both hexadecimal.
fn channel(message: &str) -> Option<u32> {
    let rest = after(message, "channel 0x").or_else(|| after(message, "Ch "))?;
    let hex: String = rest.chars().take_while(char::is_ascii_hexdigit).collect();
    u32::from_str_radix(&hex, 16).ok()
}

/// `MMU Fault: ENGINE GRAPHICS GPC1 GPCCLIENT_T1_8 faulted @ 0x7f00_00000000. Fault is of type
/// FAULT_PDE ACCESS_TYPE_VIRT_WRITE`.
fn page_fault(message: &str, details: &mut XidDetails) {
    if let Some(rest) = after(message, "ENGINE ") {
        if let Some(end) = rest.find(" faulted") {
            details.fault_engine = Some(rest[..end].trim().to_string());
        }
    }
    if let Some(rest) = after(message, "faulted @ 0x") {
        let hex: String = rest
            .chars()
            .take_while(|c| c.is_ascii_hexdigit() || *c == '_')
            .filter(|c| *c != '_')
            .collect();
        details.fault_address = u64::from_str_radix(&hex, 16).ok();
    }
    if let Some(rest) = after(message, "Fault is of type ") {
        let mut words = rest.split_whitespace();
        details.fault_type = words.next().map(|w| w.trim_end_matches('.').to_string());
        details.fault_access = words
            .next()
            .filter(|w| w.starts_with("ACCESS_TYPE"))
            .map(|w| w.trim_end_matches('.').to_string());
    }
}

/// XIDs 94/95: `Contained: SM (0x1). RST: No, D-RST: No` (the unit, and whether a GPU reset or
/// a drain-and-reset is required).
fn contained_error(message: &str, details: &mut XidDetails) {
    let unit = after(message, "Uncontained: ").or_else(|| after(message, "Contained: "));
    if let Some(unit) = unit {
        let end = unit
            .find(". RST")
            .or_else(|| unit.find('.'))
            .unwrap_or(unit.len());
        details.ecc_location = Some(unit[..end].trim().to_string()).filter(|u| !u.is_empty());
    }
    let flag = |name: &str| after(message, name).map(|v| v.starts_with("Yes"));
    details.recovery_action = match (flag("D-RST: "), flag(" RST: ").or_else(|| flag("RST: "))) {
        (Some(true), _) => Some("Drain and Reset".into()),
        (_, Some(true)) => Some("GPU Reset Required".into()),
        (Some(false), Some(false)) => Some("None".into()),
        _ => None,
    };
}

/// `... in the framebuffer at [physAddr 0x7fffa8860] partition 6, subpartition 0.`,
/// `New row (0x...)`, `row 0x1f2`, `page 0x...`.
fn ecc_location(message: &str) -> Option<String> {
    if let Some(rest) = after(message, "partition ") {
        let partition = leading_number(rest)?;
        let sub = after(rest, "subpartition ").and_then(leading_number);
        let mut location = match sub {
            Some(sub) => format!("partition {partition} subpartition {sub}"),
            None => format!("partition {partition}"),
        };
        if let Some(address) = after(message, "physAddr ") {
            let address: String = address
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric())
                .collect();
            location = format!("physAddr {address} {location}");
        }
        return Some(location);
    }
    if let Some(row) = after(message, "New row (").and_then(|r| r.split(')').next()) {
        return Some(format!("row {row}"));
    }
    for marker in ["row ", "page ", "address "] {
        if let Some(rest) = after(message, marker) {
            let value: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric())
                .collect();
            if value.starts_with("0x")
                || value.chars().all(|c| c.is_ascii_digit()) && !value.is_empty()
            {
                return Some(format!("{}{value}", marker));
            }
        }
    }
    None
}

/// MIG instances: `GPU-I 1 CI 0`, `GI 1 CI 0`, `(GI:1, CI:0)`.
fn mig(message: &str) -> (Option<u32>, Option<u32>) {
    let gi = ["GPU-I ", "GPU-I:", "GI:", "GI "]
        .iter()
        .find_map(|m| after(message, m).and_then(leading_number));
    let ci = ["CI:", "CI "]
        .iter()
        .find_map(|m| after(message, m).and_then(leading_number));
    (gi, ci.filter(|_| gi.is_some()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_fault_fields_of_a_driver_580_xid_31() {
        let details = decode(
            31,
            "channel 0x0000000a, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC1 GPCCLIENT_T1_8 faulted @ 0x7f00_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE",
        );
        assert_eq!(details.channel, Some(0x0a));
        assert_eq!(
            details.fault_engine.as_deref(),
            Some("GRAPHICS GPC1 GPCCLIENT_T1_8")
        );
        assert_eq!(details.fault_address, Some(0x7f00_0000_0000));
        assert_eq!(details.fault_type.as_deref(), Some("FAULT_PDE"));
        assert_eq!(
            details.fault_access.as_deref(),
            Some("ACCESS_TYPE_VIRT_WRITE")
        );
    }

    #[test]
    fn page_fault_fields_of_an_older_driver() {
        let details = decode(
            31,
            "Ch 00000008, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_2 faulted @ 0x7fc9_c2a00000. Fault is of type FAULT_PTE ACCESS_TYPE_VIRT_READ",
        );
        assert_eq!(details.channel, Some(8));
        assert_eq!(
            details.fault_engine.as_deref(),
            Some("GRAPHICS GPCCLIENT_T1_2")
        );
        assert_eq!(details.fault_address, Some(0x7fc9_c2a0_0000));
        assert_eq!(details.fault_type.as_deref(), Some("FAULT_PTE"));
        assert_eq!(
            details.fault_access.as_deref(),
            Some("ACCESS_TYPE_VIRT_READ")
        );
    }

    #[test]
    fn ecc_recovery_and_gsp_fields() {
        let dbe = decode(
            48,
            "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.",
        );
        assert_eq!(
            dbe.ecc_location.as_deref(),
            Some("partition 6 subpartition 0")
        );
        let dbe = decode(
            48,
            "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at physAddr 0x7fffa8860 partition 7, subpartition 1.",
        );
        assert_eq!(
            dbe.ecc_location.as_deref(),
            Some("physAddr 0x7fffa8860 partition 7 subpartition 1")
        );
        let remap = decode(63, "Row Remapper: New row (0x0000000000012345) marked for remapping, reset gpu to activate.");
        assert_eq!(
            remap.ecc_location.as_deref(),
            Some("row 0x0000000000012345")
        );
        let recovery = decode(
            154,
            "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
        );
        assert_eq!(
            recovery.recovery_action.as_deref(),
            Some("GPU Reset Required")
        );
        let gsp_task = decode(120, "GSP task exception: load access page fault (cause:0xd) @ pc:0x140c7f6, partition:4#0, task:3");
        assert_eq!(
            gsp_task.gsp_function.as_deref(),
            Some("exception: load access page fault (cause:0xd)")
        );
        let gsp = decode(
            119,
            "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20800a4c 0x4).",
        );
        assert_eq!(gsp.gsp_function.as_deref(), Some("GSP_RM_CONTROL"));
    }

    #[test]
    fn contained_and_uncontained_errors() {
        let contained = decode(94, "Contained: SM (0x1). RST: No, D-RST: No");
        assert_eq!(contained.ecc_location.as_deref(), Some("SM (0x1)"));
        assert_eq!(contained.recovery_action.as_deref(), Some("None"));
        let uncontained = decode(95, "Uncontained: LTC TAG (0x2,0x1). RST: Yes, D-RST: No");
        assert_eq!(
            uncontained.ecc_location.as_deref(),
            Some("LTC TAG (0x2,0x1)")
        );
        assert_eq!(
            uncontained.recovery_action.as_deref(),
            Some("GPU Reset Required")
        );
        let drain = decode(95, "Uncontained: FBHUB (0x4). RST: Yes, D-RST: Yes");
        assert_eq!(drain.recovery_action.as_deref(), Some("Drain and Reset"));
    }

    #[test]
    fn mig_instances_and_causes() {
        let details = decode(
            13,
            "Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address GPU-I 1 CI 0",
        );
        assert_eq!(
            (details.mig_gpu_instance, details.mig_compute_instance),
            (Some(1), Some(0))
        );
        let caused = decode(
            45,
            "Ch 00000010, Preemptive cleanup, caused by previous Xid 48",
        );
        assert_eq!(caused.caused_by_xid, Some(48));
        assert_eq!(caused.channel, Some(0x10));
    }

    #[test]
    fn text_that_does_not_match_gives_nothing() {
        assert_eq!(decode(31, "garbage"), XidDetails::default());
        assert_eq!(
            decode(79, "GPU has fallen off the bus."),
            XidDetails::default()
        );
        assert_eq!(
            decode(154, "GPU recovery action changed"),
            XidDetails::default()
        );
    }
}
