//! `deploy/` and Kafka: compose's Kafka wiring (the broker's listener, the topics the one-shot
//! `kafka-topics` creates, the start order, the volume of Kafka's log), the real
//! `fencewatch serve` started with compose's command, configuration and environment against
//! librdkafka's mock cluster in place of `kafka:9092`, and the commented Kafka example of
//! `fencewatch.toml` (and so of the ConfigMap) accepted by the real binary.

use super::{Running, compose_mounts, deploy, doc, flag, mounted, texts};
use fencewatch_tests::kafka::produce;
use fencewatch_tests::service::{now_ns, request};
use fencewatch_tests::{bin, commit_line};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::mocking::MockCluster;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// A compose `environment` map with every value as a string (YAML numbers included).
fn environment(service: &Value) -> BTreeMap<String, String> {
    let vars = service["environment"].as_object();
    let vars = vars.unwrap_or_else(|| panic!("an environment map expected: {service}"));
    vars.iter()
        .map(|(k, v)| {
            (
                k.clone(),
                v.as_str().map_or_else(|| v.to_string(), String::from),
            )
        })
        .collect()
}

/// The `condition` under which `service` waits for `on` (`depends_on` long form).
fn waits_for<'a>(service: &'a Value, on: &str) -> &'a Value {
    &service["depends_on"][on]["condition"]
}

/// `--topic T … --partitions N` pairs of a `kafka-topics.sh --create` script.
fn created_topics(script: &str) -> BTreeMap<String, i32> {
    let words: Vec<&str> = script.split_whitespace().collect();
    let mut topics = BTreeMap::new();
    for (i, w) in words.iter().enumerate() {
        if *w != "--topic" {
            continue;
        }
        let topic = words[i + 1];
        let rest = &words[i + 1..];
        let end = rest.iter().position(|w| *w == "&&").unwrap_or(rest.len());
        let partitions = rest[..end]
            .iter()
            .position(|w| *w == "--partitions")
            .and_then(|p| rest.get(p + 1))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("kafka-topics: no --partitions for {topic}"));
        topics.insert(topic.to_string(), partitions);
    }
    topics
}

/// Spawns `cmd` (stdout piped) and reads its listening line: the process, its address and its
/// stdout, kept open so that the service's later prints never meet a closed pipe.
fn listen(mut cmd: Command, stderr: &Path) -> (Running, SocketAddr, BufReader<ChildStdout>) {
    let child = cmd
        .args(["--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(stderr).unwrap())
        .spawn()
        .expect("spawn fencewatch serve");
    let mut svc = Running(child);
    let mut stdout = BufReader::new(svc.0.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    let addr = first
        .trim()
        .strip_prefix("fencewatch listening on http://")
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "the configuration is refused (`{first}`):\n{}",
                std::fs::read_to_string(stderr).unwrap_or_default()
            )
        });
    (svc, addr, stdout)
}

/// The first sample of `/metrics` whose line starts with `prefix`.
fn metric(addr: SocketAddr, prefix: &str) -> Option<f64> {
    let text = request(addr, "GET", "/metrics", &[], b"").ok()?.text();
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Waits up to `secs` for `f`, failing with the service's log.
fn wait(what: &str, secs: u64, stderr: &Path, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(
            Instant::now() < deadline,
            "{what}: not within {secs} s\n{}",
            std::fs::read_to_string(stderr).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A `fencewatch serve` with the environment cleared of the caller's `FENCEWATCH_*`.
fn serve_command() -> Command {
    let mut cmd = Command::new(bin());
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("FENCEWATCH_")) {
        cmd.env_remove(k);
    }
    cmd
}

#[test]
fn compose_fencewatch_consumes_the_topics_its_kafka_creates() {
    fencewatch_tests::require!(PyYaml);
    let services = &doc("compose.yaml")["services"];
    let (fw, kafka, init) = (
        &services["fencewatch"],
        &services["kafka"],
        &services["kafka-topics"],
    );
    assert!(init.is_object(), "compose.yaml has no service kafka-topics");
    let env = environment(fw);
    let var = |name: &str| {
        env.get(name)
            .unwrap_or_else(|| panic!("compose.yaml: fencewatch sets no {name}"))
            .as_str()
    };

    // fencewatch reaches the broker on a PLAINTEXT listener the broker advertises under the
    // name the containers resolve (so no [kafka] security settings are needed).
    let brokers = var("FENCEWATCH_KAFKA_BROKERS");
    let kenv = environment(kafka);
    let listener = kenv["KAFKA_ADVERTISED_LISTENERS"]
        .split(',')
        .find_map(|l| l.split_once("://").filter(|(_, addr)| *addr == brokers))
        .map(|(name, _)| name)
        .unwrap_or_else(|| panic!("kafka advertises no listener at {brokers}: {kenv:?}"));
    let protocol = kenv["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"]
        .split(',')
        .find_map(|m| m.strip_prefix(&format!("{listener}:")));
    assert_eq!(protocol, Some("PLAINTEXT"), "listener {listener}");
    let host = brokers.split(':').next().unwrap();
    assert!(
        host == "kafka" && (kafka["hostname"] == host || kafka["hostname"].is_null()),
        "{brokers} is not the kafka service"
    );

    // Every topic fencewatch consumes or dead-letters to is created by kafka-topics, which runs
    // the broker's image once the broker is healthy; fencewatch starts after it.
    let script = texts(&init["command"]).join(" ");
    let created = created_topics(&script);
    let topics: Vec<&str> = var("FENCEWATCH_KAFKA_TOPIC").split(',').collect();
    let dead_letters = var("FENCEWATCH_KAFKA_DEAD_LETTER_TOPIC");
    for t in topics.iter().chain([&dead_letters]) {
        assert!(
            created.contains_key(*t),
            "kafka-topics does not create {t}: {script}"
        );
    }
    assert!(
        script.contains(&format!("--bootstrap-server {brokers}")),
        "{script}"
    );
    assert!(
        script.contains("--if-not-exists"),
        "kafka-topics runs on every up"
    );
    assert_eq!(init["image"], kafka["image"]);
    assert!(
        kafka["healthcheck"]["test"].is_array(),
        "kafka has no healthcheck"
    );
    assert_eq!(waits_for(init, "kafka"), "service_healthy");
    assert_eq!(
        waits_for(fw, "kafka-topics"),
        "service_completed_successfully"
    );
    // Kafka's log outlives `down`, as fencewatch's checkpoints (which hold its offsets) do.
    let mounts = compose_mounts();
    let log_dir = &kenv["KAFKA_LOG_DIRS"];
    let key = ("compose.yaml", "kafka".to_string(), log_dir.clone());
    let (kind, _) = mounts
        .get(&key)
        .unwrap_or_else(|| panic!("kafka mounts nothing at {log_dir}"));
    assert_eq!(kind, "volume", "Kafka's log in a named volume");

    // The real service with compose's command, mounted configuration and environment; the
    // mock cluster stands in for kafka:9092, with the topics kafka-topics creates.
    let mock = MockCluster::new(1).expect("a mock Kafka cluster");
    for (topic, partitions) in &created {
        mock.create_topic(topic, *partitions, 1).unwrap();
    }
    let tmp = tempfile::tempdir().unwrap();
    let data_dir = tmp.path().join("data");
    let command = texts(&fw["command"]);
    let config = deploy().join(mounted(&mounts, "fencewatch", flag(&command, "--config")));
    let mut args: Vec<String> = command.iter().map(|s| s.to_string()).collect();
    let i = args.iter().position(|a| a == "--config").unwrap();
    args[i + 1] = config.display().to_string();
    let mut cmd = serve_command();
    for (k, v) in &env {
        cmd.env(k, v);
    }
    cmd.env("FENCEWATCH_DATA_DIR", &data_dir)
        .env("FENCEWATCH_KAFKA_BROKERS", mock.bootstrap_servers())
        .args(&args);
    let stderr = tmp.path().join("stderr");
    let (mut svc, addr, stdout) = listen(cmd, &stderr);
    let status = |path: &str| request(addr, "GET", path, &[], b"").map_or(0, |r| r.status);
    wait("ready", 60, &stderr, || status("/readyz") == 200);

    let now = now_ns();
    produce(
        &mock.bootstrap_servers(),
        topics[0],
        &[
            (
                "compose-order".into(),
                commit_line(now, "compose-order", 1, "orders-api.transition"),
            ),
            ("poison".into(), "not an event".into()),
        ],
    );
    wait("both messages consumed", 60, &stderr, || {
        metric(addr, "fencewatch_kafka_messages_total") == Some(2.0)
            && metric(addr, "fencewatch_kafka_dead_lettered_messages_total") == Some(1.0)
    });
    assert_eq!(
        metric(addr, "fencewatch_events_ingested_total{source=\"kafka\"}"),
        Some(1.0)
    );
    assert_eq!(metric(addr, "fencewatch_kafka_connected"), Some(1.0));
    // The poison went to the dead-letter topic, with its reason, not to a file.
    assert!(!data_dir.join("kafka/dead-letter.ndjson").exists());
    let reader: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", mock.bootstrap_servers())
        .set("group.id", "deploy-test-dead-letters")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..created[dead_letters] {
        tpl.add_partition_offset(dead_letters, p, Offset::Beginning)
            .unwrap();
    }
    reader.assign(&tpl).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let dead = loop {
        match reader.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => break m.detach(),
            Some(Err(e)) => panic!("reading {dead_letters}: {e}"),
            None => assert!(Instant::now() < deadline, "nothing in {dead_letters}"),
        }
    };
    assert_eq!(dead.payload(), Some(&b"not an event"[..]));
    let headers = dead.headers().expect("headers");
    assert!(
        headers.iter().any(|h| h.key == "fencewatch-reason"),
        "no fencewatch-reason header"
    );

    // HTTP ingest works beside Kafka.
    let body = format!(
        "{}\n",
        commit_line(now_ns(), "compose-http", 1, "settlement-worker.settle")
    );
    let r = request(
        addr,
        "POST",
        "/v1/events",
        &[("content-type", "application/x-ndjson")],
        body.as_bytes(),
    )
    .expect("POST /v1/events");
    assert_eq!(r.status, 200, "{}", r.text());

    // SIGTERM, as `docker compose stop` sends: exit 0 within stop_grace_period.
    let grace: u64 = fw["stop_grace_period"]
        .as_str()
        .and_then(|g| g.strip_suffix('s'))
        .and_then(|g| g.parse().ok())
        .expect("stop_grace_period in seconds");
    let exit = svc.terminate(grace);
    assert!(
        exit.success(),
        "exit after SIGTERM: {exit}\n{}",
        std::fs::read_to_string(&stderr).unwrap_or_default()
    );
    drop(stdout);
}

#[test]
fn fencewatch_toml_kafka_example_is_accepted_by_the_service() {
    // The example: the commented `kafka_*` keys and `[kafka]` table at the end of the file.
    let example = std::fs::read_to_string(deploy().join("fencewatch.toml")).unwrap();
    let mut uncommented = Vec::new();
    let config: String = example
        .lines()
        .map(|l| {
            let t = l.trim_start();
            let code = ["# kafka_", "# [kafka]", "# \""]
                .iter()
                .any(|p| t.starts_with(p));
            if code {
                let line = t.trim_start_matches("# ").to_string();
                uncommented.push(line.clone());
                line + "\n"
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    for key in ["kafka_brokers", "kafka_topic", "[kafka]"] {
        assert!(
            uncommented.iter().any(|l| l.starts_with(key)),
            "deploy/fencewatch.toml shows no `{key}` example: {uncommented:?}"
        );
    }
    // The ConfigMap carries the same file (configmap_starts_the_real_service_as_the_pod_runs_it
    // checks), so this covers its example too.
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("fencewatch.toml"), &config).unwrap();
    std::fs::copy(
        deploy().join("contract.toml"),
        tmp.path().join("contract.toml"),
    )
    .unwrap();
    // No broker answers on a closed local port: the settings must still be accepted (a key
    // unknown to fencewatch exits 64, a setting librdkafka refuses exits 1, both before
    // listening), and the service must run while librdkafka retries.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap();
    let mut cmd = serve_command();
    cmd.env("FENCEWATCH_DATA_DIR", tmp.path().join("data"))
        .env("FENCEWATCH_KAFKA_BROKERS", closed.to_string())
        .args(["serve", "--config"])
        .arg(tmp.path().join("fencewatch.toml"));
    let stderr = tmp.path().join("stderr");
    let (_svc, addr, _stdout) = listen(cmd, &stderr);
    let status = |path: &str| request(addr, "GET", path, &[], b"").map_or(0, |r| r.status);
    wait("alive", 30, &stderr, || status("/livez") == 200);
    let log = std::fs::read_to_string(&stderr).unwrap();
    assert!(
        log.contains("consuming from kafka"),
        "the example did not configure Kafka ingest:\n{log}"
    );
}

#[test]
fn compose_simulator_produces_a_live_workload_under_the_deployed_contract() {
    fencewatch_tests::require!(PyYaml);
    let services = &doc("compose.yaml")["services"];
    let sim = &services["simulator"];
    assert_eq!(sim["image"], services["fencewatch"]["image"]);
    let args = texts(&sim["command"]);
    let env = environment(&services["fencewatch"]);
    // It produces to the topic fencewatch consumes, on the broker fencewatch reads.
    assert_eq!(flag(&args, "--kafka"), env["FENCEWATCH_KAFKA_BROKERS"]);
    assert_eq!(flag(&args, "--topic"), env["FENCEWATCH_KAFKA_TOPIC"]);
    assert_eq!(flag(&args, "--start"), "now");
    assert_eq!(
        waits_for(sim, "kafka-topics"),
        "service_completed_successfully"
    );
    // Its command, run for real against a mock cluster in place of kafka:9092, with fewer
    // events, produces a live workload under deploy/contract.toml.
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic("fencewatch-events", 3, 1).unwrap();
    let brokers = mock.bootstrap_servers();
    let args: Vec<String> = args
        .iter()
        .zip(std::iter::once(&"").chain(args.iter()))
        .map(|(a, prev)| match *prev {
            "--kafka" => brokers.clone(),
            "--events" => "30".to_string(),
            "--rate" => "60".to_string(),
            _ => a.to_string(),
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let contract = dir.path().join("c.toml");
    let mut all = args.clone();
    all.extend(["--contract-out".to_string(), contract.display().to_string()]);
    let out = Command::new(bin()).args(&all).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The workload's contract names the deployed contract's property and routes.
    let generated = std::fs::read_to_string(&contract).unwrap();
    let deployed = std::fs::read_to_string(deploy().join("contract.toml")).unwrap();
    for needle in [
        "name = \"order-mutation\"",
        "orders-api.transition",
        "settlement-worker.settle",
    ] {
        assert!(
            generated.contains(needle) && deployed.contains(needle),
            "{needle}"
        );
    }
    // Stamped with the wall clock.
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("group.id", "sim-check")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..3 {
        tpl.add_partition_offset("fencewatch-events", p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = 0;
    while seen < 30 && Instant::now() < deadline {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
            let json: Value = serde_json::from_slice(m.payload().unwrap()).unwrap();
            let ts = json["ts"].as_i64().unwrap();
            assert!((now_ns() - ts).abs() < 60_000_000_000, "{json} is not live");
            seen += 1;
        }
    }
    assert!(seen >= 30, "only {seen} messages");
}
