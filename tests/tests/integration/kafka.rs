//! `fencewatch serve` consuming Kafka, against librdkafka's mock cluster
//! (`rdkafka::mocking::MockCluster`, in this process, on real TCP ports): the fast tests.
//! Real-broker tests (tansu, a Python producer) are in `broker.rs`.

use fencewatch_tests::kafka::{committed, log_start, produce};
use fencewatch_tests::service::{TestService, now_ns};
use fencewatch_tests::{ORDERS_CONTRACT, commit_line, xorshift};
use rdkafka::mocking::MockCluster;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use serde_json::Value;
use std::collections::BTreeSet;

pub(crate) const CONTRACT: &str = ORDERS_CONTRACT;

pub(crate) const SEC: i64 = 1_000_000_000;
pub(crate) const TOPIC: &str = "events";

pub(crate) fn commit(ts: i64, scope: &str, epoch: u64, route: &str) -> (String, String) {
    (scope.to_string(), commit_line(ts, scope, epoch, route))
}

pub(crate) fn kafka_args<'a>(brokers: &'a str, group: &'a str) -> Vec<&'a str> {
    vec![
        "--kafka-brokers",
        brokers,
        "--kafka-topic",
        TOPIC,
        "--kafka-group",
        group,
    ]
}

/// A config file in `dir` passing librdkafka settings through: a member killed with SIGKILL
/// leaves the group after 6 s instead of the default 45 s.
pub(crate) fn fast_session(dir: &std::path::Path) -> String {
    let path = dir.join("serve.toml");
    std::fs::write(
        &path,
        "[kafka]\n\"session.timeout.ms\" = 6000\n\"heartbeat.interval.ms\" = 500\n",
    )
    .unwrap();
    path.display().to_string()
}

pub(crate) fn observations(svc: &TestService) -> u64 {
    let c = svc.get("/v1/coverage").json();
    c["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["observations"].as_u64().unwrap())
        .sum()
}

#[test]
fn a_stale_commit_is_found_poison_is_dead_lettered_and_offsets_follow_checkpoints() {
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic(TOPIC, 3, 1).unwrap();
    let brokers = mock.bootstrap_servers();
    let now = now_ns();
    let t0 = now - 60 * SEC;
    let mut msgs = Vec::new();
    for i in 0..20i64 {
        let scope = format!("order-{i}");
        let route = ["orders-api.transition", "settlement-worker.settle"][(i % 2) as usize];
        msgs.push(commit(t0 + i * SEC, &scope, 1, route));
        msgs.push(commit(t0 + i * SEC + 2 * SEC, &scope, 2, route));
    }
    // A resumed old owner of order-7, after its successor committed.
    msgs.push(commit(t0 + 30 * SEC, "order-7", 1, "orders-api.transition"));
    // Poison: not JSON, and an event whose time is not a time.
    msgs.push(("poison".into(), "this is not json".into()));
    msgs.push((
        "poison".into(),
        r#"{"kind":"commit","ts":"yesterday","scope":"order-1","epoch":1}"#.into(),
    ));
    produce(&brokers, TOPIC, &msgs);
    // Injected broker errors: fetches and offset commits fail a few times first.
    mock.request_errors(
        RDKafkaApiKey::Fetch,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION; 3],
    );
    mock.request_errors(
        RDKafkaApiKey::OffsetCommit,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT; 2],
    );

    let dir = tempfile::tempdir().unwrap();
    let svc = TestService::start(dir.path(), CONTRACT, &kafka_args(&brokers, "fw"));
    svc.wait_for("every message consumed", 60, |s| {
        s.metric("fencewatch_kafka_messages_total") == Some(43.0)
    });
    let a = svc.get("/v1/assurance").json();
    assert_eq!(a["verdict"], "refuted", "{a}");
    let page = svc.get("/v1/counterexamples").json();
    let cxs = page["counterexamples"].as_array().unwrap();
    assert_eq!(cxs.len(), 1, "{page}");
    assert_eq!(cxs[0]["scope"], "order-7");
    assert_eq!(cxs[0]["kind"], "stale_commit");
    // Provenance is topic/partition:offset.
    let source = cxs[0]["stale"]["source"].as_str().unwrap();
    assert!(source.starts_with("events/"), "{source}");
    // The scope view comes from the partition that owns it.
    let scope = svc.get("/v1/scopes/order-7").json();
    assert_eq!(scope["events"].as_array().unwrap().len(), 3, "{scope}");

    // Poison is counted, kept as evidence and dead-lettered with its reason; nothing stopped.
    svc.wait_for("dead-lettered", 30, |s| {
        s.metric("fencewatch_kafka_dead_lettered_messages_total") == Some(2.0)
    });
    assert_eq!(
        svc.metric("fencewatch_events_rejected_total{source=\"kafka\",reason=\"malformed\"}"),
        Some(2.0)
    );
    assert_eq!(
        svc.metric("fencewatch_events_ingested_total{source=\"kafka\"}"),
        Some(41.0)
    );
    assert_eq!(
        svc.metric("fencewatch_kafka_assigned_partitions"),
        Some(3.0)
    );
    assert_eq!(svc.metric("fencewatch_kafka_connected"), Some(1.0));
    // Kept as evidence (over the whole history: where the settled part ends depends on the
    // window boundaries).
    assert_eq!(
        svc.metric(
            "fencewatch_unknown_evidence{property=\"order-mutation\",reason=\"malformed_event\"}"
        ),
        Some(2.0)
    );
    // Offsets are committed once the checkpoint covering them is durable: all 43 messages.
    svc.wait_for("offsets committed", 30, |_| {
        committed(&brokers, "fw", TOPIC, 3).iter().sum::<i64>() == 43
    });
    svc.wait_for("lag zero", 30, |s| {
        let text = s.get("/metrics").text();
        let lags: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("fencewatch_kafka_consumer_lag{"))
            .collect();
        lags.len() == 3 && lags.iter().all(|l| l.ends_with(" 0"))
    });
    let (status, log) = svc.terminate();
    assert!(status.success(), "{log}");
    let dead = std::fs::read_to_string(dir.path().join("data/kafka/dead-letter.ndjson")).unwrap();
    let lines: Vec<Value> = dead
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{dead}");
    assert_eq!(lines[0]["payload"], "this is not json");
    assert!(
        lines[1]["reason"].as_str().unwrap().contains("ts"),
        "{dead}"
    );
    assert!(lines[0]["source"].as_str().unwrap().starts_with("events/"));
}

/// Batches of events with resumed old owners spread over time.
/// Reads the topic (`total` events) with one instance, then with two in one group publishing
/// summaries to the topic `summaries`, and checks that each of the two answers exactly like
/// the single one (counterexample ids and verdict). Returns those ids and the pair.
pub(crate) fn single_then_pair(
    dir: &std::path::Path,
    brokers: &str,
    total: u64,
) -> (Vec<String>, [TestService; 2]) {
    let config = fast_session(dir);
    let one = dir.join("one");
    std::fs::create_dir_all(&one).unwrap();
    let single = TestService::start(&one, CONTRACT, &kafka_args(brokers, "single"));
    single.wait_for("every event assessed", 60, |s| observations(s) == total);
    let want = single.cx_ids();
    let want_assurance = single.get("/v1/assurance").json()["verdict"].clone();
    assert!(want.len() >= 3, "{want:?}");
    let mut args = kafka_args(brokers, "pair");
    args.extend([
        "--kafka-summaries-topic",
        "summaries",
        "--config",
        config.as_str(),
    ]);
    let (a, b) = (dir.join("a"), dir.join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    let pair = [
        TestService::start(&a, CONTRACT, &args),
        TestService::start(&b, CONTRACT, &args),
    ];
    for svc in &pair {
        svc.wait_for("partitions shared", 90, |s| {
            s.metric("fencewatch_kafka_assigned_partitions") == Some(2.0)
        });
    }
    for svc in &pair {
        svc.wait_for("the whole topic answered", 90, |s| {
            observations(s) == total && s.cx_ids() == want
        });
        assert_eq!(svc.get("/v1/assurance").json()["verdict"], want_assurance);
    }
    (want, pair)
}

pub(crate) fn batches(now: i64, n: usize, per: usize) -> Vec<Vec<(String, String)>> {
    (0..n)
        .map(|b| {
            (0..per)
                .map(|i| {
                    let k = (b * per + i) as i64;
                    let scope = format!("s{}", k % 41);
                    let epoch = if k % 89 == 0 { 1 } else { (k / 41 + 2) as u64 };
                    let route =
                        ["orders-api.transition", "settlement-worker.settle"][(k % 2) as usize];
                    commit(now - 300 * SEC + k * 100_000_000, &scope, epoch, route)
                })
                .collect()
        })
        .collect()
}

/// Produces `batches` with `produce` while one instance (group `killed`) is SIGKILLed and
/// restarted at pseudo-random moments (from `seed`, after pauses under `max_pause_ms`); then,
/// once it assessed all `total` events, checks that it holds every counterexample exactly once
/// and the same ones as another group (`clean`) reading the topic uninterrupted. Returns the
/// number of kills and of counterexamples, for the caller's bounds.
pub(crate) fn killed_then_clean(
    brokers: &str,
    batches: &[Vec<(String, String)>],
    mut produce: impl FnMut(&[(String, String)]),
    total: u64,
    seed: u64,
    max_pause_ms: u64,
    timeout_s: u64,
) -> (u32, usize) {
    let dir = tempfile::tempdir().unwrap();
    let killed = dir.path().join("killed");
    std::fs::create_dir_all(&killed).unwrap();
    let config = fast_session(dir.path());
    let mut args = kafka_args(brokers, "killed");
    args.extend(["--config", &config]);
    let mut svc = TestService::start(&killed, CONTRACT, &args);
    let mut rng = seed;
    let mut kills = 0;
    for batch in batches {
        produce(batch);
        xorshift(&mut rng);
        if rng.is_multiple_of(3) {
            std::thread::sleep(std::time::Duration::from_millis(rng % max_pause_ms));
            svc = TestService::restart(svc.kill9());
            kills += 1;
        }
    }
    svc.wait_for("every event assessed", timeout_s, |s| {
        observations(s) == total
    });
    let got = svc.cx_ids();
    let unique: BTreeSet<&String> = got.iter().collect();
    assert_eq!(unique.len(), got.len(), "a counterexample twice: {got:?}");
    // The evidence archive holds every event once, with its topic, partition and offset.
    let archived = svc.rows(
        "SELECT count(*), count(DISTINCT source), \
         sum(CASE WHEN source = partition || ':' || CAST(\"offset\" AS VARCHAR) AND partition LIKE 'events/%' THEN 1 ELSE 0 END) \
         FROM events",
    );
    assert_eq!(
        archived,
        [serde_json::json!([total, total, total])],
        "after {kills} kills"
    );

    // The same topic read once, uninterrupted, by another group.
    let clean = dir.path().join("clean");
    std::fs::create_dir_all(&clean).unwrap();
    let once = TestService::start(&clean, CONTRACT, &kafka_args(brokers, "clean"));
    once.wait_for("every event assessed", timeout_s, |s| {
        observations(s) == total
    });
    let want = once.cx_ids();
    assert_eq!(got, want, "after {kills} kills");
    (kills, want.len())
}

#[test]
fn a_rejected_stale_commit_from_kafka_counts_as_a_stale_rejection() {
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic(TOPIC, 2, 1).unwrap();
    let brokers = mock.bootstrap_servers();
    let t0 = now_ns() - 60 * SEC;
    let rejected = |ts: i64, scope: &str, epoch: u64| {
        (
            scope.to_string(),
            format!(
                r#"{{"kind":"commit","ts":{ts},"scope":"{scope}","epoch":{epoch},"route":"orders-api.transition","outcome":"rejected"}}"#
            ),
        )
    };
    let msgs = vec![
        commit(t0, "order-1", 2, "orders-api.transition"),
        rejected(t0 + SEC, "order-1", 1),
        commit(t0, "order-2", 5, "orders-api.transition"),
        rejected(t0 + SEC, "order-2", 4),
        rejected(t0 + 2 * SEC, "order-2", 3),
    ];
    produce(&brokers, TOPIC, &msgs);
    let dir = tempfile::tempdir().unwrap();
    let config = fast_session(dir.path());
    let mut args = kafka_args(&brokers, "fw");
    args.extend(["--config", config.as_str()]);
    let svc = TestService::start(dir.path(), CONTRACT, &args);
    svc.wait_for("every message consumed", 60, |s| {
        s.metric("fencewatch_kafka_messages_total") == Some(5.0)
    });
    svc.wait_for("the rejections counted", 10, |s| {
        s.metric("fencewatch_stale_rejections_total{property=\"order-mutation\"}") == Some(3.0)
    });
    // A restart does not count again what the restored checkpoints hold.
    let (status, _) = svc.terminate();
    assert!(status.success());
    let svc = TestService::start(dir.path(), CONTRACT, &args);
    svc.wait_for("assigned", 60, |s| {
        s.metric("fencewatch_kafka_assigned_partitions") == Some(2.0)
    });
    produce(&brokers, TOPIC, &[rejected(t0 + 3 * SEC, "order-1", 1)]);
    svc.wait_for("the new rejection counted, alone", 30, |s| {
        s.metric("fencewatch_stale_rejections_total{property=\"order-mutation\"}") == Some(1.0)
    });
}

#[test]
fn kill_9_mid_stream_and_restart_loses_and_duplicates_nothing() {
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic(TOPIC, 4, 1).unwrap();
    let brokers = mock.bootstrap_servers();
    let all = batches(now_ns(), 24, 50);
    let total = (all.len() * all[0].len()) as u64;
    let produce = |batch: &[(String, String)]| produce(&brokers, TOPIC, batch);
    let (kills, cxs) = killed_then_clean(
        &brokers,
        &all,
        produce,
        total,
        0x2545_f491_4f6c_dd1d,
        400,
        90,
    );
    assert!(kills >= 3, "only {kills} kills");
    assert!(cxs >= 5, "{cxs} counterexamples");
}

#[test]
fn no_broker_at_the_address_is_not_ready() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .to_string();
    let dir = tempfile::tempdir().unwrap();
    let svc = TestService::start_listening(dir.path(), CONTRACT, &kafka_args(&closed, "fw"));
    // Give librdkafka time to try (and fail) several times and to report statistics.
    std::thread::sleep(std::time::Duration::from_secs(3));
    for _ in 0..3 {
        let r = svc.get("/readyz");
        assert_eq!(r.status, 503, "{}", r.text());
        assert!(r.text().contains("Kafka"), "{}", r.text());
        assert_eq!(svc.metric("fencewatch_kafka_connected"), Some(0.0));
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    // Queries answer, honestly: nothing is known.
    assert_eq!(svc.get("/v1/assurance").json()["verdict"], "unknown");
}

#[test]
fn a_broker_down_turns_readiness_false_and_the_verdict_unknown_then_recovers() {
    let mock = MockCluster::new(1).unwrap();
    // Three partitions, two scopes: at least one partition never gets a message, and must not
    // hold the watermark back (it is idle: read to its end).
    mock.create_topic(TOPIC, 3, 1).unwrap();
    let brokers = mock.bootstrap_servers();
    // Fresh evidence is required: stale after 3 s without events.
    let contract = CONTRACT
        .replace("allowed_lateness = \"10s\"", "allowed_lateness = \"500ms\"")
        .replace("route_freshness = \"5m\"", "route_freshness = \"3s\"")
        .replace("window = \"1m\"", "window = \"1s\"");
    let dir = tempfile::tempdir().unwrap();
    let svc = TestService::start(dir.path(), &contract, &kafka_args(&brokers, "fw"));
    // A producer thread keeps both routes busy with events at the current time.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (b, s) = (brokers.clone(), stop.clone());
    let producer = std::thread::spawn(move || {
        let mut epoch = 1;
        while !s.load(std::sync::atomic::Ordering::Relaxed) {
            let now = now_ns();
            let msgs: Vec<_> = (0..2)
                .map(|i| {
                    let route = ["orders-api.transition", "settlement-worker.settle"][i % 2];
                    commit(now, &format!("o{i}"), epoch, route)
                })
                .collect();
            epoch += 1;
            // While the broker is down, sends queue up in librdkafka and are retried.
            let _ = std::panic::catch_unwind(|| produce(&b, TOPIC, &msgs));
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    });
    let verdict = |s: &TestService| s.get("/v1/assurance").json()["verdict"].clone();
    svc.wait_for("holds", 30, |s| verdict(s) == "holds");
    mock.broker_down(1).unwrap();
    svc.wait_for("not ready", 30, |s| s.get("/readyz").status == 503);
    svc.wait_for("unknown", 30, |s| verdict(s) == "unknown");
    let a = svc.get("/v1/assurance").json();
    assert_eq!(a["properties"][0]["stale_evidence"], true, "{a}");
    assert_eq!(svc.metric("fencewatch_kafka_connected"), Some(0.0));
    mock.broker_up(1).unwrap();
    svc.wait_for("ready again", 60, |s| s.get("/readyz").status == 200);
    svc.wait_for("holds again", 60, |s| verdict(s) == "holds");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    producer.join().unwrap();
}

#[test]
fn two_instances_in_one_group_each_answer_like_a_single_instance() {
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic(TOPIC, 4, 1).unwrap();
    mock.create_topic("summaries", 1, 1).unwrap();
    let brokers = mock.bootstrap_servers();
    let all: Vec<(String, String)> = batches(now_ns(), 10, 60).into_iter().flatten().collect();
    let total = all.len() as u64;
    produce(&brokers, TOPIC, &all);
    let dir = tempfile::tempdir().unwrap();
    let (want, [first, second]) = single_then_pair(dir.path(), &brokers, total);
    // A counterexample's scope lives on one instance; the other shows its counterexamples.
    let cx = first
        .get(&format!("/v1/counterexamples/{}", want[0]))
        .json();
    let scope = cx["scope"].as_str().unwrap();
    for svc in [&first, &second] {
        let v = svc.get(&format!("/v1/scopes/{scope}")).json();
        assert!(
            v["counterexamples"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["id"] == want[0].as_str()),
            "{v}"
        );
    }
}

#[test]
fn a_message_keyed_by_something_else_than_its_scope_is_misrouted() {
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic(TOPIC, 2, 1).unwrap();
    let brokers = mock.bootstrap_servers();
    let now = now_ns();
    // The misrouted event lies well behind the watermark (the later order-2 event, minus the
    // 10 s lateness, once both partitions are read), so it is in the settled part whatever
    // the window boundaries.
    let (_, wrong) = commit(now - 50 * SEC, "order-1", 2, "orders-api.transition");
    let msgs = vec![
        commit(now - 60 * SEC, "order-1", 1, "orders-api.transition"),
        ("order-2".into(), wrong),
        commit(now - 19 * SEC, "order-2", 1, "settlement-worker.settle"),
    ];
    produce(&brokers, TOPIC, &msgs);
    let dir = tempfile::tempdir().unwrap();
    let svc = TestService::start(dir.path(), CONTRACT, &kafka_args(&brokers, "fw"));
    svc.wait_for("every event assessed", 30, |s| observations(s) == 3);
    // Once every partition is read (or idle), the settled part holds the misrouted event.
    svc.wait_for("misrouted in the assessment", 30, |s| {
        s.get("/v1/assurance").json()["properties"][0]["unknown"]["misrouted_partition"] == 1
    });
    svc.wait_for("misrouted in metrics", 30, |s| {
        s.metric(
            "fencewatch_unknown_evidence{property=\"order-mutation\",reason=\"misrouted_partition\"}",
        ) == Some(1.0)
    });
}

/// `n` commits of scopes `a0`..`a4` with rising epochs, from event `from` on (one a second,
/// two minutes before `now`).
fn rising(now: i64, from: i64, n: i64) -> Vec<(String, String)> {
    (from..from + n)
        .map(|i| {
            let scope = format!("a{}", i % 5);
            commit(
                now - 120 * SEC + i * SEC,
                &scope,
                i as u64 + 1,
                "orders-api.transition",
            )
        })
        .collect()
}

/// Produces 45,000 valid commits (~7 MiB) to partition 0 of the mock broker, which keeps 5 MiB
/// of a partition and deletes its oldest message sets beyond, as retention does; returns where
/// the partition's log starts then, asserted beyond `beyond`.
fn fill_past_the_mock_retention(brokers: &str, now: i64, beyond: i64) -> i64 {
    let filler: Vec<_> = (0..45_000i64)
        .map(|i| {
            let scope = format!("filler-{i:08}");
            commit(
                now - 60 * SEC + i * 1000,
                &scope,
                1,
                "orders-api.transition",
            )
        })
        .collect();
    produce(brokers, TOPIC, &filler);
    let start = log_start(brokers, TOPIC, 0);
    assert!(
        start > beyond,
        "the mock broker deleted too little: its log starts at {start}"
    );
    start
}

/// `fencewatch serve` on `brokers` with a short session and quick archive flushes.
fn lost_args<'a>(brokers: &'a str, config: &'a str) -> Vec<&'a str> {
    let mut args = kafka_args(brokers, "fw");
    args.extend(["--config", config, "--archive-flush-interval", "100ms"]);
    args
}

#[test]
fn messages_deleted_before_they_were_read_are_lost_evidence_not_a_silent_holds() {
    // 20 commits, read and checkpointed at offset 20.
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic(TOPIC, 1, 1).unwrap();
    let brokers = mock.bootstrap_servers();
    let now = now_ns();
    produce(&brokers, TOPIC, &rising(now, 0, 20));
    let dir = tempfile::tempdir().unwrap();
    let config = fast_session(dir.path());
    let args = lost_args(&brokers, &config);
    let svc = TestService::start(dir.path(), CONTRACT, &args);
    svc.wait_for("the first 20 assessed", 60, |s| observations(s) == 20);
    let (status, log) = svc.terminate();
    assert!(status.success(), "{log}");
    // While it is stopped: a stale commit (a1 held epoch 17), then more than the broker keeps:
    // the stale commit is deleted before it was read.
    produce(
        &brokers,
        TOPIC,
        &[commit(now - 95 * SEC, "a1", 2, "orders-api.transition")],
    );
    let start = fill_past_the_mock_retention(&brokers, now, 21);
    let svc = TestService::start(dir.path(), CONTRACT, &args);
    let kept = 20 + (45_021 - start) as u64;
    svc.wait_for("what the broker kept assessed", 120, |s| {
        observations(s) == kept
    });
    // The offsets between the checkpoint and the log's start are lost evidence: counted,
    // logged, and one malformed event, so the verdict cannot read `holds` over them.
    let lost = (start - 20) as f64;
    svc.wait_for("the loss counted", 10, |s| {
        s.metric("fencewatch_kafka_lost_messages_total") == Some(lost)
    });
    let malformed =
        "fencewatch_unknown_evidence{property=\"order-mutation\",reason=\"malformed_event\"}";
    assert_eq!(svc.metric(malformed), Some(1.0));
    // Consumed: the messages the broker kept, not the lost range.
    assert_eq!(
        svc.metric("fencewatch_kafka_messages_total"),
        Some((45_021 - start) as f64)
    );
    assert_eq!(
        svc.metric("fencewatch_events_rejected_total{source=\"kafka\",reason=\"malformed\"}"),
        Some(1.0)
    );
    let page = svc.get("/v1/counterexamples").json();
    assert_eq!(
        page["counterexamples"].as_array().unwrap().len(),
        0,
        "{page}"
    );
    let (status, log) = svc.terminate();
    assert!(status.success(), "{log}");
    assert!(
        log.contains("kafka: messages deleted by the broker before they were read")
            && log.contains(&format!("from=20 end={start}")),
        "{log}"
    );
    // A restart counts nothing again: the checkpoint holds the loss.
    let svc = TestService::start(dir.path(), CONTRACT, &args);
    svc.wait_for("assigned", 60, |s| {
        s.metric("fencewatch_kafka_assigned_partitions") == Some(1.0)
    });
    assert_eq!(svc.metric(malformed), Some(1.0));
    assert_eq!(
        svc.metric("fencewatch_kafka_lost_messages_total"),
        Some(0.0)
    );
}

/// An archive put back from before its partition's checkpoint (here: copied at offset 20, the
/// checkpoint at 40) is caught up from the newest checkpoint at or below it; when the broker
/// no longer holds that checkpoint's messages, the start is refused, naming both offsets,
/// rather than counting as lost what the newer checkpoint held.
#[test]
fn an_archive_behind_its_checkpoint_past_the_brokers_retention_refuses_the_start() {
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic(TOPIC, 1, 1).unwrap();
    let brokers = mock.bootstrap_servers();
    let now = now_ns();
    let dir = tempfile::tempdir().unwrap();
    let config = fast_session(dir.path());
    let args = lost_args(&brokers, &config);
    let archive = dir.path().join("data").join("archive");
    let at_20 = dir.path().join("archive-at-20");
    for from in [0, 20] {
        produce(&brokers, TOPIC, &rising(now, from, 20));
        let svc = TestService::start(dir.path(), CONTRACT, &args);
        let n = from as u64 + 20;
        svc.wait_for("assessed", 60, |s| observations(s) == n);
        let (status, log) = svc.terminate();
        assert!(status.success(), "{log}");
        if from == 0 {
            let copied = std::process::Command::new("cp")
                .arg("-r")
                .arg(&archive)
                .arg(&at_20)
                .status()
                .unwrap();
            assert!(copied.success());
        }
    }
    std::fs::rename(&archive, dir.path().join("archive-at-40")).unwrap();
    std::fs::rename(&at_20, &archive).unwrap();
    let start = fill_past_the_mock_retention(&brokers, now, 40);
    let mut svc = TestService::start_listening(dir.path(), CONTRACT, &args);
    let (status, log) = svc.wait_exit(60).expect("the start refused");
    assert!(!status.success(), "{log}");
    assert!(
        log.contains("the evidence archive holds its rows only below offset 20")
            && log.contains(&format!(
                "the checkpoint at offset 20 is, but the broker holds the partition only from offset {start}"
            )),
        "{log}"
    );
}

#[test]
fn a_partition_whose_end_went_back_is_read_again_from_its_beginning() {
    // A first cluster: 40 events, checkpointed at offset 40.
    let first = MockCluster::new(1).unwrap();
    first.create_topic(TOPIC, 1, 1).unwrap();
    let now = now_ns();
    let old = rising(now, 0, 40);
    produce(&first.bootstrap_servers(), TOPIC, &old);
    let dir = tempfile::tempdir().unwrap();
    let brokers = first.bootstrap_servers();
    let svc = TestService::start(dir.path(), CONTRACT, &kafka_args(&brokers, "fw"));
    svc.wait_for("the first log assessed", 60, |s| observations(s) == 40);
    let (status, log) = svc.terminate();
    assert!(status.success(), "{log}");
    // The topic starts over (recreated, or a broker that lost its log): 11 events at offsets
    // 0..11, below the checkpoint. One is a stale commit against the first log's epochs.
    let second = MockCluster::new(1).unwrap();
    second.create_topic(TOPIC, 1, 1).unwrap();
    let mut new: Vec<_> = (0..10i64)
        .map(|i| {
            let scope = format!("b{i}");
            commit(
                now - 60 * SEC + i * SEC,
                &scope,
                1,
                "settlement-worker.settle",
            )
        })
        .collect();
    new.push(commit(now - 50 * SEC, "a1", 2, "orders-api.transition"));
    let brokers = second.bootstrap_servers();
    produce(&brokers, TOPIC, &new);
    let contract = dir.path().join("contract.toml");
    let data = dir.path().join("data");
    let args = kafka_args(&brokers, "fw")
        .iter()
        .map(|s| s.to_string())
        .collect();
    let svc = TestService::restart((contract, data, args));
    svc.wait_for("the new log assessed too", 60, |s| observations(s) == 51);
    let page = svc.get("/v1/counterexamples").json();
    let cxs = page["counterexamples"].as_array().unwrap();
    assert_eq!(cxs.len(), 1, "{page}");
    assert_eq!(cxs[0]["scope"], "a1");
    assert!(svc.stderr().contains("end went back"), "{}", svc.stderr());
}

#[test]
fn revocations_mid_stream_lose_and_duplicate_nothing() {
    // A second member joins and leaves the group while the stream is produced: each time the
    // first one's partition workers are stopped mid-stream (last checkpoint, commit) and the
    // partitions given up, then taken back and restored from those checkpoints.
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic(TOPIC, 4, 1).unwrap();
    let brokers = mock.bootstrap_servers();
    let all = batches(now_ns(), 24, 60);
    let total = (all.len() * all[0].len()) as u64;
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    let config = fast_session(dir.path());
    let mut args = kafka_args(&brokers, "churn");
    args.extend(["--config", config.as_str()]);
    let first = TestService::start(&a, CONTRACT, &args);
    let mut second: Option<TestService> = None;
    let mut joins = 0;
    for (i, batch) in all.iter().enumerate() {
        produce(&brokers, TOPIC, batch);
        match i % 6 {
            1 => {
                let svc = TestService::start(&b, CONTRACT, &args);
                svc.wait_for("the partitions shared", 60, |s| {
                    s.metric("fencewatch_kafka_assigned_partitions") == Some(2.0)
                });
                second = Some(svc);
                joins += 1;
            }
            4 => {
                let (status, log) = second.take().expect("joined").terminate();
                assert!(status.success(), "{log}");
            }
            _ => std::thread::sleep(std::time::Duration::from_millis(100)),
        }
    }
    drop(second);
    first.wait_for("every event assessed by the first member", 90, |s| {
        s.metric("fencewatch_kafka_assigned_partitions") == Some(4.0) && observations(s) == total
    });
    assert!(joins >= 3, "{joins} joins");
    // Each join revoked the first member's partitions and assigned some back (a leave may
    // share its rebalance with the next join).
    let rebalances = first.metric("fencewatch_kafka_rebalances_total");
    let least = f64::from(1 + 2 * joins);
    assert!(rebalances.is_some_and(|n| n >= least), "{rebalances:?}");
    let got = first.cx_ids();
    let unique: BTreeSet<&String> = got.iter().collect();
    assert_eq!(unique.len(), got.len(), "a counterexample twice: {got:?}");
    // Every event archived once, though a partition was applied up to its revocation, given
    // up, and restored.
    let archived = first.rows("SELECT count(*), count(DISTINCT source) FROM events");
    assert_eq!(archived, [serde_json::json!([total, total])]);
    // Offsets were committed only as far as the checkpoints: the last ones cover the topic.
    let (status, log) = first.terminate();
    assert!(status.success(), "{log}");
    let ends: i64 = committed(&brokers, "churn", TOPIC, 4).iter().sum();
    assert_eq!(ends, total as i64);
    let clean = dir.path().join("clean");
    std::fs::create_dir_all(&clean).unwrap();
    let once = TestService::start(&clean, CONTRACT, &kafka_args(&brokers, "clean"));
    once.wait_for("every event assessed", 60, |s| observations(s) == total);
    assert_eq!(got, once.cx_ids());
}
