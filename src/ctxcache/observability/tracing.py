"""OpenTelemetry spans: one ``chat`` span per request, children for each phase.

The model thread measures its phases itself (``Timings``); spans are written from those figures
when the request completes, with explicit start and end times laid end to end from the
request's arrival, so the hot path pays nothing per phase. Exporters: ``none`` (a no-op
provider), ``console``, ``memory`` (tests read the finished spans), ``otlp`` (needs the
``opentelemetry-exporter-otlp`` package; endpoint from the standard OTEL_EXPORTER_OTLP_* env).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

from .. import __version__

EXPORTERS = ("none", "console", "memory", "otlp")
# phase key in the timings -> span name, in the order the model thread runs them
PHASES = (("queue_s", "queue"), ("lookup_s", "lookup"), ("load_s", "load"), ("prefill_s", "prefill"),
          ("store_s", "store"), ("decode_s", "decode"))  # fmt: skip


class Tracing:
    def __init__(self, exporter: str = "none", service: str = "ctxcache") -> None:
        if exporter not in EXPORTERS:
            raise ValueError(f"unknown trace exporter {exporter!r}; use one of {', '.join(EXPORTERS)}")
        self.exporter_name = exporter
        self.enabled = exporter != "none"
        self.provider = TracerProvider(
            resource=Resource.create({"service.name": service, "service.version": __version__})
        )
        self.memory: InMemorySpanExporter | None = None
        if exporter == "memory":
            self.memory = InMemorySpanExporter()
            self.provider.add_span_processor(SimpleSpanProcessor(self.memory))
        elif exporter == "console":
            self.provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
        elif exporter == "otlp":
            self.provider.add_span_processor(BatchSpanProcessor(_otlp()))
        self.tracer: Tracer = self.provider.get_tracer("ctxcache")

    def request(self, rec: Mapping[str, Any], arrived_perf: float, policy: str) -> None:
        """Write the spans of one finished request record."""
        if not self.enabled:
            return
        now_ns, now_perf = time.time_ns(), time.perf_counter()
        t = int(now_ns - (now_perf - arrived_perf) * 1e9)
        tm = rec["timings"]
        end = t + int(1e9 * sum(float(tm.get(k, 0.0)) for k, _ in PHASES)) + int(1e9 * float(tm.get("tokenize_s", 0)))
        attrs = {
            "ctxcache.request_id": rec["id"],
            "ctxcache.tenant": rec["tenant"],
            "ctxcache.policy": policy,
            "ab.group": rec["ab_group"],
            "ctxcache.prompt_tokens": rec["prompt_tokens"],
            "ctxcache.hit_tokens": rec["cached_tokens"],
            "ctxcache.completion_tokens": rec["completion_tokens"],
            "ctxcache.tier": rec["slowest_tier"] or "none",
        }
        root = self.tracer.start_span("chat", start_time=t, attributes=attrs)
        ctx = _context(root)
        cursor = t
        for key, name in PHASES:
            if key not in tm:
                continue
            dur = int(float(tm[key]) * 1e9)
            span_attrs: dict[str, Any] = {"ab.group": rec["ab_group"]}
            if name == "load":
                span_attrs.update({f"ctxcache.tier.{k}.tokens": v for k, v in rec["cached_by_tier"].items()})
                span_attrs["ctxcache.tier"] = rec["slowest_tier"] or "none"
            if name == "lookup":
                span_attrs["ctxcache.hit_tokens"] = rec["cached_tokens"]
            self.tracer.start_span(name, context=ctx, start_time=cursor, attributes=span_attrs).end(
                end_time=cursor + dur
            )
            cursor += dur
            if name == "queue":
                cursor += int(float(tm.get("tokenize_s", 0.0)) * 1e9)
        root.end(end_time=max(end, cursor))

    def shutdown(self) -> None:
        self.provider.shutdown()


def _context(span: Any) -> Any:
    from opentelemetry import trace

    return trace.set_span_in_context(span)


def _otlp() -> SpanExporter:
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        raise ValueError(
            "the otlp trace exporter needs the opentelemetry-exporter-otlp package: pip install opentelemetry-exporter-otlp"
        ) from None
    return OTLPSpanExporter()  # type: ignore[no-any-return]
