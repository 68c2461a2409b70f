//! Benchmark of `fencewatch serve`'s Kafka ingest (SPEC §7: "Kafka ingest at least half of a
//! bare consumer's throughput on the same topic"), against the real release binary.
//!
//! ```sh
//! cargo build --release -p fencewatch-api          # the binary under test, first
//! cargo run --release -p fencewatch-api --example kafka_bench -- --events 1000000 --runs 3
//! ```
//!
//! 1. **Broker.** `--brokers` if given, else a `tansu` broker (`--tansu`, default
//!    `~/.cargo/bin/tansu` or `tansu` on the PATH) on a free 127.0.0.1 port, in memory.
//! 2. **Topic.** A fresh topic of `--partitions` partitions (rdkafka's admin client), filled
//!    with the `fencewatch simulate` workload produced exactly as `simulate --kafka` does
//!    (`fencewatch_ingest::source::kafka::produce`): `--events` commits over `--scopes` scopes with
//!    rising epochs and handovers, heartbeats, and `--stale` paused old owners (stale
//!    commits); keyed by scope. The message count is what the broker acknowledged.
//! 3. **Runs.** `--runs` times, alternating which goes first, in one process and on one
//!    broker and topic:
//!    - **bare**: an rdkafka `BaseConsumer` in a fresh group that only counts messages, timed
//!      from its creation to the last message; its CPU time is this process's.
//!    - **fencewatch**: `fencewatch serve --kafka-brokers … --kafka-topic … --kafka-group
//!      <fresh> --data-dir <tmp> --listen 127.0.0.1:0` under the workload's contract, timed
//!      from spawn until its Kafka threads last worked before `fencewatch_kafka_messages_total`
//!      on `/metrics` (polled every `--poll-ms`, default 50 ms, as Prometheus would scrape)
//!      reached the count (their CPU time sampled from `/proc` every 10 ms; the scrape that
//!      saw the count is reported beside it, up to a scrape late). Reported: msgs/s, CPU time (utime +
//!      stime from `/proc/PID/stat`, also by thread: the Kafka threads `fencewatch-kafka*`
//!      (the consumer's and each partition's worker), librdkafka's `rdk:*`, the others,
//!      mostly tokio serving the scrapes), µs of CPU per
//!      event, max RSS (`VmHWM`), the broker's CPU, and as a check the events ingested and
//!      rejected and the counterexamples against the workload's ground truth (plus the
//!      partitions the log says were read again).
//!
//! Both consumers join a group and fetch with librdkafka's defaults, so group join and fetch
//! waits are in both figures; `--kafka-setting KEY=VALUE` changes both (tansu answers fetches
//! slowly under the default `fetch.wait.max.ms`, which hides the consumers' own costs:
//! `--kafka-setting fetch.wait.max.ms=100` shows them), `--serve-kafka-setting` only
//! `serve`'s. The broker, the consumer and the service share the machine's cores. A service
//! that stops answering `/metrics` fails the run and keeps its log and data directory.

mod common;

use clap::Parser;
use common::{Cpu, hwm_mib, median, metric};
use fencewatch_assess::time::EventTime;
use fencewatch_ingest::simulate::{Faults, Workload};
use fencewatch_ingest::source::kafka::produce::{Target, produce};
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Benchmark of `fencewatch serve` Kafka ingest against a bare rdkafka consumer.
#[derive(Debug, Parser)]
struct Args {
    /// The `fencewatch` binary (build it with `cargo build --release -p fencewatch-api`).
    #[arg(long, default_value = "target/release/fencewatch")]
    bin: PathBuf,
    /// Bootstrap servers of an existing broker [default: start tansu].
    #[arg(long)]
    brokers: Option<String>,
    /// The tansu binary [default: ~/.cargo/bin/tansu, else `tansu`].
    #[arg(long)]
    tansu: Option<PathBuf>,
    /// Partitions of the topic.
    #[arg(long, default_value_t = 4)]
    partitions: i32,
    /// Commits to generate (heartbeats and handover fences come on top, about 5%).
    #[arg(long, default_value_t = 1_000_000)]
    events: u64,
    /// Distinct scopes.
    #[arg(long, default_value_t = 100_000)]
    scopes: u64,
    /// Old owners that resume after a handover (stale commits).
    #[arg(long, default_value_t = 20)]
    stale: u64,
    /// Milliseconds between two scrapes of `/metrics` while `serve` consumes (a scrape is
    /// not free: it copies the summary of each partition that moved and merges them).
    #[arg(long, default_value_t = 50)]
    poll_ms: u64,
    /// Measured runs of each consumer, alternating which goes first.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// A librdkafka setting for both consumers, the bare one and `serve`'s (through `[kafka]`
    /// of its config file), repeatable; e.g. `fetch.wait.max.ms=100`.
    #[arg(long = "kafka-setting", value_name = "KEY=VALUE")]
    kafka_settings: Vec<String>,
    /// A librdkafka setting for `serve`'s consumer only, repeatable; e.g.
    /// `statistics.interval.ms=0`.
    #[arg(long = "serve-kafka-setting", value_name = "KEY=VALUE")]
    serve_kafka_settings: Vec<String>,
    /// Keep the services' data directories and logs (their paths go to stderr).
    #[arg(long)]
    keep: bool,
}

/// `KEY=VALUE` settings.
fn settings(kvs: &[String]) -> impl Iterator<Item = (&str, &str)> {
    kvs.iter().map(|kv| {
        kv.split_once('=')
            .unwrap_or_else(|| panic!("{kv:?}: expected KEY=VALUE"))
    })
}

/// A child process killed when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local address").port()
}

/// Starts tansu in memory on a free port and waits until it accepts connections.
fn start_tansu(bin: Option<&Path>, dir: &Path) -> (Killed, String) {
    let bin = bin.map(Path::to_path_buf).unwrap_or_else(|| {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let local = home.map(|h| h.join(".cargo/bin/tansu"));
        local.filter(|p| p.exists()).unwrap_or("tansu".into())
    });
    let port = free_port();
    let url = format!("tcp://127.0.0.1:{port}");
    let log = std::fs::File::create(dir.join("tansu.log")).expect("create the tansu log");
    let child = Command::new(&bin)
        .args([
            "broker",
            "--listener-url",
            &url,
            "--advertised-listener-url",
            &url,
        ])
        .args(["--storage-engine", "memory://tansu/"])
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e} (or pass --brokers)", bin.display()));
    let child = Killed(child);
    let addr = format!("127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(&addr).is_err() {
        assert!(Instant::now() < deadline, "tansu never listened on {addr}");
        std::thread::sleep(Duration::from_millis(50));
    }
    (child, addr)
}

fn create_topic(brokers: &str, topic: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .expect("an admin client");
    let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let results = rt
        .block_on(admin.create_topics([&new], &opts))
        .expect("create the topic");
    for r in results {
        if let Err((name, code)) = r {
            panic!("creating topic {name}: {code}");
        }
    }
}

/// One measurement.
struct Run {
    secs: f64,
    /// For `serve`: when a scrape first showed every message (`secs` is when its Kafka
    /// threads last worked, see [`BusyEnd`]).
    seen_secs: Option<f64>,
    /// CPU seconds of the broker during the run, when this benchmark started it.
    broker_cpu: Option<f64>,
    cpu: Cpu,
    rss_mib: f64,
    check: String,
}

/// The bare consumer: a fresh group, counts messages until `total`.
fn bare(args: &Args, brokers: &str, topic: &str, group: &str, total: u64) -> Run {
    let me = std::process::id();
    let (cpu0, started) = (Cpu::of(me), Instant::now());
    let mut cc = ClientConfig::new();
    cc.set("bootstrap.servers", brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest");
    for (k, v) in settings(&args.kafka_settings) {
        cc.set(k, v);
    }
    let consumer: BaseConsumer = cc.create().expect("a consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    let (mut n, deadline) = (0u64, started + Duration::from_secs(600));
    while n < total {
        assert!(
            Instant::now() < deadline,
            "bare: {n} of {total} after 600 s"
        );
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(_)) => n += 1,
            Some(Err(e)) => eprintln!("bare consumer: {e}"),
            None => {}
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let cpu1 = Cpu::of(me);
    drop(consumer);
    Run {
        secs,
        seen_secs: None,
        broker_cpu: None,
        cpu: cpu1.since(&cpu0),
        rss_mib: hwm_mib(me),
        check: String::new(),
    }
}

/// What the service must report once it has read everything.
struct Expect {
    total: u64,
    stale: u64,
}

/// `fencewatch serve` on the topic in a fresh group, until it has consumed `total` messages.
fn fencewatch(
    args: &Args,
    brokers: &str,
    topic: &str,
    group: &str,
    contract: &str,
    e: &Expect,
) -> Run {
    let tmp = tempfile::Builder::new()
        .prefix("kafka-bench-")
        .tempdir()
        .expect("temp dir");
    // Removed at the end unless --keep; kept when the run fails.
    let dir = &tmp.keep();
    std::fs::write(dir.join("contract.toml"), contract).expect("write the contract");
    let mut config = String::from("[kafka]\n");
    for (k, v) in settings(&args.kafka_settings).chain(settings(&args.serve_kafka_settings)) {
        config.push_str(&format!("{k:?} = {v:?}\n"));
    }
    std::fs::write(dir.join("serve.toml"), config).expect("write the config");
    let log = std::fs::File::create(dir.join("serve.log")).expect("create the log");
    let started = Instant::now();
    let child = Command::new(&args.bin)
        .args(["serve", "--listen", "127.0.0.1:0", "--contract"])
        .arg(dir.join("contract.toml"))
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(["--kafka-brokers", brokers, "--kafka-topic", topic])
        .args(["--kafka-group", group])
        .arg("--config")
        .arg(dir.join("serve.toml"))
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e} (cargo build --release)", args.bin.display()));
    let mut child = Killed(child);
    let pid = child.0.id();
    let mut out = BufReader::new(child.0.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("read the first line");
    let base = line.trim().strip_prefix("fencewatch listening on ");
    let base = base
        .unwrap_or_else(|| panic!("first line: {line:?} (see {})", dir.display()))
        .to_string();
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    let agent = ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(10)))
            .build(),
    );
    let url = format!("{base}/metrics");
    let scrape = || -> Result<String, ureq::Error> {
        let mut r = agent.get(&url).call()?;
        r.body_mut().with_config().limit(64 << 20).read_to_string()
    };
    // A service that stops answering or never gets there: stop it, keep its log, say so.
    let give_up = |why: String| -> ! {
        panic!(
            "fencewatch: {why}, {:.1} s after start; log and data kept in {}",
            started.elapsed().as_secs_f64(),
            dir.display()
        )
    };
    let deadline = started + Duration::from_secs(600);
    let busy = BusyEnd::watch(pid, started);
    let mut seen = 0.0;
    let (seen_secs, cpu, rss_mib) = loop {
        let text = scrape().unwrap_or_else(|err| {
            give_up(format!("GET /metrics failed ({err}) after {seen} messages"))
        });
        seen = metric(&text, "fencewatch_kafka_messages_total");
        if seen >= e.total as f64 {
            break (started.elapsed().as_secs_f64(), Cpu::of(pid), hwm_mib(pid));
        }
        if Instant::now() >= deadline {
            give_up(format!("{seen} of {} messages after 600 s", e.total));
        }
        std::thread::sleep(Duration::from_millis(args.poll_ms));
    };
    let secs = busy.end().min(seen_secs);
    let text = scrape().unwrap_or_else(|err| give_up(format!("GET /metrics failed ({err})")));
    let ingested = metric(&text, "fencewatch_events_ingested_total");
    let rejected = metric(&text, "fencewatch_events_rejected_total");
    let cxs = metric(&text, "fencewatch_counterexamples_total");
    let ok = ingested as u64 == e.total && rejected == 0.0 && cxs as u64 == e.stale;
    let log = std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default();
    let rewinds = log.matches("end went back").count();
    let check = format!(
        "{} ({ingested} ingested, {rejected} rejected, {cxs} counterexamples of {} injected, {rewinds} rewinds)",
        if ok && rewinds == 0 { "ok" } else { "MISMATCH" },
        e.stale
    );
    let _ = Command::new("kill").arg(pid.to_string()).status();
    let _ = child.0.wait();
    if args.keep {
        eprintln!("data dir kept: {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(dir);
    }
    Run {
        secs,
        seen_secs: Some(seen_secs),
        broker_cpu: None,
        cpu,
        rss_mib,
        check,
    }
}

/// When `serve`'s Kafka threads (`fencewatch-kafka*`: the consumer's and each partition
/// worker's, which decode, assess, archive and checkpoint) last worked: their CPU time, read
/// from `/proc` every [`BusyEnd::EVERY`] without asking the service anything, until
/// [`BusyEnd::end`]. A scrape shows the end only up to a scrape interval late (a second, at
/// `--poll-ms 1000`, against a run of a few seconds); this is the first sample at which the
/// threads' CPU time had reached its value at the end. Conservative: work after the last
/// message (a timed checkpoint) moves it later, never earlier; CPU time counts in 10 ms ticks.
struct BusyEnd {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    sampler: std::thread::JoinHandle<Vec<(f64, f64)>>,
}

impl BusyEnd {
    const EVERY: Duration = Duration::from_millis(10);

    fn watch(pid: u32, started: Instant) -> BusyEnd {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let halt = stop.clone();
        let sampler = std::thread::spawn(move || {
            let mut samples = Vec::new();
            while !halt.load(std::sync::atomic::Ordering::Relaxed) {
                let cpu = Cpu::of(pid).of_threads("fencewatch-kaf");
                samples.push((started.elapsed().as_secs_f64(), cpu));
                std::thread::sleep(Self::EVERY);
            }
            samples
        });
        BusyEnd { stop, sampler }
    }

    /// Seconds from `started` to the first sample at the last sample's CPU time.
    fn end(self) -> f64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let samples = self.sampler.join().expect("the sampler");
        let last = samples.last().map_or(0.0, |s| s.1);
        samples
            .iter()
            .find(|s| s.1 >= last)
            .map_or(f64::INFINITY, |s| s.0)
    }
}

fn main() {
    let args = Args::parse();
    assert!(
        args.bin.exists(),
        "{} not found: cargo build --release -p fencewatch-api",
        args.bin.display()
    );
    let work = tempfile::Builder::new()
        .prefix("kafka-bench-broker-")
        .tempdir()
        .expect("temp dir");
    let (broker, brokers) = match &args.brokers {
        Some(b) => (None, b.clone()),
        None => {
            let (child, addr) = start_tansu(args.tansu.as_deref(), work.path());
            (Some(child), addr)
        }
    };
    let id = format!(
        "{}-{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_secs()
    );
    let topic = format!("fencewatch-bench-{id}");
    create_topic(&brokers, &topic, args.partitions);

    // The workload ends now: one commit per ms of event time, so it starts events/1000 s ago.
    let rate = 1_000;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970");
    let span_ns = (args.events / rate) as i64 * 1_000_000_000;
    let workload = Workload {
        events: args.events,
        scopes: args.scopes.max(1),
        seed: 1,
        start: EventTime(now.as_nanos() as i64 - span_ns - 60_000_000_000),
        rate,
        rfc3339: false,
        grants: false,
        faults: Faults {
            paused_old_owner: args.stale,
            ..Faults::default()
        },
        attest: &[],
    };
    let target = Target {
        brokers: brokers.clone(),
        topic: topic.clone(),
        rate: None,
        live: false,
        timeout: Duration::from_secs(60),
        settings: Vec::new(),
    };
    let (truth, produced) = produce(&workload, &target).unwrap_or_else(|e| panic!("{e}"));
    let total = produced.events;
    let stale = truth
        .counterexamples
        .get("stale_commit")
        .copied()
        .unwrap_or(0);
    eprintln!(
        "produced {total} events ({} commits, {} scopes, {stale} stale commits) to {topic} ({} partitions) at {brokers} in {:.1} s ({:.0} events/s)",
        truth.commits,
        args.scopes,
        args.partitions,
        produced.elapsed.as_secs_f64(),
        produced.rate()
    );
    let contract = workload.contract_toml();
    let expect = Expect { total, stale };

    println!(
        "\nKafka ingest: {total} events on {} partitions, {} scopes; broker {}; {} CPU cores shared by broker and consumer\n",
        args.partitions,
        args.scopes,
        if args.brokers.is_some() {
            brokers.as_str()
        } else {
            "tansu (memory)"
        },
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!(
        "| run | first | bare s | bare msgs/s | bare CPU µs/msg | fencewatch s (seen on /metrics) | fencewatch msgs/s | ratio | fencewatch CPU s (kafka threads / rdk:* / other threads) | CPU µs/event | max RSS MiB | broker CPU s (bare / fencewatch) | check |\n{}|",
        "| --- ".repeat(13)
    );
    let (mut ratios, mut bare_rates, mut fw_rates) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..args.runs {
        let fw_first = r % 2 == 1;
        let broker_pid = broker.as_ref().map(|b| b.0.id());
        let go = |which: bool| {
            let broker0 = broker_pid.map(|p| Cpu::of(p).total());
            let mut run = if which {
                fencewatch(
                    &args,
                    &brokers,
                    &topic,
                    &format!("fw-{id}-{r}"),
                    &contract,
                    &expect,
                )
            } else {
                bare(&args, &brokers, &topic, &format!("bare-{id}-{r}"), total)
            };
            run.broker_cpu = broker_pid
                .zip(broker0)
                .map(|(p, c0)| Cpu::of(p).total() - c0);
            run
        };
        let (b, f) = if fw_first {
            let f = go(true);
            (go(false), f)
        } else {
            let b = go(false);
            (b, go(true))
        };
        let (br, fr) = (total as f64 / b.secs, total as f64 / f.secs);
        let (kafka_thread, rdk) = (f.cpu.of_threads("fencewatch-kaf"), f.cpu.of_threads("rdk:"));
        eprintln!(
            "run {}: fencewatch's busiest threads (CPU s): {}",
            r + 1,
            f.cpu.busiest(6)
        );
        ratios.push(fr / br);
        bare_rates.push(br);
        fw_rates.push(fr);
        println!(
            "| {} | {} | {:.2} | {br:.0} | {:.2} | {:.2} ({:.2}) | {fr:.0} | {:.2} | {:.2} ({:.2} / {:.2} / {:.2}) | {:.2} | {:.0} | {} | {} |",
            r + 1,
            if fw_first { "fencewatch" } else { "bare" },
            b.secs,
            b.cpu.total() / total as f64 * 1e6,
            f.secs,
            f.seen_secs.unwrap_or(f64::NAN),
            fr / br,
            f.cpu.total(),
            kafka_thread,
            rdk,
            f.cpu.total() - kafka_thread - rdk,
            f.cpu.total() / total as f64 * 1e6,
            f.rss_mib,
            match (b.broker_cpu, f.broker_cpu) {
                (Some(x), Some(y)) => format!("{x:.2} / {y:.2}"),
                _ => "-".into(),
            },
            f.check
        );
    }
    println!(
        "\nmedian: bare {:.0} msgs/s, fencewatch {:.0} msgs/s, ratio {:.2} (target ≥ 0.5); ratios {}",
        median(bare_rates),
        median(fw_rates),
        median(ratios.clone()),
        ratios
            .iter()
            .map(|r| format!("{r:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
}
