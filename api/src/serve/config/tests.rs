//! Layering precedence and error collection of [`ServeConfig::load`].

use super::*;
use clap::Parser;

const CONTRACT: &str = r#"[[property]]
name = "order-mutation"
subject = "Order"
strategy = "lease_epoch"
window = "1m"
clock_skew = "50ms"
allowed_lateness = "10s"
route_freshness = "5m"
  [[property.route]]
  name = "orders-api.transition"
"#;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: ServeArgs,
}

/// A folder with `contract.toml` and, if given, `serve.toml`.
fn setup(config: Option<&str>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("contract.toml"), CONTRACT).unwrap();
    if let Some(c) = config {
        std::fs::write(dir.path().join("serve.toml"), c).unwrap();
    }
    dir
}

fn args(flags: &[&str]) -> ServeArgs {
    let argv = std::iter::once("serve").chain(flags.iter().copied());
    Cli::try_parse_from(argv).unwrap().args
}

fn path(dir: &tempfile::TempDir, name: &str) -> String {
    dir.path().join(name).display().to_string()
}

#[test]
fn defaults_parse() {
    let d: Layer = toml::from_str(DEFAULTS_TOML).unwrap();
    assert_eq!(d.max_body_bytes, Some(16 << 20));
    assert_eq!(d.wal_segment_bytes, Some(64 << 20));
}

#[test]
fn defaults_then_file_then_flags() {
    let dir = setup(Some(
        "contract = \"contract.toml\"\nlisten = \"0.0.0.0:9000\"\nrequest_timeout = \"5s\"\n\
             max_line_bytes = 2048\nlog_format = \"json\"\n",
    ));
    let c = ServeConfig::load(args(&["--config", &path(&dir, "serve.toml")])).unwrap();
    assert_eq!(c.contract_path, dir.path().join("contract.toml"));
    assert_eq!(c.contract.properties[0].name, "order-mutation");
    assert_eq!(c.listen, "0.0.0.0:9000".parse().unwrap());
    assert_eq!(c.request_timeout, Duration::parse("5s").unwrap());
    assert_eq!(c.max_line_bytes, 2048);
    assert_eq!(c.log_format, LogFormat::Json);
    // defaults where neither file nor flags say anything
    assert_eq!(c.data_dir, PathBuf::from("./fencewatch-data"));
    assert_eq!(c.max_body_bytes, 16 << 20);
    assert_eq!(c.future_tolerance, Duration::parse("5m").unwrap());
    assert_eq!(c.checkpoint_interval, Duration::parse("10s").unwrap());
    assert_eq!(c.retention, None);
    assert!(c.auth_token.is_none());

    let flags = [
        "--config",
        &path(&dir, "serve.toml"),
        "--listen",
        "[::1]:8181",
        "--max-line-bytes",
        "4096",
        "--log-format",
        "text",
        "--retention",
        "2h",
        "--auth-token",
        "s3cret",
    ];
    let c = ServeConfig::load(args(&flags)).unwrap();
    assert_eq!(c.listen, "[::1]:8181".parse().unwrap());
    assert_eq!(c.max_line_bytes, 4096);
    assert_eq!(c.log_format, LogFormat::Text);
    assert_eq!(c.retention, Some(Duration::parse("2h").unwrap()));
    assert_eq!(c.request_timeout, Duration::parse("5s").unwrap());
    assert!(c.auth_token.unwrap().matches(b"s3cret"));
}

#[test]
fn token_file_and_flags_override_the_file_pair() {
    let dir = setup(Some(
        "auth_token_file = \"token\"\ncontract = \"contract.toml\"\n",
    ));
    std::fs::write(dir.path().join("token"), "from-file\n").unwrap();
    let config = path(&dir, "serve.toml");
    let c = ServeConfig::load(args(&["--config", &config])).unwrap();
    assert!(c.auth_token.unwrap().matches(b"from-file"));
    let c = ServeConfig::load(args(&["--config", &config, "--auth-token", "flag"])).unwrap();
    assert!(c.auth_token.unwrap().matches(b"flag"));
}

#[test]
fn body_and_line_limits_are_at_most_a_gibibyte() {
    let dir = setup(Some(
        "contract = \"contract.toml\"\nmax_body_bytes = 1073741824\nmax_line_bytes = 1073741825\n\
         max_pending_bytes = 2147483648\n",
    ));
    let config = path(&dir, "serve.toml");
    let err = ServeConfig::load(args(&["--config", &config])).unwrap_err();
    assert_eq!(
        err.errors,
        [format!(
            "{config}:3: `max_line_bytes`: 1073741825 is too large (at most 1073741824, 1 GiB)"
        )]
    );
    let err = ServeConfig::load(args(&[
        "--config",
        &config,
        "--max-body-bytes",
        "4294967296",
    ]))
    .unwrap_err();
    assert!(
        err.errors.iter().any(|e| e
            == "--max-body-bytes (or FENCEWATCH_MAX_BODY_BYTES): 4294967296 is too large (at most 1073741824, 1 GiB)"),
        "{err}"
    );
    let ok = setup(Some(
        "contract = \"contract.toml\"\nmax_body_bytes = 1073741824\nmax_line_bytes = 1073741824\nmax_pending_bytes = 2147483648\n",
    ));
    let c = ServeConfig::load(args(&["--config", &path(&ok, "serve.toml")])).unwrap();
    assert_eq!((c.max_body_bytes, c.max_line_bytes), (1 << 30, 1 << 30));
}

#[test]
fn every_error_is_reported_together() {
    let dir = setup(Some(
        "lissten = \"x\"\nmax_body_bytes = \"big\"\nrequest_timeout = \"30 seconds\"\n\
             max_line_bytes = 10\nwal_segment_bytes = 0\ncheckpoint_interval = \"0s\"\n\
             auth_token = \"a\"\nauth_token_file = \"t\"\nkafka_topic = \"events\"\n\
             kafka_group = \"\"\nlog_level = \"verbose\"\ncolour = true\n",
    ));
    let config = path(&dir, "serve.toml");
    let err = ServeConfig::load(args(&["--config", &config, "--listen", "localhost"])).unwrap_err();
    let text = err.to_string();
    let want = [
        format!("{config}:1: unknown field `lissten`, expected one of `contract`"),
        format!("{config}:2: `max_body_bytes`: "),
        format!("{config}:12: unknown field `colour`"),
        "no contract: set `contract`".to_string(),
        "--listen (or FENCEWATCH_LISTEN): `localhost` is not an address".to_string(),
        format!("{config}:3: `request_timeout`: `30 seconds` is not a duration"),
        format!("{config}:4: `max_line_bytes`: 10 is too small (at least 256)"),
        format!("{config}:5: `wal_segment_bytes`: 0 is too small"),
        format!("{config}:6: `checkpoint_interval`: must be greater than zero"),
        format!("{config}:7: `auth_token`: set either auth_token or auth_token_file"),
        format!("{config}:10: `kafka_group`: must not be empty"),
        "kafka ingest needs both kafka_brokers and kafka_topic (missing: kafka_brokers)"
            .to_string(),
        format!("{config}:11: `log_level`: `verbose` is not a level"),
    ];
    for w in &want {
        assert!(
            err.errors.iter().any(|e| e.starts_with(w.as_str())),
            "no {w:?} in\n{text}"
        );
    }
    assert_eq!(err.errors.len(), want.len(), "{text}");
    assert_eq!(text.lines().count(), want.len(), "{text}");
}

#[test]
fn unreadable_and_invalid_files() {
    let dir = setup(Some("listen = \"127.0.0.1:1\"\ndata_dir = [\n"));
    let err = ServeConfig::load(args(&["--config", &path(&dir, "serve.toml")])).unwrap_err();
    let config = path(&dir, "serve.toml");
    assert!(
        err.errors[0].starts_with(&format!("{config}:2: invalid TOML: ")),
        "{err}"
    );
    assert_eq!(err.errors.len(), 2, "{err}"); // and no contract

    let missing = path(&dir, "missing.toml");
    let err = ServeConfig::load(args(&["--config", &missing, "--contract", &missing])).unwrap_err();
    assert_eq!(err.errors.len(), 2, "{err}");
    assert!(err.errors[0].starts_with(&format!("config file `{missing}`: cannot read")));
    assert!(err.errors[1].starts_with(&format!("contract `{missing}`: cannot read")));

    std::fs::write(dir.path().join("bad.toml"), "[[property]]\nname = 1\n").unwrap();
    let bad = path(&dir, "bad.toml");
    let err = ServeConfig::load(args(&["--contract", &bad])).unwrap_err();
    assert!(
        err.errors.iter().all(|e| e.starts_with(&format!("{bad}:"))),
        "{err}"
    );
}

#[test]
fn kafka_settings_layer_and_pass_through() {
    let dir = setup(Some(
        "contract = \"contract.toml\"\nkafka_brokers = \"file:9092\"\nkafka_topic = \"a, b\"\n\n[kafka]\n\
         \"security.protocol\" = \"sasl_plaintext\"\n\"fetch.min.bytes\" = 1\n",
    ));
    let config = path(&dir, "serve.toml");
    let c = ServeConfig::load(args(&["--config", &config, "--kafka-brokers", "k:9092"])).unwrap();
    let k = c.kafka.unwrap();
    assert_eq!(k.brokers, "k:9092");
    assert_eq!(k.topics, ["a", "b"]);
    assert_eq!(k.group, "fencewatch");
    assert_eq!(k.dead_letter_topic, None);
    assert_eq!(k.summaries_topic, None);
    assert_eq!(
        k.settings,
        [
            ("fetch.min.bytes".to_string(), "1".to_string()),
            (
                "security.protocol".to_string(),
                "sasl_plaintext".to_string()
            )
        ]
    );
    let contract = path(&dir, "contract.toml");
    let c = ServeConfig::load(args(&["--contract", &contract])).unwrap();
    assert_eq!(c.kafka, None);
    let err =
        ServeConfig::load(args(&["--contract", &contract, "--kafka-topic", "t"])).unwrap_err();
    assert_eq!(
        err.errors,
        ["kafka ingest needs both kafka_brokers and kafka_topic (missing: kafka_brokers)"]
    );
}

#[test]
fn defaults_file_and_flags() {
    let dir = setup(Some(
        "contract = \"contract.toml\"\narchive_flush_interval = \"2s\"\nquery_max_rows = 10\n",
    ));
    let config = path(&dir, "serve.toml");
    let c = ServeConfig::load(args(&["--config", &config])).unwrap();
    let a = c.archive.unwrap();
    assert_eq!(a.flush_interval, Duration::parse("2s").unwrap());
    assert_eq!(a.retention, Duration::parse("720h").unwrap());
    assert_eq!(a.max_bytes, None);
    assert_eq!(a.nice, 10);
    assert_eq!(c.query.nice, 19);
    assert_eq!(c.query.max_rows, 10);
    assert_eq!(c.query.timeout, Duration::parse("30s").unwrap());
    assert_eq!(c.query.memory, 512 << 20);
    let c = ServeConfig::load(args(&[
        "--config",
        &config,
        "--archive",
        "false",
        "--query-memory",
        "1048576",
    ]))
    .unwrap();
    assert_eq!(c.archive, None);
    assert_eq!(c.query.memory, 1 << 20);
    let c = ServeConfig::load(args(&["--config", &config, "--archive-nice", "0"])).unwrap();
    assert_eq!(c.archive.unwrap().nice, 0);
    let err = ServeConfig::load(args(&[
        "--config",
        &config,
        "--archive",
        "maybe",
        "--query-memory",
        "10",
        "--query-timeout",
        "0s",
        "--archive-nice",
        "20",
    ]))
    .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("--archive (or FENCEWATCH_ARCHIVE): `maybe` is not true or false"),
        "{text}"
    );
    assert!(
        text.contains("`query_memory`") || text.contains("--query-memory"),
        "{text}"
    );
    assert!(
        text.contains("--query-timeout (or FENCEWATCH_QUERY_TIMEOUT): must be greater than zero"),
        "{text}"
    );
    assert!(
        text.contains(
            "--archive-nice (or FENCEWATCH_ARCHIVE_NICE): 20 is not a nice value from 0 to 19"
        ),
        "{text}"
    );
    assert_eq!(err.errors.len(), 4, "{text}");
}
