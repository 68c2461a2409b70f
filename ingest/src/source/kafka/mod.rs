//! The Kafka source (SPEC §5, feature `kafka`): a consumer group member whose every assigned
//! partition is a [`Partition`] registered in the registry, checkpointed under
//! `<data_dir>/kafka/<topic>/<partition>`. Each message is one batch of one item
//! ([`Format::Message`]) at its offset, keyed by its message key, received at its Kafka
//! timestamp (so a replay decides `future timestamp` as the first pass did).
//!
//! Offsets are committed to the group only once the checkpoints covering them are durable. An
//! assigned partition is restored from its own checkpoint (a damaged newer one passed over;
//! all of them quarantined when none is valid, and the partition read again from the earliest
//! retained offset) and read from that offset, not the group's. A checkpoint or dead-letter
//! copy that cannot be written stops the consumer before anything is committed past it.
//! Malformed messages are copied to the dead-letter topic or file (`dead_letter.rs`); a
//! partition read to the end the broker last reported is idle, out of the watermark
//! (`context.rs`); other instances' summaries come through the summaries topic
//! (`summaries.rs`). The README's "Kafka ingest" states the guarantees.

mod context;
mod dead_letter;
pub mod produce;
mod summaries;
mod worker;

pub use dead_letter::{DEAD_LETTER_FILE_BYTES, DEAD_LETTER_FILE_VALUE_BYTES};
pub use summaries::Published;

use crate::checkpoint::CheckpointStore;
use crate::clock::SharedClock;
use crate::partition::restore::{WhenNoneUsable, restore, restore_at_or_below};
use crate::partition::{self, Partition};
use crate::registry::{Kind, Registry, Shared, read};
use crate::report::metrics::PartitionLabels;
use crate::report::{InternalEvent, Metrics, PartitionRestored};
use context::Context;
use dead_letter::{DeadFile, DeadLetter};
use fencewatch_assess::live::LiveOptions;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, Producer};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};
use worker::{SharedConsumer, Worker};
/// How often the seqs seen by all partitions are fed back to each
/// ([`Registry::absorb_seq_runs`]).
const ABSORB_EVERY: Duration = Duration::from_secs(1);
/// How long after the last refused oversized fetch response the source stays not ready
/// (librdkafka retries at least every `reconnect.backoff.max.ms`, 10 s by default).
const TOO_LARGE_FOR: Duration = Duration::from_secs(30);

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
    /// Static membership: this instance's stable id in the group (`group.instance.id`): a
    /// restarted instance takes its partitions back at once, without a rebalance.
    pub instance_id: Option<String>,
    /// librdkafka settings passed through (`security.protocol`, `sasl.*`, …), applied last.
    pub settings: Vec<(String, String)>,
}

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

/// Why the Kafka source failed. librdkafka's errors are kept as they are.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// librdkafka refused a client's settings.
    #[error("kafka {what}: {source}")]
    Client {
        /// Which client.
        what: String,
        /// librdkafka's error.
        source: KafkaError,
    },
    /// Subscribing failed.
    #[error("kafka subscribe to {topics}: {source}")]
    Subscribe {
        /// The topics.
        topics: String,
        /// librdkafka's error.
        source: KafkaError,
    },
    /// A folder could not be created.
    #[error("cannot create {path}: {source}")]
    Dir {
        /// The folder.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A thread could not be started.
    #[error("cannot start the kafka {0} thread: {1}")]
    Spawn(&'static str, std::io::Error),
    /// An assigned partition could not be restored.
    #[error("{dir}: {source}; move the folder away to rebuild the partition from Kafka")]
    Restore {
        /// The partition's folder.
        dir: PathBuf,
        /// The cause.
        source: partition::Error,
    },
    /// A checkpoint could not be written: nothing is committed past the last durable one.
    #[error(
        "the checkpoint of {partition} at offset {offset} cannot be written ({source}); its committed offset stays at or below {kept}, the last durable checkpoint"
    )]
    Checkpoint {
        /// `topic/partition`.
        partition: String,
        /// The offset it would have covered.
        offset: u64,
        /// The newest checkpoint kept.
        kept: u64,
        /// The cause.
        source: crate::checkpoint::Error,
    },
    /// The evidence archive could not be written: no checkpoint is taken past it.
    #[cfg(feature = "archive")]
    #[error(
        "the evidence archive cannot hold the rows of {partition} below offset {offset} ({source}); no checkpoint is taken past it"
    )]
    Archive {
        /// `topic/partition`.
        partition: String,
        /// The offset the checkpoint would have covered.
        offset: u64,
        /// The cause.
        source: crate::archive::Error,
    },
    /// The dead-letter file could not be written.
    #[error(
        "the dead-letter file {path} cannot be written ({source}); offsets are not committed past {at}"
    )]
    DeadLetterFile {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
        /// The message whose copy was lost.
        at: String,
    },
    /// The dead-letter file's buffer could not be written out.
    #[error("the dead-letter file {path}: {source}")]
    DeadLetterFlush {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// An earlier failure stopped the consumer.
    #[error("{0}")]
    Failed(String),
    /// The consumer thread panicked.
    #[error("the kafka consumer thread panicked")]
    Panicked,
}

/// One assigned partition, as the consumer thread keeps it.
#[derive(Debug)]
struct Assigned {
    /// `topic/partition`: its name in the registry and in provenance.
    name: String,
    part: Shared,
    /// What the last published summary covered: (next, idle).
    published: Option<(u64, bool)>,
    /// The thread that applies and checkpoints it (`None` once stopped).
    worker: Option<Worker>,
}

/// Where malformed messages and summaries go, shared by the workers and the consumer thread.
struct Sinks {
    producer: Option<BaseProducer>,
    dead: Mutex<DeadLetter>,
}

impl std::fmt::Debug for Sinks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sinks")
            .field("producer", &self.producer.is_some())
            .finish_non_exhaustive()
    }
}

/// The consumer, for the rebalance callback to split partition queues from (weak: the
/// consumer's context holds the source).
#[derive(Default)]
struct ConsumerRef(OnceLock<Weak<BaseConsumer<Context>>>);

impl std::fmt::Debug for ConsumerRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ConsumerRef")
    }
}

/// Figures for metrics and readiness.
#[derive(Debug, Default)]
struct KafkaStatus {
    /// A broker answered recently (cleared when librdkafka reports all brokers down).
    connected: AtomicBool,
    /// The end (high watermark) of each assigned partition as the broker last reported it.
    ends: Mutex<BTreeMap<(String, i32), i64>>,
    /// When librdkafka last refused a fetch response over `receive.message.max.bytes` (a
    /// message too large to receive: its partition cannot move), and its words.
    too_large: Mutex<Option<(Instant, String)>>,
}

/// The Kafka source, shared by the consumer thread, its callbacks and the service.
#[derive(Debug)]
pub struct KafkaSource {
    registry: Arc<Registry>,
    assigned: Mutex<BTreeMap<(String, i32), Assigned>>,
    consumer: ConsumerRef,
    sinks: Sinks,
    status: KafkaStatus,
    stop: AtomicBool,
    opts: KafkaOptions,
    metrics: Metrics,
    clock: SharedClock,
    /// A fatal error (a checkpoint or dead-letter copy that cannot be written): the service
    /// stops.
    failure: Mutex<Option<String>>,
    /// This instance's name in published summaries.
    owner: String,
    /// Partitions whose end went back below the applied offset, to read again.
    rewound: Mutex<Vec<(String, i32)>>,
}

/// The running consumer thread.
#[derive(Debug)]
pub struct KafkaConsumer(std::thread::JoinHandle<Result<(), Error>>);

impl KafkaConsumer {
    /// Waits for the consumer to checkpoint, commit and leave the group.
    pub fn join(self) -> Result<(), Error> {
        self.0.join().unwrap_or(Err(Error::Panicked))
    }
}

impl KafkaSource {
    /// Creates the consumer, subscribes and starts the consumer thread; its partitions
    /// register in `registry` as they are assigned. Fails when librdkafka refuses the
    /// settings.
    pub fn start(
        registry: Arc<Registry>,
        opts: KafkaOptions,
        metrics: Metrics,
        clock: SharedClock,
    ) -> Result<(Arc<KafkaSource>, KafkaConsumer), Error> {
        std::fs::create_dir_all(&opts.dir).map_err(|source| Error::Dir {
            path: opts.dir.clone(),
            source,
        })?;
        registry.expect_streamed();
        let c = &opts.config;
        let producer = if c.dead_letter_topic.is_some() || c.summaries_topic.is_some() {
            let mut pc = ClientConfig::new();
            pc.set("bootstrap.servers", &c.brokers)
                .set("client.id", "fencewatch")
                .set("compression.type", "gzip")
                .set("message.max.bytes", "10000000");
            for (k, v) in c.settings.iter().filter(|(k, _)| is_shared_setting(k)) {
                pc.set(k, v);
            }
            let producer: BaseProducer = pc.create().map_err(|source| Error::Client {
                what: "producer".into(),
                source,
            })?;
            Some(producer)
        } else {
            None
        };
        let dead = match &c.dead_letter_topic {
            Some(topic) => DeadLetter::Topic {
                topic: topic.clone(),
            },
            None => DeadLetter::File(DeadFile::new(opts.dir.join("dead-letter.ndjson"))),
        };
        let kafka = Arc::new(KafkaSource {
            registry,
            assigned: Mutex::new(BTreeMap::new()),
            consumer: ConsumerRef::default(),
            sinks: Sinks {
                producer,
                dead: Mutex::new(dead),
            },
            status: KafkaStatus::default(),
            stop: AtomicBool::new(false),
            opts,
            metrics,
            clock,
            failure: Mutex::new(None),
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
        if let Some(id) = &c.instance_id {
            cc.set("group.instance.id", id);
        }
        for (k, v) in &c.settings {
            cc.set(k, v);
        }
        let consumer: BaseConsumer<Context> = cc
            .create_with_context(Context {
                kafka: kafka.clone(),
            })
            .map_err(|source| Error::Client {
                what: "consumer".into(),
                source,
            })?;
        let consumer = Arc::new(consumer);
        let _ = kafka.consumer.0.set(Arc::downgrade(&consumer));
        let topics: Vec<&str> = c.topics.iter().map(String::as_str).collect();
        consumer
            .subscribe(&topics)
            .map_err(|source| Error::Subscribe {
                topics: c.topics.join(","),
                source,
            })?;
        if let Some(topic) = &c.summaries_topic {
            let reader = summaries::summaries_reader(&kafka, topic)?;
            let k = kafka.clone();
            std::thread::Builder::new()
                .name("fencewatch-summaries".into())
                .spawn(move || k.read_summaries(&reader))
                .map_err(|e| Error::Spawn("summaries", e))?;
        }
        let k = kafka.clone();
        let handle = std::thread::Builder::new()
            .name("fencewatch-kafka".into())
            .spawn(move || {
                let r =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| k.consume(&consumer)))
                        .unwrap_or(Err(Error::Panicked));
                if let Err(e) = &r {
                    // A checkpoint or the dead-letter file could not be written: nothing past
                    // the last durable checkpoint was committed. The service stops (exit 1),
                    // as when the WAL cannot be written, and is not ready meanwhile.
                    k.fail(e);
                    tracing::error!(error = %e, "the kafka consumer stopped");
                }
                r
            })
            .map_err(|e| Error::Spawn("consumer", e))?;
        Ok((kafka, KafkaConsumer(handle)))
    }

    fn assigned(&self) -> MutexGuard<'_, BTreeMap<(String, i32), Assigned>> {
        self.assigned.lock().unwrap_or_else(|p| p.into_inner())
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

    fn fail(&self, why: &Error) {
        tracing::error!(error = %why, "kafka: fatal");
        self.failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert_with(|| why.to_string());
        self.stop.store(true, Ordering::Release);
    }

    fn part_dir(&self, topic: &str, p: i32) -> PathBuf {
        self.opts.dir.join(sanitize(topic)).join(p.to_string())
    }

    /// The dead-letter sink.
    fn dead(&self) -> MutexGuard<'_, DeadLetter> {
        self.sinks.dead.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Restores partition `(topic, p)` from its checkpoint (or starts it empty), registers it,
    /// splits its queue from `consumer`'s and starts its worker; returns the offset to consume
    /// from. Call before the partition is assigned, so that none of its messages goes to the
    /// consumer's own queue. A damaged newer checkpoint is passed over for the older one; when
    /// none is valid the damaged files are moved into `quarantine/<ns>/` and the partition is
    /// rebuilt from the earliest retained offset: Kafka still holds what the checkpoints
    /// covered, as long as its retention does.
    fn open_part(self: &Arc<Self>, topic: &str, p: i32) -> Result<u64, Error> {
        // Assigned twice without a revocation between: the old worker checkpoints and ends
        // before the partition is restored again.
        let old = self.assigned().remove(&(topic.to_string(), p));
        if let Some(w) = old.and_then(|a| a.worker) {
            w.join();
        }
        let started = Instant::now();
        let dir = self.part_dir(topic, p);
        let fail = |source| Error::Restore {
            dir: dir.clone(),
            source,
        };
        let mut store = CheckpointStore::open(&dir).map_err(|e| fail(e.into()))?;
        let none_usable = WhenNoneUsable::Quarantine {
            at: self.clock.now().0,
        };
        let contract = self.registry.contract().clone();
        let mut restored =
            restore(&mut store, contract.clone(), self.opts.live, none_usable).map_err(fail)?;
        let name = format!("{topic}/{p}");
        // An archive that lists the partition below the checkpoint lacks the rows between
        // (it is not the one the checkpoint was taken beside): they are consumed and applied
        // again from the newest checkpoint at or below it, else the partition is refused.
        if let (Some(archived), Some(at)) = (self.registry.archive_lists(&name), restored.from)
            && archived < at
        {
            let behind = |kept| {
                fail(crate::partition::Error::ArchiveBehindState {
                    partition: name.clone(),
                    archived,
                    restored: at,
                    kept,
                })
            };
            restored = restore_at_or_below(&mut store, contract, archived)
                .map_err(fail)?
                .ok_or_else(|| behind(String::new()))?;
            // Applied again only if the broker still holds those messages: past its retention,
            // they would be counted as lost though the newer checkpoint held them.
            let from = restored.from.unwrap_or(0);
            match self.log_start(topic, p) {
                Ok(start) if start > from => {
                    return Err(behind(format!(
                        " (the checkpoint at offset {from} is, but the broker holds the partition only from offset {start})"
                    )));
                }
                Ok(_) => {}
                // Unchecked here: messages the broker no longer holds are counted as lost
                // when the partition is read (the worker's check).
                Err(e) => {
                    tracing::warn!(partition = %name, error = %e, "kafka: the broker's log start could not be read; replaying from the older checkpoint unchecked")
                }
            }
            tracing::warn!(
                partition = %name,
                archived,
                checkpoint = at,
                replay_from = restored.from.unwrap_or(0),
                "archive: the archive holds the partition's rows only below the checkpoint; the messages between are consumed again from an older state, and archived"
            );
        }
        // A restart with another configuration: its options are in force from here on.
        restored.live.set_options(self.opts.live);
        let next = restored.from.unwrap_or(0);
        PartitionRestored {
            partition: &name,
            restored_from: restored.from,
            next_offset: next,
            replayed: None,
            passed_over: &restored.passed_over,
            quarantined: restored.quarantined.as_ref(),
            elapsed: started.elapsed(),
        }
        .emit(&self.metrics);
        let consumer: SharedConsumer = self
            .consumer
            .0
            .get()
            .and_then(Weak::upgrade)
            .ok_or_else(|| Error::Failed("the kafka consumer is closing".into()))?;
        let queue = consumer
            .split_partition_queue(topic, p)
            .ok_or_else(|| Error::Failed(format!("kafka: no queue for partition {name}")))?;
        let mut partition = Partition::new(&name, restored.live, next);
        self.registry.prepare(&mut partition);
        let part = self.registry.register(Kind::Streamed, partition);
        let worker = Worker::spawn(
            self.clone(),
            consumer,
            queue,
            topic,
            p,
            &name,
            part.clone(),
            store,
        )?;
        let assigned = Assigned {
            name,
            part,
            published: None,
            worker: Some(worker),
        };
        self.assigned().insert((topic.to_string(), p), assigned);
        Ok(next)
    }

    /// Stops the workers of `listed` (each ends its batch, checkpoints and commits, all at
    /// once) and drops the partitions: call before they are given up.
    fn release(&self, listed: &[(String, i32)]) {
        let workers: Vec<Worker> = {
            let mut assigned = self.assigned();
            listed
                .iter()
                .filter_map(|key| assigned.get_mut(key).and_then(|a| a.worker.take()))
                .collect()
        };
        for w in &workers {
            w.signal();
        }
        for w in workers {
            w.join();
        }
        let mut assigned = self.assigned();
        let mut ends = self.status.ends.lock().unwrap_or_else(|p| p.into_inner());
        for key in listed {
            if let Some(a) = assigned.remove(key) {
                self.registry.unregister(&a.name);
            }
            ends.remove(key);
        }
    }

    /// The consumer loop: serve the callbacks (rebalances, statistics), feed seqs across
    /// partitions, publish summaries; the workers do the rest. On stop, every worker
    /// checkpoints and commits a last time before the group is left.
    fn consume(&self, consumer: &BaseConsumer<Context>) -> Result<(), Error> {
        let mut last_publish = Instant::now();
        let mut last_absorb = Instant::now();
        while !self.stop.load(Ordering::Acquire) {
            // Polling runs the rebalance and statistics callbacks, which take the partitions'
            // locks themselves. Messages come through the workers' queues, split before
            // assignment; one that still came here is applied in its partition's order.
            match consumer.poll(Duration::from_millis(100)) {
                Some(Ok(msg)) => self.apply_stray(&[Ok(msg)]),
                Some(Err(KafkaError::PartitionEOF(_))) | None => {}
                Some(Err(e)) => tracing::warn!(error = %e, "kafka: consume"),
            }
            self.rewind();
            if last_absorb.elapsed() >= ABSORB_EVERY {
                self.registry.absorb_seq_runs();
                last_absorb = Instant::now();
            }
            if let Some(producer) = &self.sinks.producer {
                if last_publish.elapsed() >= summaries::PUBLISH_EVERY {
                    self.publish(producer);
                    last_publish = Instant::now();
                }
                producer.poll(Duration::ZERO);
            }
        }
        let all: Vec<(String, i32)> = self.assigned().keys().cloned().collect();
        self.release(&all);
        if let Some(f) = self.failure() {
            return Err(Error::Failed(f));
        }
        if let Some(producer) = &self.sinks.producer {
            self.publish(producer);
            let _ = producer.flush(Duration::from_secs(10));
        }
        self.dead().flush()?;
        consumer.unsubscribe();
        tracing::info!("kafka consumer stopped after a last checkpoint");
        Ok(())
    }

    /// Applies a message that came through the consumer's queue rather than its partition's.
    fn apply_stray(&self, polled: &[Result<rdkafka::message::BorrowedMessage<'_>, KafkaError>]) {
        let Some(Ok(msg)) = polled.first() else {
            return;
        };
        let key = (msg.topic().to_string(), msg.partition());
        let found = self
            .assigned()
            .get(&key)
            .map(|a| (a.name.clone(), a.part.clone()));
        if let Some((name, part)) = found {
            tracing::debug!(partition = %name, offset = msg.offset(), "kafka: a message came through the consumer's queue");
            self.apply_polled(&name, &part, polled);
        }
    }

    /// Has the workers of the partitions whose end went back read them again from their
    /// beginning: the state keeps what it learnt (high-water marks, counterexamples), the new
    /// log is assessed on top.
    fn rewind(&self) {
        let keys = std::mem::take(&mut *self.rewound.lock().unwrap_or_else(|p| p.into_inner()));
        let assigned = self.assigned();
        for key in keys {
            if let Some(w) = assigned.get(&key).and_then(|a| a.worker.as_ref()) {
                w.rewind();
            }
        }
    }

    /// Sets the Kafka gauges (called before each scrape).
    pub fn refresh_metrics(&self, metrics: &Metrics) {
        let next: Vec<((String, i32), u64)> = self
            .assigned()
            .iter()
            .map(|(k, a)| (k.clone(), read(&a.part).next()))
            .collect();
        metrics.kafka_assigned_partitions.set(next.len() as i64);
        metrics
            .kafka_connected
            .set(i64::from(self.status.connected.load(Ordering::Acquire)));
        metrics.kafka_consumer_lag.clear();
        let ends = self.status.ends.lock().unwrap_or_else(|p| p.into_inner());
        for ((topic, partition), next) in next {
            let Some(&end) = ends.get(&(topic.clone(), partition)) else {
                continue;
            };
            let labels = PartitionLabels { topic, partition };
            let lag = (end - next as i64).max(0);
            metrics.kafka_consumer_lag.get_or_create(&labels).set(lag);
        }
    }
}

/// librdkafka settings that concern the connection (security, SASL, SSL) and so also apply
/// to the dead-letter producer and the summaries consumer.
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
