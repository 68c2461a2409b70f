//! The configuration of `serve`, loaded once and validated once (STYLE 8).
//!
//! Layers, later ones winning: the embedded defaults ([`DEFAULTS_TOML`]), the TOML file of
//! `--config`, then `FENCEWATCH_*` environment variables and command-line flags (both arrive
//! through clap in [`ServeArgs`]; a flag wins over its variable). [`ServeConfig::load`] reads
//! everything and reports **every** problem at once in [`ConfigErrors`], one per line; the
//! caller exits 64 on it. Relative paths in the file are resolved against the file's folder,
//! relative paths of flags and variables against the working directory.
//!
//! Each file key is checked on its own, so several unknown keys and wrongly typed values are
//! all reported with their lines, not only the first as `#[serde(deny_unknown_fields)]` alone
//! would (the per-key check still goes through that derive, so the accepted keys and types
//! are the struct's).

use crate::serve::auth::{AuthToken, TokenError};
use clap::{Args, ValueEnum};
use fencewatch_assess::{Contract, Duration};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
mod archive;
mod loader;
pub use archive::{ArchiveArgs, ArchiveConfig, QueryConfig};
pub use fencewatch_ingest::source::kafka::KafkaConfig;
use loader::{Loader, Origin, pick};

/// The embedded defaults, parsed like a config file.
pub const DEFAULTS_TOML: &str = r#"
data_dir = "./fencewatch-data"
listen = "127.0.0.1:8080"
max_body_bytes = 16777216       # 16 MiB
max_line_bytes = 1048576        # 1 MiB
request_timeout = "30s"
header_read_timeout = "10s"     # a client must send a request's headers within this
idle_timeout = "60s"            # a connection with nothing in flight is closed after this
max_connections = 1024          # more are answered 503 and closed (capped below the fd limit)
max_pending_bytes = 268435456   # 256 MiB of ingest bodies in flight; 503 beyond
max_emitters = 1000000          # emitters tracked per partition; events of others are unknown(telemetry_gap)
max_counterexamples = 100000    # counterexamples kept in full per property and partition
future_tolerance = "5m"         # an event further ahead of the wall clock is malformed
checkpoint_interval = "10s"
wal_segment_bytes = 67108864    # 64 MiB
log_format = "text"
log_level = "info"
archive = true                  # the evidence archive: Parquet under <data_dir>/archive (SPEC §9)
archive_flush_interval = "10s"
archive_retention = "720h"      # 30 days
archive_max_bytes = 0           # 0: no limit
archive_nice = 10               # the archive thread's CPU priority: ingest first on a shared core; 0 normal
query_timeout = "30s"
query_max_rows = 100000
query_memory = 536870912        # 512 MiB
query_nice = 19                 # query threads' CPU priority: 19 lowest (ingest first), 0 normal
"#;

/// The smallest accepted `max_body_bytes`.
pub const MIN_BODY_BYTES: u64 = 1 << 10;
/// The smallest accepted `max_line_bytes`.
pub const MIN_LINE_BYTES: u64 = 256;
/// The largest accepted `max_body_bytes` and `max_line_bytes`: 1 GiB. One event is at most
/// that, so that the archive's Arrow string columns (2 GiB each, a chunk handed over at
/// 16 MiB of strings plus its last event) and the WAL's records (4 GiB) always hold it: a
/// larger limit let one request crash the archive's writer.
pub const MAX_BODY_BYTES: u64 = 1 << 30;
/// The smallest accepted `wal_segment_bytes`.
pub const MIN_WAL_SEGMENT_BYTES: u64 = 1 << 20;

/// How logs are written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// The flags of `fencewatch serve`; each also reads a `FENCEWATCH_*` variable.
#[derive(Debug, Clone, Default, Args)]
pub struct ServeArgs {
    /// Configuration file (TOML); flags and FENCEWATCH_* variables override it.
    #[arg(long, env = "FENCEWATCH_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The contract (TOML). Required.
    #[arg(long, env = "FENCEWATCH_CONTRACT", value_name = "FILE")]
    pub contract: Option<PathBuf>,
    /// Folder of the WAL, checkpoints and archive [default: ./fencewatch-data].
    #[arg(long, env = "FENCEWATCH_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1:8080].
    #[arg(long, env = "FENCEWATCH_LISTEN", value_name = "IP:PORT")]
    pub listen: Option<String>,
    /// Address of the OTLP/gRPC listener (trace and logs services); off unless set.
    #[arg(long, env = "FENCEWATCH_OTLP_GRPC_LISTEN", value_name = "IP:PORT")]
    pub otlp_grpc_listen: Option<String>,
    /// A link to a trace on the page, `{trace_id}` (and `{span_id}`) filled in, e.g.
    /// `https://grafana.example/explore?traceId={trace_id}`.
    #[arg(long, env = "FENCEWATCH_TRACE_URL_TEMPLATE", value_name = "URL")]
    pub trace_url_template: Option<String>,
    /// Bearer token required on /v1/* (prefer --auth-token-file).
    #[arg(long, env = "FENCEWATCH_AUTH_TOKEN", hide_env_values = true)]
    pub auth_token: Option<String>,
    /// File holding the bearer token required on /v1/*.
    #[arg(long, env = "FENCEWATCH_AUTH_TOKEN_FILE", value_name = "FILE")]
    pub auth_token_file: Option<PathBuf>,
    /// Largest accepted request body in bytes [default: 16 MiB].
    #[arg(long, env = "FENCEWATCH_MAX_BODY_BYTES", value_name = "BYTES")]
    pub max_body_bytes: Option<String>,
    /// Longer event lines are malformed [default: 1 MiB].
    #[arg(long, env = "FENCEWATCH_MAX_LINE_BYTES", value_name = "BYTES")]
    pub max_line_bytes: Option<String>,
    /// Requests taking longer fail with 503 [default: 30s].
    #[arg(long, env = "FENCEWATCH_REQUEST_TIMEOUT", value_name = "DURATION")]
    pub request_timeout: Option<String>,
    /// A client must send a request's headers within this [default: 10s].
    #[arg(long, env = "FENCEWATCH_HEADER_READ_TIMEOUT", value_name = "DURATION")]
    pub header_read_timeout: Option<String>,
    /// A connection with no request in flight and no bytes moving is closed after this
    /// [default: 60s].
    #[arg(long, env = "FENCEWATCH_IDLE_TIMEOUT", value_name = "DURATION")]
    pub idle_timeout: Option<String>,
    /// Open connections at most; more are answered 503 and closed [default: 1024, capped
    /// below the file-descriptor limit].
    #[arg(long, env = "FENCEWATCH_MAX_CONNECTIONS", value_name = "N")]
    pub max_connections: Option<String>,
    /// Bytes of ingest bodies in flight (read, queued or being applied) at most; requests
    /// beyond are answered 503 with Retry-After [default: 256 MiB].
    #[arg(long, env = "FENCEWATCH_MAX_PENDING_BYTES", value_name = "BYTES")]
    pub max_pending_bytes: Option<String>,
    /// Distinct emitters tracked per partition; events of emitters beyond are set aside as
    /// unknown(telemetry_gap) [default: 1000000].
    #[arg(long, env = "FENCEWATCH_MAX_EMITTERS", value_name = "N")]
    pub max_emitters: Option<String>,
    /// Counterexamples kept in full per property and partition; the oldest final ones beyond
    /// keep refuting but lose their detail [default: 100000].
    #[arg(long, env = "FENCEWATCH_MAX_COUNTEREXAMPLES", value_name = "N")]
    pub max_counterexamples: Option<String>,
    /// Events further ahead of the wall clock are malformed [default: 5m].
    #[arg(long, env = "FENCEWATCH_FUTURE_TOLERANCE", value_name = "DURATION")]
    pub future_tolerance: Option<String>,
    /// How long detail is kept resident [default: derived from the contract].
    #[arg(long, env = "FENCEWATCH_RETENTION", value_name = "DURATION")]
    pub retention: Option<String>,
    /// Time between checkpoints [default: 10s].
    #[arg(long, env = "FENCEWATCH_CHECKPOINT_INTERVAL", value_name = "DURATION")]
    pub checkpoint_interval: Option<String>,
    /// Size at which a new WAL segment starts [default: 64 MiB].
    #[arg(long, env = "FENCEWATCH_WAL_SEGMENT_BYTES", value_name = "BYTES")]
    pub wal_segment_bytes: Option<String>,
    /// Log format: text or json [default: text].
    #[arg(long, env = "FENCEWATCH_LOG_FORMAT", value_name = "FORMAT")]
    pub log_format: Option<String>,
    /// Log level or filter, e.g. `debug` or `info,fencewatch_ingest=debug` [default: info].
    #[arg(long, env = "FENCEWATCH_LOG_LEVEL", value_name = "FILTER")]
    pub log_level: Option<String>,
    /// Kafka bootstrap servers, `host:port[,host:port…]`: consume events from Kafka.
    #[arg(long, env = "FENCEWATCH_KAFKA_BROKERS", value_name = "HOSTS")]
    pub kafka_brokers: Option<String>,
    /// Kafka topic(s) of events, comma-separated (required with --kafka-brokers).
    #[arg(long, env = "FENCEWATCH_KAFKA_TOPIC", value_name = "TOPIC")]
    pub kafka_topic: Option<String>,
    /// Kafka consumer group [default: fencewatch].
    #[arg(long, env = "FENCEWATCH_KAFKA_GROUP", value_name = "GROUP")]
    pub kafka_group: Option<String>,
    /// Topic that malformed messages are copied to [default: a file in the data directory].
    #[arg(long, env = "FENCEWATCH_KAFKA_DEAD_LETTER_TOPIC", value_name = "TOPIC")]
    pub kafka_dead_letter_topic: Option<String>,
    /// Scale-out: topic where instances of the group publish and read partition summaries.
    #[arg(long, env = "FENCEWATCH_KAFKA_SUMMARIES_TOPIC", value_name = "TOPIC")]
    pub kafka_summaries_topic: Option<String>,
    /// Static group membership: this instance's stable id in the group (librdkafka
    /// `group.instance.id`; a StatefulSet's pod name), so that after a crash it takes its
    /// partitions back at once instead of waiting out its old session. Ignored without Kafka.
    #[arg(long, env = "FENCEWATCH_KAFKA_INSTANCE_ID", value_name = "ID")]
    pub kafka_instance_id: Option<String>,
    /// The evidence archive's and the queries' flags.
    #[command(flatten)]
    pub archive_flags: ArchiveArgs,
}

/// The validated configuration, passed down by value (no global).
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Where the contract was read from.
    pub contract_path: PathBuf,
    /// The contract, parsed and validated.
    pub contract: Contract,
    /// Folder of the WAL, checkpoints and archive.
    pub data_dir: PathBuf,
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Token required on `/v1/*` (and on OTLP/gRPC), if any.
    pub auth_token: Option<AuthToken>,
    /// Address of the OTLP/gRPC listener, when set.
    pub otlp_grpc_listen: Option<SocketAddr>,
    /// Link to a trace on the page (`{trace_id}`, `{span_id}`), when set.
    pub trace_url_template: Option<String>,
    /// Largest accepted request body.
    pub max_body_bytes: u64,
    /// Longer event lines are malformed.
    pub max_line_bytes: u64,
    /// Requests taking longer fail.
    pub request_timeout: Duration,
    /// A request's headers must arrive within this.
    pub header_read_timeout: Duration,
    /// Idle connections are closed after this.
    pub idle_timeout: Duration,
    /// Open connections at most (before the file-descriptor cap).
    pub max_connections: u64,
    /// Bytes of ingest bodies in flight at most.
    pub max_pending_bytes: u64,
    /// Emitters tracked per partition.
    pub max_emitters: u64,
    /// Counterexamples kept in full per property and partition.
    pub max_counterexamples: u64,
    /// Events further ahead of the wall clock are malformed.
    pub future_tolerance: Duration,
    /// Resident horizon; `None` lets the engine derive it from the contract.
    pub retention: Option<Duration>,
    /// Time between checkpoints.
    pub checkpoint_interval: Duration,
    /// Size at which a new WAL segment starts.
    pub wal_segment_bytes: u64,
    /// Log format.
    pub log_format: LogFormat,
    /// Log level or `tracing` filter directives.
    pub log_level: String,
    /// Kafka ingest, when brokers and a topic are set.
    pub kafka: Option<KafkaConfig>,
    /// The evidence archive, unless `archive = false`.
    pub archive: Option<ArchiveConfig>,
    /// The limits of SQL queries.
    pub query: QueryConfig,
}

/// Every problem found in a configuration, one per line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", errors.join("\n"))]
pub struct ConfigErrors {
    /// At least one message, each naming where the bad value came from.
    pub errors: Vec<String>,
}

/// One layer: the embedded defaults or the file (flags are [`ServeArgs`]).
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Layer {
    contract: Option<PathBuf>,
    data_dir: Option<PathBuf>,
    listen: Option<String>,
    otlp_grpc_listen: Option<String>,
    trace_url_template: Option<String>,
    auth_token: Option<String>,
    auth_token_file: Option<PathBuf>,
    max_body_bytes: Option<u64>,
    max_line_bytes: Option<u64>,
    request_timeout: Option<String>,
    header_read_timeout: Option<String>,
    idle_timeout: Option<String>,
    max_connections: Option<u64>,
    max_pending_bytes: Option<u64>,
    max_emitters: Option<u64>,
    max_counterexamples: Option<u64>,
    future_tolerance: Option<String>,
    retention: Option<String>,
    checkpoint_interval: Option<String>,
    wal_segment_bytes: Option<u64>,
    log_format: Option<LogFormat>,
    log_level: Option<String>,
    kafka_brokers: Option<String>,
    kafka_topic: Option<String>,
    kafka_group: Option<String>,
    kafka_dead_letter_topic: Option<String>,
    kafka_summaries_topic: Option<String>,
    kafka_instance_id: Option<String>,
    /// librdkafka settings passed through (`[kafka]` table).
    kafka: Option<BTreeMap<String, toml::Value>>,
    archive: Option<bool>,
    archive_flush_interval: Option<String>,
    archive_retention: Option<String>,
    archive_max_bytes: Option<u64>,
    archive_nice: Option<u64>,
    query_timeout: Option<String>,
    query_max_rows: Option<u64>,
    query_memory: Option<u64>,
    query_nice: Option<u64>,
}

fn is_level(s: &str) -> bool {
    ["trace", "debug", "info", "warn", "error", "off"]
        .iter()
        .any(|l| s.eq_ignore_ascii_case(l))
}

impl ServeConfig {
    /// Layers defaults, the file, variables and flags; validates everything, the contract
    /// included, and reports every problem together.
    pub fn load(args: ServeArgs) -> Result<ServeConfig, ConfigErrors> {
        let d: Layer = toml::from_str(DEFAULTS_TOML).expect("the embedded defaults parse");
        let mut l = Loader {
            file: None,
            errors: Vec::new(),
        };
        let f = args
            .config
            .as_deref()
            .map_or_else(Layer::default, |p| l.read_file(p));
        let a = args;
        let (archive, query) = archive::load(&mut l, a.archive_flags, &f, &d);

        let contract_path = pick(a.contract, f.contract, None).map(|(p, _)| p);
        let contract = contract_path.as_deref().and_then(|path| {
            let name = path.display().to_string();
            let src = std::fs::read_to_string(path)
                .map_err(|e| {
                    l.errors
                        .push(format!("contract `{name}`: cannot read: {e}"))
                })
                .ok()?;
            Contract::parse(&name, &src)
                .map_err(|e| l.errors.extend(e.diagnostics.iter().map(|d| d.to_string())))
                .ok()
        });
        if contract_path.is_none() {
            l.errors.push(
                "no contract: set `contract` in the config file, --contract or \
                 FENCEWATCH_CONTRACT"
                    .into(),
            );
        }

        let (listen, origin) = pick(a.listen, f.listen, d.listen).unwrap_or_default();
        let listen = listen.parse::<SocketAddr>().unwrap_or_else(|_| {
            let expected = "expected IP:PORT, e.g. 127.0.0.1:8080 or [::]:8080";
            l.error(
                "listen",
                origin,
                format_args!("`{listen}` is not an address ({expected})"),
            );
            SocketAddr::from(([127, 0, 0, 1], 0))
        });

        let otlp_grpc_listen =
            pick(a.otlp_grpc_listen, f.otlp_grpc_listen, None).and_then(|(addr, origin)| {
                let parsed = addr.parse::<SocketAddr>();
                if parsed.is_err() {
                    l.error(
                        "otlp_grpc_listen",
                        origin,
                        format_args!(
                            "`{addr}` is not an address (expected IP:PORT, e.g. 0.0.0.0:4317)"
                        ),
                    );
                }
                parsed.ok()
            });
        let trace_url_template =
            pick(a.trace_url_template, f.trace_url_template, None).and_then(|(t, origin)| {
                let ok = t.contains("{trace_id}")
                    && (t.starts_with("https://") || t.starts_with("http://"));
                if !ok {
                    l.error(
                        "trace_url_template",
                        origin,
                        format_args!("`{t}` must be an http(s) URL holding `{{trace_id}}`"),
                    );
                }
                ok.then_some(t)
            });

        let auth_token = if a.auth_token.is_some() || a.auth_token_file.is_some() {
            let t = a.auth_token.map(|s| s.parse::<AuthToken>());
            token(&mut l, t, a.auth_token_file, Origin::Flag)
        } else {
            let t = f.auth_token.map(|s| s.parse::<AuthToken>());
            token(&mut l, t, f.auth_token_file, Origin::File)
        };

        let (max_body_bytes, body_origin) = l.number(
            "max_body_bytes",
            a.max_body_bytes,
            f.max_body_bytes,
            d.max_body_bytes,
            MIN_BODY_BYTES,
        );
        let (max_line_bytes, line_origin) = l.number(
            "max_line_bytes",
            a.max_line_bytes,
            f.max_line_bytes,
            d.max_line_bytes,
            MIN_LINE_BYTES,
        );
        for (key, n, origin) in [
            ("max_body_bytes", max_body_bytes, body_origin),
            ("max_line_bytes", max_line_bytes, line_origin),
        ] {
            if n > MAX_BODY_BYTES {
                l.error(
                    key,
                    origin,
                    format_args!("{n} is too large (at most {MAX_BODY_BYTES}, 1 GiB)"),
                );
            }
        }
        let (max_connections, _) = l.number(
            "max_connections",
            a.max_connections,
            f.max_connections,
            d.max_connections,
            1,
        );
        let (max_pending_bytes, pending_origin) = l.number(
            "max_pending_bytes",
            a.max_pending_bytes,
            f.max_pending_bytes,
            d.max_pending_bytes,
            MIN_BODY_BYTES,
        );
        if max_pending_bytes < max_body_bytes {
            l.error(
                "max_pending_bytes",
                pending_origin,
                format_args!(
                    "{max_pending_bytes} is below max_body_bytes ({max_body_bytes}): a body of the largest accepted size could never be taken"
                ),
            );
        }
        let (max_emitters, _) = l.number(
            "max_emitters",
            a.max_emitters,
            f.max_emitters,
            d.max_emitters,
            1,
        );
        let (max_counterexamples, _) = l.number(
            "max_counterexamples",
            a.max_counterexamples,
            f.max_counterexamples,
            d.max_counterexamples,
            1,
        );
        let (wal_segment_bytes, _) = l.number(
            "wal_segment_bytes",
            a.wal_segment_bytes,
            f.wal_segment_bytes,
            d.wal_segment_bytes,
            MIN_WAL_SEGMENT_BYTES,
        );
        let timeout = pick(a.request_timeout, f.request_timeout, d.request_timeout);
        let request_timeout = l.duration("request_timeout", timeout).unwrap_or_default();
        let headers = pick(
            a.header_read_timeout,
            f.header_read_timeout,
            d.header_read_timeout,
        );
        let header_read_timeout = (l.duration("header_read_timeout", headers)).unwrap_or_default();
        let idle = pick(a.idle_timeout, f.idle_timeout, d.idle_timeout);
        let idle_timeout = l.duration("idle_timeout", idle).unwrap_or_default();
        let future = pick(a.future_tolerance, f.future_tolerance, d.future_tolerance);
        let future_tolerance = l.duration("future_tolerance", future).unwrap_or_default();
        let retention = l.duration("retention", pick(a.retention, f.retention, None));
        let every = pick(
            a.checkpoint_interval,
            f.checkpoint_interval,
            d.checkpoint_interval,
        );
        let checkpoint_interval = l.duration("checkpoint_interval", every).unwrap_or_default();
        let data_dir = pick(a.data_dir, f.data_dir, d.data_dir)
            .unwrap_or_default()
            .0;
        let flag_format = a
            .log_format
            .and_then(|s| match s.to_ascii_lowercase().as_str() {
                "text" => Some(LogFormat::Text),
                "json" => Some(LogFormat::Json),
                _ => {
                    l.error(
                        "log_format",
                        Origin::Flag,
                        format_args!("`{s}` is not a log format (text or json)"),
                    );
                    None
                }
            });
        let log_format = pick(flag_format, f.log_format, d.log_format)
            .unwrap_or_default()
            .0;
        let (log_level, level_origin) =
            pick(a.log_level, f.log_level, d.log_level).unwrap_or_default();
        if !(is_level(&log_level) || log_level.contains(['=', ',']))
            || tracing_subscriber::EnvFilter::try_new(&log_level).is_err()
        {
            l.error(
                "log_level",
                level_origin,
                format_args!(
                    "`{log_level}` is not a level (trace, debug, info, warn, error, off) or a \
                     filter like `info,fencewatch_ingest=debug`"
                ),
            );
        }

        let mut kafka_values = BTreeMap::new();
        for (key, v) in [
            (
                "kafka_brokers",
                pick(a.kafka_brokers, f.kafka_brokers, None),
            ),
            ("kafka_topic", pick(a.kafka_topic, f.kafka_topic, None)),
            ("kafka_group", pick(a.kafka_group, f.kafka_group, None)),
            (
                "kafka_dead_letter_topic",
                pick(a.kafka_dead_letter_topic, f.kafka_dead_letter_topic, None),
            ),
            (
                "kafka_summaries_topic",
                pick(a.kafka_summaries_topic, f.kafka_summaries_topic, None),
            ),
        ] {
            match v {
                Some((s, o)) if s.trim().is_empty() => l.error(key, o, "must not be empty"),
                Some((s, _)) => {
                    kafka_values.insert(key, s.trim().to_string());
                }
                None => {}
            }
        }
        let instance_id = match pick(a.kafka_instance_id, f.kafka_instance_id, None) {
            Some((s, o)) if s.trim().is_empty() => {
                l.error("kafka_instance_id", o, "must not be empty");
                None
            }
            v => v.map(|(s, _)| s.trim().to_string()),
        };
        let mut settings = Vec::new();
        for (k, v) in f.kafka.unwrap_or_default() {
            match v {
                toml::Value::String(s) => settings.push((k, s)),
                toml::Value::Integer(n) => settings.push((k, n.to_string())),
                toml::Value::Boolean(b) => settings.push((k, b.to_string())),
                toml::Value::Float(x) => settings.push((k, x.to_string())),
                other => l.errors.push(format!(
                    "[kafka] `{k}`: librdkafka settings are strings, numbers or booleans, not {}",
                    other.type_str()
                )),
            }
        }
        let kafka = match (
            kafka_values.remove("kafka_brokers"),
            kafka_values.remove("kafka_topic"),
        ) {
            (Some(brokers), Some(topics)) => Some(KafkaConfig {
                brokers,
                topics: topics
                    .split(',')
                    .map(|t| t.trim().to_string())
                    .filter(|t| !t.is_empty())
                    .collect(),
                group: kafka_values
                    .remove("kafka_group")
                    .unwrap_or_else(|| "fencewatch".into()),
                dead_letter_topic: kafka_values.remove("kafka_dead_letter_topic"),
                summaries_topic: kafka_values.remove("kafka_summaries_topic"),
                instance_id,
                settings,
            }),
            (None, None) if kafka_values.is_empty() && settings.is_empty() => None,
            (b, _) => {
                l.errors.push(format!(
                    "kafka ingest needs both kafka_brokers and kafka_topic (missing: {})",
                    if b.is_none() {
                        "kafka_brokers"
                    } else {
                        "kafka_topic"
                    }
                ));
                None
            }
        };

        match (contract_path, contract) {
            (Some(contract_path), Some(contract)) if l.errors.is_empty() => Ok(ServeConfig {
                contract_path,
                contract,
                data_dir,
                listen,
                auth_token,
                otlp_grpc_listen,
                trace_url_template,
                max_body_bytes,
                max_line_bytes,
                request_timeout,
                header_read_timeout,
                idle_timeout,
                max_connections,
                max_pending_bytes,
                max_emitters,
                max_counterexamples,
                future_tolerance,
                retention,
                checkpoint_interval,
                wal_segment_bytes,
                log_format,
                log_level,
                kafka,
                archive,
                query,
            }),
            _ => Err(ConfigErrors { errors: l.errors }),
        }
    }
}

/// One layer's `auth_token` / `auth_token_file` pair, which overrides the lower layers' as a
/// whole.
fn token(
    l: &mut Loader,
    token: Option<Result<AuthToken, TokenError>>,
    file: Option<PathBuf>,
    origin: Origin,
) -> Option<AuthToken> {
    match (token, file) {
        (Some(_), Some(_)) => {
            l.error(
                "auth_token",
                origin,
                "set either auth_token or auth_token_file, not both",
            );
            None
        }
        (Some(Ok(t)), None) => Some(t),
        (Some(Err(e)), None) => {
            l.error("auth_token", origin, e);
            None
        }
        (None, Some(path)) => {
            let parsed = match std::fs::read_to_string(&path) {
                Ok(s) => s.parse::<AuthToken>().map_err(|e| e.to_string()),
                Err(e) => Err(format!("cannot read: {e}")),
            };
            match parsed {
                Ok(t) => Some(t),
                Err(e) => {
                    l.error(
                        "auth_token_file",
                        origin,
                        format_args!("`{}`: {e}", path.display()),
                    );
                    None
                }
            }
        }
        (None, None) => None,
    }
}

#[cfg(test)]
mod tests;
