//! The HTTP server behind `/metrics`, `/health` and `/live` (hyper, HTTP/1.1, one request per
//! connection), built so that no client can take the descriptors capture and sinks need:
//!
//! - at most [`Limits::max_connections`] sockets are open at once. When all are taken, the
//!   connection that has waited longest without sending its request is closed before the next
//!   one is accepted, so idle or slow clients cannot lock out a scrape or a probe; when all are
//!   busy answering, new connections wait in the kernel's backlog, which costs no descriptor;
//! - a request's head must arrive within [`Limits::header_read_timeout`] and fit in
//!   [`Limits::max_request_bytes`] (431 otherwise); a connection lives at most
//!   [`Limits::connection_timeout`] in all;
//! - an `accept` error (EMFILE, ENFILE, ...) pauses accepting for [`ACCEPT_ERROR_PAUSE`]
//!   instead of spinning.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};

use super::{render, Health};
use crate::accounting::Accounting;
use crate::live::LiveTap;

/// How long accepting pauses after an `accept` error.
pub const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// How many connections and how long each may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Sockets open at once (`[metrics] max_connections`).
    pub max_connections: usize,
    /// Time from accept to the end of the request head.
    pub header_read_timeout: Duration,
    /// Time from accept to the last byte of the answer.
    pub connection_timeout: Duration,
    /// The largest request head, in bytes (hyper's floor is 8,192).
    pub max_request_bytes: usize,
}

impl Limits {
    /// Limits with the documented timeouts and `max_connections` sockets.
    pub fn new(max_connections: usize) -> Self {
        Self {
            max_connections: max_connections.max(1),
            header_read_timeout: Duration::from_secs(5),
            connection_timeout: Duration::from_secs(30),
            max_request_bytes: 8192,
        }
    }
}

/// What the endpoints answer from.
#[derive(Clone)]
pub struct Served {
    /// Counters for `/metrics` and `/live`.
    pub accounting: Arc<Accounting>,
    /// `/health`.
    pub health: Arc<Health>,
    /// `/live`, and the GPU-health families of `/metrics`.
    pub live: Arc<LiveTap>,
    /// The OTLP metrics exporter's counts, when `[metrics.otlp]` is set.
    pub otlp_exports: Option<Arc<super::otlp::ExportCounters>>,
}

/// Connections that have not sent their request yet, oldest first, each with the sender that
/// closes it.
#[derive(Default)]
struct Waiting {
    next_id: u64,
    queue: VecDeque<(u64, oneshot::Sender<()>)>,
}

impl Waiting {
    fn push(&mut self) -> (u64, oneshot::Receiver<()>) {
        let (close, closed) = oneshot::channel();
        self.next_id += 1;
        self.queue.push_back((self.next_id, close));
        (self.next_id, closed)
    }

    fn remove(&mut self, id: u64) {
        self.queue.retain(|(waiting, _)| *waiting != id);
    }

    /// Asks the oldest still-running waiting connection to close; false when there is none.
    fn close_oldest(&mut self) -> bool {
        while let Some((_, close)) = self.queue.pop_front() {
            if close.send(()).is_ok() {
                return true;
            }
        }
        false
    }
}

type Shared<T> = Arc<Mutex<T>>;

fn lock(waiting: &Shared<Waiting>) -> std::sync::MutexGuard<'_, Waiting> {
    // The queue stays consistent even if a holder panicked (each change is one call).
    waiting.lock().unwrap_or_else(|e| e.into_inner())
}

/// Serves `listener` until the runtime shuts down.
pub async fn serve(listener: TcpListener, served: Served, limits: Limits) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let waiting: Shared<Waiting> = Arc::default();
    let mut last_error_log: Option<Instant> = None;
    loop {
        let permit = match permits.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                lock(&waiting).close_oldest();
                match permits.clone().acquire_owned().await {
                    Ok(permit) => permit,
                    Err(_) => return, // never closed
                }
            }
        };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(err) => {
                let quiet = last_error_log.is_some_and(|t| t.elapsed() < Duration::from_secs(10));
                if !quiet {
                    tracing::warn!(%err, "metrics server cannot accept; pausing");
                    last_error_log = Some(Instant::now());
                }
                tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                continue;
            }
        };
        let (id, closed) = lock(&waiting).push();
        tokio::spawn(connection(
            stream,
            permit,
            (id, closed, waiting.clone()),
            served.clone(),
            limits,
        ));
    }
}

/// Answers one connection; its socket is closed before `permit` is given back.
async fn connection(
    stream: TcpStream,
    permit: OwnedSemaphorePermit,
    (id, closed, waiting): (u64, oneshot::Receiver<()>, Shared<Waiting>),
    served: Served,
    limits: Limits,
) {
    let answering = waiting.clone();
    let service = service_fn(move |request: Request<Incoming>| {
        // The head is in: this connection no longer waits, and is not closed for a newcomer.
        lock(&answering).remove(id);
        let response = respond(&served, request.method(), request.uri().path());
        async move { Ok::<_, Infallible>(response) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(false)
        .max_buf_size(limits.max_request_bytes.max(8192))
        .serve_connection(TokioIo::new(stream), service);
    let deadline = tokio::time::sleep(limits.connection_timeout);
    tokio::select! {
        _ = conn => {}
        Ok(()) = closed => {}
        _ = deadline => {}
    }
    lock(&waiting).remove(id);
    // The connection future (and its socket) was dropped with the select; only now may the
    // accept loop open another.
    drop(permit);
}

fn respond(served: &Served, method: &Method, path: &str) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match (method == Method::GET, path) {
        (true, "/metrics") => (
            StatusCode::OK,
            super::render::CONTENT_TYPE,
            render(
                &served.accounting.snapshot(),
                served.live.health(),
                served.otlp_exports.as_deref(),
            ),
        ),
        (true, "/live") => (
            StatusCode::OK,
            "application/json",
            served.live.json(served.accounting.snapshot()),
        ),
        (true, "/health") => {
            let (status, body) = super::health_answer(&served.health, &served.accounting);
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
            (status, "text/plain", body)
        }
        (true, _) => (StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
        (false, _) => (
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "GET only\n".into(),
        ),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    async fn start(limits: Limits) -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address");
        let served = Served {
            accounting: Arc::default(),
            health: Arc::default(),
            live: Arc::new(LiveTap::new()),
            otlp_exports: None,
        };
        served.health.set_running();
        tokio::spawn(serve(listener, served, limits));
        address
    }

    /// Sends `request` on a new connection; the status and body of the answer.
    async fn get(address: std::net::SocketAddr, request: &str) -> (u16, String, String) {
        let mut stream = TcpStream::connect(address).await.expect("connect");
        stream.write_all(request.as_bytes()).await.expect("send");
        answer(&mut stream).await
    }

    async fn answer(stream: &mut TcpStream) -> (u16, String, String) {
        let mut text = String::new();
        tokio::time::timeout(Duration::from_secs(30), stream.read_to_string(&mut text))
            .await
            .expect("an answer within 30 s")
            .expect("read");
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok());
        (status.unwrap_or(0), head.to_string(), body.to_string())
    }

    /// True once the server has closed `stream` (end of file or reset).
    async fn closed(stream: &mut TcpStream) -> bool {
        let mut byte = [0u8; 1];
        matches!(
            tokio::time::timeout(Duration::from_millis(1), stream.read(&mut byte)).await,
            Ok(Ok(0) | Err(_))
        )
    }

    async fn count_closed(streams: &mut [TcpStream]) -> usize {
        let mut count = 0;
        for stream in streams {
            count += usize::from(closed(stream).await);
        }
        count
    }

    #[tokio::test]
    async fn idle_connections_cannot_lock_out_a_probe() {
        let limits = Limits {
            header_read_timeout: Duration::from_secs(600),
            connection_timeout: Duration::from_secs(600),
            ..Limits::new(4)
        };
        let address = start(limits).await;
        let mut idle = Vec::new();
        for _ in 0..10 {
            idle.push(TcpStream::connect(address).await.expect("connect"));
        }
        let (status, _, body) = get(address, "GET /health HTTP/1.1\r\n\r\n").await;
        assert_eq!((status, body.as_str()), (200, "ok\n"));
        // Each accept past the 4th closed the oldest waiting connection first: 7 for the
        // idle ones, one more for the probe.
        let deadline = Instant::now() + Duration::from_secs(30);
        while count_closed(&mut idle).await < 8 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let open: Vec<usize> = (0..idle.len()).collect::<Vec<_>>();
        let mut still_open = Vec::new();
        for i in open {
            if !closed(&mut idle[i]).await {
                still_open.push(i);
            }
        }
        assert_eq!(still_open, vec![8, 9], "the newest stay, the oldest go");
        // A kept connection that now sends its request is answered.
        idle[9]
            .write_all(b"GET /metrics HTTP/1.1\r\n\r\n")
            .await
            .expect("send");
        let (status, head, body) = answer(&mut idle[9]).await;
        assert_eq!(status, 200);
        assert!(head.contains(super::super::CONTENT_TYPE), "{head}");
        assert!(body.ends_with("# EOF\n"), "{body}");
    }

    #[tokio::test]
    async fn requests_are_bounded_in_size_and_time() {
        let limits = Limits {
            header_read_timeout: Duration::from_millis(200),
            ..Limits::new(4)
        };
        let address = start(limits).await;
        let big = format!(
            "GET /health HTTP/1.1\r\nX-Big: {}\r\n\r\n",
            "a".repeat(64 << 10)
        );
        assert_eq!(get(address, &big).await.0, 431);
        // A client that never sends its request is closed (no answer, or a 408).
        let mut silent = TcpStream::connect(address).await.expect("connect");
        let (status, _, _) = answer(&mut silent).await;
        assert!(status == 0 || status == 408, "{status}");
        // Half a request head is no better.
        let mut slow = TcpStream::connect(address).await.expect("connect");
        slow.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            .await
            .expect("send");
        let (status, _, _) = answer(&mut slow).await;
        assert!(status == 0 || status == 408, "{status}");
    }

    #[tokio::test]
    async fn answers_get_on_three_paths_only() {
        let address = start(Limits::new(4)).await;
        let (status, head, body) = get(address, "GET /live HTTP/1.1\r\n\r\n").await;
        assert_eq!(status, 200);
        assert!(head.contains("application/json"), "{head}");
        let live: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(live["version"], 1);
        assert_eq!(get(address, "GET /nope HTTP/1.1\r\n\r\n").await.0, 404);
        assert_eq!(get(address, "POST /metrics HTTP/1.1\r\n\r\n").await.0, 405);
        assert_eq!(get(address, "GET /health HTTP/1.0\r\n\r\n").await.0, 200);
    }
}
