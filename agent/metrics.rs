//! Self-metrics: Prometheus text on `/metrics`, a readiness answer on `/health` and the live
//! view's JSON on `/live` (read by `gpuship top`), served on loopback by default. The HTTP
//! handling is deliberately tiny (GET only, one request per connection): the endpoint serves a
//! scraper, a probe and `top`, nothing else.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::accounting::{Accounting, Snapshot};
use crate::live::LiveTap;

/// Lifecycle state reported by `/health`.
#[derive(Debug)]
pub struct Health(AtomicU8);

impl Default for Health {
    fn default() -> Self {
        Self(AtomicU8::new(Self::STARTING))
    }
}

impl Health {
    const STARTING: u8 = 0;
    const RUNNING: u8 = 1;
    const DRAINING: u8 = 2;

    /// Capture is running.
    pub fn set_running(&self) {
        self.0.store(Self::RUNNING, Ordering::Release);
    }

    /// Shutdown has begun.
    pub fn set_draining(&self) {
        self.0.store(Self::DRAINING, Ordering::Release);
    }

    /// HTTP status and body for `/health`.
    pub fn answer(&self) -> (u16, &'static str) {
        match self.0.load(Ordering::Acquire) {
            Self::RUNNING => (200, "ok\n"),
            Self::DRAINING => (503, "draining\n"),
            _ => (503, "starting\n"),
        }
    }
}

/// Serves until the runtime shuts down.
pub async fn serve(
    listener: TcpListener,
    accounting: Arc<Accounting>,
    health: Arc<Health>,
    live: Arc<LiveTap>,
) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        let accounting = accounting.clone();
        let health = health.clone();
        let live = live.clone();
        tokio::spawn(async move {
            let mut request = Vec::with_capacity(1024);
            let mut buf = [0u8; 1024];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 8192 {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            let line = String::from_utf8_lossy(&request);
            let target = line.split_whitespace().nth(1).unwrap_or("");
            let (status, content_type, body) = match (line.starts_with("GET "), target) {
                (true, "/metrics") => (
                    200,
                    "text/plain; version=0.0.4",
                    render(&accounting.snapshot()),
                ),
                (true, "/live") => (200, "application/json", live.json(accounting.snapshot())),
                (true, "/health") => {
                    let (status, body) = health.answer();
                    (status, "text/plain", body.to_string())
                }
                (true, _) => (404, "text/plain", "not found\n".to_string()),
                _ => (405, "text/plain", "GET only\n".to_string()),
            };
            let reason = match status {
                200 => "OK",
                404 => "Not Found",
                405 => "Method Not Allowed",
                _ => "Service Unavailable",
            };
            let head = format!(
                "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.write_all(body.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// The Prometheus text exposition of `snapshot`.
pub fn render(snapshot: &Snapshot) -> String {
    let mut out = String::with_capacity(4096);
    type RingField = fn(&crate::accounting::RingSnapshot) -> u64;
    let ring_metrics: [(&str, &str, RingField); 7] = [
        (
            "gpuship_kernel_emitted_events_total",
            "Events the BPF probes produced (submitted + lost).",
            |r| r.emitted,
        ),
        (
            "gpuship_kernel_lost_events_total",
            "Events lost in the kernel because the ring was full.",
            |r| r.lost_in_kernel,
        ),
        (
            "gpuship_ring_received_events_total",
            "Events taken off the ring by the agent.",
            |r| r.received,
        ),
        (
            "gpuship_ring_pending_events",
            "Events submitted but not yet taken off the ring.",
            |r| r.pending_in_ring,
        ),
        (
            "gpuship_ring_decode_errors_total",
            "Malformed ring records (received, not delivered).",
            |r| r.decode_errors,
        ),
        (
            "gpuship_cuda_unmatched_returns_total",
            "CUDA returns whose entry record was missing.",
            |r| r.unmatched_returns,
        ),
        (
            "gpuship_cuda_inflight_full_total",
            "CUDA calls not recorded because the in-flight table was full.",
            |r| r.inflight_full,
        ),
    ];
    for (name, help, value) in ring_metrics {
        family(
            &mut out,
            name,
            if name.ends_with("_total") {
                "counter"
            } else {
                "gauge"
            },
            help,
        );
        for ring in &snapshot.rings {
            let _ = writeln!(out, "{name}{{ring=\"{}\"}} {}", ring.ring, value(ring));
        }
    }
    for (name, help, value) in [
        (
            "gpuship_kmsg_xid_events_total",
            "XID lines read from the kernel log.",
            snapshot.kmsg.xids,
        ),
        (
            "gpuship_kmsg_parse_errors_total",
            "Kernel log XID lines that could not be parsed.",
            snapshot.kmsg.parse_errors,
        ),
        (
            "gpuship_xid_unpaired_tracepoint_total",
            "XIDs the tracepoint reported that the kernel log did not (both sources running).",
            snapshot.kmsg.unpaired_tracepoint,
        ),
        (
            "gpuship_xid_unpaired_kmsg_total",
            "XIDs the kernel log reported that the tracepoint did not (both sources running).",
            snapshot.kmsg.unpaired_kmsg,
        ),
        (
            "gpuship_kmsg_lost_gaps_total",
            "Gaps where the kernel overwrote log records before they were read.",
            snapshot.kmsg.lost_gaps,
        ),
    ] {
        family(&mut out, name, "counter", help);
        let _ = writeln!(out, "{name} {value}");
    }
    type SinkField = fn(&crate::accounting::SinkSnapshot) -> u64;
    let sink_metrics: [(&str, &str, &str, SinkField); 9] = [
        (
            "gpuship_component_received_events_total",
            "counter",
            "Events offered to the sink.",
            |s| s.received,
        ),
        (
            "gpuship_component_sent_events_total",
            "counter",
            "Events the destination acknowledged.",
            |s| s.delivered,
        ),
        (
            "gpuship_component_failed_events_total",
            "counter",
            "Events lost to destination errors.",
            |s| s.failed,
        ),
        (
            "gpuship_component_filtered_events_total",
            "counter",
            "Events left out by the sink's kinds/cuda_filter.",
            |s| s.filtered,
        ),
        (
            "gpuship_component_in_flight_events",
            "gauge",
            "Events received but not yet delivered, dropped or failed.",
            |s| s.in_flight,
        ),
        (
            "gpuship_buffer_events",
            "gauge",
            "Events waiting in the sink's queue.",
            |s| s.queued_events,
        ),
        (
            "gpuship_component_spooled_events_total",
            "counter",
            "Events written to the sink's disk spool.",
            |s| s.spooled,
        ),
        (
            "gpuship_component_replayed_events_total",
            "counter",
            "Events read back from the spool.",
            |s| s.replayed,
        ),
        (
            "gpuship_spool_events",
            "gauge",
            "Events in the sink's spool now.",
            |s| s.spooled_pending,
        ),
    ];
    for (name, kind, help, value) in sink_metrics {
        family(&mut out, name, kind, help);
        for sink in &snapshot.sinks {
            let _ = writeln!(
                out,
                "{name}{{component_id=\"{}\",component_kind=\"sink\",kind=\"{}\"}} {}",
                sink.sink,
                sink.kind,
                value(sink)
            );
        }
    }
    let name = "gpuship_component_discarded_events_total";
    family(
        &mut out,
        name,
        "counter",
        "Events dropped before the destination, by reason.",
    );
    for sink in &snapshot.sinks {
        for reason in gpuship_sinks::DropReason::ALL {
            let value = sink
                .dropped_by_reason
                .get(reason.as_str())
                .copied()
                .unwrap_or(0);
            let (reason, intentional) = (reason.as_str(), reason.intentional());
            let _ = writeln!(
                out,
                "{name}{{component_id=\"{}\",component_kind=\"sink\",kind=\"{}\",reason=\"{reason}\",intentional=\"{intentional}\"}} {value}",
                sink.sink, sink.kind
            );
        }
    }
    let name = "gpuship_sink_healthy";
    family(
        &mut out,
        name,
        "gauge",
        "1 while the sink's destination works, 0 from a failed delivery until the next success.",
    );
    for sink in &snapshot.sink_health {
        let _ = writeln!(
            out,
            "{name}{{component_id=\"{}\",component_kind=\"sink\"}} {}",
            sink.sink,
            u8::from(sink.healthy)
        );
    }
    let name = "gpuship_sink_delivery_errors_total";
    family(
        &mut out,
        name,
        "counter",
        "Events whose delivery attempt failed, by error (retried events count once per attempt).",
    );
    for sink in &snapshot.sink_health {
        for (error, count) in &sink.errors {
            let _ = writeln!(
                out,
                "{name}{{component_id=\"{}\",component_kind=\"sink\",error=\"{error}\"}} {count}",
                sink.sink
            );
        }
    }
    family(
        &mut out,
        "gpuship_build_info",
        "gauge",
        "Version of the running agent.",
    );
    let _ = writeln!(
        out,
        "gpuship_build_info{{version=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION")
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuship_sinks::{DropReason, EventKind, SinkStats};

    #[test]
    fn exposition_has_every_family_with_labels_and_values() {
        let mut accounting = Accounting::default();
        let stats = Arc::new(SinkStats::default());
        stats.received.add(EventKind::Cuda, 10);
        stats.delivered.add(EventKind::Cuda, 6);
        stats.drop_events(DropReason::BufferFull, EventKind::Cuda, 3);
        stats.set_healthy(false);
        stats.count_error("message_timed_out", 4);
        accounting.sinks.push(("lake".into(), stats));
        accounting.cuda_ring.submitted.store(12, Ordering::Relaxed);
        accounting
            .cuda_ring
            .lost_in_kernel
            .store(2, Ordering::Relaxed);
        let text = render(&accounting.snapshot());
        for line in [
            "gpuship_kernel_emitted_events_total{ring=\"cuda\"} 14",
            "gpuship_kernel_lost_events_total{ring=\"cuda\"} 2",
            "gpuship_component_received_events_total{component_id=\"lake\",component_kind=\"sink\",kind=\"cuda\"} 10",
            "gpuship_component_sent_events_total{component_id=\"lake\",component_kind=\"sink\",kind=\"cuda\"} 6",
            "gpuship_component_discarded_events_total{component_id=\"lake\",component_kind=\"sink\",kind=\"cuda\",reason=\"buffer_full\",intentional=\"true\"} 3",
            "gpuship_component_in_flight_events{component_id=\"lake\",component_kind=\"sink\",kind=\"cuda\"} 1",
            "# TYPE gpuship_buffer_events gauge",
            "gpuship_sink_healthy{component_id=\"lake\",component_kind=\"sink\"} 0",
            "gpuship_sink_delivery_errors_total{component_id=\"lake\",component_kind=\"sink\",error=\"message_timed_out\"} 4",
            "gpuship_component_discarded_events_total{component_id=\"lake\",component_kind=\"sink\",kind=\"cuda\",reason=\"rejected\",intentional=\"false\"} 0",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
        // Every sample line is `name{labels} value` or `name value` with a numeric value.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let value = line.rsplit(' ').next().unwrap();
            assert!(value.parse::<u64>().is_ok(), "{line}");
        }
    }

    #[test]
    fn health_follows_the_lifecycle() {
        let health = Health::default();
        assert_eq!(health.answer(), (503, "starting\n"));
        health.set_running();
        assert_eq!(health.answer(), (200, "ok\n"));
        health.set_draining();
        assert_eq!(health.answer(), (503, "draining\n"));
    }
}
