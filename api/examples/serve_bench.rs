//! Benchmark of `fencewatch serve` (SPEC §7): HTTP ingest throughput and counterexample
//! visibility, measured against the real release binary.
//!
//! ```sh
//! cargo build --release -p fencewatch-api
//! cargo run --release -p fencewatch-api --example serve_bench -- --connections 1,2,4,8
//! cargo run --release -p fencewatch-api --example serve_bench -- --formats ndjson,otlp --trials 0
//! ```
//!
//! 1. **Ingest**: for each `--connections` value, a fresh `serve` (port 0, temporary data
//!    directory, a one-property `lease_epoch` contract) takes `--events` events as NDJSON
//!    bodies of `--batch` events, pre-generated in memory (200k scopes, rising epochs with
//!    handovers, declared routes, one emitter with a rising `seq` per connection, `ts` a few
//!    seconds before now). Every `2xx` means the batch was fsync'd in the WAL and applied (group
//!    commit). Reported: events/s and requests/s (wall), request latency, the service's CPU time
//!    (utime+stime from `/proc`, split by thread: the writer, tokio workers, and per event the
//!    WAL's applier, the serial stage) and max RSS, the
//!    client's CPU, the WAL bytes from `/metrics` and the checkpoints the log reports.
//!    With `--formats ndjson,otlp` each run is made in each format: `otlp` posts the same
//!    events as OTLP/HTTP protobuf (`POST /v1/traces`), one span per event carrying the
//!    `fencing.*` attributes (and a few others, as instrumented code has), `--batch` spans per
//!    request; `grpc` sends the same requests over OTLP/gRPC (the trace service on
//!    `--otlp-grpc-listen`, one channel per connection, each request sent as the bytes
//!    `otlp` posts).
//!    `--bin old,new --rounds N` repeats the runs with each binary in turn, N rounds
//!    interleaved (the binaries' order reversed every other round, so that neither always
//!    runs first), and summarises the medians, the archive's on/off ratios and each binary's
//!    per-round ratio to the first one's (what to compare on a noisy machine: the same build
//!    swings by 20% and more from one minute to the next, a round's two runs less).
//! 2. **Visibility**: on the last service, with a background load at `--load` times the best
//!    measured rate, `--trials` times: post one batch whose last event completes a stale commit
//!    on a fresh scope (epoch 2 at t, then epoch 1 at t + 1s), note the instant the `2xx`
//!    arrives, then poll `/v1/counterexamples?scope=` and `/metrics` (in parallel, 1 ms apart)
//!    until the counterexample shows; reported: p50/p99/max of (visible - 2xx) for each.
//!
//! Client and service share the machine: on a 2-core box they compete for the same CPUs, so
//! the figures are a lower bound of what the service does alone.

mod common;

use clap::Parser;
use common::{Cpu, hwm_mib, median, metric};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use ureq::Agent;

const ROUTES: [&str; 2] = ["orders-api.transition", "orders-worker.apply"];
const CONTRACT: &str = r#"[[property]]
name = "order-mutation"
subject = "Order"
strategy = "lease_epoch"
window = "1m"
allowed_lateness = "30s"
  [[property.route]]
  name = "orders-api.transition"
  [[property.route]]
  name = "orders-worker.apply"
"#;

/// Benchmark of `fencewatch serve`: ingest throughput and counterexample visibility.
#[derive(Debug, Parser)]
struct Args {
    /// The `fencewatch` binary; a list (`old,new`) runs every ingest run with each, one after
    /// the other, to compare builds in one run (visibility and the runaway phase use the first).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "target/release/fencewatch"
    )]
    bin: Vec<PathBuf>,
    /// Rounds of the ingest runs: the runs (every binary, format and archive setting) are
    /// repeated, interleaved, and a summary gives the median of each and of the archive's
    /// on/off ratios (on a shared, noisy machine, compare within rounds).
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Events per ingest run.
    #[arg(long, default_value_t = 2_000_000)]
    events: usize,
    /// Events per request.
    #[arg(long, default_value_t = 1000)]
    batch: usize,
    /// Concurrent connections; a list (`1,2,4,8`) runs each on a fresh service.
    #[arg(long, value_delimiter = ',', default_value = "4")]
    connections: Vec<usize>,
    /// Distinct scopes of the ingest load.
    #[arg(long, default_value_t = 200_000)]
    scopes: usize,
    /// Visibility trials (0 skips the visibility phase).
    #[arg(long, default_value_t = 200)]
    trials: usize,
    /// Background load during the trials, as a fraction of the best measured rate.
    #[arg(long, default_value_t = 0.5)]
    load: f64,
    /// Body formats: `ndjson` (`POST /v1/events`), `otlp` (OTLP/HTTP protobuf, `POST
    /// /v1/traces`), `grpc` (the same requests over OTLP/gRPC).
    #[arg(long, value_delimiter = ',', default_value = "ndjson")]
    formats: Vec<String>,
    /// The evidence archive in each ingest run: `on`, `off` (`--archive false`), or both
    /// (`on,off`: each run made with each, one after the other, to compare in one run).
    #[arg(long, value_delimiter = ',', default_value = "on")]
    archive: Vec<String>,
    /// Seconds of each half of the runaway-query phase (0 skips it): ingest at `--load` times
    /// the best rate, first alone, then beside a query that runs until `--query-timeout`
    /// ends it, again and again; reported: the ingest requests' latency in each half.
    #[arg(long, default_value_t = 0)]
    runaway_secs: u64,
    /// The services' `query_timeout` (the runaway query's limit).
    #[arg(long, default_value = "5s")]
    query_timeout: String,
    /// The services' `archive_flush_interval`: shorter than a run, the archive's retention and
    /// compaction pass (at each interval) happen inside the run, as under a steady load.
    #[arg(long, default_value = "10s")]
    archive_flush_interval: String,
    /// Keep the data directories (their paths go to stderr).
    #[arg(long)]
    keep: bool,
}

/// A query no limit but the deadline stops: 10^10 pairs.
const RUNAWAY_SQL: &str = "SELECT count(*) FROM generate_series(1, 100000) a, generate_series(1, 100000) b WHERE a.value + b.value = 7";

fn now_ns() -> i64 {
    let d = SystemTime::now().duration_since(UNIX_EPOCH);
    d.expect("after 1970").as_nanos() as i64
}

/// A deterministic event source: per scope a rising epoch, per emitter a rising `seq`.
struct Gen {
    rng: u64,
    prefix: String,
    epochs: Vec<u32>,
    seqs: Vec<u64>,
    ts: i64,
}

impl Gen {
    fn new(prefix: &str, scopes: usize, emitters: usize, seed: u64) -> Gen {
        let (epochs, seqs) = (vec![0; scopes], vec![0; emitters]);
        Gen {
            rng: seed | 1,
            prefix: prefix.into(),
            epochs,
            seqs,
            ts: 0,
        }
    }

    /// Appends `n` commits of emitter `e`, from `ts` (kept rising), `step` ns apart.
    fn batch(&mut self, out: &mut Vec<u8>, n: usize, e: usize, ts: i64, step: i64) {
        self.ts = self.ts.max(ts);
        for _ in 0..n {
            // xorshift64*
            self.rng ^= self.rng >> 12;
            self.rng ^= self.rng << 25;
            self.rng ^= self.rng >> 27;
            let r = self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d);
            let s = (r >> 32) as usize % self.epochs.len();
            let epoch = &mut self.epochs[s];
            if *epoch == 0 {
                *epoch = 1 + (r % 5) as u32;
            } else if r.is_multiple_of(12) {
                *epoch += 1; // a handover to a new owner
            }
            let (epoch, p, route) = (*epoch, &self.prefix, ROUTES[(r >> 8) as usize % 2]);
            self.seqs[e] += 1;
            let _ = writeln!(
                out,
                r#"{{"kind":"commit","ts":{},"scope":"{p}-{s}","epoch":{epoch},"route":"{route}","holder":"w{}","emitter":"bench-{p}-{e}","seq":{}}}"#,
                self.ts,
                epoch % 64,
                self.seqs[e]
            );
            self.ts += step;
        }
    }
}

/// The same events as [`Gen::batch`] writes them, as one OTLP trace request (protobuf): a span
/// per event, ending at its time, with its fields as `fencing.*` attributes (the spans of
/// `simulate --otlp`).
fn otlp_body(ndjson: &[u8], batch_no: usize) -> Vec<u8> {
    use fencewatch_ingest::simulate::spans;
    use prost::Message;
    let trace_id = spans::trace_id(0, batch_no as u64);
    let spans = ndjson
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .enumerate()
        .map(|(n, line)| {
            let e: serde_json::Value = serde_json::from_slice(line).expect("a generated event");
            let end = e["ts"].as_i64().unwrap_or_default();
            spans::span(line, end, trace_id, n as u64 + 1).expect("a generated event")
        })
        .collect();
    spans::request("orders-api", spans).encode_to_vec()
}

/// Sends `bodies` (OTLP trace requests, protobuf) one after the other over one OTLP/gRPC
/// channel to `url`: each request's latency, ms. Each is sent as the bytes the OTLP/HTTP run
/// posts ([`RawRequest`]), so that the client's cost is the transport's, as on HTTP. (It
/// parsed every request into opentelemetry-proto's owned types and encoded it again, inside
/// the timed run: ~20 s of the client's CPU a 3M-span run on the service's 2 cores, which held
/// gRPC to ~200k spans/s, session 34.)
fn grpc_worker<'a>(url: &str, bodies: impl Iterator<Item = &'a Vec<u8>>) -> Vec<f64> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let channel = tonic::transport::Endpoint::from_shared(url.to_string())
            .expect("a gRPC url")
            .connect()
            .await
            .expect("connect to the OTLP/gRPC listener");
        let mut client = tonic::client::Grpc::new(channel).max_encoding_message_size(64 << 20);
        let path = tonic::codegen::http::uri::PathAndQuery::from_static(
            "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
        );
        let mut lat = Vec::new();
        for body in bodies {
            let request = tonic::Request::new(prost::bytes::Bytes::copy_from_slice(body));
            let t = Instant::now();
            client.ready().await.expect("the channel ready");
            let answer = client
                .unary(request, path.clone(), RawRequest)
                .await
                .expect("an OTLP/gRPC export")
                .into_inner();
            lat.push(ms(t.elapsed()));
            let rejected = answer.partial_success.map_or(0, |p| p.rejected_spans);
            assert_eq!(rejected, 0, "a partial success");
        }
        lat
    })
}

/// The client's codec of an export whose request is already protobuf: its bytes written as
/// they are, the answer decoded by prost (the server's `RawCodec` the other way round).
#[derive(Clone, Copy, Default)]
struct RawRequest;

type TraceAnswer = fencewatch_ingest::decode::otlp::trace_service::ExportTraceServiceResponse;

impl tonic::codec::Codec for RawRequest {
    type Encode = prost::bytes::Bytes;
    type Decode = TraceAnswer;
    type Encoder = RawRequest;
    type Decoder = RawRequest;

    fn encoder(&mut self) -> Self::Encoder {
        RawRequest
    }

    fn decoder(&mut self) -> Self::Decoder {
        RawRequest
    }
}

impl tonic::codec::Encoder for RawRequest {
    type Item = prost::bytes::Bytes;
    type Error = tonic::Status;

    fn encode(
        &mut self,
        item: prost::bytes::Bytes,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        use prost::bytes::BufMut;
        dst.put(item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawRequest {
    type Item = TraceAnswer;
    type Error = tonic::Status;

    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<TraceAnswer>, tonic::Status> {
        use prost::Message;
        TraceAnswer::decode(src)
            .map(Some)
            .map_err(|e| tonic::Status::internal(format!("decoding the answer: {e}")))
    }
}

fn agent() -> Agent {
    let config = Agent::config_builder().http_status_as_error(false);
    Agent::new_with_config(config.timeout_global(Some(Duration::from_secs(60))).build())
}

/// Posts an NDJSON body: the instant the answer's head arrived, its status and its body.
fn post(a: &Agent, url: &str, body: &[u8]) -> (Instant, u16, String) {
    post_as(a, url, "application/x-ndjson", body)
}

/// Posts a body of `content_type`.
fn post_as(a: &Agent, url: &str, content_type: &str, body: &[u8]) -> (Instant, u16, String) {
    let req = a.post(url).header("content-type", content_type);
    let mut r = req.send(body).expect("POST /v1/events");
    let at = Instant::now();
    let text = r.body_mut().read_to_string().expect("read the answer");
    (at, r.status().as_u16(), text)
}

fn get(a: &Agent, url: &str) -> String {
    let mut r = a.get(url).call().expect("GET");
    assert_eq!(r.status().as_u16(), 200, "GET {url}");
    let body = r.body_mut().with_config().limit(256 << 20);
    body.read_to_string().expect("read the answer")
}

/// CPU seconds of a process: user, sys, the writer thread, the tokio threads, the WAL
/// applier (the serial stage), the decoders, the archive's thread.
fn cpu(pid: u32) -> [f64; 7] {
    let c = Cpu::of(pid);
    [
        c.user,
        c.sys,
        c.of_threads("fencewatch-wri"),
        c.of_threads("tokio"),
        c.of_threads("fencewatch-app"),
        c.of_threads("fencewatch-dec"),
        c.of_threads("fencewatch-arc"),
    ]
}

/// A running service.
struct Service {
    child: Child,
    base: String,
    /// The OTLP/gRPC listener, `http://127.0.0.1:PORT`.
    grpc: String,
    dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
}

impl Service {
    fn start(args: &Args, bin: &Path, archive: bool) -> Service {
        let keep = args.keep;
        let tmp = tempfile::Builder::new()
            .prefix("serve-bench-")
            .tempdir()
            .expect("temp dir");
        let dir = tmp.path().to_path_buf();
        std::fs::write(dir.join("contract.toml"), CONTRACT).expect("write the contract");
        let log = std::fs::File::create(dir.join("serve.log")).expect("create the log");
        // A free port for the gRPC listener (the HTTP one reports its own).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut child = Command::new(bin)
            .args(["serve", "--listen", "127.0.0.1:0", "--contract"])
            .arg(dir.join("contract.toml"))
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(["--archive", if archive { "true" } else { "false" }])
            .args(["--query-timeout", &args.query_timeout])
            .args(["--archive-flush-interval", &args.archive_flush_interval])
            .args(["--otlp-grpc-listen", &format!("127.0.0.1:{port}")])
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e} (cargo build --release)", bin.display()));
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        out.read_line(&mut line).expect("read the first line");
        let base = line.trim().strip_prefix("fencewatch listening on ");
        let base = base
            .unwrap_or_else(|| panic!("first line: {line:?}"))
            .to_string();
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        let (a, deadline) = (agent(), Instant::now() + Duration::from_secs(60));
        let ready = || {
            a.get(format!("{base}/readyz"))
                .call()
                .is_ok_and(|r| r.status() == 200)
        };
        while !ready() {
            assert!(Instant::now() < deadline, "the service never became ready");
            std::thread::sleep(Duration::from_millis(10));
        }
        let _tmp = if keep {
            eprintln!("data dir kept: {}", tmp.keep().display());
            None
        } else {
            Some(tmp)
        };
        Service {
            child,
            base,
            grpc: format!("http://127.0.0.1:{port}"),
            dir,
            _tmp,
        }
    }

    /// Checkpoints the log reports so far: how many, the longest in ms.
    fn checkpoints(&self) -> (usize, u64) {
        let log = std::fs::read_to_string(self.dir.join("serve.log")).unwrap_or_default();
        let ms: Vec<u64> = log
            .lines()
            // `CheckpointSaved`'s line: `… INFO fencewatch_ingest::report: checkpoint partition=…`
            // (the filter read `engine: checkpoint`, the target before the report module, and
            // counted none since).
            .filter(|l| l.contains("::report: checkpoint "))
            .filter_map(|l| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix("elapsed_ms="))
            })
            .filter_map(|v| v.parse().ok())
            .collect();
        (ms.len(), ms.iter().copied().max().unwrap_or(0))
    }

    /// Stops it with SIGTERM: it drains, checkpoints and exits.
    fn stop(mut self) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

/// p50, p99 and max of sorted figures, in one cell.
fn pcts(sorted: &[f64], digits: usize) -> String {
    let at = |p: f64| sorted.get(((sorted.len().max(1) - 1) as f64 * p).round() as usize);
    let [a, b, c] = [0.5, 0.99, 1.0].map(|p| at(p).copied().unwrap_or(f64::NAN));
    format!("{a:.digits$} / {b:.digits$} / {c:.digits$}")
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One ingest run on a fresh service: its events/s, its table row and the service.
fn ingest(
    args: &Args,
    run: &Run<'_>,
    conns: usize,
    format: &str,
    archive: bool,
) -> (f64, String, Service) {
    let (otlp, grpc) = (format != "ndjson", format == "grpc");
    let batches = args.events.div_ceil(args.batch);
    let step = 2_000; // ns between events: 2M events span 4 s, ending 5 s before now
    let mut g = Gen::new("order", args.scopes, conns, 7);
    let base_ts = now_ns() - 5_000_000_000 - (args.events as i64 * step).min(60_000_000_000);
    let bodies: Vec<Vec<u8>> = (0..batches)
        .map(|b| {
            let mut body = Vec::with_capacity(args.batch * 170);
            let n = args.batch.min(args.events - b * args.batch);
            g.batch(&mut body, n, b % conns, base_ts, step);
            if otlp { otlp_body(&body, b) } else { body }
        })
        .collect();
    let mib = bodies.iter().map(Vec::len).sum::<usize>() >> 20;
    eprintln!("{conns} connection(s): {batches} bodies, {mib} MiB");
    let svc = Service::start(args, run.bin, archive);
    let (pid, me) = (svc.child.id(), std::process::id());
    let (path, ct) = if otlp {
        ("/v1/traces", "application/x-protobuf")
    } else {
        ("/v1/events", "application/x-ndjson")
    };
    let url = format!("{}{path}", svc.base);
    let (cpu0, me0, start) = (cpu(pid), cpu(me), Instant::now());
    let mut lat: Vec<f64> = std::thread::scope(|s| {
        let worker = |k: usize| {
            if grpc {
                return grpc_worker(&svc.grpc, bodies.iter().skip(k).step_by(conns));
            }
            let a = agent();
            let mine = bodies.iter().skip(k).step_by(conns);
            let post = |body: &Vec<u8>| {
                let t = Instant::now();
                let (at, status, text) = post_as(&a, &url, ct, body);
                assert_eq!(status, 200, "POST {path}: {text}");
                assert!(text.is_empty() || !otlp, "a partial success: {text}");
                ms(at - t)
            };
            mine.map(post).collect::<Vec<f64>>()
        };
        let workers: Vec<_> = (0..conns).map(|k| s.spawn(move || worker(k))).collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a client thread"))
            .collect()
    });
    let wall = start.elapsed().as_secs_f64();
    let d = |a: [f64; 7], b: [f64; 7]| [0, 1, 2, 3, 4, 5, 6].map(|i| a[i] - b[i]);
    let (c, client) = (d(cpu(pid), cpu0), d(cpu(me), me0));
    lat.sort_by(f64::total_cmp);
    let m = get(&agent(), &format!("{}/metrics", svc.base));
    let accepted = metric(&m, "fencewatch_events_ingested_total");
    assert_eq!(accepted as usize, args.events, "events accepted");
    let (ckpts, ckpt_ms) = svc.checkpoints();
    let (eps, total) = (args.events as f64 / wall, c[0] + c[1]);
    let row = [
        format!(
            "{}{format} {conns}{}",
            run.label,
            if archive { "" } else { ", archive off" }
        ),
        format!("{wall:.2}"),
        format!("{eps:.0}"),
        format!("{:.0}", batches as f64 / wall),
        pcts(&lat, 1),
        format!("{total:.2} ({:.2} + {:.2})", c[0], c[1]),
        format!("{:.2}", total / args.events as f64 * 1e6),
        format!("{:.2} / {:.2} / {:.2} / {:.2}", c[2], c[3], c[5], c[6]),
        format!("{:.2}", c[4] / args.events as f64 * 1e6),
        format!(
            "{:.3}",
            metric(&m, "fencewatch_archive_backpressure_seconds_total")
        ),
        format!("{:.2}", client[0] + client[1]),
        format!("{:.0}", hwm_mib(pid)),
        format!(
            "{:.0}",
            metric(&m, "fencewatch_wal_bytes") / f64::from(1 << 20)
        ),
        format!("{ckpts} / {ckpt_ms}"),
        format!("{}", metric(&m, "fencewatch_counterexamples_total")),
    ];
    let row = format!("| {} |", row.join(" | "));
    eprintln!("{row}");
    (eps, row, svc)
}

/// Background load at `rate` events/s until `stop`; returns the events posted and each
/// request's (start, latency ms).
fn background(
    url: &str,
    rate: f64,
    batch: usize,
    w: usize,
    stop: &AtomicBool,
) -> (usize, Vec<(Instant, f64)>) {
    let (a, mut body) = (agent(), Vec::with_capacity(batch * 170));
    let mut g = Gen::new(&format!("bg{w}"), 200_000, 1, 11 + w as u64);
    let every = Duration::from_secs_f64(batch as f64 / rate.max(1.0));
    let (start, mut sent, mut lat) = (Instant::now(), 0, Vec::new());
    while !stop.load(Ordering::Relaxed) {
        let due = start + every * (sent / batch) as u32;
        if let Some(d) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(d.min(Duration::from_millis(50)));
            continue;
        }
        body.clear();
        g.batch(&mut body, batch, 0, now_ns() - 3_000_000_000, 1_000);
        let t = Instant::now();
        let (at, status, text) = post(&a, url, &body);
        assert_eq!(status, 200, "background POST: {text}");
        lat.push((t, ms(at - t)));
        sent += batch;
    }
    (sent, lat)
}

/// Polls `url` until `seen`: ms from `acked` to the answer that showed it.
fn poll(a: &Agent, url: &str, acked: Instant, seen: impl Fn(&str) -> bool) -> f64 {
    loop {
        if seen(&get(a, url)) {
            return ms(acked.elapsed());
        }
        assert!(
            acked.elapsed().as_secs() < 10,
            "not visible at {url} after 10 s"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The visibility trials under a background load; the report.
fn visibility(args: &Args, svc: &Service, rate: f64) -> String {
    let (base, stop) = (&svc.base, AtomicBool::new(false));
    let (url, metrics_url) = (format!("{base}/v1/events"), format!("{base}/metrics"));
    let (mut api, mut met) = (Vec::new(), Vec::new());
    let total = |t: &str| metric(t, "fencewatch_counterexamples_total");
    eprintln!(
        "visibility: {} trials, background {rate:.0} events/s",
        args.trials
    );
    let (bg, elapsed) = std::thread::scope(|s| {
        let (url, stop) = (&url, &stop);
        let load = |w| s.spawn(move || background(url, rate / 2.0, args.batch, w, stop));
        let bgs = [load(0), load(1)];
        std::thread::sleep(Duration::from_secs(2)); // warm up
        let (a, am, start) = (agent(), agent(), Instant::now());
        for trial in 0..args.trials {
            let scope = format!("vis-{}-{trial}", std::process::id());
            let before = total(&get(&a, &metrics_url));
            let t = now_ns() - 2_000_000_000;
            let commit = |ts: i64, epoch: u32, route: &str| {
                format!(
                    "{{\"kind\":\"commit\",\"ts\":{ts},\"scope\":\"{scope}\",\"epoch\":{epoch},\"route\":\"{route}\"}}\n"
                )
            };
            let body = commit(t, 2, ROUTES[0]) + &commit(t + 1_000_000_000, 1, ROUTES[1]);
            let (acked, status, text) = post(&a, url, body.as_bytes());
            assert_eq!(status, 200, "trial POST: {text}");
            let cx_url = format!("{base}/v1/counterexamples?scope={scope}&limit=10");
            std::thread::scope(|t| {
                let m = t.spawn(|| poll(&am, &metrics_url, acked, |m| total(m) > before));
                api.push(poll(&a, &cx_url, acked, |b| b.contains("\"stale_commit\"")));
                met.push(m.join().expect("the metrics poller"));
            });
            std::thread::sleep(Duration::from_millis(20));
        }
        let elapsed = start.elapsed().as_secs_f64() + 2.0;
        stop.store(true, Ordering::Relaxed);
        let bg: usize = bgs
            .into_iter()
            .map(|b| b.join().expect("background").0)
            .sum();
        (bg, elapsed)
    });
    api.sort_by(f64::total_cmp);
    met.sort_by(f64::total_cmp);
    format!(
        "Counterexample visibility, ms from the 2xx to the first answer showing it ({} trials; background load {:.0} events/s achieved, {rate:.0} targeted):\n\n\
         | seen in | p50 / p99 / max ms |\n| --- | --- |\n\
         | GET /v1/counterexamples?scope= | {} |\n| GET /metrics | {} |",
        args.trials,
        bg as f64 / elapsed,
        pcts(&api, 2),
        pcts(&met, 2)
    )
}

/// Ingest at `rate` for `secs` (after 2 s of warm-up), with a runaway query looping beside it
/// or not: the requests' sorted latencies (ms), the events/s achieved, the queries the
/// deadline ended and any other answers to them.
fn ingest_beside(
    svc: &Service,
    rate: f64,
    batch: usize,
    secs: u64,
    query: bool,
) -> (Vec<f64>, f64, usize, Vec<String>) {
    let (url, stop, done) = (
        format!("{}/v1/events", svc.base),
        AtomicBool::new(false),
        AtomicBool::new(false),
    );
    let q_url = format!("{}/v1/query", svc.base);
    let body = serde_json::json!({ "sql": RUNAWAY_SQL }).to_string();
    std::thread::scope(|s| {
        let (url, stop, done) = (&url, &stop, &done);
        let load = |w| s.spawn(move || background(url, rate / 2.0, batch, w, stop));
        let bgs = [load(0), load(1)];
        std::thread::sleep(Duration::from_secs(2));
        let from = Instant::now();
        let queries = query.then(|| {
            let (q_url, body) = (&q_url, &body);
            s.spawn(move || {
                let (a, mut cut, mut other) = (agent(), 0, Vec::new());
                while !done.load(Ordering::Relaxed) {
                    let (_, status, text) = post_as(&a, q_url, "application/json", body.as_bytes());
                    if (400..500).contains(&status) && text.contains("query_timeout") {
                        cut += 1;
                    } else {
                        other.push(format!(
                            "{status}: {}",
                            text.chars().take(200).collect::<String>()
                        ));
                    }
                }
                (cut, other)
            })
        });
        std::thread::sleep(Duration::from_secs(secs));
        let elapsed = from.elapsed().as_secs_f64();
        stop.store(true, Ordering::Relaxed);
        let mut lat = Vec::new();
        let mut sent = 0;
        for b in bgs {
            let (_, l) = b.join().expect("background");
            for (t, ms) in l {
                if t >= from && t.duration_since(from).as_secs_f64() <= elapsed {
                    lat.push(ms);
                    sent += batch;
                }
            }
        }
        done.store(true, Ordering::Relaxed);
        let (cut, other) = queries.map_or((0, Vec::new()), |q| q.join().expect("the query loop"));
        lat.sort_by(f64::total_cmp);
        (lat, sent as f64 / elapsed, cut, other)
    })
}

/// The runaway-query phase on `svc`: ingest latency alone and beside the runaway query.
fn runaway(args: &Args, svc: &Service, rate: f64) -> String {
    eprintln!(
        "runaway query: {} s alone, {} s beside the query, ingest at {rate:.0} events/s",
        args.runaway_secs, args.runaway_secs
    );
    let (alone, alone_eps, _, _) = ingest_beside(svc, rate, args.batch, args.runaway_secs, false);
    let (beside, beside_eps, cut, other) =
        ingest_beside(svc, rate, args.batch, args.runaway_secs, true);
    let p99 = |v: &[f64]| {
        v.get(((v.len().max(1) - 1) as f64 * 0.99).round() as usize)
            .copied()
            .unwrap_or(f64::NAN)
    };
    format!(
        "Ingest latency beside a runaway query (`{RUNAWAY_SQL}`, ended by query_timeout = {}), ingest targeted at {rate:.0} events/s, {} s each:\n\n\
         | ingest | events/s achieved | requests | latency p50 / p99 / max ms |\n| --- | --- | --- | --- |\n\
         | alone | {alone_eps:.0} | {} | {} |\n| beside the query | {beside_eps:.0} | {} | {} |\n\n\
         p99 beside / alone: {:.2} (target ≤ 2); queries ended by their deadline: {cut}; other answers: {}",
        args.query_timeout,
        args.runaway_secs,
        alone.len(),
        pcts(&alone, 1),
        beside.len(),
        pcts(&beside, 1),
        p99(&beside) / p99(&alone),
        if other.is_empty() {
            "none".to_string()
        } else {
            other.join("; ")
        }
    )
}

/// Which binary an ingest run uses, and how its row is labelled (`round 2, new: `).
struct Run<'a> {
    bin: &'a Path,
    label: String,
}

/// With several rounds or binaries: per binary, format and connections, the median events/s
/// of each archive setting and, with both, the on/off ratio of each round and their median.
fn summary(args: &Args, results: &[(usize, usize, usize, String, bool, f64)]) -> String {
    let mut out = String::from(
        "| binary | format, conns | archive on: median events/s | archive off | on/off per round | on/off median | ÷ first binary per round | ÷ first median |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for (b, bin) in args.bin.iter().enumerate() {
        for &c in &args.connections {
            for f in &args.formats {
                let of = |bin: usize, on: bool| -> Vec<(usize, f64)> {
                    results
                        .iter()
                        .filter(|r| r.1 == bin && r.2 == c && &r.3 == f && r.4 == on)
                        .map(|r| (r.0, r.5))
                        .collect()
                };
                // Each round's events/s in `a` over those in `b`, where both ran.
                let per_round = |a: &[(usize, f64)], b: &[(usize, f64)]| -> Vec<f64> {
                    a.iter()
                        .filter_map(|&(round, e)| Some(e / b.iter().find(|r| r.0 == round)?.1))
                        .collect()
                };
                let (on, off) = (of(b, true), of(b, false));
                let ratios = per_round(&on, &off);
                // Against the first binary, round by round (archive on where it ran).
                let setting = !on.is_empty();
                let vs_first = if b == 0 {
                    Vec::new()
                } else {
                    per_round(if setting { &on } else { &off }, &of(0, setting))
                };
                let list = |v: &[f64]| {
                    if v.is_empty() {
                        "-".to_string()
                    } else {
                        v.iter()
                            .map(|r| format!("{r:.2}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                };
                let med_of = |v: &[f64]| {
                    if v.is_empty() {
                        "-".to_string()
                    } else {
                        format!("{:.2}", median(v.to_vec()))
                    }
                };
                let med = |v: &[(usize, f64)]| {
                    if v.is_empty() {
                        "-".to_string()
                    } else {
                        format!("{:.0}", median(v.iter().map(|r| r.1).collect()))
                    }
                };
                out.push_str(&format!(
                    "| {} | {f} {c} | {} | {} | {} | {} | {} | {} |\n",
                    bin.display(),
                    med(&on),
                    med(&off),
                    list(&ratios),
                    med_of(&ratios),
                    list(&vs_first),
                    med_of(&vs_first),
                ));
            }
        }
    }
    out
}

fn main() {
    let args = Args::parse();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (mut rows, mut best, mut last) = (Vec::new(), 0.0f64, None::<Service>);
    let mut results = Vec::new();
    let many = args.bin.len() > 1 || args.rounds > 1;
    for round in 1..=args.rounds.max(1) {
        let mut order: Vec<usize> = (0..args.bin.len()).collect();
        if round % 2 == 0 {
            order.reverse();
        }
        for b in order {
            let bin = &args.bin[b];
            let label = match (args.rounds > 1, args.bin.len() > 1) {
                (true, true) => format!("round {round}, {}: ", bin.display()),
                (true, false) => format!("round {round}: "),
                (false, true) => format!("{}: ", bin.display()),
                (false, false) => String::new(),
            };
            let run = Run { bin, label };
            for &c in &args.connections {
                for f in &args.formats {
                    for a in &args.archive {
                        if let Some(s) = last.take() {
                            s.stop();
                        }
                        let archive = a != "off";
                        let (eps, row, svc) = ingest(&args, &run, c.max(1), f, archive);
                        (best, last) = (best.max(eps), Some(svc));
                        rows.push(row);
                        results.push((round, b, c, f.clone(), archive, eps));
                    }
                }
            }
        }
    }
    let vis = (args.trials > 0).then(|| {
        let svc = last
            .take()
            .unwrap_or_else(|| Service::start(&args, &args.bin[0], true));
        let v = visibility(&args, &svc, best * args.load);
        last = Some(svc);
        v
    });
    let run = (args.runaway_secs > 0).then(|| {
        if let Some(s) = last.take() {
            s.stop();
        }
        let svc = Service::start(&args, &args.bin[0], true);
        let r = runaway(&args, &svc, best * args.load);
        last = Some(svc);
        r
    });
    if let Some(s) = last {
        s.stop();
    }
    println!(
        "\nfencewatch serve: {} events per run in NDJSON batches of {} (fsync per group commit), {} scopes; {cores} CPU cores shared by the client and the service\n",
        args.events, args.batch, args.scopes
    );
    println!(
        "| format, conns | wall s | events/s | req/s | latency p50 / p99 / max ms | service CPU s (user + sys) | service CPU µs/event | writer / tokio / decoder / archive threads CPU s | applier CPU µs/event | ingest waited for the archive s | client CPU s | service max RSS MiB | WAL MiB | checkpoints / longest ms | counterexamples |\n{}",
        "| --- ".repeat(15) + "|"
    );
    println!("{}", rows.join("\n"));
    if many {
        println!("\n{}", summary(&args, &results));
    }
    if let Some(v) = vis {
        println!("\n{v}");
    }
    if let Some(r) = run {
        println!("\n{r}");
    }
}
