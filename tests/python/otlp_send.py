"""OTLP clients for the black-box tests (tests/tests/integration/otlp.rs).

  otlp_send.py http URL HISTORY      the SDK's OTLP/HTTP span exporter (protobuf) sends HISTORY
  otlp_send.py grpc HOST:PORT HISTORY the SDK's OTLP/gRPC span exporter
  otlp_send.py logs URL HISTORY      the SDK's OTLP/HTTP log exporter
  otlp_send.py build KIND OUT NOW     a hand-built request (opentelemetry-proto classes) in OUT
  otlp_send.py grpc-raw HOST:PORT KIND NOW [gzip]  sends hand-built request KIND with the
                                     generated gRPC stub; prints its status code, rejected
                                     count, message and whether retry info came with it

HISTORY is a JSON list of events {"ts", "scope", "epoch", "route", "kind"?, "holder"?}, each
sent as one span (or log record) ending at `ts` with the fencing.* attributes. Prints one JSON
line: {"result": "SUCCESS" | "FAILURE", "spans": [{"trace_id", "span_id"}...]}. A bearer token
in $FENCEWATCH_TOKEN is sent as `authorization`.
"""

import json
import os
import sys


def attrs(e):
    a = {
        "fencing.kind": e.get("kind", "commit"),
        "fencing.scope": e["scope"],
        "fencing.epoch": e["epoch"],
        "fencing.route": e["route"],
        "db.system": "postgresql",
    }
    if "holder" in e:
        a["fencing.holder"] = e["holder"]
    return a


def headers():
    t = os.environ.get("FENCEWATCH_TOKEN")
    return {"authorization": f"Bearer {t}"} if t else None


def send_spans(exporter, history):
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExportResult, SimpleSpanProcessor

    results = []

    class Recording(SimpleSpanProcessor):
        pass

    provider = TracerProvider(resource=Resource.create({"service.name": "orders-api"}))
    tracer = provider.get_tracer("orders.db")
    spans = []
    for e in history:
        s = tracer.start_span("UPDATE orders", start_time=e["ts"] - 1000, attributes=attrs(e))
        s.end(end_time=e["ts"])
        spans.append(s)
    # One export call with every span, as a batch processor would make it.
    r = exporter.export([s for s in spans])
    exporter.shutdown()
    ids = [
        {"trace_id": format(s.context.trace_id, "032x"), "span_id": format(s.context.span_id, "016x")}
        for s in spans
    ]
    return ("SUCCESS" if r == SpanExportResult.SUCCESS else "FAILURE", ids)


def send_logs(url, history):
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
    from opentelemetry.sdk.resources import Resource

    exporter = OTLPLogExporter(endpoint=url, headers=headers(), timeout=10)
    provider = LoggerProvider(resource=Resource.create({"service.name": "orders-api"}))
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    logger = provider.get_logger("orders.db")
    for e in history:
        logger.emit(timestamp=e["ts"], body="commit", attributes=attrs(e))
    provider.shutdown()
    return ("SUCCESS", [])


def build(kind, out):
    """Hand-built requests at the edges."""
    import base64
    import gzip

    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as ts
    from opentelemetry.proto.common.v1 import common_pb2 as common
    from opentelemetry.proto.trace.v1 import trace_pb2 as tr

    def kv(k, v):
        if isinstance(v, int):
            return common.KeyValue(key=k, value=common.AnyValue(int_value=v))
        return common.KeyValue(key=k, value=common.AnyValue(string_value=v))

    now = int(sys.argv[4]) if len(sys.argv) > 4 else 1_700_000_000_000_000_000

    def span(n, epoch, ts, extra=(), status=None):
        a = [kv("fencing.kind", "commit"), kv("fencing.scope", "order-1"),
             kv("fencing.route", "orders-api.transition")]
        if epoch is not None:
            a.append(kv("fencing.epoch", epoch))
        a += [kv(k, v) for k, v in extra]
        s = tr.Span(trace_id=bytes([0x11] * 16), span_id=bytes([n] * 8), name="commit",
                    start_time_unix_nano=ts - 10, end_time_unix_nano=ts, attributes=a)
        if status is not None:
            s.status.code = status
        return s

    def request(spans):
        return ts.ExportTraceServiceRequest(resource_spans=[tr.ResourceSpans(
            scope_spans=[tr.ScopeSpans(spans=spans)])])

    if kind == "partial":
        # Epoch 2, then a stale epoch 1, a bad epoch, an errored commit, a span without fencing.
        plain = tr.Span(trace_id=bytes([0x22] * 16), span_id=bytes([9] * 8), name="GET /",
                        end_time_unix_nano=now)
        req = request([span(1, 2, now - 2_000_000_000), span(2, 1, now - 1_000_000_000),
                       span(3, -5, now), plain,
                       span(4, 3, now, status=tr.Status.STATUS_CODE_ERROR)])
        data = req.SerializeToString()
    elif kind == "resumed":
        data = request([span(1, 2, now - 2_000_000_000), span(2, 1, now - 1_000_000_000)]).SerializeToString()
    elif kind == "resumed-json":
        # OTLP/JSON: ids in hex (protobuf's own JSON mapping would write base64).
        d = json_format.MessageToDict(
            request([span(1, 2, now - 2_000_000_000), span(2, 1, now - 1_000_000_000)]))
        for rs in d["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for sp in ss["spans"]:
                    for k in ("traceId", "spanId"):
                        sp[k] = base64.b64decode(sp[k]).hex()
        data = json.dumps(d).encode()
    elif kind == "resumed-gzip":
        data = gzip.compress(request([span(1, 2, now - 2_000_000_000),
                                      span(2, 1, now - 1_000_000_000)]).SerializeToString())
    elif kind == "errored":
        data = request([span(5, 7, now, status=tr.Status.STATUS_CODE_ERROR)]).SerializeToString()
    elif kind == "large":
        # Over 512 KiB on the wire, not compressed: a stale commit among 600 padded spans
        # that carry no fencing.kind (ignored).
        plain = [tr.Span(trace_id=bytes([0x33] * 16), span_id=(n + 1).to_bytes(8, "big"),
                         name="GET /", end_time_unix_nano=now,
                         attributes=[kv("pad", "y" * 1000)]) for n in range(600)]
        data = request([span(1, 2, now - 2_000_000_000)] + plain
                       + [span(2, 1, now - 1_000_000_000)]).SerializeToString()
        assert len(data) > 512 * 1024, len(data)
    elif kind == "big":
        # Many spans, compressing well: small on the wire, over the limit decompressed.
        data = gzip.compress(request([span(1, 2, now, extra=[("pad", "x" * 1000)])
                                      for _ in range(400)]).SerializeToString())
    else:
        raise SystemExit(f"unknown kind {kind}")
    with open(out, "wb") as f:
        f.write(data)
    return ("SUCCESS", [])


def grpc_raw(target, kind, now, gzip_it):
    import tempfile

    import grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as ts
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc as tsg

    if kind in ("undecodable", "unknown-method"):
        # Bytes as they are: a body cut inside its first field, or a method the service lacks.
        method = "Export" if kind == "undecodable" else "Import"
        md = tuple(headers().items()) if headers() else None
        with grpc.insecure_channel(target) as ch:
            call = ch.unary_unary(f"/opentelemetry.proto.collector.trace.v1.TraceService/{method}",
                                  request_serializer=lambda b: b,
                                  response_deserializer=lambda b: b)
            try:
                call(b"\x0a\x7f\x0a", timeout=10, metadata=md)
                return {"code": "OK"}
            except grpc.RpcError as e:
                return {"code": e.code().name, "message": e.details()}
    with tempfile.NamedTemporaryFile() as f:
        sys.argv[4:] = [str(now)]
        build(kind, f.name)
        data = open(f.name, "rb").read()
    if kind == "big":
        import gzip
        data = gzip.decompress(data)
    req = ts.ExportTraceServiceRequest()
    req.ParseFromString(data)
    md = tuple(headers().items()) if headers() else None
    with grpc.insecure_channel(target) as ch:
        stub = tsg.TraceServiceStub(ch)
        try:
            res = stub.Export(req, timeout=10, metadata=md,
                              compression=grpc.Compression.Gzip if gzip_it else None)
            return {"code": "OK", "rejected": res.partial_success.rejected_spans,
                    "message": res.partial_success.error_message}
        except grpc.RpcError as e:
            trailers = dict(e.trailing_metadata() or ())
            return {"code": e.code().name, "message": e.details(),
                    "retry_info": "grpc-status-details-bin" in trailers}


def main():
    mode = sys.argv[1]
    if mode == "grpc-raw":
        out = grpc_raw(sys.argv[2], sys.argv[3], int(sys.argv[4]), len(sys.argv) > 5)
        print(json.dumps(out))
        return
    if mode == "build":
        result = build(sys.argv[2], sys.argv[3])
    else:
        target, history = sys.argv[2], json.loads(sys.argv[3])
        if mode == "http":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            result = send_spans(OTLPSpanExporter(endpoint=target, headers=headers(), timeout=10), history)
        elif mode == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
            hs = headers()
            result = send_spans(OTLPSpanExporter(endpoint=target, insecure=True, timeout=10,
                                                 headers=tuple(hs.items()) if hs else None), history)
        elif mode == "logs":
            result = send_logs(target, history)
        else:
            raise SystemExit(f"unknown mode {mode}")
    print(json.dumps({"result": result[0], "spans": result[1]}))


if __name__ == "__main__":
    main()
