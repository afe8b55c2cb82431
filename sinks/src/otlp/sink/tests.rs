//! What no real collector can be asked to do: answer with a partial success, a retryable status
//! or a permanent one. A canned OTLP/HTTP endpoint answers each request from a script.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsPartialSuccess, ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use prost::Message as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::OtlpSink;
use crate::otlp::config::{OtlpCompression, OtlpProtocol, OtlpSinkConfig};
use crate::queue::{queue, BufferConfig};
use crate::sink::{Sink, SinkInput};
use crate::stats::{DropReason, SinkStats};
use crate::test_support::{cuda_batch, identity};
use crate::EventKind;

/// An answer: HTTP status and the partial-success count (for 200). Status 0: read the whole
/// request, then close the connection without answering (a collector dying mid-request).
type Answer = (u16, i64);

/// Serves `answers` in order (the last one repeats); returns the port and the records received
/// per request.
async fn canned_collector(answers: Vec<Answer>) -> (u16, Arc<Mutex<Vec<usize>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let received = Arc::new(Mutex::new(Vec::new()));
    let seen = received.clone();
    tokio::spawn(async move {
        let answers = Arc::new(answers);
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            let answers = answers.clone();
            let seen = seen.clone();
            tokio::spawn(async move {
                loop {
                    let mut request = Vec::new();
                    let mut byte = [0u8; 1];
                    while !request.ends_with(b"\r\n\r\n") {
                        if stream.read(&mut byte).await.unwrap_or(0) == 0 {
                            return;
                        }
                        request.push(byte[0]);
                    }
                    let head = String::from_utf8_lossy(&request).to_ascii_lowercase();
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .map(|v| v.trim().parse().unwrap())
                        .unwrap_or(0);
                    let mut body = vec![0u8; length];
                    stream.read_exact(&mut body).await.unwrap();
                    let records = ExportLogsServiceRequest::decode(body.as_slice())
                        .map(|r| r.resource_logs[0].scope_logs[0].log_records.len())
                        .unwrap_or(0);
                    let index = {
                        let mut seen = seen.lock().unwrap();
                        seen.push(records);
                        seen.len() - 1
                    };
                    let (status, rejected) = answers[index.min(answers.len() - 1)];
                    if status == 0 {
                        return;
                    }
                    let payload = if status == 200 {
                        ExportLogsServiceResponse {
                            partial_success: (rejected > 0).then(|| ExportLogsPartialSuccess {
                                rejected_log_records: rejected,
                                error_message: "attribute too long".into(),
                            }),
                        }
                        .encode_to_vec()
                    } else {
                        b"try again".to_vec()
                    };
                    let head = format!(
                        "HTTP/1.1 {status} X\r\ncontent-type: application/x-protobuf\r\ncontent-length: {}\r\n\r\n",
                        payload.len()
                    );
                    stream.write_all(head.as_bytes()).await.unwrap();
                    stream.write_all(&payload).await.unwrap();
                }
            });
        }
    });
    (port, received)
}

async fn run(answers: Vec<Answer>, rows: usize) -> (Arc<SinkStats>, Vec<usize>) {
    let (port, received) = canned_collector(answers).await;
    let mut config = OtlpSinkConfig::with_endpoint(format!("http://127.0.0.1:{port}"));
    config.protocol = OtlpProtocol::HttpProtobuf;
    config.compression = OtlpCompression::None;
    config.batch_size = rows;
    let stats = Arc::new(SinkStats::default());
    let (sender, receiver) = queue(BufferConfig::default(), stats.clone());
    sender.send_blocking(cuda_batch(rows, 0));
    drop(sender);
    let sink = Box::new(OtlpSink::new("otlp", config, identity(), None));
    tokio::time::timeout(
        Duration::from_secs(30),
        sink.run(SinkInput {
            batches: receiver,
            stats: stats.clone(),
        }),
    )
    .await
    .expect("sink finishes")
    .unwrap();
    let received = received.lock().unwrap().clone();
    (stats, received)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_success_counts_the_refused_records_as_rejected() {
    let (stats, requests) = run(vec![(200, 2)], 5).await;
    assert_eq!(requests, [5]);
    assert_eq!(stats.delivered.get(EventKind::Cuda), 3);
    assert_eq!(stats.dropped(DropReason::Rejected, EventKind::Cuda), 2);
    assert_eq!(stats.errors().get("partial_success"), Some(&2));
    assert_eq!(stats.in_flight(EventKind::Cuda), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retryable_status_is_retried_until_accepted() {
    let (stats, requests) = run(vec![(503, 0), (429, 0), (200, 0)], 4).await;
    assert_eq!(requests, [4, 4, 4]);
    assert_eq!(stats.delivered.get(EventKind::Cuda), 4);
    assert_eq!(stats.errors().get("http_503"), Some(&4));
    assert_eq!(stats.errors().get("http_429"), Some(&4));
    assert_eq!(
        stats.errors().get("maybe_delivered"),
        None,
        "an answered refusal is not a possible duplicate"
    );
    assert!(stats.healthy());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_of_exports_with_an_unknown_outcome_are_counted_as_maybe_delivered() {
    // The collector takes the request and dies before answering, then a gateway answers 502:
    // both times it may have kept the records, so the third, accepted, attempt may be a
    // duplicate of either.
    let (stats, requests) = run(vec![(0, 0), (502, 0), (200, 0)], 4).await;
    assert_eq!(requests, [4, 4, 4]);
    assert_eq!(stats.delivered.get(EventKind::Cuda), 4);
    let errors = stats.errors();
    assert_eq!(errors.get("connection_lost"), Some(&4), "{errors:?}");
    assert_eq!(errors.get("http_502"), Some(&4), "{errors:?}");
    assert_eq!(errors.get("maybe_delivered"), Some(&8), "{errors:?}");
    assert_eq!(stats.in_flight(EventKind::Cuda), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permanent_refusal_counts_the_records_as_failed() {
    let (stats, requests) = run(vec![(400, 0)], 6).await;
    assert_eq!(requests, [6]);
    assert_eq!(stats.failed.get(EventKind::Cuda), 6);
    assert_eq!(stats.delivered.get(EventKind::Cuda), 0);
    assert_eq!(stats.errors().get("http_400"), Some(&6));
    assert_eq!(stats.in_flight(EventKind::Cuda), 0);
}
