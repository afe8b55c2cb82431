//! A [`Frame`] as lines of text: the header (agent, uptime, rates, loss counters, sinks), the
//! function and process tables and the latest XIDs, fitted to the terminal's width and height.
//! With colour on, loss counters that are not zero and XIDs of severity `fatal`/`error` are
//! red; everything else is plain, so `--once` output is the same text without the escapes.
//! Text from the agent is printed with its control characters escaped ([`crate::escape`]).

use std::time::Duration;

use super::format::{cut, duration, interval, nanos, rate, timestamp};
use super::frame::Frame;

/// How to lay the frame out.
#[derive(Debug, Clone, Default)]
pub struct Layout {
    /// Columns; None: lines are never cut.
    pub width: Option<usize>,
    /// Rows; None: every row of every table.
    pub height: Option<usize>,
    /// ANSI colours and bold.
    pub color: bool,
    /// The refresh interval, shown in the header of the interactive view.
    pub interval: Option<Duration>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Style {
    Plain,
    Bold,
    Alert,
}

/// Pieces of one line with their style.
type Line = Vec<(String, Style)>;

fn plain(text: impl Into<String>) -> Line {
    vec![(text.into(), Style::Plain)]
}

fn bold(text: impl Into<String>) -> Line {
    vec![(text.into(), Style::Bold)]
}

/// The frame's lines.
pub fn render(frame: &Frame, layout: &Layout) -> Vec<String> {
    let mut header = vec![
        bold(format!(
            "gpuship top  agent {}  up {}{}  (gpuship {})",
            frame.agent,
            duration(frame.uptime_s),
            layout
                .interval
                .map(|i| format!("  every {}  q quits", interval(i)))
                .unwrap_or_default(),
            frame.agent_version,
        )),
        plain(format!(
            "events/s {}  cuda calls/s {}  processes {}{}  XIDs {}",
            rate(frame.events_per_s),
            rate(frame.cuda_per_s),
            frame.processes.len(),
            if frame.processes_evicted > 0 {
                format!(" (+{} forgotten)", frame.processes_evicted)
            } else {
                String::new()
            },
            frame.xids_total
        )),
    ];
    let mut loss = plain("lost:");
    for (name, value) in frame.loss.fields() {
        let style = if value > 0 {
            Style::Alert
        } else {
            Style::Plain
        };
        loss.push((format!(" {name} {value}"), style));
    }
    header.push(loss);
    let mut sinks = plain("sinks:");
    for (i, sink) in frame.sinks.iter().enumerate() {
        sinks.push((
            format!(
                "{} {} delivered {} queued {}",
                if i > 0 { ";" } else { "" },
                sink.name,
                sink.delivered,
                sink.queued
            ),
            Style::Plain,
        ));
        if sink.dropped > 0 || sink.failed > 0 {
            let reasons: Vec<String> = sink
                .dropped_reasons
                .iter()
                .map(|(r, c)| format!("{r}={c}"))
                .collect();
            sinks.push((
                format!(
                    " dropped {} ({}) failed {}",
                    sink.dropped,
                    reasons.join(","),
                    sink.failed
                ),
                Style::Alert,
            ));
        }
    }
    header.push(sinks);
    header.push(Vec::new());

    // Rows left for the three tables (each has a header line, blank lines between them).
    let fixed = header.len() + 2 + 2 + 2;
    let available = layout.height.map(|h| h.saturating_sub(fixed));
    let xid_rows = match available {
        Some(rows) => frame.xids.len().min((rows / 4).max(2)),
        None => frame.xids.len(),
    };
    let (function_rows, process_rows) = match available {
        Some(rows) => {
            let rows = rows.saturating_sub(xid_rows.max(1));
            let processes = frame.processes.len().min(rows / 2);
            let functions = frame.functions.len().min(rows - processes);
            (functions, frame.processes.len().min(rows - functions))
        }
        None => (frame.functions.len(), frame.processes.len()),
    };

    let mut lines = header;
    lines.push(bold(format!(
        "{:<26} {:>9} {:>9} {:>8} {:>11} {:>9}",
        "FUNCTION", "CALLS/S", "ERRORS/S", "MEAN", "CALLS", "ERRORS"
    )));
    if frame.functions.is_empty() {
        lines.push(plain("(no CUDA calls yet)"));
    }
    for f in frame.functions.iter().take(function_rows) {
        let style = if f.errors_per_s.is_some_and(|r| r > 0.0) {
            Style::Alert
        } else {
            Style::Plain
        };
        lines.push(vec![(
            format!(
                "{:<26} {:>9} {:>9} {:>8} {:>11} {:>9}",
                cut(&f.name, 26),
                rate(f.calls_per_s),
                rate(f.errors_per_s),
                f.mean_ns.map_or("-".to_string(), nanos),
                f.calls,
                f.errors
            ),
            style,
        )]);
    }
    lines.push(Vec::new());
    lines.push(bold(format!(
        "{:<8} {:<16} {:>10} {:>12} {:>10}",
        "PID", "COMM", "CALLS/S", "CALLS", "ERRORS"
    )));
    for p in frame.processes.iter().take(process_rows) {
        lines.push(plain(format!(
            "{:<8} {:<16} {:>10} {:>12} {:>10}",
            p.pid,
            cut(&p.comm, 16),
            rate(p.calls_per_s),
            p.calls,
            p.errors
        )));
    }
    lines.push(Vec::new());
    lines.push(bold(format!(
        "{:<14} {:>4} {:<26} {:<7} {:<12} MESSAGE (XIDs, newest first, UTC)",
        "TIME", "XID", "NAME", "SEVERITY", "GPU"
    )));
    if frame.xids.is_empty() {
        lines.push(plain("(no XIDs since the agent started)"));
    }
    for x in frame.xids.iter().take(xid_rows) {
        let style = if x.severity == "fatal" || x.severity == "error" {
            Style::Alert
        } else {
            Style::Plain
        };
        lines.push(vec![
            (
                format!(
                    "{:<14} {:>4} {:<26} {:<7} {:<12} ",
                    timestamp(x.time_ns),
                    x.code,
                    cut(&x.name, 26),
                    cut(&x.severity, 7),
                    cut(&x.pci_bus_id, 12),
                ),
                style,
            ),
            (x.message.clone(), Style::Plain),
        ]);
    }
    if let Some(height) = layout.height {
        lines.truncate(height);
    }
    lines
        .iter()
        .map(|line| finish(line, layout.width, layout.color))
        .collect()
}

/// The screen shown while the agent cannot be read.
pub fn unreachable(agent: &str, error: &str, layout: &Layout) -> Vec<String> {
    let retry = layout
        .interval
        .map(|i| format!("retrying every {}  q quits", interval(i)))
        .unwrap_or_default();
    [
        bold(format!("gpuship top  agent {agent}  {retry}")),
        Vec::new(),
        vec![(format!("agent unreachable: {error}"), Style::Alert)],
        plain("is `gpuship run` running here, with [metrics] enabled on this address (--agent)?"),
    ]
    .iter()
    .map(|line| finish(line, layout.width, layout.color))
    .collect()
}

/// Joins the pieces, cut to `width` (ending in `…` when cut), with escapes when `color`.
fn finish(line: &Line, width: Option<usize>, color: bool) -> String {
    let mut out = String::new();
    let mut left = width.unwrap_or(usize::MAX);
    for (text, style) in line {
        if left == 0 {
            break;
        }
        // Every piece, whatever it holds (process names, XID messages, sink names, the
        // agent's address or an error), reaches the terminal without its control characters:
        // the only escapes on screen are the ones added below.
        let text = crate::escape::escape_controls(text);
        let count = text.chars().count();
        let piece = if count > left {
            let mut piece: String = text.chars().take(left.saturating_sub(1)).collect();
            piece.push('…');
            piece
        } else {
            text.into_owned()
        };
        left = left.saturating_sub(count);
        match (color, style) {
            (true, Style::Bold) => out.push_str(&format!("\x1b[1m{piece}\x1b[0m")),
            (true, Style::Alert) => out.push_str(&format!("\x1b[1;31m{piece}\x1b[0m")),
            _ => out.push_str(&piece),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::top::frame::{FunctionLine, Loss, ProcessLine, SinkLine};

    fn sample() -> Frame {
        Frame {
            agent: "127.0.0.1:9464".into(),
            agent_version: "0.1.0".into(),
            uptime_s: 3723.0,
            events_per_s: Some(12.0),
            cuda_per_s: Some(10.0),
            loss: Loss {
                kernel: 3,
                ..Loss::default()
            },
            sinks: vec![SinkLine {
                name: "parquet".into(),
                delivered: 9,
                queued: 0,
                dropped: 0,
                dropped_reasons: Vec::new(),
                failed: 0,
            }],
            functions: vec![FunctionLine {
                name: "cuLaunchKernel".into(),
                calls_per_s: Some(10.0),
                errors_per_s: Some(0.0),
                mean_ns: Some(1500.0),
                calls: 60,
                errors: 0,
            }],
            processes: vec![ProcessLine {
                pid: 4242,
                comm: "cuda_workload".into(),
                calls_per_s: None,
                calls: 60,
                errors: 4,
            }],
            processes_evicted: 0,
            xids_total: 1,
            xids: vec![crate::live::XidLive {
                time_ns: 1_700_000_000_000_000_000,
                code: 79,
                name: "GPU fell off the PCIe bus".into(),
                category: "hardware".into(),
                severity: "fatal".into(),
                action: "reboot_node".into(),
                pci_bus_id: "0000:3b:00.0".into(),
                gpu_uuid: None,
                gpu_index: None,
                pid: None,
                comm: None,
                message: "GPU has fallen off the bus. And a long tail of text".into(),
                source: "kmsg".into(),
            }],
        }
    }

    #[test]
    fn plain_frame_has_every_section() {
        let lines = render(&sample(), &Layout::default());
        let text = lines.join("\n");
        assert!(!text.contains('\x1b'), "{text}");
        assert_eq!(
            lines[0],
            "gpuship top  agent 127.0.0.1:9464  up 1:02:03  (gpuship 0.1.0)"
        );
        assert_eq!(
            lines[2],
            "lost: kernel 3 sink_dropped 0 sink_failed 0 decode 0 kmsg_gaps 0 unmatched 0 inflight_full 0"
        );
        let function = lines
            .iter()
            .find(|l| l.starts_with("cuLaunchKernel"))
            .unwrap();
        let cells: Vec<&str> = function.split_whitespace().collect();
        assert_eq!(cells, ["cuLaunchKernel", "10.0", "0.0", "1.5µs", "60", "0"]);
        let process = lines.iter().find(|l| l.starts_with("4242")).unwrap();
        assert_eq!(
            process.split_whitespace().collect::<Vec<_>>(),
            ["4242", "cuda_workload", "-", "60", "4"]
        );
        assert!(text.contains(
            "11-14 22:13:20   79 GPU fell off the PCIe bus  fatal   0000:3b:00.0 GPU has fallen off the bus. And a long tail of text"
        ), "{text}");
    }

    #[test]
    fn fits_the_terminal_and_colours_what_is_lost() {
        let layout = Layout {
            width: Some(80),
            height: Some(40),
            color: true,
            interval: Some(Duration::from_millis(200)),
        };
        let lines = render(&sample(), &layout);
        assert!(lines[0].contains("every 200ms  q quits"), "{}", lines[0]);
        assert!(
            lines[2].contains("\x1b[1;31m kernel 3\x1b[0m"),
            "{}",
            lines[2]
        );
        let xid = lines.iter().find(|l| l.contains("fell off")).unwrap();
        assert!(xid.ends_with('…'), "{xid}");
        let strip = |l: &str| {
            l.replace("\x1b[1;31m", "")
                .replace("\x1b[1m", "")
                .replace("\x1b[0m", "")
        };
        assert!(lines.iter().all(|l| strip(l).chars().count() <= 80));
        assert_eq!(lines[3], "sinks: parquet delivered 9 queued 0");
        let small = Layout {
            height: Some(5),
            ..layout
        };
        assert_eq!(render(&sample(), &small).len(), 5);
    }
}
