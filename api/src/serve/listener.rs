//! The HTTP listener: our own accept loop around hyper's HTTP/1 connections, so that no client
//! can hold the service's file descriptors or memory without sending anything (issue 11).
//!
//! - **Connection limit.** At most `max_connections` connections are served at once, capped
//!   below the process's file-descriptor limit (raised to the hard limit at start) with a
//!   reserve left for the WAL, checkpoints and Kafka, which therefore never starve. A
//!   connection over the limit is answered `503` problem+json with `Retry-After: 1` and closed,
//!   never left hanging in the backlog. For 64 connections at a time the request head is read
//!   for up to 100 ms first, a liveness probe (`GET /livez`) is answered 200 (a flood must not
//!   get a healthy service restarted by its probe), and the close waits a moment for the client
//!   to read the answer; beyond those 64 the 503 is written at once and the close is immediate,
//!   which can reset the connection before the client read it.
//! - **Header read timeout** (`header_read_timeout`, hyper's own): a request's headers must
//!   arrive within it, counted from the connection's start for its first request and from the
//!   first byte for later ones (slow-loris).
//! - **Idle timeout** (`idle_timeout`): a connection with no request in flight and no byte
//!   read or written for that long is closed (an idle keep-alive, or a client that connected
//!   and sent nothing). A slow body is bounded by `request_timeout`, which covers the handler.
//! - **Accept errors** (out of descriptors, say) are logged at most once a second and retried
//!   after a pause; they never stop the service.
//!
//! On shutdown the loop stops accepting, idle connections close at once, and requests in
//! flight finish (each bounded by `request_timeout`).

use crate::serve::metrics::HttpMetrics;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tower::ServiceExt;

/// File descriptors kept out of the connection limit: WAL segments, checkpoints, the Kafka
/// client's sockets, logs, and the shedding slots.
pub const RESERVED_FDS: u64 = 256 + SHED_SLOTS as u64;
/// Connections over the limit whose close waits for the client (each at most
/// [`SHED_LINGER`]); beyond, a shed connection is closed right after its 503 is written.
const SHED_SLOTS: usize = 64;
/// How long a shed connection may take to read its answer and close.
const SHED_LINGER: Duration = Duration::from_millis(250);

/// What the listener needs.
#[derive(Debug, Clone, Copy)]
pub struct ListenerOptions {
    /// Connections served at once (see [`connection_limit`]).
    pub max_connections: usize,
    /// A request's headers must arrive within this.
    pub header_read_timeout: Duration,
    /// A connection with nothing in flight and no bytes moving is closed after this.
    pub idle_timeout: Duration,
}

/// Raises the soft file-descriptor limit to the hard one and returns the connection limit:
/// `configured`, or less when the descriptors would not hold it beside [`RESERVED_FDS`]; with
/// the descriptor limit (`None` where it cannot be read).
pub fn connection_limit(configured: u64) -> (usize, Option<u64>) {
    let fds = match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(n) => Some(n),
        Err(e) => {
            tracing::warn!(error = %e, "cannot raise the file-descriptor limit");
            rlimit::getrlimit(rlimit::Resource::NOFILE)
                .ok()
                .map(|(soft, _)| soft)
        }
    };
    let cap = fds.map_or(configured, |n| n.saturating_sub(RESERVED_FDS).max(8));
    let limit = configured.min(cap);
    if limit < configured {
        tracing::warn!(
            configured,
            limit,
            fd_limit = fds,
            "max_connections lowered to fit the file-descriptor limit"
        );
    }
    (usize::try_from(limit).unwrap_or(usize::MAX), fds)
}

/// Serves `app` on `listener` until `shutdown` completes, then lets the connections finish.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    opts: ListenerOptions,
    metrics: HttpMetrics,
    shutdown: impl Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(opts.max_connections));
    let shed_slots = Arc::new(Semaphore::new(SHED_SLOTS));
    let graceful = GracefulShutdown::new();
    let mut last_accept_error: Option<Instant> = None;
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            () = &mut shutdown => break,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors or memory: the connection waits in the backlog.
                if last_accept_error.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                    tracing::warn!(error = %e, "accepting a connection failed; retrying");
                    last_accept_error = Some(Instant::now());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            metrics.connection_closed("limit");
            match shed_slots.clone().try_acquire_owned() {
                // A few at a time: the request is read (a liveness probe is answered, so that
                // a flood does not get a healthy service restarted), then 503, and the close
                // waits for the client to read it.
                Ok(slot) => {
                    tokio::spawn(async move {
                        shed(stream).await;
                        drop(slot);
                    });
                }
                // Beyond: the 503 goes out at once.
                Err(_) => answer_shed(&stream),
            }
            continue;
        };
        let _ = stream.set_nodelay(true);
        let activity = Arc::new(Activity::new());
        let io = TokioIo::new(Tracked {
            inner: stream,
            activity: activity.clone(),
        });
        let (app, act) = (app.clone(), activity.clone());
        let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
            let in_flight = InFlight::enter(&act);
            let app = app.clone();
            async move {
                let res = app.oneshot(req).await;
                drop(in_flight);
                res
            }
        });
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(opts.header_read_timeout)
            .keep_alive(true);
        let conn = graceful.watch(builder.serve_connection(io, service));
        let metrics = metrics.clone();
        metrics.http_connections.inc();
        tokio::spawn(async move {
            tokio::select! {
                r = conn => match r {
                    Err(e) if e.is_timeout() => {
                        metrics.connection_closed("header_timeout");
                        tracing::debug!(error = %e, "request headers did not arrive in time");
                    }
                    Err(e) => tracing::debug!(error = %e, "connection ended with an error"),
                    Ok(()) => {}
                },
                () = idle(&activity, opts.idle_timeout) => {
                    metrics.connection_closed("idle");
                    tracing::debug!("idle connection closed");
                }
            }
            metrics.http_connections.dec();
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// The answer of a connection over the limit.
const SHED_RESPONSE: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
content-type: application/problem+json\r\n\
retry-after: 1\r\n\
connection: close\r\n\
content-length: 161\r\n\r\n\
{\"type\":\"https://fencewatch.dev/problems/service-unavailable\",\"title\":\"Service unavailable\",\"status\":503,\"detail\":\"too many open connections; retry in a second\"}";

/// Writes the 503 to a connection over the limit, without waiting (when no shedding slot is
/// free): what the client sent so far is read first (so that the close resets nothing the client still has to read), and the
/// answer fits the socket's send buffer.
fn answer_shed(stream: &TcpStream) {
    let mut buf = [0u8; 4096];
    while let Ok(n) = stream.try_read(&mut buf) {
        if n == 0 {
            break;
        }
    }
    let _ = stream.try_write(SHED_RESPONSE);
}

/// The answer to `GET /livez` on a connection over the limit: the process is alive.
const LIVEZ_RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\n\
content-type: application/json\r\n\
connection: close\r\n\
content-length: 15\r\n\r\n\
{\"status\":\"ok\"}";

/// How long a shed connection's request head may take to arrive.
const SHED_HEAD_WAIT: Duration = Duration::from_millis(100);

/// Whether a request head asks for the liveness probe.
fn is_livez(head: &[u8]) -> bool {
    let line = head
        .split(|&b| b == b'\r' || b == b'\n')
        .next()
        .unwrap_or(b"");
    let mut parts = line.split(|&b| b == b' ');
    let (method, target) = (parts.next(), parts.next());
    method == Some(b"GET".as_slice())
        && target.is_some_and(|t| t == b"/livez" || t.starts_with(b"/livez?"))
}

/// Answers a shed connection: reads its request head for a moment, answers a liveness probe
/// with 200 and anything else with 503, ends the writing side and waits, at most
/// [`SHED_LINGER`] in all, for the client to close.
async fn shed(mut stream: TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    let _ = tokio::time::timeout(SHED_HEAD_WAIT, async {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 4096 {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    let answer = if is_livez(&head) {
        LIVEZ_RESPONSE
    } else {
        SHED_RESPONSE
    };
    let _ = tokio::time::timeout(SHED_LINGER, async {
        stream.write_all(answer).await?;
        stream.shutdown().await?;
        while stream.read(&mut buf).await? > 0 {}
        io::Result::Ok(())
    })
    .await;
}

/// When a connection last moved a byte, and its requests in flight.
#[derive(Debug)]
struct Activity {
    start: Instant,
    /// Milliseconds since `start` of the last byte read or written.
    last_ms: AtomicU64,
    in_flight: AtomicUsize,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
        }
    }

    fn touch(&self) {
        let ms = self.start.elapsed().as_millis() as u64;
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }
}

/// Marks a request in flight while it lives (the idle timer waits for it).
struct InFlight(Arc<Activity>);

impl InFlight {
    fn enter(a: &Arc<Activity>) -> InFlight {
        a.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(a.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.0.touch();
    }
}

/// Completes once the connection has had nothing in flight and moved no byte for `timeout`.
async fn idle(a: &Activity, timeout: Duration) {
    loop {
        if a.in_flight.load(Ordering::Acquire) > 0 {
            tokio::time::sleep(timeout).await;
            continue;
        }
        let deadline = a.last() + timeout;
        if Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep_until(deadline.into()).await;
    }
}

/// A TCP stream that notes every byte moved in its [`Activity`].
struct Tracked {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Tracked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.touch();
        }
        r
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_liveness_probe_is_recognised() {
        assert!(is_livez(b"GET /livez HTTP/1.1\r\nhost: x\r\n\r\n"));
        assert!(is_livez(b"GET /livez?verbose HTTP/1.1\r\n"));
        assert!(!is_livez(b"GET /livezz HTTP/1.1\r\n"));
        assert!(!is_livez(b"POST /livez HTTP/1.1\r\n"));
        assert!(!is_livez(b"GET /readyz HTTP/1.1\r\n"));
        assert!(!is_livez(b""));
        let text = std::str::from_utf8(LIVEZ_RESPONSE).unwrap();
        let (_, body) = text.split_once("\r\n\r\n").unwrap();
        assert_eq!(body.len(), 15);
    }

    #[test]
    fn the_shed_answer_is_a_well_formed_problem() {
        let text = std::str::from_utf8(SHED_RESPONSE).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(body.len(), len);
        let p: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(p["status"], 503);
    }
}
