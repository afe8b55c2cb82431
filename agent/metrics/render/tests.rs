use std::sync::atomic::Ordering;
use std::sync::Arc;

use gpuship_sinks::{DropReason, EventKind, SinkStats};

use super::*;
use crate::accounting::{Accounting, Ring};
use crate::live::LiveTap;

#[test]
fn exposition_has_every_family_with_labels_and_values() {
    let accounting = Accounting::default();
    let stats = Arc::new(SinkStats::default());
    stats.received.add(EventKind::Cuda, 10);
    stats.delivered.add(EventKind::Cuda, 6);
    stats.drop_events(DropReason::BufferFull, EventKind::Cuda, 3);
    stats.set_healthy(false);
    stats.count_error("message_timed_out", 4);
    accounting.add_sink("lake", stats, false);
    let (cuda, driver) = (accounting.ring(Ring::Cuda), accounting.ring(Ring::Driver));
    cuda.submitted.store(12, Ordering::Relaxed);
    cuda.lost_in_kernel.store(2, Ordering::Relaxed);
    driver.unmatched_returns.store(5, Ordering::Relaxed);
    let text = render(&accounting.snapshot(), LiveTap::new().health(), None);
    for line in [
        "gpuship_kernel_emitted_events_total{ring=\"cuda\"} 14",
        "gpuship_kernel_lost_events_total{ring=\"cuda\"} 2",
        "gpuship_probe_unmatched_returns_total{ring=\"driver\"} 5",
        "gpuship_probe_inflight_full_total{ring=\"cuda\"} 0",
        "gpuship_ring_pending_events{ring=\"xid\"} 0",
        "gpuship_kmsg_xid_events_total 0",
        "gpuship_component_received_events_total{component_id=\"lake\",component_kind=\"sink\",kind=\"cuda\"} 10",
        "gpuship_component_sent_events_total{component_id=\"lake\",component_kind=\"sink\",kind=\"cuda\"} 6",
        "gpuship_component_discarded_events_total{component_id=\"lake\",component_kind=\"sink\",kind=\"cuda\",reason=\"buffer_full\",intentional=\"true\"} 3",
        "gpuship_component_in_flight_events{component_id=\"lake\",component_kind=\"sink\",kind=\"cuda\"} 1",
        "# TYPE gpuship_buffer_events gauge",
        "# TYPE gpuship_component_sent_events counter",
        "gpuship_sink_healthy{component_id=\"lake\",component_kind=\"sink\"} 0",
        "gpuship_sink_delivery_errors_total{component_id=\"lake\",component_kind=\"sink\",error=\"message_timed_out\"} 4",
        "gpuship_component_discarded_events_total{component_id=\"lake\",component_kind=\"sink\",kind=\"cuda\",reason=\"rejected\",intentional=\"false\"} 0",
        concat!(
            "gpuship_build_info{version=\"",
            env!("CARGO_PKG_VERSION"),
            "\",commit=\"",
            env!("GPUSHIP_COMMIT"),
            "\",built=\"",
            env!("GPUSHIP_BUILD_DATE"),
            "\"} 1"
        ),
        "gpuship_config_reloads_total{result=\"applied\"} 0",
        "gpuship_config_reloads_total{result=\"rejected\"} 0",
        "gpuship_config_last_reload_success 1",
        "gpuship_config_last_reload_capture_gap_seconds 0.0",
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
    }
    assert_eq!(text.lines().last(), Some("# EOF"));
    // Every sample line is `name{labels} value` or `name value` with a numeric value.
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let value = line.rsplit(' ').next().unwrap();
        assert!(value.parse::<f64>().is_ok(), "{line}");
    }
}

#[test]
fn label_values_with_quotes_backslashes_and_newlines_are_escaped() {
    let accounting = Accounting::default();
    let hostile = "a\"} evil{x=\"1\\\nnext";
    let stats = Arc::new(SinkStats::default());
    stats.received.add(EventKind::Xid, 7);
    stats.count_error("bad\"error\n", 2);
    accounting.add_sink(hostile, stats, false);
    let text = render(&accounting.snapshot(), LiveTap::new().health(), None);
    let escaped = r#"a\"} evil{x=\"1\\\nnext"#;
    let line = format!(
        "gpuship_component_received_events_total{{component_id=\"{escaped}\",component_kind=\"sink\",kind=\"xid\"}} 7"
    );
    assert!(
        text.lines().any(|l| l == line),
        "missing {line:?} in\n{text}"
    );
    assert!(text.contains(r#"error="bad\"error\n"} 2"#), "{text}");
    // Every line is a comment or a sample whose labels parse: the name, then `{`, label
    // pairs with quoted values, `}`, a space and a number.
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (series, value) = line.rsplit_once(' ').expect("sample");
        assert!(value.parse::<f64>().is_ok(), "{line}");
        if let Some((_, labels)) = series.split_once('{') {
            let labels = parse_labels(labels).unwrap_or_else(|| panic!("{line}"));
            assert!(!labels.is_empty(), "{line}");
        }
    }
    let received = text
        .lines()
        .find(|l| {
            l.starts_with("gpuship_component_received_events_total{") && l.contains("kind=\"xid\"")
        })
        .expect("received line");
    let labels = parse_labels(
        received
            .split_once('{')
            .unwrap()
            .1
            .rsplit_once(' ')
            .unwrap()
            .0,
    );
    assert_eq!(
        labels.unwrap()[0],
        ("component_id".to_string(), hostile.to_string())
    );
}

/// `k="v",k="v"}` with the exposition's escapes; None when it does not parse.
fn parse_labels(text: &str) -> Option<Vec<(String, String)>> {
    let mut labels = Vec::new();
    let mut rest = text;
    loop {
        let (key, after) = rest.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next()? {
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c @ ('\\' | '"') => value.push(c),
                    _ => return None,
                },
                (i, '"') => break i,
                (_, c) => value.push(c),
            }
        };
        labels.push((key.to_string(), value));
        rest = &after[end + 1..];
        match rest.strip_prefix(',') {
            Some(next) => rest = next,
            None => return (rest == "}").then_some(labels),
        }
    }
}
