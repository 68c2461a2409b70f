//! The simulated workload as OTLP spans (`simulate --otlp`, the OTLP benchmarks): one span per
//! event, ending at its time, its fields as `fencing.*` attributes (SPEC §8) next to a name
//! and two attributes of the database call it stands for, as instrumented code has; a request
//! per `batch` spans under one resource (`service.name`). Ids are deterministic: a request's
//! trace id holds the seed and the request's number, a span's id its number in the run, so
//! the same seed sends the same spans (a run sent twice is a retry: nothing new).

use crate::decode::otlp::common::v1::{AnyValue, KeyValue, any_value::Value};
use crate::decode::otlp::resource::v1::Resource;
use crate::decode::otlp::trace::v1::{ResourceSpans, ScopeSpans, Span};
use crate::decode::otlp::trace_service::ExportTraceServiceRequest;
use crate::simulate::Sink;
use std::io;

fn kv(key: &str, value: Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(value) }),
    }
}

/// The span of one event (`json`, an object as the generator writes it) ending at `ts` (ns).
pub fn span(json: &[u8], ts: i64, trace_id: [u8; 16], span_id: u64) -> io::Result<Span> {
    let bad = |why: String| io::Error::new(io::ErrorKind::InvalidData, why);
    let event: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(json).map_err(|e| bad(format!("not an event object: {e}")))?;
    let end = u64::try_from(ts).map_err(|_| bad(format!("event time {ts} before 1970")))?;
    let mut attributes = vec![
        kv("db.system", Value::StringValue("postgresql".into())),
        kv("db.operation.name", Value::StringValue("UPDATE".into())),
    ];
    for (k, v) in event.iter().filter(|(k, _)| *k != "ts") {
        let value = match v {
            serde_json::Value::String(s) => Value::StringValue(s.clone()),
            // u64 beyond i64 (OTLP ints are signed) as a decimal string, as SPEC §8 allows.
            serde_json::Value::Number(n) => match n.as_i64() {
                Some(i) => Value::IntValue(i),
                None => Value::StringValue(n.to_string()),
            },
            other => {
                return Err(bad(format!(
                    "field `{k}`: {other} is not a string or number"
                )));
            }
        };
        attributes.push(kv(&format!("fencing.{k}"), value));
    }
    Ok(Span {
        trace_id: trace_id.to_vec(),
        span_id: span_id.to_be_bytes().to_vec(),
        name: "UPDATE orders".into(),
        start_time_unix_nano: end.saturating_sub(1_000_000),
        end_time_unix_nano: end,
        attributes,
        ..Span::default()
    })
}

/// A trace request of `spans` from service `service`.
pub fn request(service: &str, spans: Vec<Span>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv("service.name", Value::StringValue(service.into()))],
                ..Resource::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans,
                ..ScopeSpans::default()
            }],
            schema_url: String::new(),
        }],
    }
}

/// The trace id of request `n` of a run with `seed`: never all zeros.
pub fn trace_id(seed: u64, n: u64) -> [u8; 16] {
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&seed.to_be_bytes());
    id[8..].copy_from_slice(&(n + 1).to_be_bytes());
    id
}

/// A [`Sink`] that hands the workload to `send` as trace requests of `batch` spans (the last
/// one shorter; call [`Spans::finish`]).
#[derive(Debug)]
pub struct Spans<F> {
    seed: u64,
    batch: usize,
    service: String,
    spans: Vec<Span>,
    requests: u64,
    events: u64,
    send: F,
}

impl<F: FnMut(ExportTraceServiceRequest) -> io::Result<()>> Spans<F> {
    /// Spans of a run with `seed`, `batch` per request, from `service`.
    pub fn new(seed: u64, batch: usize, service: &str, send: F) -> Spans<F> {
        Spans {
            seed,
            batch: batch.max(1),
            service: service.into(),
            spans: Vec::new(),
            requests: 0,
            events: 0,
            send,
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.spans.is_empty() {
            return Ok(());
        }
        let spans = std::mem::take(&mut self.spans);
        self.requests += 1;
        (self.send)(request(&self.service, spans))
    }

    /// Sends what is left; the number of spans sent.
    pub fn finish(mut self) -> io::Result<u64> {
        self.flush()?;
        Ok(self.events)
    }
}

impl<F: FnMut(ExportTraceServiceRequest) -> io::Result<()>> Sink for Spans<F> {
    fn event(&mut self, json: &[u8], _scope: Option<&str>, ts: i64) -> io::Result<()> {
        self.events += 1;
        let id = trace_id(self.seed, self.requests);
        self.spans.push(span(json, ts, id, self.events)?);
        if self.spans.len() >= self.batch {
            self.flush()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::otlp::{self, Entry};
    use crate::simulate::{Faults, Workload, simulate, simulate_into};

    /// The spans of a workload map back to the events of its NDJSON, field for field.
    #[test]
    fn the_spans_map_to_the_events_of_the_ndjson() {
        let wl = Workload {
            events: 300,
            scopes: 20,
            seed: 3,
            start: fencewatch_assess::EventTime(1_764_417_600_000_000_000),
            rate: 1000,
            rfc3339: false,
            grants: true,
            faults: Faults {
                paused_old_owner: 2,
                missing_epoch: 1,
                ..Faults::default()
            },
            attest: &[],
        };
        let mut ndjson = Vec::new();
        simulate(&wl, &mut ndjson).unwrap();
        let lines: Vec<&[u8]> = ndjson
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .collect();
        let mut requests = Vec::new();
        let mut sink = Spans::new(wl.seed, 64, "test", |r| {
            requests.push(r);
            Ok(())
        });
        simulate_into(&wl, &mut sink).unwrap();
        assert_eq!(sink.finish().unwrap(), lines.len() as u64);
        assert_eq!(requests.len(), lines.len().div_ceil(64));
        let mut at = 0;
        let mut ids = std::collections::HashSet::new();
        for r in requests {
            let mapped = otlp::map_traces(&r);
            assert_eq!(mapped.ignored, 0);
            for e in mapped.items.entries() {
                let Entry::Event(ev, Some(span)) = e else {
                    panic!("not an event with a span: {e:?}")
                };
                assert!(ids.insert(*span), "span ids are unique");
                let want = crate::decode::json::decode_line(lines[at], 1 << 20).unwrap();
                assert_eq!(ev, want.event(), "line {at}");
                at += 1;
            }
        }
        assert_eq!(at, lines.len());
    }
}
