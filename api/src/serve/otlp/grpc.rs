//! OTLP/gRPC (SPEC §8): the trace and logs services (tonic) on `otlp_grpc_listen`, off unless
//! set. Same semantics as OTLP/HTTP ([`super::Otlp::take`]): `OK` with `partial_success` when
//! some items were malformed; `INVALID_ARGUMENT` for an undecodable request;
//! `RESOURCE_EXHAUSTED` (no retry info) over `max_body_bytes`, on the wire or decompressed
//! (gzip accepted); `UNAVAILABLE` with retry info (`google.rpc.RetryInfo`, 1 s) when saturated,
//! not ready or shutting down, or past `request_timeout`; `UNAUTHENTICATED` without
//! `authorization: Bearer <token>` when a token is configured.
//!
//! Connections are accepted by our own loop, as on the HTTP listener: at most
//! `max_connections` at once (beyond, closed at once: gRPC clients retry), each with at most
//! [`MAX_STREAMS`] streams open, and one with no byte moving for `idle_timeout` is closed.

use super::{Failure, Otlp, Request, Taken};
use crate::serve::auth::AuthToken;
use fencewatch_ingest::decode::otlp::{Signal, logs_service, trace_service};
use fencewatch_ingest::source::wal::Reservation;
use prost::Message;
use prost::bytes::Bytes;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::codec::CompressionEncoding;
use tonic::{Code, Status};

/// What the gRPC listener needs.
#[derive(Debug, Clone)]
pub struct GrpcOptions {
    /// Connections served at once.
    pub max_connections: usize,
    /// A connection moving no byte for this long is closed.
    pub idle_timeout: Duration,
    /// An export call taking longer answers `UNAVAILABLE`.
    pub request_timeout: Duration,
    /// The largest request, compressed or not.
    pub max_body_bytes: usize,
    /// Required as `authorization: Bearer <token>`, when set.
    pub token: Option<AuthToken>,
}

#[derive(Debug, Clone)]
struct Export {
    otlp: Otlp,
    request_timeout: Duration,
}

impl Export {
    /// Stores `request` (`encoded` bytes decompressed), `held` holding its bytes on the wire:
    /// it holds the larger of the two (a message received whole is the buffer tonic read it
    /// into; a compressed one is decompressed into another, its wire bytes consumed).
    async fn take(
        &self,
        request: Request,
        encoded: usize,
        mut held: Reservation,
    ) -> Result<Taken, Status> {
        let wal = &self.otlp.wal;
        if !wal.is_ready() {
            return Err(unavailable(
                "replaying the write-ahead log; not ready yet".into(),
            ));
        }
        if !held.grow((encoded as u64).saturating_sub(held.bytes())) {
            return Err(saturated(wal.budget().max()));
        }
        self.otlp.take(request, held).await.map_err(status_of)
    }
}

/// `UNAVAILABLE`: the bodies in flight would pass `max_pending_bytes`.
fn saturated(max: u64) -> Status {
    unavailable(fencewatch_ingest::source::wal::SubmitError::Saturated(max).to_string())
}

/// The reservation of one call's bytes, shared by its body ([`Budgeted`], which grows it as
/// frames arrive) and the call (which takes it once the message is whole).
#[derive(Clone)]
struct Held(Arc<std::sync::Mutex<Option<Reservation>>>);

impl Held {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Reservation>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn take(&self) -> Option<Reservation> {
        self.lock().take()
    }

    /// Takes `n` more bytes; false past the budget, or once the call took the reservation.
    fn grow(&self, n: u64) -> bool {
        self.lock().as_mut().is_some_and(|h| h.grow(n))
    }
}

/// A request body whose data is taken from the ingest budget (`max_pending_bytes`) as it
/// arrives, as HTTP bodies are while read: tonic buffers a message whole before the call,
/// and streams of many connections each holding most of a large message held memory
/// without bound (hostile test, session 27: 1.9 GB with the budget's gauge at 0). Past the
/// budget the body fails with `UNAVAILABLE`, which tonic answers.
struct Budgeted<B> {
    inner: Pin<Box<B>>,
    held: Held,
    max: u64,
}

impl<B> hyper::body::Body for Budgeted<B>
where
    B: hyper::body::Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = B::Data;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<B::Data>, Self::Error>>> {
        use prost::bytes::Buf;
        match self.inner.as_mut().poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref()
                    && !self.held.grow(data.remaining() as u64)
                {
                    return Poll::Ready(Some(Err(Box::new(saturated(self.max)))));
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// One of the two OTLP export services, served on raw protobuf bodies ([`Raw`]).
trait Export1: Send + Sync + 'static {
    /// The service's name (`package.Service`), as the generated server names it.
    const NAME: &'static str;
    /// The path of its `Export` method.
    const PATH: &'static str;
    const SIGNAL: Signal;
    type Response: prost::Message + Default + Send + 'static;
    fn response(t: Taken) -> Self::Response;
}

struct Traces;

impl Export1 for Traces {
    const NAME: &'static str = "opentelemetry.proto.collector.trace.v1.TraceService";
    const PATH: &'static str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
    const SIGNAL: Signal = Signal::Traces;
    type Response = trace_service::ExportTraceServiceResponse;
    fn response(t: Taken) -> Self::Response {
        trace_service::ExportTraceServiceResponse {
            partial_success: (t.rejected > 0).then(|| trace_service::ExportTracePartialSuccess {
                rejected_spans: i64::try_from(t.rejected).unwrap_or(i64::MAX),
                error_message: t.error_message,
            }),
        }
    }
}

struct Logs;

impl Export1 for Logs {
    const NAME: &'static str = "opentelemetry.proto.collector.logs.v1.LogsService";
    const PATH: &'static str = "/opentelemetry.proto.collector.logs.v1.LogsService/Export";
    const SIGNAL: Signal = Signal::Logs;
    type Response = logs_service::ExportLogsServiceResponse;
    fn response(t: Taken) -> Self::Response {
        logs_service::ExportLogsServiceResponse {
            partial_success: (t.rejected > 0).then(|| logs_service::ExportLogsPartialSuccess {
                rejected_log_records: i64::try_from(t.rejected).unwrap_or(i64::MAX),
                error_message: t.error_message,
            }),
        }
    }
}

/// tonic's codec for an export call whose request is kept as its protobuf bytes (after tonic
/// has decompressed it and held it to the size limit), so that it is mapped as it is read,
/// as on OTLP/HTTP (`wire::map_into`), instead of parsed into opentelemetry-proto's owned
/// types first (about twenty allocations a span). Responses are prost messages.
struct RawCodec<E>(std::marker::PhantomData<fn(E)>);

impl<E> Default for RawCodec<E> {
    fn default() -> Self {
        RawCodec(std::marker::PhantomData)
    }
}

impl<E: prost::Message + Send + 'static> tonic::codec::Codec for RawCodec<E> {
    type Encode = E;
    type Decode = Bytes;
    type Encoder = RawCodec<E>;
    type Decoder = RawCodec<E>;

    fn encoder(&mut self) -> Self::Encoder {
        RawCodec::default()
    }

    fn decoder(&mut self) -> Self::Decoder {
        RawCodec::default()
    }
}

impl<E: prost::Message> tonic::codec::Encoder for RawCodec<E> {
    type Item = E;
    type Error = Status;

    fn encode(&mut self, item: E, dst: &mut tonic::codec::EncodeBuf<'_>) -> Result<(), Status> {
        item.encode(dst)
            .map_err(|e| Status::internal(format!("encoding the response: {e}")))
    }
}

impl<E: Send + 'static> tonic::codec::Decoder for RawCodec<E> {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut tonic::codec::DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        use prost::bytes::Buf;
        let n = src.remaining();
        Ok(Some(src.copy_to_bytes(n)))
    }
}

/// An export service (`S`) on raw bodies: what opentelemetry-proto's generated server does
/// (`tonic::server::Grpc::unary` on the method's path, `UNIMPLEMENTED` on any other), with
/// [`RawCodec`].
struct Raw<S> {
    export: Arc<Export>,
    limit: usize,
    _service: std::marker::PhantomData<fn(S)>,
}

impl<S> Clone for Raw<S> {
    fn clone(&self) -> Self {
        Raw {
            export: self.export.clone(),
            limit: self.limit,
            _service: std::marker::PhantomData,
        }
    }
}

impl<S: Export1> Raw<S> {
    fn new(export: Arc<Export>, limit: usize) -> Self {
        Raw {
            export,
            limit,
            _service: std::marker::PhantomData,
        }
    }
}

impl<S: Export1> tonic::server::NamedService for Raw<S> {
    const NAME: &'static str = S::NAME;
}

/// The `Export` method of `S` on one request's bytes.
struct ExportCall<S> {
    export: Arc<Export>,
    _service: std::marker::PhantomData<fn(S)>,
}

impl<S: Export1> tonic::server::UnaryService<Bytes> for ExportCall<S> {
    type Response = S::Response;
    type Future = BoxFuture<Result<tonic::Response<S::Response>, Status>>;

    fn call(&mut self, request: tonic::Request<Bytes>) -> Self::Future {
        let export = self.export.clone();
        Box::pin(async move {
            let held = request.extensions().get::<Held>().and_then(Held::take);
            let held = held.unwrap_or_else(|| export.otlp.wal.budget().reserve());
            let body = request.into_inner();
            let encoded = body.len();
            let req = export.otlp.map_protobuf(S::SIGNAL, body).await;
            let req = req.map_err(status_of)?;
            let t = export.take(req, encoded, held).await?;
            Ok(tonic::Response::new(S::response(t)))
        })
    }
}

impl<S, B> tower::Service<http::Request<B>> for Raw<S>
where
    S: Export1,
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if req.uri().path() != S::PATH {
            return Box::pin(async move {
                let mut response = http::Response::new(tonic::body::Body::default());
                let headers = response.headers_mut();
                headers.insert(Status::GRPC_STATUS, (Code::Unimplemented as i32).into());
                headers.insert(
                    http::header::CONTENT_TYPE,
                    tonic::metadata::GRPC_CONTENT_TYPE,
                );
                Ok(response)
            });
        }
        let (export, limit) = (self.export.clone(), self.limit);
        let budget = export.otlp.wal.budget();
        let held = Held(Arc::new(std::sync::Mutex::new(Some(budget.reserve()))));
        let (mut parts, body) = req.into_parts();
        parts.extensions.insert(held.clone());
        let body = Budgeted {
            inner: Box::pin(body),
            held,
            max: budget.max(),
        };
        let req = http::Request::from_parts(parts, body);
        Box::pin(async move {
            let mut accept = tonic::codec::EnabledCompressionEncodings::default();
            accept.enable(CompressionEncoding::Gzip);
            let mut grpc = tonic::server::Grpc::new(RawCodec::<S::Response>::default())
                .apply_compression_config(accept, Default::default())
                .apply_max_message_size_config(Some(limit), None);
            let timeout = export.request_timeout;
            let call = ExportCall::<S> {
                export,
                _service: std::marker::PhantomData,
            };
            // The whole call, reading the message included (a client trickling its bytes held
            // a stream and its buffer for as long as it liked).
            match tokio::time::timeout(timeout, grpc.unary(call, req)).await {
                Ok(response) => Ok(response),
                Err(_) => Ok(unavailable(format!(
                    "the request took longer than request_timeout ({timeout:?})"
                ))
                .into_http()),
            }
        })
    }
}

/// `google.rpc.Status` with its details, for `grpc-status-details-bin`.
#[derive(Clone, PartialEq, prost::Message)]
struct StatusDetails {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
    #[prost(message, repeated, tag = "3")]
    details: Vec<Any>,
}

/// `google.protobuf.Any`.
#[derive(Clone, PartialEq, prost::Message)]
struct Any {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

/// `google.rpc.RetryInfo`.
#[derive(Clone, PartialEq, prost::Message)]
struct RetryInfo {
    #[prost(message, optional, tag = "1")]
    retry_delay: Option<ProtoDuration>,
}

/// `google.protobuf.Duration`.
#[derive(Clone, PartialEq, prost::Message)]
struct ProtoDuration {
    #[prost(int64, tag = "1")]
    seconds: i64,
    #[prost(int32, tag = "2")]
    nanos: i32,
}

/// `UNAVAILABLE` with retry info: retry in a second (OTLP clients honour it).
/// The gRPC status of a failure (OTLP/HTTP answers 400, 413, 503).
fn status_of(f: Failure) -> Status {
    match f {
        Failure::Invalid(why) => Status::invalid_argument(why),
        Failure::TooLarge(why) => Status::resource_exhausted(why),
        Failure::Unavailable(why) => unavailable(why),
    }
}

fn unavailable(message: String) -> Status {
    let retry = RetryInfo {
        retry_delay: Some(ProtoDuration {
            seconds: 1,
            nanos: 0,
        }),
    };
    let details = StatusDetails {
        code: Code::Unavailable as i32,
        message: message.clone(),
        details: vec![Any {
            type_url: "type.googleapis.com/google.rpc.RetryInfo".into(),
            value: retry.encode_to_vec(),
        }],
    };
    Status::with_details(Code::Unavailable, message, details.encode_to_vec().into())
}

/// The signal of a gRPC path, for the metrics.
fn signal_of(path: &str) -> Option<Signal> {
    if path.starts_with("/opentelemetry.proto.collector.trace.v1.TraceService/") {
        Some(Signal::Traces)
    } else if path.starts_with("/opentelemetry.proto.collector.logs.v1.LogsService/") {
        Some(Signal::Logs)
    } else {
        None
    }
}

/// A gRPC status code's metric label.
fn code_label(code: &str) -> &'static str {
    match code {
        "0" => "ok",
        "3" => "invalid_argument",
        "8" => "resource_exhausted",
        "12" => "unimplemented",
        "13" => "internal",
        "14" => "unavailable",
        "16" => "unauthenticated",
        _ => "other",
    }
}

/// The layer around the services: checks the bearer token, answers tonic's own statuses as
/// SPEC §8 does ([`tonic_status_as_spec`]), and records each call's duration
/// (`fencewatch_otlp_grpc_request_duration_seconds`).
#[derive(Debug, Clone)]
struct Observe<S> {
    inner: S,
    otlp: Otlp,
    token: Option<AuthToken>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B> tower::Service<http::Request<B>> for Observe<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<tonic::body::Body>>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
    B: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let start = Instant::now();
        let signal = signal_of(req.uri().path());
        let authorized = self.token.as_ref().is_none_or(|t| {
            crate::serve::auth::bearer(req.headers()).is_some_and(|p| t.matches(p))
        });
        let metrics = self.otlp.metrics.clone();
        let inner = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, inner);
        Box::pin(async move {
            let mut res = if authorized {
                inner.call(req).await?
            } else {
                Status::unauthenticated("send `authorization: Bearer <token>`").into_http()
            };
            let headers = res.headers_mut();
            tonic_status_as_spec(headers);
            let code = headers
                .get(Status::GRPC_STATUS)
                .and_then(|c| c.to_str().ok())
                .map_or("ok", code_label);
            if let Some(signal) = signal {
                metrics.grpc_call(signal, code, start.elapsed().as_secs_f64());
            }
            Ok(res)
        })
    }
}

/// The beginnings of tonic's `INTERNAL` answers to a request it could not read as one gRPC
/// message: a corrupt or truncated compressed message, a message cut short by the end of the
/// stream, the compressed flag without `grpc-encoding` (or another flag), no message at all.
const UNREADABLE: [&str; 4] = [
    "Error decompressing",
    "Unexpected EOF decoding stream",
    "protocol error: received message with",
    "Missing request message",
];

/// tonic's own answers to what SPEC §8 answers otherwise: a message over the size limit on the
/// wire (tonic's `OUT_OF_RANGE`) is `RESOURCE_EXHAUSTED`, as one over the limit decompressed;
/// a request tonic could not read as one gRPC message is `INVALID_ARGUMENT`, not `INTERNAL`
/// (tonic's, as gRPC core recommends): it is an undecodable request, which OTLP/HTTP answers
/// 400, and `INTERNAL` (in the metrics' `code="internal"`, which alerts watch) is left to the
/// service's own faults; its message is tonic's, after a sentence saying what was wrong.
fn tonic_status_as_spec(headers: &mut http::HeaderMap) {
    if headers.get(Status::GRPC_STATUS).is_some_and(|c| c == "11") {
        headers.insert(Status::GRPC_STATUS, (Code::ResourceExhausted as i32).into());
        return;
    }
    if headers.get(Status::GRPC_STATUS).is_none_or(|c| c != "13") {
        return;
    }
    let Some(status) = Status::from_header_map(headers) else {
        return;
    };
    if !UNREADABLE.iter().any(|p| status.message().starts_with(p)) {
        return;
    }
    let invalid = Status::invalid_argument(format!(
        "the request is not one readable gRPC message: {}",
        status.message()
    ));
    headers.remove(Status::GRPC_MESSAGE);
    headers.remove(Status::GRPC_STATUS_DETAILS);
    if invalid.add_header(headers).is_err() {
        headers.insert(Status::GRPC_STATUS, (Code::InvalidArgument as i32).into());
    }
}

#[derive(Debug, Clone)]
struct ObserveLayer {
    otlp: Otlp,
    token: Option<AuthToken>,
}

impl<S> tower::Layer<S> for ObserveLayer {
    type Service = Observe<S>;
    fn layer(&self, inner: S) -> Observe<S> {
        Observe {
            inner,
            otlp: self.otlp.clone(),
            token: self.token.clone(),
        }
    }
}

/// Streams a connection may have open at once (HTTP/2 `SETTINGS_MAX_CONCURRENT_STREAMS`;
/// clients queue their further calls until one ends). tonic's default is no limit: one
/// connection opening 100,000 streams of headers only held 2 GB until `request_timeout`
/// (hostile test, session 32). An OTLP exporter has a few exports in flight (the collector's
/// `sending_queue.num_consumers` is 10 by default).
pub const MAX_STREAMS: u32 = 100;

/// Serves the trace and logs services on `listener` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    otlp: Otlp,
    opts: GrpcOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    let export = Export {
        otlp: otlp.clone(),
        request_timeout: opts.request_timeout,
    };
    let limit = opts.max_body_bytes;
    let export = Arc::new(export);
    let traces = Raw::<Traces>::new(export.clone(), limit);
    let logs = Raw::<Logs>::new(export, limit);
    let (tx, rx) = tokio::sync::mpsc::channel::<io::Result<Conn>>(16);
    let permits = Arc::new(Semaphore::new(opts.max_connections));
    let idle = opts.idle_timeout;
    let accept = tokio::spawn(async move {
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting an OTLP/gRPC connection failed; retrying");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Ok(permit) = permits.clone().try_acquire_owned() else {
                tracing::debug!("OTLP/gRPC connection over max_connections closed");
                continue;
            };
            let _ = stream.set_nodelay(true);
            let conn = Conn {
                inner: stream,
                _permit: permit,
                idle,
                timer: Box::pin(tokio::time::sleep(idle)),
            };
            if tx.send(Ok(conn)).await.is_err() {
                return;
            }
        }
    });
    let incoming = tokio_stream::wrappers::ReceiverStream::new(rx);
    let r = tonic::transport::Server::builder()
        .max_concurrent_streams(MAX_STREAMS)
        .layer(ObserveLayer {
            otlp,
            token: opts.token,
        })
        .add_service(traces)
        .add_service(logs)
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await;
    accept.abort();
    r
}

/// An accepted connection: holds its slot of `max_connections`, and fails its reads once no
/// byte moved for `idle` (which closes it).
struct Conn {
    inner: TcpStream,
    _permit: OwnedSemaphorePermit,
    idle: Duration,
    timer: Pin<Box<tokio::time::Sleep>>,
}

impl Conn {
    fn touch(&mut self) {
        let at = tokio::time::Instant::now() + self.idle;
        self.timer.as_mut().reset(at);
    }
}

impl tonic::transport::server::Connected for Conn {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;
    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    self.touch();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => match self.timer.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "idle OTLP/gRPC connection closed",
                ))),
                Poll::Pending => Poll::Pending,
            },
            r => r,
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
