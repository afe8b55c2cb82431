//! A [`Frame`] as styled lines: the header (agent, uptime, rates, loss counters, sinks), the
//! function and process tables and the latest XIDs, fitted to the terminal's width and height.
//! Loss counters that are not zero and XIDs of severity `fatal`/`error` are bold red, headings
//! bold, everything else plain. The terminal draws the lines with their styles; `--once`
//! prints their text ([`plain`]), the same characters without styles.
//!
//! How many rows each table gets and the cutting to the width are [`crate::layout`]'s.

use ratatui::style::Style;
use ratatui::text::{Line, Span};

use crate::format::{cut, duration, interval, nanos, rate, timestamp};
use crate::frame::Frame;
use crate::layout::{finish, Layout, Rows};

/// Headings.
fn heading() -> Style {
    Style::new().bold()
}

/// What stands out: loss, errors, serious XIDs.
fn alert() -> Style {
    Style::new().bold().red()
}

fn plain_line(text: String) -> Line<'static> {
    Line::from(text)
}

fn bold_line(text: String) -> Line<'static> {
    Line::from(Span::styled(text, heading()))
}

/// The frame's lines.
pub fn render(frame: &Frame, layout: &Layout) -> Vec<Line<'static>> {
    let mut lines = header(frame, layout);
    let rows = Rows::fitted(
        frame,
        layout.height.map(|h| h.saturating_sub(lines.len() + 6)),
    );
    lines.extend(function_table(frame, rows.functions));
    lines.push(Line::default());
    lines.extend(process_table(frame, rows.processes));
    lines.push(Line::default());
    lines.extend(xid_table(frame, rows.xids));
    finish(lines, layout)
}

/// The screen shown while the agent cannot be read.
pub fn unreachable(agent: &str, error: &str, layout: &Layout) -> Vec<Line<'static>> {
    let retry = layout
        .interval
        .map(|i| format!("retrying every {}  q quits", interval(i)))
        .unwrap_or_default();
    let lines = vec![
        bold_line(format!("gpuship top  agent {agent}  {retry}")),
        Line::default(),
        Line::from(Span::styled(format!("agent unreachable: {error}"), alert())),
        plain_line(
            "is `gpuship run` running here, with [metrics] enabled on this address (--agent)?"
                .into(),
        ),
    ];
    finish(lines, layout)
}

/// The text of `lines`, one per line, without styles (`--once`).
pub fn plain(lines: &[Line<'_>]) -> Vec<String> {
    lines
        .iter()
        .map(|line| line.spans.iter().map(|s| s.content.as_ref()).collect())
        .collect()
}

/// Agent, rates, loss counters, sinks, and a blank line.
fn header(frame: &Frame, layout: &Layout) -> Vec<Line<'static>> {
    let every = layout
        .interval
        .map(|i| format!("  every {}  q quits", interval(i)))
        .unwrap_or_default();
    let forgotten = if frame.processes_evicted > 0 {
        format!(" (+{} forgotten)", frame.processes_evicted)
    } else {
        String::new()
    };
    vec![
        bold_line(format!(
            "gpuship top  agent {}  up {}{every}  (gpuship {})",
            frame.agent,
            duration(frame.uptime_s),
            frame.agent_version,
        )),
        plain_line(format!(
            "events/s {}  cuda calls/s {}  processes {}{forgotten}  XIDs {}",
            rate(frame.events_per_s),
            rate(frame.cuda_per_s),
            frame.processes.len(),
            frame.xids_total
        )),
        loss_line(frame),
        sinks_line(frame),
        Line::default(),
    ]
}

/// `lost: kernel 0 sink_dropped 0 ...`, each counter that is not zero in red.
fn loss_line(frame: &Frame) -> Line<'static> {
    let mut spans = vec![Span::raw("lost:")];
    for (name, value) in frame.loss.fields() {
        let style = if value > 0 { alert() } else { Style::new() };
        spans.push(Span::styled(format!(" {name} {value}"), style));
    }
    Line::from(spans)
}

/// `sinks: lake delivered 9 queued 0; ...`, drops and failures in red.
fn sinks_line(frame: &Frame) -> Line<'static> {
    let mut spans = vec![Span::raw("sinks:")];
    for (i, sink) in frame.sinks.iter().enumerate() {
        spans.push(Span::raw(format!(
            "{} {} delivered {} queued {}",
            if i > 0 { ";" } else { "" },
            sink.name,
            sink.delivered,
            sink.queued
        )));
        if sink.dropped > 0 || sink.failed > 0 {
            let reasons: Vec<String> = sink
                .dropped_reasons
                .iter()
                .map(|(r, c)| format!("{r}={c}"))
                .collect();
            spans.push(Span::styled(
                format!(
                    " dropped {} ({}) failed {}",
                    sink.dropped,
                    reasons.join(","),
                    sink.failed
                ),
                alert(),
            ));
        }
    }
    Line::from(spans)
}

fn function_table(frame: &Frame, rows: usize) -> Vec<Line<'static>> {
    let mut lines = vec![bold_line(format!(
        "{:<26} {:>9} {:>9} {:>8} {:>11} {:>9}",
        "FUNCTION", "CALLS/S", "ERRORS/S", "MEAN", "CALLS", "ERRORS"
    ))];
    if frame.functions.is_empty() {
        lines.push(plain_line("(no CUDA calls yet)".into()));
    }
    for f in frame.functions.iter().take(rows) {
        let style = if f.errors_per_s.is_some_and(|r| r > 0.0) {
            alert()
        } else {
            Style::new()
        };
        let text = format!(
            "{:<26} {:>9} {:>9} {:>8} {:>11} {:>9}",
            cut(&f.name, 26),
            rate(f.calls_per_s),
            rate(f.errors_per_s),
            f.mean_ns.map_or("-".to_string(), nanos),
            f.calls,
            f.errors
        );
        lines.push(Line::from(Span::styled(text, style)));
    }
    lines
}

fn process_table(frame: &Frame, rows: usize) -> Vec<Line<'static>> {
    let mut lines = vec![bold_line(format!(
        "{:<8} {:<16} {:>10} {:>12} {:>10}",
        "PID", "COMM", "CALLS/S", "CALLS", "ERRORS"
    ))];
    for p in frame.processes.iter().take(rows) {
        lines.push(plain_line(format!(
            "{:<8} {:<16} {:>10} {:>12} {:>10}",
            p.pid,
            cut(&p.comm, 16),
            rate(p.calls_per_s),
            p.calls,
            p.errors
        )));
    }
    lines
}

fn xid_table(frame: &Frame, rows: usize) -> Vec<Line<'static>> {
    let mut lines = vec![bold_line(format!(
        "{:<14} {:>4} {:<26} {:<7} {:<12} MESSAGE (XIDs, newest first, UTC)",
        "TIME", "XID", "NAME", "SEVERITY", "GPU"
    ))];
    if frame.xids.is_empty() {
        lines.push(plain_line("(no XIDs since the agent started)".into()));
    }
    for x in frame.xids.iter().take(rows) {
        let style = if x.severity == "fatal" || x.severity == "error" {
            alert()
        } else {
            Style::new()
        };
        let cells = format!(
            "{:<14} {:>4} {:<26} {:<7} {:<12} ",
            timestamp(x.time_ns),
            x.code,
            cut(&x.name, 26),
            cut(&x.severity, 7),
            cut(&x.pci_bus_id, 12),
        );
        lines.push(Line::from(vec![
            Span::styled(cells, style),
            Span::raw(x.message.clone()),
        ]));
    }
    lines
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Duration;

    use ratatui::style::Modifier;

    use super::*;
    use crate::frame::{FunctionLine, Loss, ProcessLine, SinkLine};

    pub(crate) fn sample() -> Frame {
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
            xids: vec![crate::wire::XidLive {
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
        let lines = plain(&render(&sample(), &Layout::default()));
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
            interval: Some(Duration::from_millis(200)),
        };
        let styled = render(&sample(), &layout);
        let lines = plain(&styled);
        assert!(lines[0].contains("every 200ms  q quits"), "{}", lines[0]);
        // The non-zero loss counter is bold red, the zero ones plain.
        let loss = &styled[2].spans;
        let kernel = loss.iter().find(|s| s.content == " kernel 3").unwrap();
        assert_eq!(kernel.style.fg, Some(ratatui::style::Color::Red));
        assert!(kernel.style.add_modifier.contains(Modifier::BOLD));
        let dropped = loss
            .iter()
            .find(|s| s.content == " sink_dropped 0")
            .unwrap();
        assert_eq!(dropped.style, Style::new());
        let xid = lines.iter().find(|l| l.contains("fell off")).unwrap();
        assert!(xid.ends_with('…'), "{xid}");
        assert!(lines.iter().all(|l| l.chars().count() <= 80));
        assert_eq!(lines[3], "sinks: parquet delivered 9 queued 0");
        let small = Layout {
            height: Some(5),
            ..layout
        };
        assert_eq!(render(&sample(), &small).len(), 5);
    }
}
