//! `fencewatch simulate --kafka`: the simulated workload produced to a Kafka topic, one message
//! per event, **keyed by its scope** (SPEC §5: producers key by scope, so that one scope's events
//! land in one partition, in order, and one consumer assesses them). Events without a scope
//! (heartbeats) carry no key and go to any partition.
//!
//! The generator ([`crate::simulate`]) hands each event with its scope to a [`Sink`] here, so
//! the key costs no second parse. One `BaseProducer`, polled from the generating thread:
//!
//! - **Backpressure.** When librdkafka's queue is full, `send` is retried after polling (which
//!   serves delivery reports and frees room); nothing is dropped.
//! - **Pacing.** With a rate, event `i` is sent no earlier than `i / rate` s after the start,
//!   and the waits are spent polling. Without one, as fast as the broker takes them.
//! - **Delivery.** Every message has `message.timeout.ms` (the timeout) to be acknowledged. The
//!   first failed delivery stops production, and so does a final flush that does not finish
//!   within the timeout: the command then exits non-zero saying how many events were lost.

use crate::simulate::{Sink, Truth, Workload, simulate_into};
use rdkafka::ClientConfig;
use rdkafka::client::ClientContext;
use rdkafka::producer::{
    BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext, PurgeConfig,
};
use rdkafka::types::{RDKafkaErrorCode, RDKafkaRespErr};
use std::io;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Where and how fast to produce.
#[derive(Debug, Clone)]
pub struct Target {
    /// Bootstrap servers, `host:port[,host:port…]`.
    pub brokers: String,
    /// The topic.
    pub topic: String,
    /// Events per second of wall time; `None`: as fast as possible.
    pub rate: Option<u64>,
    /// Send each event when the wall clock reaches its time (for `--start now`): a live
    /// workload whose event time keeps up with the wall clock.
    pub live: bool,
    /// How long a message may take to be acknowledged (and the broker to answer at all).
    pub timeout: Duration,
    /// librdkafka settings applied last (`security.protocol`, `sasl.*`, `linger.ms`, …).
    pub settings: Vec<(String, String)>,
}

/// What was produced.
#[derive(Debug, Clone, Copy)]
pub struct Produced {
    /// Events acknowledged by the broker.
    pub events: u64,
    /// From the first send to the last acknowledgement.
    pub elapsed: Duration,
}

impl Produced {
    /// Events per second.
    pub fn rate(&self) -> f64 {
        self.events as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Why producing failed. librdkafka's errors are kept as text: their own sources repeat them.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// librdkafka refused the settings.
    #[error("kafka producer: {0}")]
    Client(String),
    /// No broker answered.
    #[error("cannot reach kafka at {brokers} within {secs} s: {why}")]
    Unreachable {
        /// The bootstrap servers.
        brokers: String,
        /// The timeout.
        secs: u64,
        /// librdkafka's error.
        why: String,
    },
    /// The broker does not know the topic.
    #[error("topic {0} does not exist on the broker (create it first): {1}")]
    Topic(String, String),
    /// A message could not be enqueued.
    #[error("producing to {topic}: {why}")]
    Send {
        /// The topic.
        topic: String,
        /// librdkafka's error.
        why: String,
    },
    /// Messages were not acknowledged in time, or were refused.
    #[error(
        "{lost} of {sent} events sent to {topic} were not delivered within {secs} s (delivered: {delivered}): {why}"
    )]
    Undelivered {
        /// The topic.
        topic: String,
        /// Events handed to librdkafka.
        sent: u64,
        /// Events acknowledged.
        delivered: u64,
        /// Events failed or never acknowledged.
        lost: u64,
        /// The timeout.
        secs: u64,
        /// The first failure.
        why: String,
    },
    /// The generator failed for another reason.
    #[error("generating the workload: {0}")]
    Generate(#[source] io::Error),
}

/// Delivery reports, counted.
#[derive(Debug, Default)]
struct Deliveries {
    ok: AtomicU64,
    failed: AtomicU64,
    first_failure: Mutex<Option<String>>,
}

impl Deliveries {
    fn failure(&self) -> Option<String> {
        self.first_failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => {
                self.ok.fetch_add(1, Ordering::Relaxed);
            }
            Err((e, _)) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                self.first_failure
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_or_insert_with(|| e.to_string());
            }
        }
    }
}

/// The generator's sink: sends each event, paced, and stops at the first failure.
struct KafkaSink<'a> {
    producer: &'a BaseProducer<Deliveries>,
    topic: &'a str,
    /// The start and the interval between two events.
    pace: Option<(Instant, f64)>,
    /// Live: each event is sent when the wall clock reaches its time (its offset from the
    /// first event's time after the start), so event time keeps up with the wall clock.
    live: Option<(Instant, Option<i64>)>,
    sent: u64,
    /// Why the sink stopped the generator (the generator only sees an `io::Error`).
    error: Option<Error>,
}

impl KafkaSink<'_> {
    fn stop(&mut self, e: Error) -> io::Error {
        let text = e.to_string();
        self.error = Some(e);
        io::Error::other(text)
    }

    fn check_deliveries(&mut self) -> io::Result<()> {
        match self.producer.context().failure() {
            // Details (counts) are reported after the flush.
            Some(why) => Err(io::Error::other(why)),
            None => Ok(()),
        }
    }
}

impl Sink for KafkaSink<'_> {
    fn event(&mut self, json: &[u8], scope: Option<&str>, ts: i64) -> io::Result<()> {
        if let Some((start, first)) = &mut self.live {
            let first = *first.get_or_insert(ts);
            let due = *start + Duration::from_nanos(ts.saturating_sub(first).max(0) as u64);
            while let Some(wait) = due.checked_duration_since(Instant::now()) {
                self.producer.poll(wait);
            }
        } else if let Some((start, interval)) = self.pace {
            let due = start + Duration::from_secs_f64(self.sent as f64 * interval);
            while let Some(wait) = due.checked_duration_since(Instant::now()) {
                self.producer.poll(wait);
            }
        }
        let mut record = BaseRecord::<str, [u8]>::to(self.topic).payload(json);
        if let Some(scope) = scope {
            record = record.key(scope);
        }
        loop {
            match self.producer.send(record) {
                Ok(()) => break,
                Err((e, back)) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) => {
                    // Room comes back as acknowledgements are served; a dead broker ends this
                    // through failed deliveries after the timeout.
                    self.producer.poll(Duration::from_millis(10));
                    self.check_deliveries()?;
                    record = back;
                }
                Err((e, _)) => {
                    let topic = self.topic.to_string();
                    let why = e.to_string();
                    return Err(self.stop(Error::Send { topic, why }));
                }
            }
        }
        self.sent += 1;
        if self.sent.is_multiple_of(1024) {
            self.producer.poll(Duration::ZERO);
            self.check_deliveries()?;
        }
        Ok(())
    }
}

/// Creates the producer and checks that a broker answers and knows the topic.
fn connect(target: &Target) -> Result<BaseProducer<Deliveries>, Error> {
    let mut cc = ClientConfig::new();
    cc.set("bootstrap.servers", &target.brokers)
        .set("client.id", "fencewatch-simulate")
        .set(
            "message.timeout.ms",
            target.timeout.as_millis().max(1).to_string(),
        )
        .set("linger.ms", "5");
    for (k, v) in &target.settings {
        cc.set(k, v);
    }
    let producer: BaseProducer<Deliveries> = cc
        .create_with_context(Deliveries::default())
        .map_err(|e| Error::Client(e.to_string()))?;
    let metadata = producer
        .client()
        .fetch_metadata(Some(&target.topic), target.timeout)
        .map_err(|e| Error::Unreachable {
            brokers: target.brokers.clone(),
            secs: target.timeout.as_secs(),
            why: e.to_string(),
        })?;
    let topic = metadata.topics().iter().find(|t| t.name() == target.topic);
    if let Some(err) = topic.and_then(|t| t.error())
        && err == RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART
    {
        let why = RDKafkaErrorCode::from(err).to_string();
        return Err(Error::Topic(target.topic.clone(), why));
    }
    Ok(producer)
}

/// Generates `wl` and produces it to `target`; returns the ground truth and what was produced
/// once every event is acknowledged.
pub fn produce(wl: &Workload, target: &Target) -> Result<(Truth, Produced), Error> {
    let producer = connect(target)?;
    let started = Instant::now();
    let mut sink = KafkaSink {
        producer: &producer,
        topic: &target.topic,
        pace: target
            .rate
            .filter(|&r| r > 0)
            .map(|r| (started, 1.0 / r as f64)),
        live: target.live.then_some((started, None)),
        sent: 0,
        error: None,
    };
    let generated = simulate_into(wl, &mut sink);
    let (sent, sink_error) = (sink.sent, sink.error.take());
    if let Some(e) = sink_error {
        producer.purge(PurgeConfig::default().queue().inflight());
        return Err(e);
    }
    let stopped = generated.is_err();
    if stopped {
        // A failed delivery: what is still queued would fail the same way.
        producer.purge(PurgeConfig::default().queue());
    }
    let flushed = producer.flush(target.timeout + Duration::from_secs(5));
    let elapsed = started.elapsed();
    let d = producer.context();
    let (delivered, failed) = (
        d.ok.load(Ordering::Acquire),
        d.failed.load(Ordering::Acquire),
    );
    if failed > 0 || flushed.is_err() || delivered < sent {
        let why = d.failure().unwrap_or_else(|| match flushed {
            Err(e) => format!("{e} ({} still in flight)", producer.in_flight_count()),
            Ok(()) => "not acknowledged".into(),
        });
        return Err(Error::Undelivered {
            topic: target.topic.clone(),
            sent,
            delivered,
            lost: sent - delivered.min(sent),
            secs: target.timeout.as_secs(),
            why,
        });
    }
    let truth = generated.map_err(Error::Generate)?;
    Ok((
        truth,
        Produced {
            events: delivered,
            elapsed,
        },
    ))
}
