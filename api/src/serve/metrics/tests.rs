//! The exposition and the HTTP histogram.

use super::*;
use axum::Router;
use axum::body::Body;
use axum::routing::get;
use fencewatch_assess::live::NewCounterexample;
use fencewatch_assess::{CounterexampleKind, EventTime, Reason, Verdict};
use fencewatch_ingest::report::{
    CounterexampleFound, EventsIngested, EventsRejected, InternalEvent,
};
use tower::ServiceExt;

#[test]
fn exposition_has_names_labels_and_help() {
    let mut registry = Registry::default();
    let m = Metrics::register(&mut registry);
    EventsIngested {
        source: "http",
        count: 3,
    }
    .emit(&m);
    EventsRejected {
        source: "http",
        reason: "malformed_event",
        count: 1,
    }
    .emit(&m);
    let contract = fencewatch_assess::Contract::parse(
        "c.toml",
        "[[property]]\nname=\"order-mutation\"\nsubject=\"O\"\nstrategy=\"lease_epoch\"\n[[property.route]]\nname=\"orders-api.transition\"\n",
    )
    .unwrap();
    let p = &contract.properties[0];
    let found = |route: &str| {
        let cx = NewCounterexample {
            property: 0,
            kind: CounterexampleKind::StaleCommit,
            id: "cx".into(),
            route: route.into(),
        };
        CounterexampleFound {
            property: p,
            counterexample: &cx,
        }
        .emit(&m);
    };
    found("orders-api.transition");
    // Routes the contract does not declare share one series, whatever events name.
    for route in ["made-up-1", "made-up-2", "made-up-3"] {
        found(route);
    }
    m.set_assurance("order-mutation", Verdict::Refuted);
    m.set_unknown("order-mutation", Reason::MissingEpoch, 2);
    m.set_watermark(
        "order-mutation",
        EventTime(10_000_000_000),
        EventTime(12_500_000_000),
    );
    m.wal_bytes.set(4096);
    let text = encode(&registry);
    for line in [
        "# HELP fencewatch_events_ingested Events accepted into the WAL.",
        "# TYPE fencewatch_events_ingested counter",
        "fencewatch_events_ingested_total{source=\"http\"} 3",
        "fencewatch_events_rejected_total{source=\"http\",reason=\"malformed_event\"} 1",
        "fencewatch_counterexamples_total{property=\"order-mutation\",kind=\"stale_commit\",route=\"orders-api.transition\"} 1",
        "fencewatch_counterexamples_total{property=\"order-mutation\",kind=\"stale_commit\",route=\"undeclared\"} 3",
        "fencewatch_assurance{property=\"order-mutation\",verdict=\"refuted\"} 1",
        "fencewatch_assurance{property=\"order-mutation\",verdict=\"holds\"} 0",
        "fencewatch_assurance{property=\"order-mutation\",verdict=\"unknown\"} 0",
        "fencewatch_unknown_evidence{property=\"order-mutation\",reason=\"missing_epoch\"} 2",
        "fencewatch_watermark_seconds{property=\"order-mutation\"} 10.0",
        "fencewatch_evidence_lag_seconds{property=\"order-mutation\"} 2.5",
        "# TYPE fencewatch_wal_bytes gauge",
        "fencewatch_wal_bytes 4096",
        "# EOF",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
    m.set_assurance("order-mutation", Verdict::Holds);
    let text = encode(&registry);
    assert!(text.contains("fencewatch_assurance{property=\"order-mutation\",verdict=\"holds\"} 1"));
    assert!(
        text.contains("fencewatch_assurance{property=\"order-mutation\",verdict=\"refuted\"} 0")
    );
}

#[tokio::test]
async fn http_histogram_uses_the_route_template() {
    let mut registry = Registry::default();
    let m = HttpMetrics::register(&mut registry);
    let app = Router::new()
        .route("/v1/counterexamples/{id}", get(|| async { "cx" }))
        .route_layer(axum::middleware::from_fn(note_matched_path))
        .layer(axum::middleware::from_fn_with_state(m.clone(), track_http));
    for uri in [
        "/v1/counterexamples/cx-1",
        "/v1/counterexamples/cx-2",
        "/elsewhere",
    ] {
        let req = Request::get(uri).body(Body::empty()).unwrap();
        app.clone().oneshot(req).await.unwrap();
    }
    let text = encode(&registry);
    let name = HTTP_REQUEST_DURATION_SECONDS;
    for line in [
        format!(
            r#"{name}_count{{method="GET",route="/v1/counterexamples/{{id}}",status="200"}} 2"#
        ),
        format!(r#"{name}_count{{method="GET",route="unmatched",status="404"}} 1"#),
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
}
