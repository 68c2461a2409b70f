//! Kafka for the tests: producing keyed messages and reading a group's committed offsets with
//! librdkafka (rdkafka), against `rdkafka::mocking::MockCluster` or a real broker.

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use std::time::Duration;

/// Produces `(key, payload)` messages to `topic` (partitioned by key) and waits until every
/// one is acknowledged.
pub fn produce(brokers: &str, topic: &str, messages: &[(String, String)]) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("linger.ms", "5")
        .set("enable.idempotence", "true")
        .create()
        .expect("a producer");
    for (key, payload) in messages {
        send(
            &producer,
            BaseRecord::to(topic)
                .key(key.as_str())
                .payload(payload.as_str()),
        );
    }
    producer
        .flush(Duration::from_secs(30))
        .expect("every message acknowledged");
}

/// Sends one record, waiting while the producer's queue is full.
fn send<K, P>(producer: &BaseProducer, mut record: BaseRecord<'_, K, P>)
where
    K: rdkafka::message::ToBytes + ?Sized,
    P: rdkafka::message::ToBytes + ?Sized,
{
    loop {
        match producer.send(record) {
            Ok(()) => return,
            Err((e, r)) => {
                assert!(
                    matches!(
                        e.rdkafka_error_code(),
                        Some(rdkafka::types::RDKafkaErrorCode::QueueFull)
                    ),
                    "produce: {e}"
                );
                producer.poll(Duration::from_millis(10));
                record = r;
            }
        }
    }
}

/// A raw message for [`produce_bytes`]: key and payload, each possibly absent.
pub type RawMessage<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

/// Produces raw `(key, payload)` messages to `topic` (no key, no payload where `None`; bytes
/// need not be UTF-8, and may be up to 1 GB each: the producer's size limits are raised) and
/// waits until every one is acknowledged.
pub fn produce_bytes(brokers: &str, topic: &str, messages: &[RawMessage<'_>]) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("linger.ms", "5")
        .set("message.max.bytes", "1000000000")
        .set("enable.idempotence", "true")
        .create()
        .expect("a producer");
    for &(key, payload) in messages {
        let mut record: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(topic).partition(0);
        if let Some(k) = key {
            record = record.key(k);
        }
        if let Some(p) = payload {
            record = record.payload(p);
        }
        send(&producer, record);
    }
    producer
        .flush(Duration::from_secs(60))
        .expect("every message acknowledged");
}

/// Creates `topic` with `partitions` partitions (replication 1) and waits for the answer.
pub fn create_topic(brokers: &str, topic: &str, partitions: i32) {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .expect("an admin client");
    let topics = [NewTopic::new(topic, partitions, TopicReplication::Fixed(1))];
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let rt = tokio_free_block_on(admin.create_topics(&topics, &opts));
    for r in rt.expect("create_topics") {
        r.unwrap_or_else(|(t, e)| panic!("create topic {t}: {e}"));
    }
}

/// Runs a future to completion on this thread (the admin API is async; no runtime needed).
fn tokio_free_block_on<F: std::future::Future>(f: F) -> F::Output {
    use std::task::{Context, Poll, Wake, Waker};
    struct Thread(std::thread::Thread);
    impl Wake for Thread {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(std::sync::Arc::new(Thread(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        match f.as_mut().poll(&mut cx) {
            Poll::Ready(v) => return v,
            Poll::Pending => std::thread::park_timeout(Duration::from_millis(50)),
        }
    }
}

/// The offsets group `group` committed on partitions `0..partitions` of `topic` (-1 where
/// none).
pub fn committed(brokers: &str, group: &str, topic: &str, partitions: i32) -> Vec<i64> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .create()
        .expect("a consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    match consumer.committed_offsets(tpl, Duration::from_secs(10)) {
        Ok(tpl) => tpl
            .elements()
            .iter()
            .map(|e| match e.offset() {
                Offset::Offset(n) => n,
                _ => -1,
            })
            .collect(),
        Err(_) => vec![-1; partitions as usize],
    }
}

/// The first offset the broker still holds of `topic`'s partition `p` (its log start).
pub fn log_start(brokers: &str, topic: &str, p: i32) -> i64 {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .expect("a consumer");
    consumer
        .fetch_watermarks(topic, p, Duration::from_secs(10))
        .expect("the partition's watermarks")
        .0
}

/// A `tansu` broker (a Kafka-compatible broker, in memory) on a free 127.0.0.1 port, killed
/// when dropped. `cargo install tansu --locked --features dynostore` puts it on the path
/// (`.ci/run` does); tests that start one begin with `require!(Tansu)`.
#[derive(Debug)]
pub struct Tansu {
    child: std::process::Child,
    /// `127.0.0.1:PORT`.
    pub brokers: String,
}

impl Tansu {
    /// Starts the broker and waits until it accepts connections.
    pub fn start() -> Tansu {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        Tansu::start_on(port)
    }

    fn start_on(port: u16) -> Tansu {
        let url = format!("tcp://127.0.0.1:{port}");
        let bin = std::env::var("TANSU").unwrap_or_else(|_| "tansu".into());
        let child = std::process::Command::new(&bin)
            .args(["broker", "--listener-url", &url, "--advertised-listener-url", &url])
            .args(["--storage-engine", "memory://tansu/"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start `{bin}` ({e}): install it with `cargo install tansu --locked --features dynostore`")
            });
        let brokers = format!("127.0.0.1:{port}");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(&brokers).is_err() {
            assert!(std::time::Instant::now() < deadline, "tansu did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        Tansu { child, brokers }
    }

    /// Stops the broker process (SIGSTOP): it answers nothing until [`Tansu::resume`].
    pub fn pause(&self) {
        signal(self.child.id(), "STOP");
    }

    /// Resumes a paused broker (SIGCONT).
    pub fn resume(&self) {
        signal(self.child.id(), "CONT");
    }
}

fn signal(pid: u32, sig: &str) {
    assert!(crate::signal(pid, sig), "kill -s {sig} {pid}");
}

impl Drop for Tansu {
    fn drop(&mut self) {
        signal(self.child.id(), "CONT");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Produces NDJSON `lines` to `topic` with the Python confluent-kafka client
/// (`tests/python/kafka_produce.py`), keyed by scope; creates the topic with `partitions`
/// first when non-zero. Returns the number of messages delivered.
pub fn python_produce(brokers: &str, topic: &str, partitions: u32, lines: &[String]) -> u64 {
    use std::io::Write;
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python/kafka_produce.py");
    let mut child = std::process::Command::new("python3")
        .arg(&script)
        .args([brokers, topic, &partitions.to_string()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    let mut stdin = child.stdin.take().expect("stdin");
    for l in lines {
        writeln!(stdin, "{l}").expect("write to the producer");
    }
    drop(stdin);
    let out = child.wait_with_output().expect("the producer");
    assert!(
        out.status.success(),
        "kafka_produce.py failed (is confluent-kafka installed? `pip install confluent-kafka`): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("a count")
}
