//! Kafka ingest (SPEC §5): a consumer group member that keeps one live assessor per assigned
//! partition, checkpointed with its offset under `<data_dir>/kafka/<topic>/<partition>`.
//!
//! - **Offsets after checkpoints.** `enable.auto.commit` is off. Every `checkpoint_interval`
//!   (and when partitions are revoked, and on shutdown) each partition that moved is saved
//!   durably (write, fsync, rename) and only then is its next offset committed to the group.
//!   A crash replays from the last checkpoint: counterexample ids are deterministic and offsets
//!   below a partition's checkpoint are skipped, so nothing is lost or found twice.
//! - **Assignment.** On assignment a partition's checkpoint is restored and the partition is
//!   assigned at the checkpoint's offset (not the group's committed one, which can be ahead
//!   of a local checkpoint after a handover between instances). A partition with no local
//!   checkpoint is rebuilt from the earliest retained offset: exact, at the cost of a replay.
//!   On revocation the partition is checkpointed, committed and dropped.
//! - **Damaged checkpoints.** A newer checkpoint that does not verify (a flipped byte, torn,
//!   garbage) is passed over for the older one, with a WARN naming the file; when none
//!   verifies, the files are moved into `<partition>/quarantine/<ns>/` (a WARN each) and the
//!   partition is rebuilt from the earliest retained offset. Never fatal, never silent.
//! - **A checkpoint or the dead-letter file that cannot be written** (a full disk, a read-only
//!   or vanished folder) stops the consumer before anything is committed past the last durable
//!   checkpoint; `/readyz` answers 503 with the cause and the service exits 1 (as when the WAL
//!   cannot be written). A restart on a disk with room replays from that checkpoint.
//! - **Poison messages** never stop consumption: a message that is not one valid event is
//!   counted, kept as `malformed_event` evidence, and written with its reason to the
//!   dead-letter topic (headers `fencewatch-reason`, `fencewatch-source`) or, without one, as
//!   a JSON line to `<data_dir>/kafka/dead-letter.ndjson`. Dead-lettering is at least once: a
//!   replay after a crash writes the messages since the last checkpoint again. Copies are
//!   bounded: a file copy keeps 64 KiB of the value (`payload_bytes`, `payload_truncated` say
//!   what was cut) and the file is rotated to `dead-letter.ndjson.1` at 64 MiB; a topic copy
//!   keeps `max_line_bytes` (header `fencewatch-truncated` with the original length).
//! - **Watermarks** are per partition (each assessor's own); queries take the minimum over
//!   active partitions. A partition is idle, and left out of the minimum, once the offset it
//!   applied reached the partition's end as the broker last reported it (librdkafka's
//!   statistics, every second) with nothing newer since: nothing of it is in flight. Until
//!   then a silent partition holds the watermark back.
//! - **Received time** of a message is its Kafka timestamp, so a replay decides
//!   `future timestamp` exactly as the first pass did.

use crate::serve::engine::now_ns;
use crate::serve::metrics::Metrics;
use fencewatch_assess::Contract;
use fencewatch_assess::live::{Live, LiveOptions, Pushed, Summary, View};
use fencewatch_ingest::checkpoint::{CheckpointStore, Error as CheckpointError};
use fencewatch_ingest::{json, partition};
use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Header, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::statistics::Statistics;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::types::RDKafkaRespErr;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

/// Messages applied under one hold of the write lock at most (queries wait at most that long).
const BATCH: usize = 2048;

/// The Kafka settings of `serve`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaConfig {
    /// Bootstrap servers, `host:port[,host:port…]`.
    pub brokers: String,
    /// Topics of events.
    pub topics: Vec<String>,
    /// Consumer group.
    pub group: String,
    /// Topic that malformed messages are copied to; `None`: a file in the data directory.
    pub dead_letter_topic: Option<String>,
    /// Scale-out: the topic where each instance publishes its partitions' summaries and
    /// reads the others'. `None`: a single instance answers for its own partitions.
    pub summaries_topic: Option<String>,
    /// librdkafka settings passed through (`security.protocol`, `sasl.*`, …), applied last.
    pub settings: Vec<(String, String)>,
}

/// One partition's mergeable summary as published to the summaries topic (postcard), keyed
/// by `topic/partition`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Published {
    /// Format version of this envelope.
    pub version: u32,
    /// The publishing instance.
    pub owner: String,
    /// `topic/partition`.
    pub partition: String,
    /// The partition offset the summary covers (messages below it are in).
    pub next: i64,
    /// Whether the partition was idle (read to its end).
    pub idle: bool,
    /// Wall time of publication, ns.
    pub at: i64,
    /// The summary.
    pub summary: Summary,
}

/// The envelope version [`Published`] is written with.
const PUBLISHED_VERSION: u32 = 1;
/// How often changed partitions' summaries are published.
const PUBLISH_EVERY: Duration = Duration::from_millis(500);
/// How often the seqs seen by all partitions are fed back to each (see [`Kafka::absorb`]).
const ABSORB_EVERY: Duration = Duration::from_secs(1);

/// What the consumer needs besides the Kafka settings.
#[derive(Debug, Clone)]
pub struct KafkaOptions {
    /// The Kafka settings.
    pub config: KafkaConfig,
    /// Folder of the partitions' checkpoints and the dead-letter file.
    pub dir: PathBuf,
    /// Options of each partition's assessor.
    pub live: LiveOptions,
    /// Longer messages are malformed.
    pub max_line_bytes: usize,
    /// Time between checkpoints.
    pub checkpoint_interval: Duration,
}

/// One assigned partition.
#[derive(Debug)]
pub struct Part {
    /// Its assessor.
    pub live: Live,
    /// The next offset to apply (messages below it are in the state already).
    next: i64,
    /// The offset the last checkpoint covers.
    checkpointed: i64,
    /// Read to its end with nothing newer since: nothing of it is in flight.
    pub idle: bool,
    source: u32,
    /// What the last published summary covered: (next, idle).
    published: Option<(i64, bool)>,
    /// What the metrics were told of its findings.
    reported: crate::serve::engine::Reported,
}

/// Figures for metrics and readiness.
#[derive(Debug, Default)]
pub struct KafkaStatus {
    /// A broker answered recently (cleared when librdkafka reports all brokers down).
    pub connected: AtomicBool,
    /// Messages written to the dead-letter topic or file.
    pub dead_lettered: AtomicU64,
    /// The end (high watermark) of each assigned partition as the broker last reported it.
    pub ends: Mutex<BTreeMap<(String, i32), i64>>,
    /// Wall time (ns) of the last checkpoint, 0 before the first.
    pub checkpoint_at: AtomicI64,
    /// When librdkafka last refused a fetch response over `receive.message.max.bytes` (a
    /// message too large to receive: its partition cannot move), and its words.
    pub too_large: Mutex<Option<(Instant, String)>>,
}

/// How long after the last refused oversized fetch response the source stays not ready
/// (librdkafka retries at least every `reconnect.backoff.max.ms`, 10 s by default).
const TOO_LARGE_FOR: Duration = Duration::from_secs(30);

/// The Kafka source shared by the consumer thread and the API.
#[derive(Debug)]
pub struct Kafka {
    parts: RwLock<BTreeMap<(String, i32), Part>>,
    /// Checkpoint stores of the assigned partitions (the consumer thread's alone).
    stores: Mutex<BTreeMap<(String, i32), CheckpointStore>>,
    /// Figures for metrics and readiness.
    pub status: KafkaStatus,
    stop: AtomicBool,
    contract: Contract,
    opts: KafkaOptions,
    metrics: Metrics,
    /// A fatal error (a checkpoint that cannot be read or written): the service stops.
    failure: Mutex<Option<String>>,
    /// Other instances' partitions, from the summaries topic, by `topic/partition`.
    remote: RwLock<BTreeMap<String, Published>>,
    /// This instance's name in published summaries.
    owner: String,
    /// Partitions whose end went back below the applied offset, to read again.
    rewound: Mutex<Vec<(String, i32)>>,
}

/// The consumer's callbacks.
struct Context {
    kafka: Arc<Kafka>,
}

impl ClientContext for Context {
    fn stats(&self, stats: Statistics) {
        let mut ends = BTreeMap::new();
        for (name, topic) in &stats.topics {
            for (&p, part) in &topic.partitions {
                if p >= 0 && part.desired && part.hi_offset >= 0 {
                    ends.insert((name.clone(), p), part.hi_offset);
                }
            }
        }
        // A partition whose applied position reached the end the broker last reported has
        // nothing in flight: idle, left out of the watermark until its next message.
        {
            let mut parts = self.kafka.parts.write().unwrap_or_else(|p| p.into_inner());
            for (key, &end) in &ends {
                let Some(part) = parts.get_mut(key) else {
                    continue;
                };
                if part.next > end {
                    // The partition's end is below what was applied: the topic was recreated
                    // or the broker lost its log. Its offsets start over; read it again from
                    // its beginning (the consumer thread seeks).
                    tracing::error!(topic = %key.0, partition = key.1, applied = part.next, end, "kafka: the partition's end went back (topic recreated or broker data lost); reading it again from its beginning");
                    self.kafka
                        .rewound
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(key.clone());
                } else if part.next >= end {
                    part.idle = true;
                }
            }
        }
        *self
            .kafka
            .status
            .ends
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = ends;
        let up = stats
            .brokers
            .values()
            .any(|b| b.nodeid >= 0 && b.state == "UP");
        self.kafka.status.connected.store(up, Ordering::Release);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if let KafkaError::Global(rdkafka::types::RDKafkaErrorCode::PartitionEOF) = error {
            // Reaching a partition's end is news, not an error (idleness comes from statistics).
            return;
        }
        if reason.contains("receive.message.max.bytes") {
            // A fetch response (a message) over receive.message.max.bytes: the connection is
            // dropped and the fetch retried forever, so the partition cannot move until the
            // setting is raised. Said once, loudly, and kept for /readyz.
            let mut last = self
                .kafka
                .status
                .too_large
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if last.is_none() {
                tracing::error!(error = %error, reason, "kafka: a message larger than receive.message.max.bytes cannot be received; its partition does not move (nor, behind the same fetch, the others of its broker) until `receive.message.max.bytes` (and `fetch.max.bytes`) are raised in [kafka] above the broker's message.max.bytes");
            }
            *last = Some((Instant::now(), reason.to_string()));
            return;
        }
        if matches!(
            error.rdkafka_error_code(),
            Some(rdkafka::types::RDKafkaErrorCode::AllBrokersDown)
        ) {
            self.kafka.status.connected.store(false, Ordering::Release);
        }
        tracing::warn!(error = %error, reason, "kafka");
    }
}

impl ConsumerContext for Context {
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Context>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        let cooperative = matches!(
            consumer.rebalance_protocol(),
            RebalanceProtocol::Cooperative
        );
        let listed: Vec<(String, i32)> = tpl
            .elements()
            .iter()
            .map(|e| (e.topic().to_string(), e.partition()))
            .collect();
        let k = &self.kafka;
        k.metrics.kafka_rebalances.inc();
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                for (topic, p) in &listed {
                    match k.open_part(topic, *p) {
                        Ok(next) => {
                            let offset = if next > 0 {
                                Offset::Offset(next)
                            } else {
                                Offset::Beginning
                            };
                            let _ = tpl.set_partition_offset(topic, *p, offset);
                            tracing::info!(
                                topic,
                                partition = p,
                                offset = next,
                                "partition assigned"
                            );
                        }
                        Err(e) => k.fail(e),
                    }
                }
                let r = if cooperative {
                    consumer.incremental_assign(tpl)
                } else {
                    consumer.assign(tpl)
                };
                if let Err(e) = r {
                    tracing::error!(error = %e, "kafka: assigning partitions failed");
                }
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                if let Err(e) = k.checkpoint(consumer, Some(&listed), CommitMode::Sync) {
                    k.fail(e);
                }
                k.release(&listed);
                let r = if cooperative {
                    consumer.incremental_unassign(tpl)
                } else {
                    consumer.unassign()
                };
                if let Err(e) = r {
                    tracing::error!(error = %e, "kafka: releasing partitions failed");
                }
            }
            other => {
                tracing::error!(error = ?other, "kafka: rebalance failed");
                k.release(&listed);
                let _ = consumer.unassign();
            }
        }
    }
}

/// Where malformed messages go.
enum DeadLetter {
    Topic { topic: String },
    File(DeadFile),
}

/// A dead-letter file copy keeps at most this many bytes of the message's value (and of its
/// key); the line says how long the value was and that it was cut.
pub const DEAD_LETTER_FILE_VALUE_BYTES: usize = 64 * 1024;
/// The dead-letter file is rotated to `dead-letter.ndjson.1` (replacing the one before) when
/// it reaches this size: at most twice this on disk, however many messages are poison.
pub const DEAD_LETTER_FILE_BYTES: u64 = 64 * 1024 * 1024;
/// A dead-letter topic copy keeps at most this many bytes of the message's value (and never
/// more than `max_line_bytes`, beyond which the message was malformed for its length alone),
/// with a `fencewatch-truncated` header giving the original length.
const DEAD_LETTER_TOPIC_VALUE_BYTES: usize = 9_000_000;

/// The dead-letter file, `<data_dir>/kafka/dead-letter.ndjson`.
struct DeadFile {
    path: PathBuf,
    out: Option<std::io::BufWriter<std::fs::File>>,
    /// Bytes in the file (written or buffered).
    len: u64,
    /// The size at which the file is rotated ([`DEAD_LETTER_FILE_BYTES`]).
    limit: u64,
}

impl DeadFile {
    fn new(path: PathBuf) -> DeadFile {
        DeadFile {
            path,
            out: None,
            len: 0,
            limit: DEAD_LETTER_FILE_BYTES,
        }
    }

    /// Appends one line, rotating the file first when it is full.
    fn append(&mut self, line: &[u8]) -> std::io::Result<()> {
        if self.out.is_some() && self.len + line.len() as u64 > self.limit {
            let mut out = self.out.take().expect("open");
            out.flush()?;
            out.get_ref().sync_all()?;
            drop(out);
            let old = self.path.with_extension("ndjson.1");
            std::fs::rename(&self.path, &old)?;
            tracing::info!(file = %self.path.display(), rotated_to = %old.display(), bytes = self.len, "kafka: dead-letter file rotated");
        }
        if self.out.is_none() {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)?;
            self.len = f.metadata()?.len();
            self.out = Some(std::io::BufWriter::new(f));
        }
        let out = self.out.as_mut().expect("opened");
        out.write_all(line)?;
        self.len += line.len() as u64;
        Ok(())
    }

    /// Writes out what is buffered (before offsets are committed past it).
    fn flush(&mut self) -> Result<(), String> {
        match &mut self.out {
            Some(out) => out
                .flush()
                .map_err(|e| format!("the dead-letter file {}: {e}", self.path.display())),
            None => Ok(()),
        }
    }
}

/// At most `max` bytes of `bytes`, cut at a UTF-8 boundary when it is text, and whether it
/// was cut.
fn cut(bytes: &[u8], max: usize) -> (&[u8], bool) {
    if bytes.len() <= max {
        return (bytes, false);
    }
    let mut end = max;
    // Back to a character boundary (at most 3 bytes) so that text stays text.
    while end > max.saturating_sub(3) && (bytes[end] & 0xC0) == 0x80 {
        end -= 1;
    }
    (&bytes[..end], true)
}

/// The running consumer thread.
#[derive(Debug)]
pub struct KafkaConsumer(std::thread::JoinHandle<Result<(), String>>);

impl KafkaConsumer {
    /// Waits for the consumer to checkpoint, commit and leave the group.
    pub fn join(self) -> Result<(), String> {
        self.0
            .join()
            .unwrap_or_else(|_| Err("the kafka consumer thread panicked".into()))
    }
}

impl Kafka {
    /// Creates the consumer, subscribes and starts the consumer thread. Fails when the
    /// settings are refused by librdkafka.
    pub fn start(
        contract: Contract,
        opts: KafkaOptions,
        metrics: Metrics,
    ) -> Result<(Arc<Kafka>, KafkaConsumer), String> {
        std::fs::create_dir_all(&opts.dir)
            .map_err(|e| format!("cannot create {}: {e}", opts.dir.display()))?;
        let kafka = Arc::new(Kafka {
            parts: RwLock::new(BTreeMap::new()),
            stores: Mutex::new(BTreeMap::new()),
            status: KafkaStatus::default(),
            stop: AtomicBool::new(false),
            contract,
            opts,
            metrics,
            failure: Mutex::new(None),
            remote: RwLock::new(BTreeMap::new()),
            rewound: Mutex::new(Vec::new()),
            owner: format!(
                "{}-{}",
                std::env::var("HOSTNAME").unwrap_or_else(|_| "fencewatch".into()),
                std::process::id()
            ),
        });
        let c = &kafka.opts.config;
        let mut cc = ClientConfig::new();
        cc.set("bootstrap.servers", &c.brokers)
            .set("group.id", &c.group)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            .set("enable.partition.eof", "true")
            .set("statistics.interval.ms", "1000")
            .set("client.id", "fencewatch");
        for (k, v) in &c.settings {
            cc.set(k, v);
        }
        let consumer: BaseConsumer<Context> = cc
            .create_with_context(Context {
                kafka: kafka.clone(),
            })
            .map_err(|e| format!("kafka consumer: {e}"))?;
        let topics: Vec<&str> = c.topics.iter().map(String::as_str).collect();
        consumer
            .subscribe(&topics)
            .map_err(|e| format!("kafka subscribe to {}: {e}", c.topics.join(",")))?;
        let producer = if c.dead_letter_topic.is_some() || c.summaries_topic.is_some() {
            let mut pc = ClientConfig::new();
            pc.set("bootstrap.servers", &c.brokers)
                .set("client.id", "fencewatch")
                .set("compression.type", "gzip")
                .set("message.max.bytes", "10000000");
            for (k, v) in c.settings.iter().filter(|(k, _)| is_shared_setting(k)) {
                pc.set(k, v);
            }
            let producer: BaseProducer = pc.create().map_err(|e| format!("kafka producer: {e}"))?;
            Some(producer)
        } else {
            None
        };
        let dead = match &c.dead_letter_topic {
            Some(topic) => DeadLetter::Topic {
                topic: topic.clone(),
            },
            None => DeadLetter::File(DeadFile::new(kafka.opts.dir.join("dead-letter.ndjson"))),
        };
        if let Some(topic) = &c.summaries_topic {
            let reader = summaries_reader(&kafka, topic)?;
            let k = kafka.clone();
            std::thread::Builder::new()
                .name("fencewatch-summaries".into())
                .spawn(move || k.read_summaries(&reader))
                .map_err(|e| format!("cannot start the summaries thread: {e}"))?;
        }
        let k = kafka.clone();
        let handle = std::thread::Builder::new()
            .name("fencewatch-kafka".into())
            .spawn(move || {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    k.consume(&consumer, producer.as_ref(), dead)
                }))
                .unwrap_or_else(|_| Err("the kafka consumer thread panicked".to_string()));
                if let Err(e) = &r {
                    // A checkpoint or the dead-letter file could not be written: nothing past
                    // the last durable checkpoint was committed. The service stops (exit 1),
                    // as when the WAL cannot be written, and is not ready meanwhile.
                    k.fail(e.clone());
                    tracing::error!(error = %e, "the kafka consumer stopped");
                }
                r
            })
            .map_err(|e| format!("cannot start the kafka consumer thread: {e}"))?;
        Ok((kafka, KafkaConsumer(handle)))
    }

    /// Reads the assigned partitions.
    pub fn parts(&self) -> RwLockReadGuard<'_, BTreeMap<(String, i32), Part>> {
        self.parts.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Asks the consumer thread to checkpoint, commit, leave the group and end.
    pub fn close(&self) {
        self.stop.store(true, Ordering::Release);
    }

    /// Whether the consumer stopped on a fatal error, and why.
    pub fn failure(&self) -> Option<String> {
        self.failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Why the Kafka source is not ready (`/readyz` 503), if it is not: the consumer stopped
    /// on a failure, or no broker answers.
    pub fn unready(&self) -> Option<String> {
        if let Some(why) = self.failure() {
            return Some(format!("the Kafka consumer stopped: {why}"));
        }
        if let Some((at, why)) = &*self
            .status
            .too_large
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            && at.elapsed() < TOO_LARGE_FOR
        {
            return Some(format!(
                "a Kafka message is larger than receive.message.max.bytes: consumption cannot \
                 move past it until the setting is raised in [kafka] ({why})"
            ));
        }
        (!self.status.connected.load(Ordering::Acquire))
            .then(|| "no Kafka broker answers".to_string())
    }

    /// Whether the consumer thread has stopped or was asked to.
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    fn fail(&self, why: String) {
        tracing::error!(error = %why, "kafka: fatal");
        self.failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(why);
        self.stop.store(true, Ordering::Release);
    }

    fn part_dir(&self, topic: &str, p: i32) -> PathBuf {
        self.opts.dir.join(sanitize(topic)).join(p.to_string())
    }

    /// Restores partition `(topic, p)` from its checkpoint (or starts it empty) and returns
    /// the offset to consume from. A damaged newer checkpoint is passed over for the older one
    /// (WARN, naming the file); when none is valid the damaged files are moved into
    /// `quarantine/<ns>/` and the partition is rebuilt from the earliest retained offset
    /// (WARN): Kafka still holds what the checkpoints covered, as long as its retention does.
    fn open_part(&self, topic: &str, p: i32) -> Result<i64, String> {
        let dir = self.part_dir(topic, p);
        let mut store = CheckpointStore::open(&dir).map_err(|e| e.to_string())?;
        let loaded = match store.latest_decoded(partition::decode_state) {
            Err(CheckpointError::NoValidCheckpoint { .. }) => {
                store = quarantine_checkpoints(&dir, topic, p)?;
                None
            }
            r => r.map_err(|e| {
                format!("{e}; move the folder away to rebuild the partition from Kafka")
            })?,
        };
        let (live, next) = match loaded {
            Some((loaded, state)) => {
                for c in &loaded.passed_over {
                    tracing::warn!(topic, partition = p, checkpoint = %c.path.display(), offset = c.offset, bytes = c.bytes, reason = %c.reason, restored_offset = loaded.offset, "kafka: a damaged checkpoint was passed over; the partition is restored from the older one and read again from its offset");
                }
                let live = Live::restore(self.contract.clone(), state).map_err(|e| {
                    format!(
                        "{}: {e}; move the folder away to rebuild the partition from Kafka",
                        dir.display()
                    )
                })?;
                (live, loaded.offset as i64)
            }
            None => (Live::new(self.contract.clone(), self.opts.live), 0),
        };
        let mut live = live;
        // A restart with another configuration: its options are in force from here on.
        live.set_options(self.opts.live);
        let source = live.add_source(&format!("{topic}/{p}"));
        let key = (topic.to_string(), p);
        self.stores
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.clone(), store);
        self.parts
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                key,
                Part {
                    reported: crate::serve::engine::Reported::of(&live),
                    live,
                    next,
                    checkpointed: next,
                    idle: false,
                    source,
                    published: None,
                },
            );
        Ok(next)
    }

    fn release(&self, listed: &[(String, i32)]) {
        let mut parts = self.parts.write().unwrap_or_else(|p| p.into_inner());
        let mut stores = self.stores.lock().unwrap_or_else(|p| p.into_inner());
        for key in listed {
            parts.remove(key);
            stores.remove(key);
            self.status
                .ends
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(key);
        }
    }

    /// Saves every partition (of `only`, if given) that moved since its last checkpoint, then
    /// commits their offsets.
    fn checkpoint(
        &self,
        consumer: &BaseConsumer<Context>,
        only: Option<&[(String, i32)]>,
        mode: CommitMode,
    ) -> Result<(), String> {
        if let Some(why) = self.failure() {
            // A failure (a dead-letter copy lost, an earlier checkpoint) stops the consumer:
            // nothing may be committed past it.
            return Err(why);
        }
        let mut todo = Vec::new();
        {
            let parts = self.parts();
            for (key, part) in parts.iter() {
                if only.is_some_and(|o| !o.contains(key)) || part.next <= part.checkpointed {
                    continue;
                }
                todo.push((key.clone(), part.next, partition::snapshot(&part.live)));
            }
        }
        if todo.is_empty() {
            return Ok(());
        }
        let started = Instant::now();
        let mut tpl = TopicPartitionList::new();
        let mut bytes = 0;
        {
            let mut stores = self.stores.lock().unwrap_or_else(|p| p.into_inner());
            for ((topic, p), next, state) in &todo {
                let store = stores
                    .get_mut(&(topic.clone(), *p))
                    .expect("an assigned partition has a store");
                store.save(*next as u64, state).map_err(|e| {
                    let kept = store.latest_offset().map_or(0, |o| o as i64);
                    format!(
                        "the checkpoint of {topic}/{p} at offset {next} cannot be written ({e}); \
                         its committed offset stays at or below {kept}, the last durable checkpoint"
                    )
                })?;
                bytes += state.len();
                tpl.add_partition_offset(topic, *p, Offset::Offset(*next))
                    .map_err(|e| e.to_string())?;
            }
        }
        {
            let mut parts = self.parts.write().unwrap_or_else(|p| p.into_inner());
            for (key, next, _) in &todo {
                if let Some(part) = parts.get_mut(key) {
                    part.checkpointed = part.checkpointed.max(*next);
                }
            }
        }
        self.status.checkpoint_at.store(now_ns(), Ordering::Release);
        // The checkpoints are durable: now the group may move past them. A failed commit is
        // not fatal (the next checkpoint commits again; a restart replays from the checkpoint).
        if let Err(e) = consumer.commit(&tpl, mode) {
            tracing::warn!(error = %e, "kafka: committing offsets failed");
        }
        tracing::debug!(
            partitions = todo.len(),
            bytes,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "kafka checkpoint"
        );
        Ok(())
    }

    /// The consumer loop: poll, apply in batches under the write lock, checkpoint.
    fn consume(
        &self,
        consumer: &BaseConsumer<Context>,
        producer: Option<&BaseProducer>,
        mut dead: DeadLetter,
    ) -> Result<(), String> {
        let mut last_publish = Instant::now();
        let mut last_absorb = Instant::now();
        let mut last_checkpoint = Instant::now();
        let interval = self.opts.checkpoint_interval;
        while !self.stop.load(Ordering::Acquire) {
            // Poll a batch first, with no lock held: polling runs the rebalance and statistics
            // callbacks, which take the partitions' lock themselves.
            let mut batch = Vec::new();
            let mut next = consumer.poll(Duration::from_millis(100));
            while let Some(r) = next {
                batch.push(r);
                if batch.len() >= BATCH {
                    break;
                }
                next = consumer.poll(Duration::ZERO);
            }
            if !batch.is_empty() {
                let mut parts = self.parts.write().unwrap_or_else(|p| p.into_inner());
                let (mut ok, mut bad) = (0, 0);
                for r in batch {
                    match r {
                        Ok(msg) => match self.apply(&mut parts, &msg, producer, &mut dead) {
                            Some(true) => ok += 1,
                            Some(false) => bad += 1,
                            None => {}
                        },
                        Err(KafkaError::PartitionEOF(_)) => {}
                        Err(e) => tracing::warn!(error = %e, "kafka: consume"),
                    }
                }
                drop(parts);
                if ok + bad > 0 {
                    // Messages came: a broker answers (errors alone prove nothing).
                    self.status.connected.store(true, Ordering::Release);
                }
                self.metrics.kafka_messages.inc_by(ok + bad);
                self.metrics.ingested("kafka", ok);
                if bad > 0 {
                    self.metrics.rejected("kafka", "malformed", bad);
                }
                self.after_batch();
            }
            self.rewind(consumer);
            if last_absorb.elapsed() >= ABSORB_EVERY {
                self.absorb();
                last_absorb = Instant::now();
            }
            if let Some(producer) = producer {
                if last_publish.elapsed() >= PUBLISH_EVERY {
                    self.publish(producer);
                    last_publish = Instant::now();
                }
                producer.poll(Duration::ZERO);
            }
            if last_checkpoint.elapsed() >= interval {
                if let DeadLetter::File(f) = &mut dead {
                    f.flush()?;
                }
                self.checkpoint(consumer, None, CommitMode::Async)?;
                last_checkpoint = Instant::now();
            }
        }
        if let Some(f) = self.failure() {
            return Err(f);
        }
        if let Some(producer) = producer {
            self.publish(producer);
            let _ = producer.flush(Duration::from_secs(10));
        }
        if let DeadLetter::File(f) = &mut dead {
            f.flush()?;
        }
        self.checkpoint(consumer, None, CommitMode::Sync)?;
        consumer.unsubscribe();
        tracing::info!("kafka consumer stopped after a last checkpoint");
        Ok(())
    }

    /// Reads again from their beginning the partitions whose end went back: the state keeps
    /// what it learnt (high-water marks, counterexamples), the new log is assessed on top.
    fn rewind(&self, consumer: &BaseConsumer<Context>) {
        let keys = std::mem::take(&mut *self.rewound.lock().unwrap_or_else(|p| p.into_inner()));
        for (topic, p) in keys {
            let mut parts = self.parts.write().unwrap_or_else(|p| p.into_inner());
            let Some(part) = parts.get_mut(&(topic.clone(), p)) else {
                continue;
            };
            match consumer.seek(&topic, p, Offset::Beginning, Duration::from_secs(5)) {
                Ok(()) => {
                    part.next = 0;
                    part.checkpointed = 0;
                    part.idle = false;
                }
                Err(e) => {
                    tracing::warn!(topic, partition = p, error = %e, "kafka: seeking back failed; retrying")
                }
            }
        }
    }

    /// Feeds the seqs seen by every partition (local and published) back to each local one.
    /// Producers key by scope, so one emitter's seqs are spread over partitions and each
    /// partition alone would keep one run per event (memory, and work for every query that
    /// merges them); joined with what the others saw, its runs stay as few as the real gaps.
    fn absorb(&self) {
        let seen = {
            let parts = self.parts();
            let remote = self.remote();
            if parts.len() < 2 && remote.is_empty() {
                return;
            }
            let mut view = View::new(&self.contract);
            for part in parts.values() {
                let _ = view.add_live(&part.live, true);
            }
            for published in remote.values() {
                let _ = view.add_summary(&published.summary, true);
            }
            view.seq_runs()
        };
        if seen.is_empty() {
            return;
        }
        let mut parts = self.parts.write().unwrap_or_else(|p| p.into_inner());
        for part in parts.values_mut() {
            part.live.absorb_seq_runs(&seen);
        }
    }

    /// Counterexample metrics and logs after a batch.
    fn after_batch(&self) {
        let mut parts = self.parts.write().unwrap_or_else(|p| p.into_inner());
        for part in parts.values_mut() {
            crate::serve::engine::report_findings(
                &self.contract,
                &self.metrics,
                &mut part.live,
                &mut part.reported,
            );
        }
    }

    /// Applies one message: `Some(true)` assessed, `Some(false)` malformed (dead-lettered),
    /// `None` skipped (not assigned here, or already in the state).
    fn apply(
        &self,
        parts: &mut BTreeMap<(String, i32), Part>,
        msg: &BorrowedMessage<'_>,
        producer: Option<&BaseProducer>,
        dead: &mut DeadLetter,
    ) -> Option<bool> {
        let part = parts
            .iter_mut()
            .find(|((t, p), _)| *p == msg.partition() && t == msg.topic())
            .map(|(_, part)| part)?;
        let offset = msg.offset();
        if offset < part.next {
            // Already in the state (a fetch from before the assignment's offset took).
            return None;
        }
        part.next = offset + 1;
        part.idle = false;
        let position = offset as u64;
        let received = msg
            .timestamp()
            .to_millis()
            .map_or(i64::MAX, |ms| ms.saturating_mul(1_000_000));
        let reason = match msg.payload() {
            None => {
                let why = "empty message (no payload)".to_string();
                part.live
                    .push_malformed(part.source, position, None, why.clone());
                Some(why)
            }
            Some(bytes) => match json::decode_line(bytes, self.opts.max_line_bytes) {
                Ok(d) => {
                    let ev = d.event();
                    match part.live.push(&ev, part.source, position, received) {
                        Pushed::Malformed => Some(
                            part.live
                                .view()
                                .last_malformed()
                                .unwrap_or_default()
                                .to_string(),
                        ),
                        Pushed::Assessed => {
                            // Partitioning by scope is what keeps a scope's events together.
                            let key = msg.key().unwrap_or_default();
                            if ev.scope.is_some_and(|s| s.as_bytes() != key) {
                                let key = String::from_utf8_lossy(key);
                                part.live.note_misrouted(&ev, part.source, position, &key);
                            }
                            None
                        }
                        _ => None,
                    }
                }
                Err(e) => {
                    let why = e.to_string();
                    part.live
                        .push_malformed(part.source, position, e.ts, why.clone());
                    Some(why)
                }
            },
        };
        match reason {
            None => Some(true),
            Some(why) => {
                self.dead_letter(dead, producer, msg, &why);
                Some(false)
            }
        }
    }

    /// Publishes the summary of every partition that changed since its last publication.
    fn publish(&self, producer: &BaseProducer) {
        let Some(topic) = &self.opts.config.summaries_topic else {
            return;
        };
        let now = now_ns();
        let mut out = Vec::new();
        {
            let parts = self.parts();
            for ((t, p), part) in parts.iter() {
                if part.published == Some((part.next, part.idle)) {
                    continue;
                }
                let env = Published {
                    version: PUBLISHED_VERSION,
                    owner: self.owner.clone(),
                    partition: format!("{t}/{p}"),
                    next: part.next,
                    idle: part.idle,
                    at: now,
                    summary: part.live.summary(),
                };
                out.push(((t.clone(), *p), (part.next, part.idle), env));
            }
        }
        let mut sent = Vec::new();
        for (key, mark, env) in out {
            let bytes = postcard::to_stdvec(&env).expect("a summary serializes");
            let record: BaseRecord<'_, str, [u8]> = BaseRecord::to(topic)
                .key(env.partition.as_str())
                .payload(bytes.as_slice());
            match producer.send(record) {
                Ok(()) => sent.push((key, mark)),
                Err((e, _)) => {
                    tracing::warn!(partition = %env.partition, bytes = bytes.len(), error = %e, "kafka: publishing a summary failed")
                }
            }
        }
        let mut parts = self.parts.write().unwrap_or_else(|p| p.into_inner());
        for (key, mark) in sent {
            if let Some(part) = parts.get_mut(&key) {
                part.published = Some(mark);
            }
        }
    }

    /// Reads every instance's published summaries, keeping the newest per partition.
    fn read_summaries(&self, reader: &BaseConsumer) {
        let topic = self
            .opts
            .config
            .summaries_topic
            .as_deref()
            .expect("a summaries topic");
        let mut assigned = false;
        let fingerprint = fencewatch_assess::live::fingerprint(&self.contract);
        while !self.stop.load(Ordering::Acquire) {
            if !assigned {
                // Every partition of the topic, from the beginning (a compacted topic keeps
                // the newest summary of each partition).
                match reader.fetch_metadata(Some(topic), Duration::from_secs(2)) {
                    Ok(md) => {
                        let mut tpl = TopicPartitionList::new();
                        for t in md.topics().iter().filter(|t| t.name() == topic) {
                            for p in t.partitions() {
                                let _ = tpl.add_partition_offset(topic, p.id(), Offset::Beginning);
                            }
                        }
                        if tpl.count() > 0 {
                            assigned = reader.assign(&tpl).is_ok();
                        }
                    }
                    Err(e) => tracing::debug!(error = %e, "kafka: summaries topic metadata"),
                }
                if !assigned {
                    std::thread::sleep(Duration::from_millis(500));
                    continue;
                }
            }
            let Some(Ok(msg)) = reader.poll(Duration::from_millis(200)) else {
                continue;
            };
            let Some(bytes) = msg.payload() else { continue };
            let env: Published = match postcard::from_bytes(bytes) {
                Ok(env) => env,
                Err(e) => {
                    tracing::warn!(error = %e, offset = msg.offset(), "kafka: unreadable summary");
                    continue;
                }
            };
            if env.version != PUBLISHED_VERSION || env.summary.fingerprint() != fingerprint {
                tracing::warn!(owner = %env.owner, partition = %env.partition, "kafka: a summary of another version or contract: ignored");
                continue;
            }
            if env.owner == self.owner {
                continue;
            }
            let mut remote = self.remote.write().unwrap_or_else(|p| p.into_inner());
            let newer = remote
                .get(&env.partition)
                .is_none_or(|old| (env.next, env.at) >= (old.next, old.at));
            if newer {
                remote.insert(env.partition.clone(), env);
            }
        }
    }

    /// Other instances' partitions (from the summaries topic) that this one does not own.
    pub fn remote(&self) -> RwLockReadGuard<'_, BTreeMap<String, Published>> {
        self.remote.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets the Kafka gauges (called before each scrape).
    pub fn refresh_metrics(&self, metrics: &Metrics) {
        metrics
            .kafka_assigned_partitions
            .set(self.parts().len() as i64);
        metrics
            .kafka_connected
            .set(i64::from(self.status.connected.load(Ordering::Acquire)));
        metrics.kafka_consumer_lag.clear();
        let next: Vec<((String, i32), i64)> = self
            .parts()
            .iter()
            .map(|(k, part)| (k.clone(), part.next))
            .collect();
        let ends = self.status.ends.lock().unwrap_or_else(|p| p.into_inner());
        for ((topic, partition), next) in next {
            let Some(&end) = ends.get(&(topic.clone(), partition)) else {
                continue;
            };
            let labels = crate::serve::metrics::PartitionLabels { topic, partition };
            let lag = (end - next).max(0);
            metrics.kafka_consumer_lag.get_or_create(&labels).set(lag);
        }
    }

    /// Copies a malformed message with its reason to the dead-letter topic or file, its value
    /// cut to a bound (see [`DEAD_LETTER_FILE_VALUE_BYTES`]). A dead-letter file that cannot
    /// be written is fatal, as a checkpoint is: offsets are not committed past a copy lost.
    fn dead_letter(
        &self,
        dead: &mut DeadLetter,
        producer: Option<&BaseProducer>,
        msg: &BorrowedMessage<'_>,
        why: &str,
    ) {
        let source = format!("{}/{}:{}", msg.topic(), msg.partition(), msg.offset());
        let payload_len = msg.payload().map_or(0, <[u8]>::len);
        let written = match dead {
            DeadLetter::Topic { topic } => {
                let producer = producer.expect("a dead-letter topic has a producer");
                let max = DEAD_LETTER_TOPIC_VALUE_BYTES.min(self.opts.max_line_bytes.max(1024));
                let original = payload_len.to_string();
                let mut headers = OwnedHeaders::new()
                    .insert(Header {
                        key: "fencewatch-reason",
                        value: Some(why),
                    })
                    .insert(Header {
                        key: "fencewatch-source",
                        value: Some(&source),
                    });
                let mut record: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(topic);
                if let Some(k) = msg.key() {
                    record = record.key(cut(k, max).0);
                }
                if let Some(p) = msg.payload() {
                    let (value, truncated) = cut(p, max);
                    if truncated {
                        headers = headers.insert(Header {
                            key: "fencewatch-truncated",
                            value: Some(&original),
                        });
                    }
                    record = record.payload(value);
                }
                producer
                    .send(record.headers(headers))
                    .map_err(|(e, _)| e.to_string())
            }
            DeadLetter::File(file) => {
                let key = msg.key().map(|k| cut(k, DEAD_LETTER_FILE_VALUE_BYTES).0);
                let value = msg.payload().map(|p| cut(p, DEAD_LETTER_FILE_VALUE_BYTES));
                let mut line = serde_json::json!({
                    "source": source,
                    "reason": why,
                    "key": key.map(String::from_utf8_lossy),
                    "payload": value.map(|(v, _)| String::from_utf8_lossy(v)),
                });
                if value.is_some_and(|(_, truncated)| truncated) {
                    line["payload_bytes"] = payload_len.into();
                    line["payload_truncated"] = true.into();
                }
                let mut bytes = serde_json::to_vec(&line).expect("a JSON value serializes");
                bytes.push(b'\n');
                if let Err(e) = file.append(&bytes) {
                    self.fail(format!(
                        "the dead-letter file {} cannot be written ({e}); offsets are not committed past {source}",
                        file.path.display()
                    ));
                    return;
                }
                Ok(())
            }
        };
        match written {
            Ok(()) => {
                self.status.dead_lettered.fetch_add(1, Ordering::Relaxed);
                self.metrics.kafka_dead_lettered.inc();
            }
            Err(e) => {
                tracing::error!(source = %source, error = %e, "kafka: dead-lettering failed")
            }
        }
    }
}

/// Moves every checkpoint of partition `topic/p` in `dir` (none of which verifies) into
/// `dir/quarantine/<ns>/`, logging each at WARN with its reason, and opens the store again,
/// empty: the partition is rebuilt from the earliest retained offset.
fn quarantine_checkpoints(dir: &Path, topic: &str, p: i32) -> Result<CheckpointStore, String> {
    let found =
        fencewatch_ingest::checkpoint::inspect(dir, |s| partition::decode_state(s).map(|_| ()))
            .map_err(|e| e.to_string())?;
    let to = dir.join("quarantine").join(now_ns().to_string());
    std::fs::create_dir_all(&to).map_err(|e| format!("cannot create {}: {e}", to.display()))?;
    let newest = found.first().map_or(0, |c| c.offset);
    for c in &found {
        let name = c.path.file_name().expect("a checkpoint file has a name");
        let dest = to.join(name);
        std::fs::rename(&c.path, &dest).map_err(|e| {
            format!(
                "cannot move the damaged checkpoint {} to {}: {e}",
                c.path.display(),
                dest.display()
            )
        })?;
        let reason = c.problem.as_deref().unwrap_or("not restorable");
        tracing::warn!(topic, partition = p, checkpoint = %c.path.display(), offset = c.offset, bytes = c.bytes, reason, quarantined = %dest.display(), "kafka: a damaged checkpoint was moved aside");
    }
    for d in [dir, to.as_path()] {
        std::fs::File::open(d)
            .and_then(|f| f.sync_all())
            .map_err(|e| format!("{}: {e}", d.display()))?;
    }
    tracing::warn!(topic, partition = p, checkpoints = found.len(), newest_offset = newest, quarantine = %to.display(), "kafka: no checkpoint of the partition is valid; rebuilding it from the earliest retained offset (exact as long as the topic still retains it from its beginning)");
    CheckpointStore::open(dir).map_err(|e| e.to_string())
}

/// The consumer of the summaries topic: no group membership, offsets never committed.
fn summaries_reader(kafka: &Kafka, topic: &str) -> Result<BaseConsumer, String> {
    let c = &kafka.opts.config;
    let mut cc = ClientConfig::new();
    cc.set("bootstrap.servers", &c.brokers)
        .set("group.id", format!("{}-summaries-{}", c.group, kafka.owner))
        .set("enable.auto.commit", "false")
        .set("client.id", "fencewatch-summaries");
    for (k, v) in c.settings.iter().filter(|(k, _)| is_shared_setting(k)) {
        cc.set(k, v);
    }
    cc.create()
        .map_err(|e| format!("kafka summaries consumer for `{topic}`: {e}"))
}

/// librdkafka settings that concern the connection (security, SASL, SSL) and so also apply
/// to the dead-letter producer.
fn is_shared_setting(key: &str) -> bool {
    key.starts_with("security.")
        || key.starts_with("sasl.")
        || key.starts_with("ssl.")
        || key.starts_with("client.dns")
        || key == "broker.address.family"
}

/// A topic name as a folder name (topic names are `[a-zA-Z0-9._-]`, this only guards).
fn sanitize(topic: &str) -> String {
    topic
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dead_letter_file_is_rotated_at_its_limit_keeping_one_previous() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dead-letter.ndjson");
        let mut f = DeadFile::new(path.clone());
        f.limit = 100;
        for i in 0..25 {
            f.append(format!("line {i:03}\n").as_bytes()).unwrap();
        }
        f.flush().unwrap();
        let now = std::fs::read_to_string(&path).unwrap();
        let old = std::fs::read_to_string(dir.path().join("dead-letter.ndjson.1")).unwrap();
        assert!(now.len() <= 100 && old.len() <= 100, "{now:?} {old:?}");
        assert!(now.ends_with("line 024\n"), "{now:?}");
        assert!(old.ends_with(&format!("line {:03}\n", 24 - now.lines().count())));
        // Reopened (a restart), it goes on counting from the file's size.
        let mut f = DeadFile::new(path.clone());
        f.limit = 100;
        f.append(b"x\n").unwrap();
        f.flush().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), now + "x\n");
    }

    #[test]
    fn a_cut_value_ends_on_a_character_boundary() {
        assert_eq!(cut(b"short", 10), (&b"short"[..], false));
        let text = "ab\u{e9}\u{e9}".as_bytes(); // a b 0xC3 0xA9 0xC3 0xA9
        assert_eq!(cut(text, 3), (&b"ab"[..], true));
        assert_eq!(cut(text, 4), (&text[..4], true));
        assert_eq!(cut(&[0xff; 10], 4), (&[0xff; 4][..], true));
    }
}
