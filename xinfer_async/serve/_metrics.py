"""The server's Prometheus metrics (``GET /metrics``), in a ``CollectorRegistry`` of their own per
app (two apps in one process never share a series).

Names follow vLLM's (``vllm:num_requests_running`` -> ``xinfer_num_requests_running``...), so
dashboards written for it read these with the prefix changed. Counters and histograms are updated
as requests run; the gauges are read from the model (``LanguageModel.statistics()``) and the
server's requests at each scrape.
"""

from __future__ import annotations

import bisect
import dataclasses
from typing import Callable, Sequence

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.utils import floatToGoString

__all__ = ["Snapshot", "ServerMetrics", "CountedHistogram", "CONTENT_TYPE_LATEST"]

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0)
ITL_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15,
               0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0)
E2E_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 60.0, 120.0, 300.0, 600.0)
FREE_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """The state the gauges show at a scrape.

    Attributes:
        loaded: the model is loaded (``/health`` answers 200).
        running: generation requests holding a slot (a batch sequence with batching).
        waiting: generation requests waiting for a slot.
        in_flight: generation requests the server has admitted (running, waiting, or ending).
        slots: the model's slots (concurrent requests).
        kv_tokens: KV-cache rows in use: prompt + generated tokens of the requests past their first
            token (a request still in its prefill is not counted).
        kv_capacity_tokens: KV-cache rows in all: slots x context length.
    """

    loaded: bool = False
    running: int = 0
    waiting: int = 0
    in_flight: int = 0
    slots: int = 0
    kv_tokens: int = 0
    kv_capacity_tokens: int = 0


class _Gauges:
    """A collector that reads a ``Snapshot`` at each scrape."""

    def __init__(self, snapshot: Callable[[], Snapshot]):
        self._snapshot = snapshot

    def describe(self):
        return []  # not described up front: the registry must not call snapshot() at registration

    def collect(self):
        s = self._snapshot()
        cap = s.kv_capacity_tokens
        for name, doc, value in (
            ("xinfer_model_loaded", "1 once the model is loaded (/health answers 200), 0 while loading", int(s.loaded)),
            ("xinfer_num_requests_running", "generation requests holding a slot (a batch sequence)", s.running),
            ("xinfer_num_requests_waiting", "generation requests waiting for a slot", s.waiting),
            ("xinfer_num_requests_in_flight", "generation requests admitted by the server (back-pressure counts these)",
             s.in_flight),
            ("xinfer_slots", "slots of the model (concurrent requests)", s.slots),
            ("xinfer_slot_usage_ratio", "slots held / slots", s.running / s.slots if s.slots else 0.0),
            ("xinfer_kv_cache_tokens", "KV-cache rows in use (prompt + generated tokens of the requests past their "
             "first token)", s.kv_tokens),
            ("xinfer_kv_cache_usage_ratio", "KV-cache rows in use / rows in all (slots x context)",
             s.kv_tokens / cap if cap else 0.0),
        ):
            yield GaugeMetricFamily(name, doc, value=value)


class CountedHistogram:
    """A Prometheus histogram whose ``observe`` records one value ``count`` times in one call (a
    streamed event of n tokens is n inter-token gaps of the same length): one bucket search and
    two additions, where ``prometheus_client.Histogram`` would take n ``observe`` calls (a lock
    and a bucket walk each). Exposed at each scrape as a histogram family (``_bucket``,
    ``_count``, ``_sum``), as ``Histogram`` is. For one thread (the server's trio thread): no lock.

    Args:
        name, documentation: the metric's.
        buckets: upper bounds, seconds, increasing (``+Inf`` is added).
        registry: registers the collector there.

    Raises:
        ValueError: buckets empty or not increasing.
    """

    def __init__(self, name: str, documentation: str, buckets: Sequence[float], registry: CollectorRegistry):
        bounds = [float(b) for b in buckets]
        if not bounds or any(b >= c for b, c in zip(bounds, bounds[1:])):
            raise ValueError(f"buckets must be a non-empty increasing sequence, got {list(buckets)!r}")
        self.name, self.documentation = name, documentation
        self._bounds = bounds
        self._counts = [0] * (len(bounds) + 1)  # the last: above every bound (+Inf)
        self._sum = 0.0
        registry.register(self)

    def observe(self, value: float, count: int = 1) -> None:
        """Record ``value`` (seconds) ``count`` times (an int >= 0)."""
        self._counts[bisect.bisect_left(self._bounds, value)] += count
        self._sum += value * count

    def describe(self):
        return [HistogramMetricFamily(self.name, self.documentation)]

    def collect(self):
        cumulative, total = [], 0
        for bound, n in zip(self._bounds + [float("inf")], self._counts):
            total += n
            cumulative.append((floatToGoString(bound), total))
        yield HistogramMetricFamily(self.name, self.documentation, buckets=cumulative, sum_value=self._sum)


class ServerMetrics:
    """The metrics of one app.

    Args:
        snapshot: called at each scrape for the gauges (``Snapshot``).
    """

    def __init__(self, snapshot: Callable[[], Snapshot]):
        self.registry = CollectorRegistry()
        r = self.registry
        ProcessCollector(registry=r)  # process_cpu_seconds_total etc. (Linux): bench serve's server CPU a token
        self.http_requests = Counter("xinfer_http_requests", "HTTP requests answered, by route and status",
                                     ["route", "status"], registry=r)
        self.prompt_tokens = Counter("xinfer_prompt_tokens", "prompt tokens of admitted generation requests",
                                     registry=r)
        self.generation_tokens = Counter("xinfer_generation_tokens", "tokens generated", registry=r)
        self.request_success = Counter("xinfer_request_success", "generation requests finished, by finish reason",
                                       ["finished_reason"], registry=r)
        self.requests_cancelled = Counter("xinfer_requests_cancelled",
                                          "generation requests cancelled, by reason (disconnect, timeout)",
                                          ["reason"], registry=r)
        self.ttft = Histogram("xinfer_time_to_first_token_seconds",
                              "request received to its first token sent, seconds (queue wait and prefill included)",
                              buckets=TTFT_BUCKETS, registry=r)
        self.itl = CountedHistogram("xinfer_inter_token_latency_seconds",
                                    "time between consecutive tokens of a request as sent, seconds (a piece of "
                                    "several tokens counts its gap divided among them)", ITL_BUCKETS, r)
        self.e2e = Histogram("xinfer_e2e_request_latency_seconds", "request received to its last token, seconds",
                             buckets=E2E_BUCKETS, registry=r)
        self.disconnect_to_free = Histogram(
            "xinfer_disconnect_to_free_seconds",
            "client disconnect (or request timeout) to its slot being free again, seconds",
            buckets=FREE_BUCKETS, registry=r)
        r.register(_Gauges(snapshot))

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric (content type ``CONTENT_TYPE_LATEST``)."""
        return generate_latest(self.registry)
