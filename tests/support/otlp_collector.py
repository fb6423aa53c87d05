"""An in-process OTLP trace collector for the tracing tests: what an exporter sends, received over
gRPC (``TraceService/Export``, OTLP's default) or HTTP/protobuf (``POST /v1/traces``), and kept
as flat :class:`ReceivedSpan` records."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue


def attribute_value(value: AnyValue) -> Any:
    """A protobuf ``AnyValue`` as Python (int, float, str, bool; the type OTLP carried)."""
    kind = value.WhichOneof("value")
    return None if kind is None else getattr(value, kind)


def attributes(kvs: Any) -> dict[str, Any]:
    """Protobuf ``KeyValue``s as a dict."""
    out: dict[str, Any] = {}
    kv: KeyValue
    for kv in kvs:
        out[kv.key] = attribute_value(kv.value)
    return out


@dataclass
class ReceivedSpan:
    """One span as the collector got it, with its resource and instrumentation scope."""

    resource: dict[str, Any]
    scope: str
    name: str
    kind: int
    """OTLP's ``Span.SpanKind`` number (2: SERVER)."""
    trace_id: str
    span_id: str
    parent_span_id: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    trace_state: str


class Collector:
    """The spans received so far (thread-safe), from any number of exports."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: list[ReceivedSpan] = []
        self.endpoint = ""
        """What an exporter is pointed at (``host:port`` for gRPC, a URL for HTTP)."""

    def receive(self, request: trace_service_pb2.ExportTraceServiceRequest) -> None:
        """Keep the spans of one export request."""
        received = []
        for rs in request.resource_spans:
            resource = attributes(rs.resource.attributes)
            for ss in rs.scope_spans:
                for span in ss.spans:
                    received.append(
                        ReceivedSpan(
                            resource=resource,
                            scope=ss.scope.name,
                            name=span.name,
                            kind=span.kind,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                            attributes=attributes(span.attributes),
                            trace_state=span.trace_state,
                        )
                    )
        with self._lock:
            self._spans.extend(received)

    def spans(self) -> list[ReceivedSpan]:
        """Every span received so far."""
        with self._lock:
            return list(self._spans)

    def wait_for(
        self, predicate: Callable[[ReceivedSpan], bool], count: int = 1, timeout: float = 30.0
    ) -> list[ReceivedSpan]:
        """The spans matching ``predicate`` once there are ``count`` of them (AssertionError
        after ``timeout`` s)."""
        deadline = time.monotonic() + timeout
        while True:
            found = [s for s in self.spans() if predicate(s)]
            if len(found) >= count or time.monotonic() > deadline:
                assert len(found) >= count, f"{len(found)} of {count} spans after {timeout} s"
                return found
            time.sleep(0.05)


class _Servicer(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, collector: Collector) -> None:
        self._collector = collector

    def Export(self, request: Any, context: Any) -> Any:
        self._collector.receive(request)
        return trace_service_pb2.ExportTraceServiceResponse()


@contextlib.contextmanager
def grpc_collector() -> Iterator[Collector]:
    """A collector serving OTLP/gRPC on 127.0.0.1 (``endpoint``: ``127.0.0.1:PORT``)."""
    collector = Collector()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Servicer(collector), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    collector.endpoint = f"127.0.0.1:{port}"
    try:
        yield collector
    finally:
        server.stop(0)


@contextlib.contextmanager
def http_collector() -> Iterator[Collector]:
    """A collector serving OTLP/HTTP protobuf (``endpoint``: ``http://127.0.0.1:PORT/v1/traces``)."""
    collector = Collector()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            ok = self.path == "/v1/traces" and self.headers.get("Content-Type") == (
                "application/x-protobuf"
            )
            if ok:
                request = trace_service_pb2.ExportTraceServiceRequest()
                request.ParseFromString(body)
                collector.receive(request)
            reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
            self.send_response(200 if ok else 400)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    collector.endpoint = f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    try:
        yield collector
    finally:
        server.shutdown()
        server.server_close()
