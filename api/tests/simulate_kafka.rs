//! `fencewatch simulate --kafka` (the real binary) against librdkafka's mock cluster
//! (`rdkafka::mocking::MockCluster`, in this process, on real TCP ports): every event arrives
//! once, keyed by its scope; `--rate` paces; undelivered events make it fail loudly.

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::mocking::MockCluster;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const TOPIC: &str = "events";
const PARTITIONS: i32 = 3;

fn simulate(args: &[&str]) -> (Output, Duration) {
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_fencewatch"))
        .arg("simulate")
        .args(args)
        .output()
        .expect("run fencewatch");
    (out, started.elapsed())
}

/// Every message of the topic: (partition, key, payload).
fn consume_all(brokers: &str) -> Vec<(i32, Option<String>, serde_json::Value)> {
    consume_timed(brokers)
        .into_iter()
        .map(|(p, k, j, _)| (p, k, j))
        .collect()
}

/// Every message of the topic: (partition, key, payload, Kafka timestamp in ms).
fn consume_timed(brokers: &str) -> Vec<(i32, Option<String>, serde_json::Value, i64)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "simulate-test")
        .set("enable.partition.eof", "true")
        .create()
        .expect("a consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(TOPIC, p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let (mut out, mut ended, deadline) = (
        Vec::new(),
        BTreeSet::new(),
        Instant::now() + Duration::from_secs(30),
    );
    while ended.len() < PARTITIONS as usize {
        assert!(
            Instant::now() < deadline,
            "the topic was not read to its end"
        );
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                let key = m.key().map(|k| String::from_utf8(k.to_vec()).unwrap());
                let json = serde_json::from_slice(m.payload().expect("a payload")).unwrap();
                let ms = m.timestamp().to_millis().expect("a timestamp");
                out.push((m.partition(), key, json, ms));
            }
            Some(Err(KafkaError::PartitionEOF(p))) => {
                ended.insert(p);
            }
            Some(Err(e)) => panic!("consume: {e}"),
            None => {}
        }
    }
    out
}

/// The seconds of the summary line `… in S s (R events/s)` and its event count.
fn summary(stderr: &str) -> (u64, f64) {
    let line = stderr
        .lines()
        .rfind(|l| l.starts_with("fencewatch simulate: produced "))
        .unwrap_or_else(|| panic!("no summary in {stderr}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let events = words[3].parse().unwrap();
    let at = words.iter().position(|w| *w == "in").unwrap();
    (events, words[at + 1].parse().unwrap())
}

#[test]
fn every_event_once_keyed_by_scope_and_paced() {
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic(TOPIC, PARTITIONS, 1).unwrap();
    let brokers = mock.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let truth = dir.path().join("truth.json");
    let (out, _) = simulate(&[
        "--events",
        "200",
        "--scopes",
        "40",
        "--paused-old-owner",
        "1",
        "--rate",
        "400",
        "--kafka",
        &brokers,
        "--topic",
        TOPIC,
        "--truth",
        truth.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(out.stdout.is_empty(), "nothing on stdout with --kafka");
    let truth: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&truth).unwrap()).unwrap();
    let lines = truth["lines"].as_u64().unwrap();
    assert!(lines >= 200, "{truth}");
    let (produced, secs) = summary(&stderr);
    assert_eq!(produced, lines);
    // At 400 events/s the last of `lines` events is due (lines - 1) / 400 s after the first.
    let due = (lines - 1) as f64 / 400.0;
    assert!(
        secs >= due,
        "{lines} events at 400/s in {secs} s: not paced"
    );
    assert!(secs < due + 10.0, "{lines} events at 400/s took {secs} s");

    let messages = consume_all(&brokers);
    assert_eq!(messages.len() as u64, lines, "one message per event");
    let mut partition_of: BTreeMap<String, i32> = BTreeMap::new();
    let mut keyless = 0;
    for (partition, key, json) in &messages {
        assert_eq!(key.as_deref(), json["scope"].as_str(), "key of {json}");
        match key {
            Some(k) => {
                let p = *partition_of.entry(k.clone()).or_insert(*partition);
                assert_eq!(p, *partition, "scope {k} is in one partition");
            }
            None => keyless += 1,
        }
    }
    assert!(keyless > 0, "heartbeats have no scope and no key");
    assert!(partition_of.len() > 1, "many scopes");
}

#[test]
fn start_now_produces_each_event_when_the_wall_clock_reaches_its_time() {
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic(TOPIC, PARTITIONS, 1).unwrap();
    let brokers = mock.bootstrap_servers();
    // 40 commits at 40 per second of event time: about a second of live workload.
    let (out, took) = simulate(&[
        "--events", "40", "--scopes", "10", "--rate", "40", "--start", "now", "--kafka", &brokers,
        "--topic", TOPIC,
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(took >= Duration::from_millis(900), "not live: {took:?}");
    let messages = consume_timed(&brokers);
    assert!(messages.len() >= 40);
    for (_, _, json, sent_ms) in &messages {
        // Sent when the wall clock reached the event's time: they agree within 250 ms.
        let ts_ms = json["ts"].as_i64().unwrap() / 1_000_000;
        assert!((sent_ms - ts_ms).abs() < 250, "{json} sent at {sent_ms}");
    }
}

#[test]
fn unpaced_without_rate() {
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic(TOPIC, PARTITIONS, 1).unwrap();
    let brokers = mock.bootstrap_servers();
    let (out, _) = simulate(&[
        "--events",
        "20000",
        "--kafka",
        &brokers,
        "--topic",
        TOPIC,
        "--truth",
        "/dev/null",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let (produced, _) = summary(&stderr);
    assert_eq!(consume_all(&brokers).len() as u64, produced);
}

#[test]
fn undelivered_events_fail_with_a_clear_message() {
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic(TOPIC, PARTITIONS, 1).unwrap();
    let brokers = mock.bootstrap_servers();
    // Every produce request fails with a retriable error: nothing is acknowledged in time.
    mock.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS; 500],
    );
    let (out, took) = simulate(&[
        "--events",
        "50",
        "--kafka",
        &brokers,
        "--topic",
        TOPIC,
        "--kafka-timeout",
        "2",
        "--truth",
        "/dev/null",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("were not delivered within 2 s"), "{stderr}");
    assert!(took < Duration::from_secs(20), "gave up after {took:?}");

    // A topic the broker does not know is refused up front (the mock creates topics on
    // demand, so it is told to answer as a broker without `auto.create.topics.enable`).
    mock.clear_request_errors(RDKafkaApiKey::Produce);
    mock.topic_error(
        "missing",
        RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART,
    )
    .unwrap();
    let (out, _) = simulate(&[
        "--events",
        "5",
        "--kafka",
        &brokers,
        "--topic",
        "missing",
        "--truth",
        "/dev/null",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("topic missing does not exist"), "{stderr}");
}
