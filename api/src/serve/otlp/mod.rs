//! OTLP ingest (SPEC §8): spans and log records carrying `fencing.*` attributes, over OTLP/HTTP
//! on the listener ([`http`]: `POST /v1/traces`, `POST /v1/logs`) and over OTLP/gRPC on
//! `otlp_grpc_listen` ([`grpc`]). Both go through [`Otlp::take`]: the request is mapped to its
//! fencing items once (`fencewatch_ingest::decode::otlp`), which are submitted to the WAL
//! source as one batch (format `Otlp`, source `otlp`) and applied; the answer is full success, or partial success naming
//! the first malformed items (durable as `malformed_event` evidence: not to be retried).
//! [`links`] adds the trace and span ids (and links) to the events of the `/v1` answers.

pub mod grpc;
pub mod http;
pub mod links;

use crate::serve::metrics::Metrics;
use crate::serve::submit::submit;
use fencewatch_ingest::batch::{self, Format};
use fencewatch_ingest::decode::otlp::{self, Location, Mapped, Signal};
use fencewatch_ingest::partition::Applied;
use fencewatch_ingest::report::{InternalEvent, ItemsIgnored};
use fencewatch_ingest::source::wal::{Reservation, SubmitError, WalSource};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// The WAL source (and metric label) of OTLP batches.
pub const SOURCE: &str = "otlp";
/// Histogram {service, code}: time of an OTLP/gRPC export call; `service` is `traces` or
/// `logs`, `code` the gRPC status code's name. (OTLP/HTTP is in
/// `fencewatch_http_request_duration_seconds`, routes `/v1/traces` and `/v1/logs`.)
pub const GRPC_REQUEST_DURATION_SECONDS: &str = "fencewatch_otlp_grpc_request_duration_seconds";
/// Malformed items an `error_message` names at most.
const NAMED: usize = 5;

/// Labels {service, code}.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GrpcLabels {
    /// `traces` or `logs`.
    pub service: &'static str,
    /// The gRPC status code, e.g. `ok`, `invalid_argument`.
    pub code: &'static str,
}

/// The OTLP/gRPC metrics, and the evidence's (ingested, rejected and ignored items count
/// there, under source `otlp`).
#[derive(Debug, Clone)]
pub struct OtlpMetrics {
    evidence: Metrics,
    grpc_duration: Family<GrpcLabels, Histogram>,
}

impl OtlpMetrics {
    /// Registers the gRPC family in `registry`; the evidence's are `evidence`'s.
    pub fn register(registry: &mut Registry, evidence: Metrics) -> OtlpMetrics {
        let grpc_duration = Family::<GrpcLabels, Histogram>::new_with_constructor(
            crate::serve::metrics::http_histogram as fn() -> Histogram,
        );
        registry.register(
            GRPC_REQUEST_DURATION_SECONDS,
            "Time of OTLP/gRPC export calls",
            grpc_duration.clone(),
        );
        OtlpMetrics {
            evidence,
            grpc_duration,
        }
    }

    fn ignored(&self, signal: Signal, n: u64) {
        ItemsIgnored {
            signal: signal.as_str(),
            count: n,
        }
        .emit(&self.evidence);
    }

    /// Records one gRPC call.
    pub fn grpc_call(&self, signal: Signal, code: &'static str, seconds: f64) {
        let labels = GrpcLabels {
            service: signal.as_str(),
            code,
        };
        self.grpc_duration.get_or_create(&labels).observe(seconds);
    }
}

/// What OTLP ingest shares between HTTP and gRPC.
#[derive(Debug, Clone)]
pub struct Otlp {
    /// The WAL source the batches go to.
    pub wal: std::sync::Arc<WalSource>,
    /// The OTLP metrics.
    pub metrics: OtlpMetrics,
    /// Requests being mapped at once at most ([`Otlp::mapping`]): as many as cores.
    pub mapping: std::sync::Arc<tokio::sync::Semaphore>,
}

/// Why a request was not taken; nothing of it is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Not an OTLP request of the signal (HTTP 400, gRPC `INVALID_ARGUMENT`).
    Invalid(String),
    /// Over `max_body_bytes`, compressed or not (HTTP 413, gRPC `RESOURCE_EXHAUSTED`).
    TooLarge(String),
    /// Ingest saturated, not ready or shutting down: retry (HTTP 503 with `Retry-After`, gRPC
    /// `UNAVAILABLE` with retry info).
    Unavailable(String),
}

/// A request taken: durable in the WAL and applied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Taken {
    /// Malformed fencing items (kept as `malformed_event` evidence).
    pub rejected: u64,
    /// Names the first malformed items (index, field, reason); empty when none.
    pub error_message: String,
}

/// An OTLP request, parsed.
#[derive(Debug)]
pub enum Request {
    /// Of the trace service.
    Traces(otlp::trace_service::ExportTraceServiceRequest),
    /// Of the logs service.
    Logs(otlp::logs_service::ExportLogsServiceRequest),
    /// A protobuf body of either, mapped as it was read ([`otlp::wire::map`]).
    Mapped(Signal, Mapped),
}

impl Request {
    fn signal(&self) -> Signal {
        match self {
            Request::Traces(_) => Signal::Traces,
            Request::Logs(_) => Signal::Logs,
            Request::Mapped(signal, _) => *signal,
        }
    }

    /// Parses an OTLP/HTTP body of `signal`, protobuf or (`json`) OTLP/JSON.
    pub fn parse(
        signal: Signal,
        body: prost::bytes::Bytes,
        json: bool,
    ) -> Result<Request, Failure> {
        let invalid = |e: otlp::RequestError| Failure::Invalid(e.0);
        if !json {
            return otlp::wire::map_into(signal, &body, header())
                .map(|m| Request::Mapped(signal, m))
                .map_err(|e| Failure::Invalid(format!("invalid OTLP protobuf: {e}")));
        }
        match signal {
            Signal::Traces => otlp::parse_traces(body, json)
                .map(Request::Traces)
                .map_err(invalid),
            Signal::Logs => otlp::parse_logs(body, json)
                .map(Request::Logs)
                .map_err(invalid),
        }
    }

    /// Its items, written after their WAL payload's [`header`].
    fn map(self) -> Mapped {
        match self {
            Request::Traces(r) => otlp::map_traces_into(&r, header()),
            Request::Logs(r) => otlp::map_logs_into(&r, header()),
            Request::Mapped(_, m) => m,
        }
    }
}

/// The header of an OTLP request's WAL payload, which its items are written after as they are
/// mapped (the time is set when it is stored: [`Prepared::of`]).
fn header() -> Vec<u8> {
    batch::encode_header(Format::Otlp, 0, SOURCE, None, 0)
}

/// A request mapped to its fencing items, and their WAL payload.
#[derive(Debug)]
pub struct Prepared {
    signal: Signal,
    /// The WAL payload; empty when there are no fencing items.
    payload: Vec<u8>,
    items: u64,
    ignored: u64,
    locations: Vec<Location>,
}

impl Prepared {
    /// Maps `request` (consuming it) and encodes its WAL payload, received at `now` (ns): CPU
    /// work for a request parsed into opentelemetry-proto's types (OTLP/JSON), none for one
    /// mapped as it was read ([`Request::Mapped`]).
    pub fn of(request: Request, now: i64) -> Prepared {
        let signal = request.signal();
        let mapped = request.map();
        let items = mapped.items.len() as u64;
        let ignored = mapped.ignored;
        let mut payload = Vec::new();
        if items > 0 {
            payload = mapped.items.into_buffer();
            batch::set_received_at(&mut payload, now);
        }
        Prepared {
            signal,
            payload,
            items,
            ignored,
            locations: mapped.locations,
        }
    }
}

/// A protobuf body up to this size (an SDK's batch of 512 spans is ~200 KiB) is mapped on
/// the async worker that read it: well under a millisecond for an SDK's batch (~0.3 µs a
/// span), 5–10 ms end to end for the hostile bodies measured (README, "Where it runs"); a
/// larger one, and a compressed or OTLP/JSON body, on a blocking thread. Handing a request to
/// a blocking thread and back took two thread wake-ups per request: `serve_bench` OTLP,
/// median of six interleaved rounds, 499k → 546k spans/s (session 31).
pub const INLINE_BYTES: usize = 512 << 10;

impl Otlp {
    /// A permit to map one request. Mapping is CPU work, and a request's mapped items take
    /// memory its body does not count (a malformed 22-byte span becomes its error, its place
    /// and its WAL record) until its items are counted against the ingest budget: one request
    /// a core at a time bounds that, where every request in flight mapped at once held 13
    /// times `max_pending_bytes` (hostile test, session 20).
    pub fn mapping_permits() -> std::sync::Arc<tokio::sync::Semaphore> {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        std::sync::Arc::new(tokio::sync::Semaphore::new(cores))
    }

    /// Waits for a permit to map one request ([`Otlp::mapping_permits`]), to hold while it maps.
    pub async fn mapping_permit(&self) -> tokio::sync::OwnedSemaphorePermit {
        let permits = self.mapping.clone();
        permits.acquire_owned().await.expect("never closed")
    }

    /// Maps an OTLP protobuf request body as it is read (`wire::map_into`), a request a core
    /// at a time ([`Otlp::mapping_permits`]): on this async worker up to [`INLINE_BYTES`], on a
    /// blocking thread beyond. The permit is given back when it is mapped: its items are
    /// counted against the ingest budget when it is stored, next.
    pub async fn map_protobuf(
        &self,
        signal: Signal,
        body: prost::bytes::Bytes,
    ) -> Result<Request, Failure> {
        let _permit = self.mapping_permit().await;
        if body.len() <= INLINE_BYTES {
            return Request::parse(signal, body, false);
        }
        tokio::task::spawn_blocking(move || Request::parse(signal, body, false))
            .await
            .map_err(|e| Failure::Unavailable(e.to_string()))?
    }

    /// Stores and applies `request`, mapped as it was read ([`Otlp::map_protobuf`]), holding
    /// `held` of the ingest budget until answered. A request without fencing items stores
    /// nothing.
    pub async fn take(&self, request: Request, held: Reservation) -> Result<Taken, Failure> {
        let now = self.wal.clock().now().0;
        self.store(Prepared::of(request, now), held).await
    }

    /// Stores and applies a prepared request ([`Otlp::take`]).
    pub async fn store(&self, prepared: Prepared, held: Reservation) -> Result<Taken, Failure> {
        let Prepared {
            signal,
            payload,
            items,
            ignored,
            locations,
        } = prepared;
        self.metrics.ignored(signal, ignored);
        if items == 0 {
            return Ok(Taken::default());
        }
        let done = submit(&self.wal, items, payload, held)
            .await
            .map_err(|e| match e {
                SubmitError::TooManyItems { .. } => Failure::TooLarge(e.to_string()),
                e => Failure::Unavailable(e.to_string()),
            })?;
        let a = &done.applied;
        Ok(Taken {
            rejected: a.malformed,
            error_message: error_message(signal, a, &locations),
        })
    }
}

/// Names the first [`NAMED`] malformed items by their place in the request.
fn error_message(signal: Signal, a: &Applied, locations: &[Location]) -> String {
    if a.malformed == 0 {
        return String::new();
    }
    let named: Vec<String> = a
        .errors
        .iter()
        .take(NAMED)
        .map(|e| {
            let at = usize::try_from(e.item - 1)
                .ok()
                .and_then(|i| locations.get(i))
                .map_or_else(
                    || format!("item {}", e.item),
                    |l| otlp::location_name(signal, *l),
                );
            format!("{at}: {}", e.error)
        })
        .collect();
    let more = a.malformed - named.len() as u64;
    format!(
        "{} {}(s) malformed, kept as malformed_event evidence (do not retry them): {}{}",
        a.malformed,
        signal.item(),
        named.join("; "),
        if more > 0 {
            format!("; and {more} more")
        } else {
            String::new()
        }
    )
}

/// `google.rpc.Status`, the body of an OTLP/HTTP error (its `details` are never sent).
#[derive(Clone, PartialEq, prost::Message, serde::Serialize)]
pub struct RpcStatus {
    /// The gRPC status code.
    #[prost(int32, tag = "1")]
    pub code: i32,
    /// What went wrong.
    #[prost(string, tag = "2")]
    pub message: String,
}

/// gRPC status codes the answers use.
pub mod code {
    /// `INVALID_ARGUMENT`.
    pub const INVALID_ARGUMENT: i32 = 3;
    /// `RESOURCE_EXHAUSTED`.
    pub const RESOURCE_EXHAUSTED: i32 = 8;
    /// `UNAVAILABLE`.
    pub const UNAVAILABLE: i32 = 14;
    /// `UNAUTHENTICATED`.
    pub const UNAUTHENTICATED: i32 = 16;
    /// `UNIMPLEMENTED`.
    pub const UNIMPLEMENTED: i32 = 12;
    /// `NOT_FOUND`.
    pub const NOT_FOUND: i32 = 5;
    /// `INTERNAL`.
    pub const INTERNAL: i32 = 13;
}
