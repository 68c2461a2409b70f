//! The Kafka source under hostile input and a hostile disk, against librdkafka's mock cluster:
//! poison and oversized messages, damaged local checkpoints, a full disk (issue 11, "Also").

use crate::kafka::{CONTRACT, SEC, TOPIC, commit, fast_session, kafka_args, observations};
use fencewatch_tests::kafka::{RawMessage, committed, produce, produce_bytes};
use fencewatch_tests::service::{TestService, now_ns};
use rdkafka::mocking::MockCluster;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The dead-letter file's lines.
fn dead_letters(data: &Path) -> Vec<Value> {
    std::fs::read_to_string(data.join("kafka/dead-letter.ndjson"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The checkpoint files of partition 0, oldest first.
fn checkpoints(data: &Path) -> Vec<PathBuf> {
    let dir = data.join("kafka").join(TOPIC).join("0");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| {
            d.map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|x| x == "ckpt"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

fn checkpoint_name(offset: u64) -> String {
    format!("checkpoint-{offset:020}.ckpt")
}

/// A history on one partition with one resumed old owner (order-3), `n` scopes from `t0`.
fn history(t0: i64, n: i64) -> Vec<(String, String)> {
    let mut msgs = Vec::new();
    for i in 0..n {
        let scope = format!("order-{i}");
        msgs.push(commit(t0 + i * SEC, &scope, 1, "orders-api.transition"));
        msgs.push(commit(
            t0 + i * SEC + SEC / 2,
            &scope,
            2,
            "orders-api.transition",
        ));
    }
    msgs.push(commit(t0 + n * SEC, "order-3", 1, "orders-api.transition"));
    msgs
}

/// Waits until the process `pid` (a child not yet reaped) has exited.
fn wait_exited(svc: &TestService, secs: u64) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", svc.pid())).unwrap_or_default();
        // The state follows the parenthesised command name.
        let state = stat.rsplit(')').next().unwrap_or("").trim_start();
        if stat.is_empty() || state.starts_with('Z') || state.starts_with('X') {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

#[test]
fn kafka_poison_of_every_kind_is_dead_lettered_and_consumption_never_stops() {
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic(TOPIC, 1, 1).unwrap();
    let brokers = mock.bootstrap_servers();
    let t0 = now_ns() - 60 * SEC;
    let good: Vec<(String, String)> = history(t0, 8);
    let deep = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
    let deep_object =
        format!(r#"{{"kind":"commit","ts":{t0},"scope":"order-1","epoch":1,"x":{deep}}}"#);
    let dup = format!(
        r#"{{"kind":"commit","ts":{t0},"scope":"order-1","epoch":1,"epoch":2,"route":"orders-api.transition"}}"#
    );
    let array = format!("[{}]", good[0].1);
    let poison: Vec<(&str, Option<Vec<u8>>)> = vec![
        ("not JSON", Some(b"this is not json".to_vec())),
        (
            "invalid UTF-8",
            Some(b"{\"kind\":\"commit\",\"scope\":\"\xff\xfe\"}".to_vec()),
        ),
        ("a JSON array", Some(array.into_bytes())),
        ("nested 100,000 deep", Some(deep.into_bytes())),
        ("a deep value in an event", Some(deep_object.into_bytes())),
        ("duplicate keys", Some(dup.into_bytes())),
        ("no payload", None),
        ("empty payload", Some(Vec::new())),
        ("NUL bytes", Some(vec![0; 1000])),
        (
            "a byte-order mark",
            Some(format!("\u{feff}{}", good[1].1).into_bytes()),
        ),
        ("a bare number", Some(b"42".to_vec())),
        (
            "two events in one message",
            Some(format!("{}\n{}", good[2].1, good[3].1).into_bytes()),
        ),
    ];
    // Each poison message between two valid ones.
    type Owned = (Option<Vec<u8>>, Option<Vec<u8>>);
    let mut msgs: Vec<Owned> = Vec::new();
    let mut good_iter = good.iter();
    for (_, p) in &poison {
        if let Some((k, v)) = good_iter.next() {
            msgs.push((Some(k.clone().into_bytes()), Some(v.clone().into_bytes())));
        }
        msgs.push((Some(b"poison".to_vec()), p.clone()));
    }
    for (k, v) in good_iter {
        msgs.push((Some(k.clone().into_bytes()), Some(v.clone().into_bytes())));
    }
    let refs: Vec<RawMessage<'_>> = msgs
        .iter()
        .map(|(k, v)| (k.as_deref(), v.as_deref()))
        .collect();
    produce_bytes(&brokers, TOPIC, &refs);
    let total = msgs.len() as f64;

    let dir = tempfile::tempdir().unwrap();
    let svc = TestService::start(dir.path(), CONTRACT, &kafka_args(&brokers, "fw"));
    svc.wait_for("every message consumed", 60, |s| {
        s.metric("fencewatch_kafka_messages_total") == Some(total)
    });
    let bad = poison.len() as f64;
    svc.wait_for("every poison message dead-lettered", 30, |s| {
        s.metric("fencewatch_kafka_dead_lettered_messages_total") == Some(bad)
    });
    assert_eq!(
        svc.metric("fencewatch_events_rejected_total{source=\"kafka\",reason=\"malformed\"}"),
        Some(bad)
    );
    assert_eq!(
        svc.metric("fencewatch_events_ingested_total{source=\"kafka\"}"),
        Some(good.len() as f64)
    );
    // The valid messages after the poison were all assessed: the resumed old owner (the last
    // message) is found.
    assert_eq!(observations(&svc), good.len() as u64);
    let cxs = svc.get("/v1/counterexamples").json();
    assert_eq!(cxs["counterexamples"][0]["scope"], "order-3", "{cxs}");
    assert_eq!(svc.get("/readyz").status, 200);
    svc.wait_for("offsets committed", 30, |_| {
        committed(&brokers, "fw", TOPIC, 1) == [total as i64]
    });
    let (status, log) = svc.terminate();
    assert!(status.success(), "{log}");
    let dead = dead_letters(&dir.path().join("data"));
    assert_eq!(dead.len(), poison.len(), "{dead:?}");
    for (line, (what, _)) in dead.iter().zip(&poison) {
        let reason = line["reason"].as_str().unwrap();
        assert!(!reason.is_empty(), "{what}: {line}");
        assert!(
            line["source"].as_str().unwrap().starts_with("events/0:"),
            "{what}: {line}"
        );
    }
}

#[test]
fn kafka_an_oversized_message_is_malformed_and_its_dead_letter_copy_is_bounded() {
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic(TOPIC, 1, 1).unwrap();
    let brokers = mock.bootstrap_servers();
    let t0 = now_ns() - 60 * SEC;
    let good = history(t0, 4);
    // Over max_line_bytes (1 MiB) and over librdkafka's fetch.message.max.bytes (1 MiB) and
    // the default message.max.bytes (1 MB); the second is also not UTF-8 text. (The mock
    // cluster keeps at most 5 MB per partition, dropping older messages beyond: tansu takes
    // a 20 MB one in `broker.rs`.)
    let pad = "x".repeat(2_500_000);
    let big = format!(r#"{{"kind":"commit","ts":{t0},"scope":"order-1","epoch":1,"pad":"{pad}"}}"#);
    let mut huge = vec![0xffu8; 1_500_000];
    huge[..2].copy_from_slice(b"{\"");
    let mut msgs: Vec<RawMessage<'_>> = Vec::new();
    for (i, (k, v)) in good.iter().enumerate() {
        msgs.push((Some(k.as_bytes()), Some(v.as_bytes())));
        if i == 1 {
            msgs.push((Some(b"big".as_slice()), Some(big.as_bytes())));
        }
        if i == 4 {
            msgs.push((Some(b"huge".as_slice()), Some(huge.as_slice())));
        }
    }
    produce_bytes(&brokers, TOPIC, &msgs);

    let dir = tempfile::tempdir().unwrap();
    let svc = TestService::start(dir.path(), CONTRACT, &kafka_args(&brokers, "fw"));
    svc.wait_for("every message consumed", 60, |s| {
        s.metric("fencewatch_kafka_messages_total") == Some(msgs.len() as f64)
    });
    svc.wait_for("both dead-lettered", 30, |s| {
        s.metric("fencewatch_kafka_dead_lettered_messages_total") == Some(2.0)
    });
    assert_eq!(observations(&svc), good.len() as u64);
    assert_eq!(svc.get("/readyz").status, 200);
    let (status, log) = svc.terminate();
    assert!(status.success(), "{log}");
    let data = dir.path().join("data");
    let dead = dead_letters(&data);
    assert_eq!(dead.len(), 2, "{log}");
    for (line, len) in dead.iter().zip([big.len(), huge.len()]) {
        let reason = line["reason"].as_str().unwrap();
        assert!(
            reason.contains(&format!("line is {len} bytes, over the 1048576-byte limit")),
            "{reason}"
        );
        assert_eq!(line["payload_bytes"], len, "{}", line["reason"]);
        assert_eq!(line["payload_truncated"], true);
    }
    // The copies are cut (64 KiB of value each, U+FFFD for bytes that are not UTF-8 aside).
    let size = std::fs::metadata(data.join("kafka/dead-letter.ndjson"))
        .unwrap()
        .len();
    assert!(size < 400_000, "the dead-letter file is {size} bytes");
}

/// Starts a service on a history in two checkpointed steps, stops it cleanly and returns its
/// counterexample ids, observations and the two checkpoint files (older, newer).
fn two_checkpoints(dir: &Path, brokers: &str) -> (Vec<String>, u64, Vec<PathBuf>) {
    let t0 = now_ns() - 120 * SEC;
    let first = history(t0, 10);
    produce(brokers, TOPIC, &first);
    let a = args(dir, brokers);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let svc = TestService::start(dir, CONTRACT, &a);
    let data = dir.join("data");
    let n1 = first.len() as u64;
    svc.wait_for("first checkpoint", 60, |_| {
        checkpoints(&data)
            .last()
            .is_some_and(|p| p.ends_with(checkpoint_name(n1)))
    });
    let second: Vec<(String, String)> = (20..30)
        .map(|i| {
            commit(
                t0 + 60 * SEC + i * SEC,
                &format!("order-{i}"),
                1,
                "orders-api.transition",
            )
        })
        .chain([commit(
            t0 + 100 * SEC,
            "order-5",
            1,
            "orders-api.transition",
        )])
        .collect();
    produce(brokers, TOPIC, &second);
    let n2 = n1 + second.len() as u64;
    svc.wait_for("second checkpoint", 60, |_| {
        checkpoints(&data)
            .last()
            .is_some_and(|p| p.ends_with(checkpoint_name(n2)))
    });
    let ids = svc.cx_ids();
    assert_eq!(ids.len(), 2, "{ids:?}");
    let seen = observations(&svc);
    let (status, log) = svc.terminate();
    assert!(status.success(), "{log}");
    let files = checkpoints(&data);
    assert_eq!(files.len(), 2, "{files:?}");
    (ids, seen, files)
}

/// The service's arguments: Kafka, and a config file whose short session lets a restarted
/// member take its partition back without waiting for the default 45 s.
fn args(dir: &Path, brokers: &str) -> Vec<String> {
    let mut args: Vec<String> = kafka_args(brokers, "fw")
        .into_iter()
        .map(String::from)
        .collect();
    args.extend(["--config".to_string(), fast_session(dir)]);
    args
}

fn restart(dir: &Path, brokers: &str) -> TestService {
    TestService::restart((
        dir.join("contract.toml"),
        dir.join("data"),
        args(dir, brokers),
    ))
}

#[test]
fn kafka_a_damaged_newest_checkpoint_is_passed_over_with_a_warning_naming_it() {
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic(TOPIC, 1, 1).unwrap();
    let brokers = mock.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let (ids, seen, files) = two_checkpoints(dir.path(), &brokers);
    // One flipped byte in the state of the newest.
    let mut bytes = std::fs::read(&files[1]).unwrap();
    let at = bytes.len() - 10;
    bytes[at] ^= 0x40;
    std::fs::write(&files[1], &bytes).unwrap();
    let svc = restart(dir.path(), &brokers);
    svc.wait_for("replayed from the older checkpoint", 60, |s| {
        observations(s) == seen
    });
    assert_eq!(svc.cx_ids(), ids);
    let log = svc.stderr();
    let warned = log.lines().any(|l| {
        l.contains("WARN")
            && l.contains("damaged checkpoint")
            && l.contains(&*files[1].to_string_lossy())
    });
    assert!(warned, "no WARN naming {}:\n{log}", files[1].display());
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(observations(&svc), seen, "nothing counted twice");
    assert_eq!(svc.get("/readyz").status, 200);
}

#[test]
fn kafka_no_valid_checkpoint_rebuilds_the_partition_from_the_earliest_offset() {
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic(TOPIC, 1, 1).unwrap();
    let brokers = mock.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let (ids, seen, files) = two_checkpoints(dir.path(), &brokers);
    // The older truncated, the newer garbage.
    let older = std::fs::read(&files[0]).unwrap();
    std::fs::write(&files[0], &older[..older.len() / 2]).unwrap();
    std::fs::write(&files[1], b"garbage, not a checkpoint at all").unwrap();
    let svc = restart(dir.path(), &brokers);
    svc.wait_for("rebuilt from the earliest offset", 60, |s| {
        observations(s) == seen
    });
    assert_eq!(svc.cx_ids(), ids);
    let log = svc.stderr();
    for f in &files {
        let warned = log
            .lines()
            .any(|l| l.contains("WARN") && l.contains(&*f.to_string_lossy()));
        assert!(warned, "no WARN naming {}:\n{log}", f.display());
    }
    assert!(log.contains("rebuilding it from the earliest"), "{log}");
    // The damaged files are kept aside, not deleted.
    let quarantine = dir
        .path()
        .join("data/kafka")
        .join(TOPIC)
        .join("0/quarantine");
    let kept: Vec<_> = std::fs::read_dir(&quarantine)
        .unwrap()
        .flat_map(|d| std::fs::read_dir(d.unwrap().path()).unwrap())
        .collect();
    assert_eq!(kept.len(), 2, "{}", quarantine.display());
    // And the partition checkpoints again from the start.
    svc.wait_for("a new checkpoint", 30, |_| {
        !checkpoints(&dir.path().join("data")).is_empty()
    });
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(observations(&svc), seen);
    assert_eq!(svc.get("/readyz").status, 200);
}

/// Makes the next checkpoint writes of partition 0 (offsets `from..=to`) hit a full disk: their
/// temporary files are symbolic links to `/dev/full` (ENOSPC on write, root or not).
fn full_disk_for(data: &Path, from: u64, to: u64) {
    let dir = data.join("kafka").join(TOPIC).join("0");
    for offset in from..=to {
        let tmp = dir.join(format!("checkpoint-{offset:020}.ckpt.tmp"));
        std::os::unix::fs::symlink("/dev/full", tmp).unwrap();
    }
}

#[test]
fn kafka_a_full_disk_at_a_checkpoint_stops_the_service_without_committing_past_it() {
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic(TOPIC, 1, 1).unwrap();
    let brokers = mock.bootstrap_servers();
    let t0 = now_ns() - 60 * SEC;
    let first = history(t0, 5);
    let n1 = first.len() as i64;
    produce(&brokers, TOPIC, &first);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let a = args(dir.path(), &brokers);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let svc = TestService::start(dir.path(), CONTRACT, &a);
    svc.wait_for("checkpointed and committed", 60, |_| {
        committed(&brokers, "fw", TOPIC, 1) == [n1]
    });
    let more: Vec<(String, String)> = (10..15)
        .map(|i| {
            commit(
                t0 + i * SEC,
                &format!("order-{i}"),
                1,
                "orders-api.transition",
            )
        })
        .collect();
    full_disk_for(&data, n1 as u64 + 1, n1 as u64 + more.len() as u64);
    produce(&brokers, TOPIC, &more);
    assert!(
        wait_exited(&svc, 30),
        "still running after its checkpoint failed; /readyz {}:\n{}",
        svc.get("/readyz").status,
        svc.stderr()
    );
    let (status, log) = svc.terminate();
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(log.contains("No space left on device"), "{log}");
    assert!(log.contains(".ckpt.tmp"), "the path is named: {log}");
    // Nothing past the durable checkpoint was committed.
    assert_eq!(committed(&brokers, "fw", TOPIC, 1), [n1]);
    assert!(
        checkpoints(&data)
            .last()
            .is_some_and(|p| p.ends_with(checkpoint_name(n1 as u64)))
    );
    // A restart on a disk with room replays from the checkpoint and finds what there is.
    for f in std::fs::read_dir(data.join("kafka").join(TOPIC).join("0")).unwrap() {
        let p = f.unwrap().path();
        if p.to_string_lossy().ends_with(".tmp") {
            std::fs::remove_file(p).unwrap();
        }
    }
    let svc = restart(dir.path(), &brokers);
    svc.wait_for("everything assessed", 60, |s| {
        observations(s) == (first.len() + more.len()) as u64
    });
    assert_eq!(svc.cx_ids().len(), 1);
}

#[test]
fn kafka_a_full_disk_under_the_dead_letter_file_stops_the_service_without_committing_past_it() {
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic(TOPIC, 1, 1).unwrap();
    let brokers = mock.bootstrap_servers();
    let t0 = now_ns() - 60 * SEC;
    let first = history(t0, 3);
    let n1 = first.len() as i64;
    produce(&brokers, TOPIC, &first);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let svc = TestService::start(dir.path(), CONTRACT, &kafka_args(&brokers, "fw"));
    svc.wait_for("checkpointed and committed", 60, |_| {
        committed(&brokers, "fw", TOPIC, 1) == [n1]
    });
    std::os::unix::fs::symlink("/dev/full", data.join("kafka/dead-letter.ndjson")).unwrap();
    produce(
        &brokers,
        TOPIC,
        &[
            ("poison".into(), "not json".into()),
            commit(t0 + 20 * SEC, "order-20", 1, "orders-api.transition"),
        ],
    );
    assert!(
        wait_exited(&svc, 30),
        "still running after the dead-letter file failed; /readyz {}:\n{}",
        svc.get("/readyz").status,
        svc.stderr()
    );
    let (status, log) = svc.terminate();
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(log.contains("No space left on device"), "{log}");
    assert!(
        log.contains("dead-letter.ndjson"),
        "the path is named: {log}"
    );
    assert_eq!(committed(&brokers, "fw", TOPIC, 1), [n1]);
}

#[test]
fn kafka_a_message_over_receive_message_max_bytes_is_named_by_readiness_and_the_log() {
    // librdkafka cannot receive a fetch response over receive.message.max.bytes (100 MB by
    // default; 2 MB here, so that the mock cluster can hold the message): the partition cannot
    // move. The service must say so, not "no broker answers".
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic(TOPIC, 1, 1).unwrap();
    let brokers = mock.bootstrap_servers();
    let t0 = now_ns() - 60 * SEC;
    let big = vec![b'x'; 3_000_000];
    let first = commit(t0, "order-1", 1, "orders-api.transition");
    produce_bytes(
        &brokers,
        TOPIC,
        &[
            (Some(first.0.as_bytes()), Some(first.1.as_bytes())),
            (Some(b"big".as_slice()), Some(big.as_slice())),
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("serve.toml");
    std::fs::write(
        &config,
        "[kafka]\n\"receive.message.max.bytes\" = 2000000\n\"fetch.max.bytes\" = 1000000\n",
    )
    .unwrap();
    let mut args = kafka_args(&brokers, "fw");
    let c = config.display().to_string();
    args.extend(["--config", c.as_str()]);
    let svc = TestService::start_listening(dir.path(), CONTRACT, &args);
    svc.wait_for("not ready, naming the setting", 60, |s| {
        let r = s.get("/readyz");
        r.status == 503 && r.text().contains("receive.message.max.bytes")
    });
    let log = svc.stderr();
    assert!(
        log.lines()
            .any(|l| l.contains("ERROR") && l.contains("larger than receive.message.max.bytes")),
        "{log}"
    );
}
