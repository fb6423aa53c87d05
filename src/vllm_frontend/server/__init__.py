"""OpenAI-compatible HTTP server.

- ``transport``: the HTTP/1.1 transport (asyncio + httptools): ``Request``, ``Response``,
  ``StreamingResponse``, ``json_response``, ``HttpServer`` and its ``HttpLimits``,
  ``bind_tcp``/``bind_unix``/``socket_from_fd``. It knows no API error format: the app layer
  words its refusals (``errors.refusal_response``).
- ``app``: ``ServerSettings`` (built once at startup), ``App`` (route table + vLLM's middleware
  behaviour: API key, CORS, X-Request-Id, /load tracking, error mapping), ``make_server``.
- ``routes``: ``build_app(settings, services, generation_routes)`` with health, ping, models,
  version, load, metrics, tokenize and detokenize; ``Services`` holds what they are served from.
- ``protocol``: request bodies as msgspec Structs and their ``parse_*`` functions (vLLM's
  validators and error messages); ``validation``: decoding and pydantic-style error reports.
- ``errors``: the exception hierarchy and the one mapping to vLLM's error JSON.
- ``metrics_route``: ``/metrics`` and its negotiating mount (over ``vllm_frontend.metrics``);
  ``sibling_metrics``: the whole server's ``/metrics`` with ``--api-server-count N``.
- ``completions``, ``chat``: the generation handlers; each maps its request onto one call of
  a lower layer's facade (``text.llm.TextLlm``, ``chat.llm.ChatLlm``) and the text updates it
  streams onto OpenAI chunks; ``generation``: what they share (``ServingContext``, sampling
  field mapping, usage); ``sse``: SSE events, chunk templates and the push-style stream pump.
"""
