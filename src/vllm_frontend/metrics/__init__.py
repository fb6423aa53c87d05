"""Prometheus metrics (and request spans), below every other package (it imports none of them).

- ``exposition``: ``MetricFamily``/``Sample``/``Collector`` and the text-format renderer
  (``render``, byte for byte prometheus_client's ``generate_latest``); ``openmetrics``: the
  OpenMetrics renderer; ``names``: name escaping schemes; ``negotiation``: which of them a scrape
  gets (``Accept``, ``Accept-Encoding``, ``name[]``); ``text_parse``: families read back from a
  text page.
- ``series``: counters, histograms and summaries as plain accumulators; ``registry``:
  ``MetricsRegistry`` (what ``/metrics`` renders) and ``render_metrics``.
- ``vllm_families``, ``frontend``, ``finish_records``, ``request_stats``, ``engine_gauges``:
  vLLM's ``vllm:*`` series and what feeds them (plain values; ``vllm_frontend.llm.step_metrics``
  reads engine messages for them); ``http_series``: vLLM's ``http_*`` series; ``process``: the
  ``process_*``/``python_*`` series of a single-process server.
- ``merge``: one exposition out of several API server processes' own.
- ``tracing``: vLLM's per-request OpenTelemetry spans (``--otlp-traces-endpoint``), from the same
  request stats; OpenTelemetry (an optional extra) is imported only when a tracer is made.

The ``/metrics`` routes and the sibling exchange stay in ``vllm_frontend.server``
(``metrics_route``, ``sibling_metrics``).
"""
