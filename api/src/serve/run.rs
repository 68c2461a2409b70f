//! The composition root of `fencewatch serve` (STYLE 12, thin main): load and validate the
//! configuration (exit 64 when invalid), build the metric registry, the partition registry,
//! the clock and the sources (the WAL source; Kafka when configured; file tailing or the live
//! simulator when asked), bind, serve until SIGTERM or Ctrl-C, then stop accepting, drain,
//! checkpoint and exit.

use crate::exit::{EXIT_FAILURE, EXIT_USAGE};
use crate::serve::config::{ServeArgs, ServeConfig};
use crate::serve::metrics::{HttpMetrics, Metrics};
use crate::serve::otlp::{self, Otlp, OtlpMetrics};
use crate::serve::{
    Base, Refresh, Upstream, base_router_with, init_tracing, listener, routes, shutdown_signal,
    telemetry,
};
use fencewatch_assess::live::LiveOptions;
use fencewatch_ingest::clock::SharedClock;
use fencewatch_ingest::registry::Registry;
use fencewatch_ingest::simulate::live;
use fencewatch_ingest::source::kafka::{KafkaOptions, KafkaSource};
use fencewatch_ingest::source::tail::ingest_file;
use fencewatch_ingest::source::wal::{Ready, WalOptions, WalSource};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

/// Something to start beside the WAL source (file tailing, the demo workload); it waits for
/// the source to be ready itself.
type Feeder = Box<dyn FnOnce(Arc<WalSource>, SharedClock) + Send>;

/// Runs the service; returns the process exit code.
pub fn run(args: ServeArgs, ingest_files: Vec<PathBuf>, clock: SharedClock) -> i32 {
    let feeders: Vec<Feeder> = ingest_files
        .iter()
        .cloned()
        .map(|path| -> Feeder { Box::new(move |wal: Arc<WalSource>, _| ingest_file(&wal, &path)) })
        .collect();
    run_checked(args, feeders, &ingest_files, clock)
}

/// `fencewatch demo`: the service under the demo contract in `data_dir` (default a fresh
/// temporary folder), fed a live simulated workload of `rate` events per second with a paused
/// old owner resuming every `stale_every`.
pub fn demo(
    listen: String,
    data_dir: Option<PathBuf>,
    rate: u64,
    stale_every: std::time::Duration,
    clock: SharedClock,
) -> i32 {
    let dir = data_dir.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("fencewatch-demo-{}", std::process::id()))
    });
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("fencewatch demo: cannot create {}: {e}", dir.display());
        return EXIT_FAILURE;
    }
    let contract = dir.join("contract.toml");
    if let Err(e) = std::fs::write(&contract, live::DEMO_CONTRACT) {
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
    let feeder: Feeder = Box::new(move |wal: Arc<WalSource>, clock: SharedClock| {
        wal.wait_ready();
        let stale_every = i64::try_from(stale_every.as_nanos()).unwrap_or(i64::MAX);
        let generator = live::demo(clock.now(), rate, stale_every, 0x5eed);
        wal.feed(&*clock, generator, std::time::Duration::from_millis(100));
    });
    run_checked(args, vec![feeder], &[], clock)
}

/// Why `serve` stopped with an error: an address cannot be listened on (exit 64), or
/// something failed while running (exit 1).
#[derive(Debug, thiserror::Error)]
enum Failed {
    /// An address cannot be listened on (in use, or not of this host): a configuration error.
    #[error("cannot listen on {addr}{what}: {source}")]
    Listen {
        /// The address.
        addr: std::net::SocketAddr,
        /// Which listener, when not the HTTP one (` (otlp_grpc_listen)`).
        what: &'static str,
        /// The cause.
        source: std::io::Error,
    },
    /// A listener has no local address.
    #[error("the listener: {0}")]
    Listener(std::io::Error),
    /// The WAL source stopped with an error.
    #[error("{0}")]
    Wal(#[from] fencewatch_ingest::source::wal::Error),
    /// The Kafka source did not start or stopped with an error.
    #[error("{0}")]
    Kafka(#[from] fencewatch_ingest::source::kafka::Error),
    /// A blocking task did not complete.
    #[error("{0}")]
    Join(#[from] tokio::task::JoinError),
    /// The evidence archive did not open.
    #[error("the evidence archive: {0}")]
    Archive(#[from] fencewatch_ingest::archive::Error),
    /// The archive's thread stopped with an error (a flush failed).
    #[error("the evidence archive: {0}")]
    ArchiveThread(String),
    /// The query runtime did not start.
    #[error("cannot start the query runtime: {0}")]
    QueryRuntime(std::io::Error),
}

fn run_checked(
    args: ServeArgs,
    feeders: Vec<Feeder>,
    files: &[PathBuf],
    clock: SharedClock,
) -> i32 {
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
            return EXIT_USAGE;
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
                return EXIT_USAGE;
            }
        },
        Err(e) => {
            eprintln!("fencewatch serve: invalid configuration:\n{e}");
            return EXIT_USAGE;
        }
    };
    if let Err(e) = init_tracing(config.log_format, &config.log_level, telemetry.as_ref()) {
        eprintln!("fencewatch serve: cannot set up logging: {e}");
    }
    let traced = telemetry.is_some();
    let code = match rt.block_on(serve(config, feeders, traced, clock)) {
        Ok(()) => 0,
        Err(e @ Failed::Listen { .. }) => {
            tracing::error!(error = %e, "fencewatch serve cannot start");
            eprintln!("fencewatch serve: {e}");
            EXIT_USAGE
        }
        Err(e) => {
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

async fn serve(
    config: ServeConfig,
    feeders: Vec<Feeder>,
    traced: bool,
    clock: SharedClock,
) -> Result<(), Failed> {
    let mut metric_registry = prometheus_client::registry::Registry::default();
    let metrics = Metrics::register(&mut metric_registry);
    let otlp_metrics = OtlpMetrics::register(&mut metric_registry, metrics.clone());
    if config.kafka.is_some() {
        metrics.register_kafka(&mut metric_registry);
    }
    let http_metrics = HttpMetrics::register(&mut metric_registry);
    let archive_metrics =
        crate::serve::metrics::archive::ArchiveMetrics::register(&mut metric_registry);
    let registry = Arc::new(Registry::new(config.contract.clone()));
    let archive = match &config.archive {
        Some(a) => {
            let archive = Arc::new(open_archive(&config, a)?);
            registry.set_archive(archive.clone());
            Some(archive)
        }
        None => None,
    };
    let ready = Ready::new();
    let live = LiveOptions {
        retention: config.retention.map(|d| d.0),
        future_tolerance: config.future_tolerance.0,
        max_emitters: usize::try_from(config.max_emitters).unwrap_or(usize::MAX),
        max_counterexamples: usize::try_from(config.max_counterexamples).unwrap_or(usize::MAX),
    };
    let checkpoint_interval = std::time::Duration::from_nanos(config.checkpoint_interval.0 as u64);
    let max_line_bytes = config.max_line_bytes as usize;
    let opts = WalOptions {
        data_dir: config.data_dir.clone(),
        segment_bytes: config.wal_segment_bytes,
        max_line_bytes,
        checkpoint_interval,
        live,
        max_pending_bytes: config.max_pending_bytes,
        max_body_bytes: config.max_body_bytes,
    };
    let (wal, writer) = WalSource::start(
        registry.clone(),
        opts,
        ready.clone(),
        metrics.clone(),
        clock.clone(),
    );
    let kafka = match &config.kafka {
        Some(k) => {
            let kopts = KafkaOptions {
                config: k.clone(),
                dir: config.data_dir.join("kafka"),
                live,
                max_line_bytes,
                checkpoint_interval,
            };
            let (kafka, consumer) =
                KafkaSource::start(registry.clone(), kopts, metrics.clone(), clock.clone())?;
            tracing::info!(brokers = %k.brokers, topics = %k.topics.join(","), group = %k.group, "consuming from kafka");
            Some((kafka, consumer))
        }
        None => None,
    };
    // A port in use (or an address not of this host) is a configuration error: exit 64.
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| Failed::Listen {
            addr: config.listen,
            what: "",
            source,
        })?;
    let addr = listener.local_addr().map_err(Failed::Listener)?;
    let (max_connections, fd_limit) = listener::connection_limit(config.max_connections);
    // The first line on stdout names the address (useful with port 0). Written once, errors
    // ignored: whoever started us may close stdout after reading the first line.
    let _ = write!(
        std::io::stdout(),
        "fencewatch listening on http://{addr}\nopen http://{addr}/ for the page, http://{addr}/v1/assurance for the API, http://{addr}/metrics for Prometheus\n"
    );
    let _ = std::io::stdout().flush();
    tracing::info!(%addr, data_dir = %config.data_dir.display(), contract = %config.contract_path.display(), max_connections, fd_limit, "listening");
    let nice = config.archive.as_ref().map_or(0, |a| a.nice);
    let archiver = archive
        .clone()
        .map(|a| crate::serve::sql::start(a, registry.clone(), wal.clone(), nice));
    let queries = crate::query::Queries::new(crate::query::Limits {
        timeout: std::time::Duration::from_nanos(config.query.timeout.0 as u64),
        max_rows: usize::try_from(config.query.max_rows).unwrap_or(usize::MAX),
        memory: usize::try_from(config.query.memory).unwrap_or(usize::MAX),
        nice: config.query.nice,
    })
    .map_err(Failed::QueryRuntime)?;
    let mut base = Base::new(
        &config,
        ready,
        Arc::new(metric_registry),
        http_metrics.clone(),
    );
    let (r, w, m, c) = (
        registry.clone(),
        wal.clone(),
        metrics.clone(),
        clock.clone(),
    );
    let k = kafka.as_ref().map(|(k, _)| k.clone());
    let am = archive_metrics.clone();
    base.refresh = Some(Refresh(Arc::new(move || {
        let d = w.durability();
        r.refresh_gauges(&m, d, w.budget().used(), c.now());
        if let Some(k) = &k {
            k.refresh_metrics(&m);
        }
        if let Some(a) = r.archive() {
            am.refresh(a);
        }
    })));
    if let Some((k, _)) = &kafka {
        let k = k.clone();
        base.upstream = Some(Upstream(Arc::new(move || k.unready())));
    }
    let otlp = Otlp {
        wal: wal.clone(),
        metrics: otlp_metrics,
        mapping: Otlp::mapping_permits(),
    };
    let grpc = match config.otlp_grpc_listen {
        Some(at) => Some(start_grpc(at, otlp.clone(), &config, max_connections).await?),
        None => None,
    };
    let queries = Arc::new(queries);
    let app = routes::App {
        registry: registry.clone(),
        wal: wal.clone(),
        clock: clock.clone(),
        data_dir: config.data_dir.clone(),
        queries: queries.clone(),
    };
    let api = routes::router(app).merge(otlp::http::router(otlp));
    let template: Option<Arc<str>> = config.trace_url_template.as_deref().map(Arc::from);
    let sql = crate::serve::sql::router(crate::serve::sql::Sql {
        registry: registry.clone(),
        wal: wal.clone(),
        data_dir: config.data_dir.clone(),
        queries: Arc::new(crate::query::Isolated::new(
            crate::query::own_program().map_err(Failed::QueryRuntime)?,
            queries.limits(),
        )),
        metrics: archive_metrics,
    });
    let mut app = base_router_with(base, api, sql);
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
        let (wal, clock) = (wal.clone(), clock.clone());
        std::thread::spawn(move || feed(wal, clock));
    }
    // Stop on SIGTERM/Ctrl-C, or when a source stops by itself (a WAL or checkpoint
    // failure): then the process exits non-zero instead of serving stale answers.
    let w = wal.clone();
    let k = kafka.as_ref().map(|(k, _)| k.clone());
    let a = archive.clone();
    let lopts = listener::ListenerOptions {
        max_connections,
        header_read_timeout: std::time::Duration::from_nanos(config.header_read_timeout.0 as u64),
        idle_timeout: std::time::Duration::from_nanos(config.idle_timeout.0 as u64),
    };
    listener::serve(listener, app, lopts, http_metrics, async move {
        let kafka_stopped = until(move || k.as_ref().map(|k| k.stopping()));
        // A failed archive (disk full, I/O error) stops the service at once rather than at
        // its next checkpoint: every acknowledged event is in the log, which a restart
        // archives from the manifest's offsets; meanwhile no WAL segment could be deleted.
        let archive_failed = until(move || {
            a.as_ref().map(|a| match a.failure() {
                Some(why) => {
                    tracing::error!(error = %why, "the evidence archive failed: stopping (a restart archives the rest from the log)");
                    true
                }
                None => false,
            })
        });
        tokio::select! {
            () = shutdown_signal() => {}
            () = w.stopped() => {}
            () = kafka_stopped => {}
            () = archive_failed => {}
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
            tokio::task::spawn_blocking(move || consumer.join()).await?
        }
        None => Ok(()),
    };
    tracing::info!("shutting down: draining the write-ahead log queue");
    wal.close();
    tokio::task::spawn_blocking(move || writer.join()).await??;
    kafka_result?;
    if let (Some(a), Some(t)) = (&archive, archiver) {
        tracing::info!("shutting down: flushing the evidence archive");
        a.close();
        tokio::task::spawn_blocking(move || t.join())
            .await?
            .map_err(|_| Failed::ArchiveThread("panicked".into()))?
            .map_err(Failed::ArchiveThread)?;
    }
    tracing::info!("stopped");
    Ok(())
}

/// Opens the evidence archive in `<data_dir>/archive` (SPEC §9).
fn open_archive(
    config: &ServeConfig,
    a: &crate::serve::config::ArchiveConfig,
) -> Result<fencewatch_ingest::archive::Archive, Failed> {
    use fencewatch_ingest::archive::{Archive, ArchiveOptions};
    let ns = |d: fencewatch_assess::Duration| std::time::Duration::from_nanos(d.0.max(0) as u64);
    let opts = ArchiveOptions {
        flush_interval: ns(a.flush_interval),
        retention: Some(ns(a.retention)),
        max_bytes: a.max_bytes,
        // Files a compaction or retention drops stay for queries that took a snapshot before.
        delete_grace: (2 * ns(config.query.timeout)).max(std::time::Duration::from_secs(60)),
        ..ArchiveOptions::new(config.data_dir.join("archive"))
    };
    let id = fencewatch_ingest::archive::data_dir_id(&config.data_dir, &opts.dir)?;
    let opts = ArchiveOptions {
        data_dir_id: Some(id.clone()),
        ..opts
    };
    // The id is written once the local partition opened beside it (`Archive::keep_owner`).
    let archive = Archive::open(opts)?;
    if archive.orphans_removed() > 0 {
        tracing::warn!(
            files = archive.orphans_removed(),
            "archive: deleted files no manifest lists (an interrupted flush or compaction); their rows are archived again from the log"
        );
    }
    Ok(archive)
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
        .map_err(|source| Failed::Listen {
            addr: at,
            what: " (otlp_grpc_listen)",
            source,
        })?;
    let addr = listener.local_addr().map_err(Failed::Listener)?;
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

/// Completes once `done` says so, asked every 200 ms; never when it answers `None` (what it
/// watches is not there).
async fn until(mut done: impl FnMut() -> Option<bool>) {
    loop {
        match done() {
            None => std::future::pending().await,
            Some(true) => return,
            Some(false) => tokio::time::sleep(std::time::Duration::from_millis(200)).await,
        }
    }
}
