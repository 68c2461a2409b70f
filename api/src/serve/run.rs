//! The composition root of `fencewatch serve` (STYLE 12, thin main): load and validate the
//! configuration (exit 64 when invalid), build the registry, start the engine, bind, serve
//! until SIGTERM or Ctrl-C, then stop accepting, drain, checkpoint and exit.

use crate::serve::config::{ServeArgs, ServeConfig};
use crate::serve::engine::{Engine, EngineOptions};
use crate::serve::kafka::{Kafka, KafkaOptions};
use crate::serve::metrics::Metrics;
use crate::serve::otlp::{self, Otlp, OtlpMetrics};
use crate::serve::{
    Base, Ready, Refresh, Upstream, base_router, init_tracing, listener, routes, shutdown_signal,
    telemetry,
};
use fencewatch_assess::live::LiveOptions;
use prometheus_client::registry::Registry;
use std::io::{BufRead, Read, Write};
use std::path::PathBuf;
use std::sync::Arc;

/// Exit code of a bad configuration (EX_USAGE).
pub const EXIT_CONFIG: i32 = 64;
/// Exit code of a failure while running.
pub const EXIT_FAILURE: i32 = 1;

/// Something to start beside the engine once it is up (file ingest, the demo workload).
type Feeder = Box<dyn FnOnce(Arc<Engine>) + Send>;

/// Runs the service; returns the process exit code.
pub fn run(args: ServeArgs, ingest_files: Vec<PathBuf>) -> i32 {
    let feeders: Vec<Feeder> = ingest_files
        .iter()
        .cloned()
        .map(|path| -> Feeder { Box::new(move |engine: Arc<Engine>| ingest_file(&engine, &path)) })
        .collect();
    run_checked(args, feeders, &ingest_files)
}

/// `fencewatch demo`: the service under the demo contract in `data_dir` (default a fresh
/// temporary folder), fed a live simulated workload of `rate` events per second with a paused
/// old owner resuming every `stale_every`.
pub fn demo(
    listen: String,
    data_dir: Option<PathBuf>,
    rate: u64,
    stale_every: std::time::Duration,
) -> i32 {
    let dir = data_dir.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("fencewatch-demo-{}", std::process::id()))
    });
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("fencewatch demo: cannot create {}: {e}", dir.display());
        return EXIT_FAILURE;
    }
    let contract = dir.join("contract.toml");
    if let Err(e) = std::fs::write(&contract, fencewatch_ingest::demo::CONTRACT) {
        eprintln!("fencewatch demo: cannot write {}: {e}", contract.display());
        return EXIT_FAILURE;
    }
    eprintln!(
        "fencewatch demo: data in {}; contract {}; {rate} events/s, a paused old owner resumes every {:?}",
        dir.display(),
        contract.display(),
        stale_every
    );
    let args = ServeArgs {
        contract: Some(contract),
        data_dir: Some(dir.join("data")),
        listen: Some(listen),
        ..ServeArgs::default()
    };
    let feeder: Feeder =
        Box::new(move |engine: Arc<Engine>| demo_workload(&engine, rate, stale_every));
    run_with(args, vec![feeder])
}

/// Posts the demo workload every 100 ms until the engine stops taking batches.
fn demo_workload(engine: &Engine, rate: u64, stale_every: std::time::Duration) {
    while !engine.is_ready() {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let tick = std::time::Duration::from_millis(100);
    let per_tick = (rate / 10).max(1) as usize;
    let mut demo = fencewatch_ingest::demo::Demo::new(500, stale_every.as_nanos() as i64, 0x5eed);
    let mut line = 1u64;
    loop {
        let now = crate::serve::engine::now_ns();
        let body = demo.batch(now, tick.as_nanos() as i64, per_tick);
        if engine.submit_lines("demo", line, body.as_bytes()).is_err() {
            return;
        }
        line += per_tick as u64;
        std::thread::sleep(tick);
    }
}

/// Why `serve` stopped with an error: the configuration (exit 64) or a failure while running
/// (exit 1).
#[derive(Debug)]
enum Failed {
    Config(String),
    Running(String),
}

impl From<String> for Failed {
    fn from(e: String) -> Failed {
        Failed::Running(e)
    }
}

fn run_with(args: ServeArgs, feeders: Vec<Feeder>) -> i32 {
    run_checked(args, feeders, &[])
}

fn run_checked(args: ServeArgs, feeders: Vec<Feeder>, files: &[PathBuf]) -> i32 {
    let mut config = ServeConfig::load(args);
    // Files to ingest must exist (stdin `-` aside): a typo must not start a service that
    // silently assesses nothing.
    for f in files.iter().filter(|f| f.as_os_str() != "-") {
        if let Err(e) = std::fs::metadata(f) {
            let msg = format!("--ingest-file `{}`: cannot read: {e}", f.display());
            match &mut config {
                Ok(_) => {
                    config = Err(crate::serve::config::ConfigErrors { errors: vec![msg] });
                }
                Err(errors) => errors.errors.push(msg),
            }
        }
    }
    let config = match config {
        Ok(c) => c,
        Err(errors) => {
            eprintln!("fencewatch serve: invalid configuration:\n{errors}");
            return EXIT_CONFIG;
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("fencewatch serve: cannot start the runtime: {e}");
            return EXIT_FAILURE;
        }
    };
    // The exporter's channel runs on the runtime: built inside it, shut down before it ends.
    let telemetry = match telemetry::wanted() {
        Ok(false) => None,
        Ok(true) => match rt.block_on(async { telemetry::Telemetry::start() }) {
            Ok(t) => Some(t),
            Err(e) => {
                eprintln!("fencewatch serve: {e}");
                return EXIT_CONFIG;
            }
        },
        Err(e) => {
            eprintln!("fencewatch serve: invalid configuration:\n{e}");
            return EXIT_CONFIG;
        }
    };
    if let Err(e) = init_tracing(config.log_format, &config.log_level, telemetry.as_ref()) {
        eprintln!("fencewatch serve: cannot set up logging: {e}");
    }
    let traced = telemetry.is_some();
    let code = match rt.block_on(serve(config, feeders, traced)) {
        Ok(()) => 0,
        Err(Failed::Config(e)) => {
            tracing::error!(error = %e, "fencewatch serve cannot start");
            eprintln!("fencewatch serve: {e}");
            EXIT_CONFIG
        }
        Err(Failed::Running(e)) => {
            tracing::error!(error = %e, "fencewatch serve failed");
            eprintln!("fencewatch serve: {e}");
            EXIT_FAILURE
        }
    };
    if let Some(t) = telemetry {
        t.shutdown();
    }
    code
}

async fn serve(config: ServeConfig, feeders: Vec<Feeder>, traced: bool) -> Result<(), Failed> {
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let otlp_metrics = OtlpMetrics::register(&mut registry);
    if config.kafka.is_some() {
        metrics.register_kafka(&mut registry);
    }
    let ready = Ready::new();
    let opts = EngineOptions {
        data_dir: config.data_dir.clone(),
        segment_bytes: config.wal_segment_bytes,
        max_line_bytes: config.max_line_bytes as usize,
        checkpoint_interval: std::time::Duration::from_nanos(config.checkpoint_interval.0 as u64),
        live: LiveOptions {
            retention: config.retention.map(|d| d.0),
            future_tolerance: config.future_tolerance.0,
            max_emitters: usize::try_from(config.max_emitters).unwrap_or(usize::MAX),
            max_counterexamples: usize::try_from(config.max_counterexamples).unwrap_or(usize::MAX),
        },
        max_pending_bytes: config.max_pending_bytes,
        max_body_bytes: config.max_body_bytes,
    };
    let (engine, writer) = Engine::start(
        config.contract.clone(),
        opts.clone(),
        ready.clone(),
        metrics.clone(),
    );
    let kafka = match &config.kafka {
        Some(k) => {
            let kopts = KafkaOptions {
                config: k.clone(),
                dir: config.data_dir.join("kafka"),
                live: opts.live,
                max_line_bytes: opts.max_line_bytes,
                checkpoint_interval: opts.checkpoint_interval,
            };
            let (kafka, consumer) = Kafka::start(config.contract.clone(), kopts, metrics.clone())?;
            engine.attach_kafka(kafka.clone());
            tracing::info!(brokers = %k.brokers, topics = %k.topics.join(","), group = %k.group, "consuming from kafka");
            Some((kafka, consumer))
        }
        None => None,
    };
    // A port in use (or an address not of this host) is a configuration error: exit 64.
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| Failed::Config(format!("cannot listen on {}: {e}", config.listen)))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let (max_connections, fd_limit) = listener::connection_limit(config.max_connections);
    // The first line on stdout names the address (useful with port 0). Written once, errors
    // ignored: whoever started us may close stdout after reading the first line.
    let _ = write!(
        std::io::stdout(),
        "fencewatch listening on http://{addr}\nopen http://{addr}/ for the page, http://{addr}/v1/assurance for the API, http://{addr}/metrics for Prometheus\n"
    );
    let _ = std::io::stdout().flush();
    tracing::info!(%addr, data_dir = %config.data_dir.display(), contract = %config.contract_path.display(), max_connections, fd_limit, "listening");
    let mut base = Base::new(&config, ready, Arc::new(registry), metrics.clone());
    let (e, m) = (engine.clone(), metrics.clone());
    base.refresh = Some(Refresh(Arc::new(move || e.refresh_metrics(&m))));
    if let Some((k, _)) = &kafka {
        let k = k.clone();
        base.upstream = Some(Upstream(Arc::new(move || k.unready())));
    }
    let otlp = Otlp {
        engine: engine.clone(),
        metrics: otlp_metrics,
    };
    let grpc = match config.otlp_grpc_listen {
        Some(at) => Some(start_grpc(at, otlp.clone(), &config, max_connections).await?),
        None => None,
    };
    let api = routes::router(engine.clone()).merge(otlp::http::router(otlp));
    let template: Option<Arc<str>> = config.trace_url_template.as_deref().map(Arc::from);
    let mut app = base_router(base, api);
    if traced {
        app = app.layer(axum::middleware::from_fn(telemetry::trace_requests));
    }
    let app = app
        .layer(axum::middleware::from_fn(otlp::http::answers))
        .layer(axum::middleware::from_fn_with_state(
            template,
            otlp::links::trace_links,
        ));
    for feed in feeders {
        let engine = engine.clone();
        std::thread::spawn(move || feed(engine));
    }
    // Stop on SIGTERM/Ctrl-C, or when the writer stops by itself (a WAL or checkpoint
    // failure): then the process exits non-zero instead of serving stale answers.
    let e = engine.clone();
    let k = kafka.as_ref().map(|(k, _)| k.clone());
    let lopts = listener::ListenerOptions {
        max_connections,
        header_read_timeout: std::time::Duration::from_nanos(config.header_read_timeout.0 as u64),
        idle_timeout: std::time::Duration::from_nanos(config.idle_timeout.0 as u64),
    };
    listener::serve(listener, app, lopts, metrics, async move {
        let kafka_stopped = async move {
            match k {
                Some(k) => {
                    while !k.stopping() {
                        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                    }
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = shutdown_signal() => {}
            () = e.stopped() => {}
            () = kafka_stopped => {}
        }
    })
    .await;
    if let Some((stop, task)) = grpc {
        stop.notify_one();
        let _ = task.await;
    }
    let kafka_result = match kafka {
        Some((k, consumer)) => {
            tracing::info!("shutting down: checkpointing the kafka partitions");
            k.close();
            tokio::task::spawn_blocking(move || consumer.join())
                .await
                .map_err(|e| e.to_string())?
        }
        None => Ok(()),
    };
    tracing::info!("shutting down: draining the write-ahead log queue");
    engine.close();
    tokio::task::spawn_blocking(move || writer.join())
        .await
        .map_err(|e| e.to_string())??;
    kafka_result?;
    tracing::info!("stopped");
    Ok(())
}

/// Binds `at` and serves OTLP/gRPC there until notified; a bind failure is a configuration
/// error (exit 64).
async fn start_grpc(
    at: std::net::SocketAddr,
    otlp: Otlp,
    config: &ServeConfig,
    max_connections: usize,
) -> Result<(Arc<tokio::sync::Notify>, tokio::task::JoinHandle<()>), Failed> {
    let listener = tokio::net::TcpListener::bind(at)
        .await
        .map_err(|e| Failed::Config(format!("cannot listen on {at} (otlp_grpc_listen): {e}")))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tracing::info!(%addr, "OTLP/gRPC listening");
    let opts = otlp::grpc::GrpcOptions {
        max_connections,
        idle_timeout: std::time::Duration::from_nanos(config.idle_timeout.0 as u64),
        request_timeout: std::time::Duration::from_nanos(config.request_timeout.0 as u64),
        max_body_bytes: usize::try_from(config.max_body_bytes).unwrap_or(usize::MAX),
        token: config.auth_token.clone(),
    };
    let stop = Arc::new(tokio::sync::Notify::new());
    let s = stop.clone();
    let task = tokio::spawn(async move {
        if let Err(e) = otlp::grpc::serve(listener, otlp, opts, s.notified()).await {
            tracing::error!(error = %e, "the OTLP/gRPC listener failed");
        }
    });
    Ok((stop, task))
}

/// Lines per batch of file ingest.
const FILE_BATCH_LINES: usize = 4096;
/// Bytes per batch of file ingest: a batch ends at the line that reaches this.
const FILE_BATCH_BYTES: usize = 8 << 20;
/// Over-long lines of a file logged one by one (then only counted).
const FILE_LONG_LINES_LOGGED: u64 = 10;

/// One line as [`read_line_bounded`] read it.
struct LineRead {
    /// Its length without the newline, however much of it was kept.
    len: u64,
    /// Whether it ended with a newline (else the input ended).
    newline: bool,
}

/// Reads the next line, appending at most `keep` bytes of it (no newline) to `out` and
/// passing over the rest: a line of any length costs at most `keep` bytes of memory. `None`
/// at the end of the input.
fn read_line_bounded(
    r: &mut impl BufRead,
    out: &mut Vec<u8>,
    keep: usize,
) -> std::io::Result<Option<LineRead>> {
    let mut len = 0u64;
    let mut any = false;
    loop {
        let buf = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            return Ok(any.then_some(LineRead {
                len,
                newline: false,
            }));
        }
        any = true;
        let newline = buf.iter().position(|&b| b == b'\n');
        let chunk = &buf[..newline.unwrap_or(buf.len())];
        let room = (keep as u64).saturating_sub(len) as usize;
        out.extend_from_slice(&chunk[..chunk.len().min(room)]);
        len += chunk.len() as u64;
        let used = chunk.len() + usize::from(newline.is_some());
        r.consume(used);
        if newline.is_some() {
            return Ok(Some(LineRead { len, newline: true }));
        }
    }
}

/// Appends an NDJSON file (or `-`, stdin) to the WAL in batches, waiting for each. Memory is
/// bounded whatever the file holds: a line longer than `max_line_bytes` is kept only up to
/// `max_line_bytes + 1` bytes (it is malformed for its length alone, and is counted so, with a
/// WARN giving its line and real length), and a batch ends at 4096 lines or 8 MiB. A binary
/// file is so many malformed lines. A file that shrinks while read (truncated, or replaced),
/// or that has fewer lines than were ingested from it before, is reported at WARN.
fn ingest_file(engine: &Engine, path: &std::path::Path) {
    while !engine.is_ready() {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let max_line = engine.max_line_bytes();
    let keep = max_line.saturating_add(1);
    let name = path.display().to_string();
    let stdin = name == "-";
    let mut size_at_open = None;
    let reader: Box<dyn Read> = if stdin {
        Box::new(std::io::stdin())
    } else {
        match std::fs::File::open(path) {
            Ok(f) => {
                size_at_open = f.metadata().ok().map(|m| m.len());
                Box::new(f)
            }
            Err(e) => {
                tracing::error!(file = %name, error = %e, "cannot read the ingest file");
                return;
            }
        }
    };
    let mut reader = std::io::BufReader::with_capacity(1 << 20, reader);
    let (mut batch, mut lines, mut total, mut malformed) = (Vec::new(), 0usize, 0u64, 0u64);
    let (mut read_bytes, mut long_lines) = (0u64, 0u64);
    let mut first_line = 1u64;
    // A file ingested before (this data directory's state remembers its last line) resumes
    // after that line instead of being appended again. stdin is always read whole.
    let done = if stdin {
        0
    } else {
        engine.source_progress(&name).unwrap_or(0)
    };
    if done > 0 {
        let mut skip = Vec::new();
        while first_line <= done {
            match read_line_bounded(&mut reader, &mut skip, 0) {
                Ok(None) => break,
                Ok(Some(l)) => {
                    read_bytes += l.len + u64::from(l.newline);
                    first_line += 1;
                }
                Err(e) => {
                    tracing::error!(file = %name, error = %e, "reading the ingest file failed");
                    return;
                }
            }
        }
        if first_line <= done {
            tracing::warn!(file = %name, lines = first_line - 1, ingested_before = done, "the ingest file has fewer lines than were ingested from it before (truncated or replaced?): nothing of it is ingested again");
        } else {
            tracing::info!(file = %name, resumed_after_line = done, "file ingested before: resuming");
        }
    }
    let source = if stdin {
        "stdin".to_string()
    } else {
        name.clone()
    };
    let mut failed = false;
    loop {
        let line = match read_line_bounded(&mut reader, &mut batch, keep) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(file = %name, line = first_line + lines as u64, error = %e, "reading the ingest file failed; the lines before are ingested");
                failed = true;
                None
            }
        };
        if let Some(l) = &line {
            batch.push(b'\n');
            lines += 1;
            read_bytes += l.len + u64::from(l.newline);
            if l.len > max_line as u64 {
                long_lines += 1;
                if long_lines <= FILE_LONG_LINES_LOGGED {
                    tracing::warn!(file = %name, line = first_line + lines as u64 - 1, bytes = l.len, max_line_bytes = max_line, kept_bytes = keep, "a line over max_line_bytes: a malformed event (only its first bytes are kept)");
                }
            }
        }
        if (line.is_none() && !batch.is_empty())
            || lines >= FILE_BATCH_LINES
            || batch.len() >= FILE_BATCH_BYTES
        {
            match engine.submit_lines(&source, first_line, &batch) {
                Ok(done) => {
                    total += done.applied.accepted;
                    malformed += done.applied.malformed;
                }
                Err(e) => {
                    tracing::error!(file = %name, error = %e, "file ingest stopped");
                    return;
                }
            }
            batch.clear();
            first_line += lines as u64;
            lines = 0;
        }
        if line.is_none() {
            break;
        }
    }
    if let Some(size) = size_at_open
        && !failed
    {
        let now = std::fs::metadata(path).map(|m| m.len());
        match now {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                tracing::warn!(file = %name, bytes_read = read_bytes, "the ingest file was removed while it was read (read to its end through the open file)");
            }
            _ if read_bytes < size => {
                tracing::warn!(file = %name, bytes_at_open = size, bytes_read = read_bytes, bytes_now = now.ok(), "the ingest file shrank while it was read (truncated or replaced?): only the lines read are ingested");
            }
            _ => {}
        }
    }
    if long_lines > FILE_LONG_LINES_LOGGED {
        tracing::warn!(file = %name, lines = long_lines, max_line_bytes = max_line, "lines over max_line_bytes (malformed events)");
    }
    tracing::info!(file = %name, events = total, malformed, lines_over_limit = long_lines, "file ingested");
}
