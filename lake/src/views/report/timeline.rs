//! The report's timeline: inline SVG, one band per GPU with its XIDs (colored by severity) and
//! one lane per affected process with its failed CUDA calls and the windows of calls the flight
//! recorder wrote for it, on a shared time axis. Pure markup, no script: every marker carries a
//! `<title>` (the browser's tooltip) and data attributes that tests and people's tools can find.

use std::fmt::Write as _;

use super::data::{GpuTimeline, ProcessLane, ReportData};
use super::flight_recorder::RecordedCalls;
use super::format::{clock, escape, time};

/// Fill of XID markers by severity. `fatal` is the red a reader looks for first.
pub fn severity_color(severity: &str) -> &'static str {
    match severity {
        "fatal" => "#d62728",
        "error" => "#ff7f0e",
        "warning" => "#bcbd22",
        "info" => "#1f77b4",
        _ => "#7f7f7f",
    }
}

/// Severities in legend order, most severe first (the catalog's four, then anything else).
pub const SEVERITIES: [&str; 5] = ["fatal", "error", "warning", "info", "unknown"];

/// Fill of failed-CUDA-call markers.
pub const CUDA_FAILURE_COLOR: &str = "#6a3d9a";

/// Fill of the flight recorder's windows (drawn translucent, under the failures).
pub const FLIGHT_RECORDER_COLOR: &str = "#17becf";

const WIDTH: f64 = 1300.0;
const LABEL_WIDTH: f64 = 330.0;
const RIGHT_PAD: f64 = 48.0;
const AXIS_HEIGHT: f64 = 34.0;
const GPU_HEADER: f64 = 26.0;
const LANE: f64 = 30.0;
const GAP: f64 = 12.0;
const XID_RADIUS: f64 = 8.0;
const FAILURE_SIZE: f64 = 7.0;
/// Height of a flight-recorder window, and its least width (a window of a few milliseconds
/// would not show on an hour's axis).
const WINDOW_HEIGHT: f64 = 12.0;
const WINDOW_MIN_WIDTH: f64 = 4.0;

/// Maps event times to x coordinates.
struct Scale {
    start_ns: i64,
    span_ns: f64,
}

impl Scale {
    /// Spans every marker, padded so none sits on the edge.
    fn fit(times: impl Iterator<Item = i64>) -> Option<Scale> {
        let (mut lo, mut hi) = (i64::MAX, i64::MIN);
        for t in times {
            lo = lo.min(t);
            hi = hi.max(t);
        }
        if lo > hi {
            return None;
        }
        let span = (hi - lo).max(2_000_000_000);
        let pad = span / 20;
        let middle = lo + (hi - lo) / 2;
        let start_ns = if hi - lo < 2_000_000_000 {
            middle - span / 2
        } else {
            lo
        } - pad;
        Some(Scale {
            start_ns,
            span_ns: (span + 2 * pad) as f64,
        })
    }

    fn x(&self, ns: i64) -> f64 {
        LABEL_WIDTH + (ns - self.start_ns) as f64 / self.span_ns * (WIDTH - LABEL_WIDTH - RIGHT_PAD)
    }
}

/// The legend: one swatch per severity, the failed-call marker and, when the page has any, the
/// flight recorder's window.
pub fn legend(flight_recorder: bool) -> String {
    let mut out = String::from("<div class=\"legend\">");
    for severity in SEVERITIES {
        let _ = write!(
            out,
            "<span class=\"legend-item\"><svg width=\"14\" height=\"14\" aria-hidden=\"true\">\
             <rect width=\"14\" height=\"14\" fill=\"{}\"/></svg> XID {severity}</span>",
            severity_color(severity)
        );
    }
    let _ = write!(
        out,
        "<span class=\"legend-item\"><svg width=\"14\" height=\"14\" aria-hidden=\"true\">\
         <polygon points=\"7,0 14,7 7,14 0,7\" fill=\"{CUDA_FAILURE_COLOR}\"/></svg> failed CUDA call</span>"
    );
    if flight_recorder {
        let _ = write!(
            out,
            "<span class=\"legend-item\"><svg width=\"14\" height=\"14\" aria-hidden=\"true\">\
             <rect y=\"1\" width=\"14\" height=\"12\" fill=\"{FLIGHT_RECORDER_COLOR}\"/></svg> \
             calls the flight recorder wrote before an incident</span>"
        );
    }
    out.push_str("</div>");
    out
}

/// One window of the flight recorder's calls: a band from its first call to its last.
fn recorded_window(out: &mut String, scale: &Scale, w: &RecordedCalls, gpu: &str, y: f64) {
    let (x1, x2) = (scale.x(w.first_ns), scale.x(w.last_ns));
    let width = (x2 - x1).max(WINDOW_MIN_WIDTH);
    let x = x1 - (width - (x2 - x1)) / 2.0;
    let _ = write!(
        out,
        "<rect class=\"flight-recorder\" data-gpu=\"{gpu}\" data-pid=\"{}\" data-incident=\"{}\" \
         data-calls=\"{}\" x=\"{x:.1}\" y=\"{:.1}\" width=\"{width:.1}\" height=\"{WINDOW_HEIGHT}\" \
         fill=\"{FLIGHT_RECORDER_COLOR}\" fill-opacity=\"0.6\">\
         <title>{} call(s) the flight recorder wrote for incident {}, {} to {}, pid {} {}: {}</title></rect>",
        w.pid,
        escape(&w.incident_id),
        w.calls,
        y - WINDOW_HEIGHT / 2.0,
        w.calls,
        escape(&w.incident_id),
        time(w.first_ns),
        time(w.last_ns),
        w.pid,
        escape(&w.comm),
        escape(&w.top_functions()),
    );
}

fn failure_lane(out: &mut String, scale: &Scale, lane: &ProcessLane, gpu: &str, y: f64) {
    let _ = write!(
        out,
        "<text class=\"lane-label\" x=\"16\" y=\"{:.1}\">pid {} {}</text>\
         <line class=\"lane\" x1=\"{LABEL_WIDTH}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\"/>",
        y + 4.0,
        lane.pid,
        escape(&lane.comm),
        WIDTH - RIGHT_PAD
    );
    for window in &lane.recorded {
        recorded_window(out, scale, window, gpu, y);
    }
    for call in &lane.failures {
        let x = scale.x(call.time_ns);
        let s = FAILURE_SIZE;
        let _ = write!(
            out,
            "<polygon class=\"cuda-failure\" data-gpu=\"{gpu}\" data-pid=\"{}\" data-function=\"{}\" \
             points=\"{:.1},{:.1} {:.1},{:.1} {:.1},{:.1} {:.1},{:.1}\" fill=\"{CUDA_FAILURE_COLOR}\">\
             <title>{} returned {} ({}) at {}, pid {} {}</title></polygon>",
            lane.pid,
            escape(&call.function),
            x,
            y - s,
            x + s,
            y,
            x,
            y + s,
            x - s,
            y,
            escape(&call.function),
            escape(&call.result_name),
            call.result,
            time(call.time_ns),
            lane.pid,
            escape(&lane.comm),
        );
    }
}

fn gpu_band(out: &mut String, scale: &Scale, gpu: &GpuTimeline, mut y: f64) -> f64 {
    let (host, bus) = &gpu.key;
    let described = [gpu.model.as_deref(), gpu.uuid.as_deref()]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(", ");
    let _ = write!(
        out,
        "<text class=\"gpu-label\" x=\"4\" y=\"{:.1}\">GPU {} on {}{}</text>",
        y + 17.0,
        escape(bus),
        escape(host),
        if described.is_empty() {
            String::new()
        } else {
            format!(" ({})", escape(&described))
        }
    );
    y += GPU_HEADER + LANE / 2.0;
    let _ = write!(
        out,
        "<text class=\"lane-label\" x=\"16\" y=\"{:.1}\">XIDs</text>\
         <line class=\"lane\" x1=\"{LABEL_WIDTH}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\"/>",
        y + 4.0,
        WIDTH - RIGHT_PAD
    );
    let gpu_attr = escape(bus);
    for xid in &gpu.xids {
        let severity = xid.display_severity();
        let _ = write!(
            out,
            "<circle class=\"xid-marker\" data-code=\"{}\" data-severity=\"{}\" data-gpu=\"{gpu_attr}\" \
             cx=\"{:.1}\" cy=\"{y:.1}\" r=\"{XID_RADIUS}\" fill=\"{}\">\
             <title>XID {} ({}), {} at {}: {}</title></circle>",
            xid.code,
            escape(&severity),
            scale.x(xid.time_ns),
            severity_color(&severity),
            xid.code,
            escape(&xid.display_name()),
            escape(&severity),
            time(xid.time_ns),
            escape(&xid.message),
        );
    }
    for lane in &gpu.processes {
        y += LANE;
        failure_lane(out, scale, lane, &gpu_attr, y);
    }
    y + LANE / 2.0 + GAP
}

/// Times of a lane's markers.
fn lane_times(lane: &ProcessLane) -> impl Iterator<Item = i64> + '_ {
    lane.failures
        .iter()
        .map(|c| c.time_ns)
        .chain(lane.recorded.iter().flat_map(|w| [w.first_ns, w.last_ns]))
}

/// The timeline's SVG, or `None` when the range has no XID, no failed call and no
/// flight-recorder call to show.
pub fn render(data: &ReportData) -> Option<String> {
    let times = data
        .gpus
        .iter()
        .flat_map(|g| {
            g.xids
                .iter()
                .map(|x| x.time_ns)
                .chain(g.processes.iter().flat_map(lane_times))
        })
        .chain(data.unlinked.iter().flat_map(lane_times));
    let scale = Scale::fit(times)?;
    let mut body = String::new();
    let mut y = AXIS_HEIGHT;
    for gpu in &data.gpus {
        y = gpu_band(&mut body, &scale, gpu, y);
    }
    if !data.unlinked.is_empty() {
        let what = if data.unlinked.iter().all(|l| l.recorded.is_empty()) {
            "CUDA failures"
        } else {
            "CUDA failures and flight-recorder calls"
        };
        let _ = write!(
            body,
            "<text class=\"gpu-label\" x=\"4\" y=\"{:.1}\">{what} no XID links to a GPU</text>",
            y + 17.0
        );
        y += GPU_HEADER - LANE / 2.0;
        for lane in &data.unlinked {
            y += LANE;
            failure_lane(&mut body, &scale, lane, "", y);
        }
        y += LANE / 2.0 + GAP;
    }
    let height = y;
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<svg class=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height:.0}\" \
         viewBox=\"0 0 {WIDTH} {height:.0}\" role=\"img\" aria-label=\"XIDs and failed CUDA calls per GPU over time\">"
    );
    for i in 0..=5 {
        let ns = scale.start_ns + (scale.span_ns * f64::from(i) / 5.0) as i64;
        let x = scale.x(ns);
        let _ = write!(
            svg,
            "<line class=\"grid\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{:.1}\" y2=\"{height:.1}\"/>\
             <text class=\"tick\" x=\"{x:.1}\" y=\"16\" text-anchor=\"middle\">{}</text>",
            AXIS_HEIGHT - 10.0,
            clock(ns)
        );
    }
    svg.push_str(&body);
    svg.push_str("</svg>");
    Some(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scale_spans_every_marker_inside_the_plot() {
        let scale = Scale::fit([10_000_000_000i64, 20_000_000_000].into_iter()).unwrap();
        let (a, b) = (scale.x(10_000_000_000), scale.x(20_000_000_000));
        assert!(a > LABEL_WIDTH && b < WIDTH - RIGHT_PAD && a < b, "{a} {b}");
        let single = Scale::fit(std::iter::once(5)).unwrap();
        let x = single.x(5);
        assert!((x - (LABEL_WIDTH + (WIDTH - LABEL_WIDTH - RIGHT_PAD) / 2.0)).abs() < 1.0);
        assert!(Scale::fit(std::iter::empty()).is_none());
    }

    #[test]
    fn every_severity_has_its_own_color() {
        let colors: std::collections::BTreeSet<_> =
            SEVERITIES.iter().map(|s| severity_color(s)).collect();
        assert_eq!(colors.len(), SEVERITIES.len());
        assert!(!colors.contains(CUDA_FAILURE_COLOR));
        assert!(!colors.contains(FLIGHT_RECORDER_COLOR));
        assert_ne!(CUDA_FAILURE_COLOR, FLIGHT_RECORDER_COLOR);
        assert_eq!(severity_color("fatal"), "#d62728");
    }
}
