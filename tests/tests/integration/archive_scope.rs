//! What the evidence archive gives back once state folded (issue 14, items 7 and 1):
//! `/v1/scopes/{scope}` with the scope's whole history, a page at a time, and
//! `/v1/counterexamples/{id}` with a counterexample whose detail is no longer resident.

use fencewatch_tests::ORDERS_CONTRACT;
use fencewatch_tests::service::{TestService, now_ns};
use serde_json::Value;
use std::collections::BTreeSet;

const SEC: i64 = 1_000_000_000;

/// Every page of the history of `scope`, `limit` events a page.
fn history(svc: &TestService, scope: &str, limit: usize) -> (Vec<Value>, usize, Value) {
    let mut events = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    let first = loop {
        let path = match &cursor {
            None => format!("/v1/scopes/{scope}?limit={limit}"),
            Some(c) => format!("/v1/scopes/{scope}?limit={limit}&cursor={}", encode(c)),
        };
        let r = svc.get(&path);
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        let doc = r.json();
        let page = doc["history"]["events"].as_array().unwrap().clone();
        assert!(page.len() <= limit, "{doc}");
        pages += 1;
        events.extend(page);
        match doc["history"]["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break doc,
        }
        assert!(pages < 100, "pages never end");
    };
    (events, pages, first)
}

/// Percent-encodes what a query string cannot hold as it is.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[test]
fn a_folded_scope_shows_its_whole_history_from_the_archive_paged() {
    let dir = tempfile::tempdir().unwrap();
    let svc = TestService::start(
        dir.path(),
        ORDERS_CONTRACT,
        &["--archive-flush-interval", "200ms"],
    );
    let now = now_ns();
    let t0 = now - 300 * SEC;
    let route = "orders-api.transition";
    // 25 events of scope `order-1` (two with the same ts), a stale commit among them, and
    // other scopes' events around them.
    let mut lines = Vec::new();
    for i in 0..24i64 {
        let ts = t0 + (i / 2) * SEC + (i % 2) * (i / 12);
        let epoch = 1 + i / 4;
        lines.push(format!(
            r#"{{"kind":"commit","ts":{ts},"scope":"order-1","epoch":{epoch},"route":"{route}","holder":"w-{epoch}"}}"#
        ));
        lines.push(format!(
            r#"{{"kind":"commit","ts":{ts},"scope":"order-2{i}","epoch":1,"route":"{route}"}}"#
        ));
    }
    lines.push(format!(
        r#"{{"kind":"commit","ts":{},"scope":"order-1","epoch":2,"route":"{route}","holder":"paused"}}"#,
        t0 + 20 * SEC
    ));
    let r = svc.post_ndjson(&(lines.join("\n") + "\n"));
    assert_eq!(r.status, 200, "{}", r.text());
    // Before anything folds or flushes: the rows not yet written are the history too.
    let (early, _, _) = history(&svc, "order-1", 1000);
    assert_eq!(early.len(), 25);
    // A heartbeat near now: the watermark passes the retention, `order-1` folds.
    let r = svc.post_ndjson(&format!(
        "{{\"kind\":\"heartbeat\",\"ts\":{},\"route\":\"{route}\"}}\n",
        now - SEC
    ));
    assert_eq!(r.status, 200, "{}", r.text());
    svc.wait_for("the rows flushed", 30, |s| {
        s.metric("fencewatch_archive_rows_total{table=\"events\"}") == Some(50.0)
    });
    let doc = svc.get("/v1/scopes/order-1").json();
    let resident = doc["events"].as_array().map_or(0, Vec::len);
    assert_eq!(resident, 0, "folded: none of its events is resident: {doc}");
    assert_eq!(doc["high_water"]["epoch"], 6, "{doc}");
    let (events, pages, _) = history(&svc, "order-1", 10);
    assert_eq!(pages, 3, "10 + 10 + 5");
    assert_eq!(events.len(), 25, "{events:?}");
    let sources: BTreeSet<&str> = events
        .iter()
        .map(|e| e["source"].as_str().unwrap())
        .collect();
    assert_eq!(sources.len(), 25, "no event twice: {events:?}");
    let keys: Vec<(String, String)> = events
        .iter()
        .map(|e| {
            (
                e["ts"].as_str().unwrap().to_string(),
                e["source"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted, "by ts, then source");
    assert!(events.iter().any(|e| e["holder"] == "paused"));
    assert!(
        events
            .iter()
            .all(|e| e["kind"] == "commit" && e["epoch"].is_u64())
    );
    // Every page size gives the same history.
    for limit in [1, 7, 25, 1000] {
        assert_eq!(history(&svc, "order-1", limit).0, events, "limit {limit}");
    }
    // Bounded and checked paging; a scope never seen is 404.
    for bad in ["limit=0", "limit=1001", "cursor=nonsense", "after=3"] {
        let r = svc.get(&format!("/v1/scopes/order-1?{bad}"));
        assert_eq!(r.status, 400, "{bad}: {}", r.text());
    }
    assert_eq!(svc.get("/v1/scopes/never-seen").status, 404);
    // The scope is a parameter, never SQL: a quote in it is only a scope name.
    let r = svc.get(&format!("/v1/scopes/{}", encode("order-1' OR '1'='1")));
    assert_eq!(r.status, 404, "{}", r.text());
}

#[test]
fn a_counterexample_whose_detail_left_memory_comes_from_the_archive_with_its_context() {
    let dir = tempfile::tempdir().unwrap();
    let svc = TestService::start(
        dir.path(),
        ORDERS_CONTRACT,
        &[
            "--archive-flush-interval",
            "200ms",
            "--max-counterexamples",
            "1",
        ],
    );
    let now = now_ns();
    let t0 = now - 300 * SEC;
    let route = "orders-api.transition";
    let mut lines = Vec::new();
    for s in 0..3i64 {
        for (k, epoch) in [1, 2, 3, 1].into_iter().enumerate() {
            lines.push(format!(
                r#"{{"kind":"commit","ts":{},"scope":"o-{s}","epoch":{epoch},"route":"{route}"}}"#,
                t0 + s * 10 * SEC + k as i64 * SEC
            ));
        }
    }
    lines.push(format!(
        r#"{{"kind":"heartbeat","ts":{},"route":"{route}"}}"#,
        now - SEC
    ));
    let r = svc.post_ndjson(&(lines.join("\n") + "\n"));
    assert_eq!(r.status, 200, "{}", r.text());
    svc.wait_for("the counterexamples archived", 30, |s| {
        s.metric("fencewatch_archive_rows_total{table=\"counterexamples\"}") == Some(3.0)
    });
    let list = svc.get("/v1/counterexamples").json();
    assert_eq!(list["not_kept"], 2, "{list}");
    let archived = svc
        .rows("SELECT id, stale_source, superseding_source FROM counterexamples ORDER BY stale_ts");
    assert_eq!(archived.len(), 3);
    let mut from_archive = 0;
    for row in &archived {
        let id = row[0].as_str().unwrap();
        let r = svc.get(&format!("/v1/counterexamples/{id}"));
        assert_eq!(r.status, 200, "{id}: {}", r.text());
        let cx = r.json();
        assert_eq!(cx["id"], id);
        assert_eq!(cx["stale"]["source"], row[1], "{cx}");
        assert_eq!(cx["superseding"]["source"], row[2], "{cx}");
        assert_eq!(cx["kind"], "stale_commit");
        let context = cx["context"].as_array().unwrap();
        // The scope's 4 events, the stale one last.
        assert_eq!(context.len(), 4, "{cx}");
        assert_eq!(context[3]["source"], row[1], "{cx}");
        assert_eq!(
            context
                .iter()
                .map(|e| e["epoch"].as_u64().unwrap())
                .collect::<Vec<_>>(),
            [1, 2, 3, 1],
            "{cx}"
        );
        if cx["archived"] == true {
            from_archive += 1;
            assert_eq!(cx["final"], true, "{cx}");
            assert_eq!(cx["stale"]["epoch"], 1, "{cx}");
            assert_eq!(cx["superseding"]["epoch"], 3, "{cx}");
        }
    }
    assert_eq!(from_archive, 2, "the two whose detail is not kept");
    assert_eq!(
        svc.get("/v1/counterexamples/cx-0000000000000000").status,
        404
    );
}

/// One OTLP/JSON span of `scope` at `ts` with `epoch`, ids given in hex.
fn span(trace: &str, span: &str, scope: &str, epoch: u64, ts: i64) -> String {
    serde_json::json!({"resourceSpans": [{"scopeSpans": [{"spans": [{
    "traceId": trace, "spanId": span, "name": "commit",
    "startTimeUnixNano": (ts - 1000).to_string(), "endTimeUnixNano": ts.to_string(),
    "attributes": [
        {"key": "fencing.kind", "value": {"stringValue": "commit"}},
        {"key": "fencing.scope", "value": {"stringValue": scope}},
        {"key": "fencing.epoch", "value": {"intValue": epoch.to_string()}},
        {"key": "fencing.route", "value": {"stringValue": "orders-api.transition"}},
    ]}]}]}]})
    .to_string()
}

/// A span delivered again with other content, at the same time, sets both deliveries aside
/// (a conflicting duplicate) and is not archived again (SPEC §8): its source stays unique
/// (hostile test, session 20: both were archived, with one `source`, and a page boundary
/// between them skipped the second). Pages of one event show what one page of all shows.
#[test]
fn a_span_delivered_again_is_archived_once_and_paged_whole() {
    let dir = tempfile::tempdir().unwrap();
    let svc = TestService::start(dir.path(), ORDERS_CONTRACT, &[]);
    let now = now_ns();
    let (trace, id) = ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");
    let mut bodies = vec![
        span(trace, id, "o-dup", 1, now - 5 * SEC),
        span(trace, id, "o-dup", 2, now - 5 * SEC),
        // The same span naming another scope: set aside too, wherever the first is kept.
        span(trace, id, "o-other", 1, now - 5 * SEC),
    ];
    for i in 0..3u8 {
        let other = format!("{:016x}", 0x1000 + u64::from(i));
        bodies.push(span(
            trace,
            &other,
            "o-dup",
            3,
            now - 4 * SEC + i64::from(i),
        ));
    }
    for b in &bodies {
        let r = fencewatch_tests::service::request(
            svc.addr,
            "POST",
            "/v1/traces",
            &[("content-type", "application/json")],
            b.as_bytes(),
        )
        .unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let (whole, pages, _) = history(&svc, "o-dup", 1000);
    assert_eq!((whole.len(), pages), (4, 1), "{whole:?}");
    let epochs: Vec<u64> = whole.iter().map(|e| e["epoch"].as_u64().unwrap()).collect();
    assert_eq!(
        epochs,
        [1, 3, 3, 3],
        "the first delivery, then the other spans"
    );
    let (paged, pages, _) = history(&svc, "o-dup", 1);
    assert_eq!(pages, 4);
    assert_eq!(paged, whole, "pages of one event against one page of all");
    let rows = svc.rows("SELECT count(*) AS n, count(DISTINCT source) AS d FROM events");
    assert_eq!(
        (&rows[0][0], &rows[0][1]),
        (&4.into(), &4.into()),
        "{rows:?}"
    );
    let other = svc.rows("SELECT count(*) AS n FROM events WHERE scope = 'o-other'");
    assert_eq!(other[0][0], serde_json::json!(0), "{other:?}");
}
