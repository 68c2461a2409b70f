"""A small OTLP/gRPC trace receiver for the tests: otlp_receiver.py PORT OUT.

Serves the trace service on 127.0.0.1:PORT and appends one JSON line per received span to OUT:
{"name", "trace_id", "span_id", "parent_span_id", "service"}. Prints "ready" once listening;
runs until killed.
"""

import json
import sys
from concurrent import futures

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as ts
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc as tsg


class Receiver(tsg.TraceServiceServicer):
    def __init__(self, out):
        self.out = out

    def Export(self, request, context):
        with open(self.out, "a") as f:
            for rs in request.resource_spans:
                service = next((a.value.string_value for a in rs.resource.attributes
                                if a.key == "service.name"), "")
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        f.write(json.dumps({
                            "name": s.name, "trace_id": s.trace_id.hex(), "span_id": s.span_id.hex(),
                            "parent_span_id": s.parent_span_id.hex(), "service": service}) + "\n")
        return ts.ExportTraceServiceResponse()


def main():
    port, out = sys.argv[1], sys.argv[2]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    tsg.add_TraceServiceServicer_to_server(Receiver(out), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    print("ready", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
