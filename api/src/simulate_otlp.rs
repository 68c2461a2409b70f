//! `fencewatch simulate --otlp URL` / `--otlp-grpc HOST:PORT`: the simulated workload sent to a
//! running `serve` (or any OTLP receiver, a Collector) as spans carrying `fencing.*` attributes
//! (`fencewatch_ingest::simulate::spans`), over OTLP/HTTP protobuf (`POST <URL>/v1/traces`)
//! or OTLP/gRPC (the trace service), one request per `--otlp-batch` spans, each sent once it
//! is answered. A `200` with `partial_success` counts its rejected spans; `503` / `UNAVAILABLE`
//! (saturated, or not ready yet) is retried after `Retry-After` (1 s by default) until
//! `--otlp-timeout`; any other answer stops the run. The bearer token is
//! `FENCEWATCH_AUTH_TOKEN` (or the file `FENCEWATCH_AUTH_TOKEN_FILE`), as for `attest`.

use crate::serve::otlp::RpcStatus;
use fencewatch_ingest::decode::otlp::trace_service::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use fencewatch_ingest::simulate::spans::Spans;
use fencewatch_ingest::simulate::{Truth, Workload, simulate_into};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use prost::Message;
use std::io::{self, Read};
use std::time::{Duration, Instant};

/// Where the spans go.
#[derive(Debug, Clone)]
pub enum Endpoint {
    /// OTLP/HTTP: the traces URL (`…/v1/traces`).
    Http(String),
    /// OTLP/gRPC: `http://HOST:PORT`.
    Grpc(String),
}

impl Endpoint {
    /// `--otlp URL`: a base URL (`http://host:4318`) or the traces URL itself.
    pub fn http(url: &str) -> Result<Endpoint, String> {
        let url = url.trim_end_matches('/');
        if !url.starts_with("http://") {
            return Err(format!(
                "--otlp {url}: expected http://HOST:PORT (the service speaks plain HTTP)"
            ));
        }
        Ok(Endpoint::Http(if url.ends_with("/v1/traces") {
            url.to_string()
        } else {
            format!("{url}/v1/traces")
        }))
    }

    /// `--otlp-grpc HOST:PORT`.
    pub fn grpc(addr: &str) -> Result<Endpoint, String> {
        let addr = addr.trim_start_matches("http://").trim_end_matches('/');
        if addr.is_empty() || addr.contains('/') {
            return Err(format!("--otlp-grpc {addr}: expected HOST:PORT"));
        }
        Ok(Endpoint::Grpc(format!("http://{addr}")))
    }

    fn name(&self) -> &str {
        match self {
            Endpoint::Http(u) | Endpoint::Grpc(u) => u,
        }
    }
}

/// How to send.
#[derive(Debug, Clone)]
pub struct Target {
    /// Where.
    pub endpoint: Endpoint,
    /// Spans per request.
    pub batch: usize,
    /// How long one request may take, retries of a saturated service included.
    pub timeout: Duration,
    /// Send each request once the wall clock reaches its last span's end (`--start now`).
    pub live: bool,
}

/// What was sent.
#[derive(Debug, Clone, Default)]
pub struct Sent {
    /// Spans sent (and answered).
    pub spans: u64,
    /// Requests.
    pub requests: u64,
    /// Spans the receiver rejected as malformed (`partial_success`).
    pub rejected: u64,
    /// Requests answered `503` / `UNAVAILABLE` and sent again.
    pub retried: u64,
    /// Wall time of the run.
    pub elapsed: Duration,
}

impl Sent {
    /// The summary line of a run.
    pub fn summary(&self, target: &Target) -> String {
        let secs = self.elapsed.as_secs_f64().max(1e-9);
        format!(
            "fencewatch simulate: sent {} spans in {} requests to {} in {:.2} s ({:.0} spans/s); {} rejected, {} retried",
            self.spans,
            self.requests,
            target.endpoint.name(),
            secs,
            self.spans as f64 / secs,
            self.rejected,
            self.retried
        )
    }
}

fn failed(why: String) -> io::Error {
    io::Error::other(why)
}

/// One answer: the rejected spans, or a wait before sending again, or why the run stops.
enum Answer {
    Taken(u64),
    Retry(Duration),
}

/// Sends one request over OTLP/HTTP.
fn post(agent: &ureq::Agent, url: &str, auth: Option<&str>, body: &[u8]) -> io::Result<Answer> {
    let mut req = agent
        .post(url)
        .header("Content-Type", "application/x-protobuf");
    if let Some(a) = auth {
        req = req.header("Authorization", a);
    }
    let mut res = req.send(body).map_err(|e| failed(format!("{url}: {e}")))?;
    let status = res.status().as_u16();
    let retry_after = res
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let mut bytes = Vec::new();
    let _ = res
        .body_mut()
        .as_reader()
        .take(1 << 20)
        .read_to_end(&mut bytes);
    match status {
        200 => {
            let answer = ExportTraceServiceResponse::decode(bytes.as_slice()).map_err(|e| {
                failed(format!(
                    "{url}: 200 with a body that is not an export response: {e}"
                ))
            })?;
            let rejected = answer.partial_success.map_or(0, |p| p.rejected_spans);
            Ok(Answer::Taken(u64::try_from(rejected).unwrap_or(0)))
        }
        429 | 503 => Ok(Answer::Retry(Duration::from_secs(
            retry_after.unwrap_or(1).clamp(1, 30),
        ))),
        _ => {
            let message = RpcStatus::decode(bytes.as_slice())
                .map(|s| s.message)
                .unwrap_or_else(|_| String::from_utf8_lossy(&bytes).chars().take(300).collect());
            let hint = if status == 401 {
                " (set FENCEWATCH_AUTH_TOKEN or FENCEWATCH_AUTH_TOKEN_FILE)"
            } else {
                ""
            };
            Err(failed(format!("{url}: {status} {message}{hint}")))
        }
    }
}

/// Sends one request over OTLP/gRPC.
async fn export(
    client: &mut TraceServiceClient<tonic::transport::Channel>,
    auth: Option<&tonic::metadata::MetadataValue<tonic::metadata::Ascii>>,
    request: ExportTraceServiceRequest,
) -> io::Result<Answer> {
    let mut req = tonic::Request::new(request);
    if let Some(a) = auth {
        req.metadata_mut().insert("authorization", a.clone());
    }
    match client.export(req).await {
        Ok(res) => {
            let rejected = res
                .into_inner()
                .partial_success
                .map_or(0, |p| p.rejected_spans);
            Ok(Answer::Taken(u64::try_from(rejected).unwrap_or(0)))
        }
        Err(s) if s.code() == tonic::Code::Unavailable => Ok(Answer::Retry(Duration::from_secs(1))),
        Err(s) => Err(failed(format!("{:?}: {}", s.code(), s.message()))),
    }
}

/// Sleeps until the wall clock reaches the request's last span's end.
fn pace(request: &ExportTraceServiceRequest) {
    let end = request
        .resource_spans
        .iter()
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| &s.spans)
        .map(|s| s.end_time_unix_nano)
        .max()
        .unwrap_or(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    if end > now {
        std::thread::sleep(Duration::from_nanos(end - now));
    }
}

/// Sends the workload `wl` to `target`; its ground truth and what was sent.
pub fn send(wl: &Workload, target: &Target) -> Result<(Truth, Sent), String> {
    let token = crate::attest::token()?;
    let auth = token.as_ref().map(|t| format!("Bearer {t}"));
    let started = Instant::now();
    let mut sent = Sent::default();
    // One request at a time, retried while the receiver says it is saturated.
    let retrying = |sent: &mut Sent, mut once: Box<dyn FnMut() -> io::Result<Answer> + '_>| {
        let deadline = Instant::now() + target.timeout;
        loop {
            match once()? {
                Answer::Taken(rejected) => {
                    sent.rejected += rejected;
                    sent.requests += 1;
                    return Ok(());
                }
                Answer::Retry(wait) if Instant::now() + wait < deadline => {
                    sent.retried += 1;
                    std::thread::sleep(wait);
                }
                Answer::Retry(_) => {
                    return Err(failed(format!(
                        "{}: still unavailable after {} s",
                        target.endpoint.name(),
                        target.timeout.as_secs()
                    )));
                }
            }
        }
    };
    let (truth, spans) = match &target.endpoint {
        Endpoint::Http(url) => {
            let agent = ureq::Agent::new_with_config(
                ureq::Agent::config_builder()
                    .timeout_global(Some(target.timeout))
                    .http_status_as_error(false)
                    .build(),
            );
            let mut sink = Spans::new(wl.seed, target.batch, "fencewatch-simulate", |r| {
                if target.live {
                    pace(&r);
                }
                let body = r.encode_to_vec();
                retrying(
                    &mut sent,
                    Box::new(|| post(&agent, url, auth.as_deref(), &body)),
                )
            });
            let truth = simulate_into(wl, &mut sink).map_err(|e| e.to_string())?;
            (truth, sink.finish().map_err(|e| e.to_string())?)
        }
        Endpoint::Grpc(url) => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            let channel = tonic::transport::Endpoint::from_shared(url.clone())
                .map_err(|e| format!("--otlp-grpc {url}: {e}"))?
                .timeout(target.timeout);
            let mut client = rt
                .block_on(TraceServiceClient::connect(channel))
                .map_err(|e| format!("{url}: {e}"))?;
            let auth = auth
                .map(|a| a.parse().map_err(|_| "the token is not ASCII".to_string()))
                .transpose()?;
            let mut sink = Spans::new(wl.seed, target.batch, "fencewatch-simulate", |r| {
                if target.live {
                    pace(&r);
                }
                retrying(
                    &mut sent,
                    Box::new(|| rt.block_on(export(&mut client, auth.as_ref(), r.clone()))),
                )
            });
            let truth = simulate_into(wl, &mut sink).map_err(|e| e.to_string())?;
            (truth, sink.finish().map_err(|e| e.to_string())?)
        }
    };
    sent.spans = spans;
    sent.elapsed = started.elapsed();
    Ok((truth, sent))
}
