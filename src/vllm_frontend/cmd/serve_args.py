"""Arguments of ``vllm-frontend serve``: our flags, and the engines' forwarded to them.

Flags and defaults follow ``vllm-rs serve`` where a flag exists in both. Before an explicit
``--``, the arguments are cut into chunks at each option-like token, and each chunk goes where
``cmd.flags`` routes its option: to us, to the managed ``vllm serve --headless`` launcher, to
both, or nowhere (an option we cannot honour stops startup with its name). Everything after
``--`` is forwarded verbatim, once checked that none of it is an option only we can honour.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
from collections.abc import Sequence
from typing import Any

import msgspec

from vllm_frontend.cmd import flags
from vllm_frontend.cmd.managed_engine import split_passthrough

# vLLM's multi-character short aliases (vllm/engine/arg_utils.py, launchers/cli_args.py).
SHORT_ALIASES: dict[str, str] = {
    "-asc": "--api-server-count",
    "-pp": "--pipeline-parallel-size",
    "-tp": "--tensor-parallel-size",
    "-dcp": "--decode-context-parallel-size",
    "-pcp": "--prefill-context-parallel-size",
    "-dp": "--data-parallel-size",
    "-dpn": "--data-parallel-rank",
    "-dpr": "--data-parallel-start-rank",
    "-dpl": "--data-parallel-size-local",
    "-dpa": "--data-parallel-address",
    "-dpp": "--data-parallel-rpc-port",
    "-dpb": "--data-parallel-backend",
    "-dph": "--data-parallel-hybrid-lb",
    "-dpe": "--data-parallel-external-lb",
    "-dpm": "--data-parallel-multi-port-external-lb",
    "-ep": "--enable-expert-parallel",
    "-sc": "--speculative-config",
    "-cc": "--compilation-config",
    "-ac": "--attention-config",
    "-dc": "--diffusion-config",
    "-q": "--quantization",
    "-n": "--nnodes",
    "-r": "--node-rank",
    "--device-memory-utilization": "--gpu-memory-utilization",
}

logger = logging.getLogger(__name__)

_NUMBER = re.compile(r"^-\d")


def _bool(value: str) -> bool:
    v = value.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected a boolean, got {value!r}")


_HUMAN_INT = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def human_readable_int(value: str) -> int:
    """An integer as vLLM's flags spell it: ``1000``, ``1k`` (1,000), ``25.6k`` (25,600),
    ``1K`` (1,024); decimals only with the decimal suffixes k/m/g/t."""
    value = value.strip()
    match = _HUMAN_INT.fullmatch(value)
    if match is None:
        return int(value)
    number, suffix = match.groups()
    if suffix in _DECIMAL:
        return int(float(number) * _DECIMAL[suffix])
    try:
        return int(number) * _BINARY[suffix]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"Decimals are not allowed with binary suffixes like {suffix}. "
            f"Did you mean to use {number}{suffix.lower()} instead?"
        ) from None


def human_readable_int_or_auto(value: str) -> int:
    """``human_readable_int``, or -1 for ``-1`` / ``auto`` (vLLM's ``--max-model-len``)."""
    if value.strip() == "-1" or value.strip().lower() == "auto":
        return -1
    return human_readable_int(value)


def _json_object(value: str) -> dict[str, Any]:
    try:
        obj = json.loads(value)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not valid JSON: {e}") from None
    if not isinstance(obj, dict):
        raise argparse.ArgumentTypeError("expected a JSON object")
    return obj


def _json_list(value: str) -> list[str]:
    try:
        obj = json.loads(value)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not valid JSON: {e}") from None
    if not isinstance(obj, list):
        raise argparse.ArgumentTypeError("expected a JSON array")
    return [str(x) for x in obj]


HTTP_LIMIT_KEYS = (
    "http_timeout_keep_alive",
    "http_timeout_head",
    "http_timeout_body",
    "h11_max_incomplete_event_size",
    "h11_max_header_count",
    "http_max_body_size",
)
"""The argument names of the HTTP transport's limits (also flags of ``frontend``)."""


def add_http_limit_arguments(p: argparse.ArgumentParser, *, defaults: bool) -> None:
    """Register the HTTP limit flags on ``p``; without ``defaults`` they default to None (for
    ``frontend``, whose ``--args-json`` carries the values unless a flag overrides them)."""

    def default(value: float) -> float | None:
        return value if defaults else None

    p.add_argument(
        "--http-timeout-keep-alive",
        type=float,
        default=default(float(os.environ.get("VLLM_HTTP_TIMEOUT_KEEP_ALIVE", "5"))),
        help="seconds an idle keep-alive connection stays open (default 5)",
    )
    p.add_argument(
        "--http-timeout-head",
        type=float,
        default=default(30.0),
        help="seconds a started request head may take to arrive, else 408 (default 30)",
    )
    p.add_argument(
        "--http-timeout-body",
        type=float,
        default=default(30.0),
        help="seconds a started request body may go without data, else 408 (default 30)",
    )
    p.add_argument(
        "--h11-max-incomplete-event-size",
        type=int,
        default=default(64 * 1024),
        help="most bytes of request line + headers, else 431 (default 65536; vLLM's is 4 MiB)",
    )
    p.add_argument(
        "--h11-max-header-count",
        type=int,
        default=default(256),
        help="most request headers, else 431 (default 256)",
    )
    p.add_argument(
        "--http-max-body-size",
        type=int,
        default=default(64 * 1024 * 1024),
        help="most bytes of a request body, else 413 (default 67108864)",
    )


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    """Register the ``serve`` flags on ``p``."""
    opt_bool: dict[str, Any] = {"nargs": "?", "const": True, "default": False, "type": _bool}
    p.add_argument("model_tag", help="local model directory or hub name (resolved in the HF cache)")
    p.add_argument("--model", default=None, help="the model again (must match MODEL)")
    p.add_argument("--headless", action="store_true", help="only start the managed engines")
    p.add_argument("--host", default="127.0.0.1", help="HTTP bind host")
    p.add_argument("--port", type=int, default=8000, help="HTTP bind port")
    p.add_argument("--uds", default=None, help="serve HTTP on this Unix socket instead")
    p.add_argument("--ssl-keyfile", default=None, help="TLS private key file")
    p.add_argument("--ssl-certfile", default=None, help="TLS certificate (chain) file")
    p.add_argument("--ssl-ca-certs", default=None, help="CA file for client certificates")
    p.add_argument(
        "--ssl-cert-reqs", type=int, default=0,
        help="client certificate: 0 not asked, 1 optional, 2 required (mutual TLS)",
    )  # fmt: skip
    p.add_argument("--ssl-ciphers", default=None, help="TLS cipher string (OpenSSL's format)")
    p.add_argument("--enable-ssl-refresh", **opt_bool, help="reload the TLS files when they change")
    p.add_argument("--root-path", default=None, help="path prefix a proxy serves us under")
    p.add_argument("--served-model-name", nargs="+", default=None)
    p.add_argument("--tokenizer", default=None)
    p.add_argument("--revision", default=None)
    p.add_argument("--tokenizer-revision", default=None)
    p.add_argument(
        "--tokenizer-mode", default="auto", choices=("auto", "hf", "mistral"),
        help="auto, hf, or mistral (read the model's tekken.json with mistral_common)",
    )  # fmt: skip
    p.add_argument("--hf-config-path", default=None)
    p.add_argument("--generation-config", default="auto")
    p.add_argument("--override-generation-config", type=_json_object, default=None)
    p.add_argument(
        "--engine-ready-timeout-secs",
        type=float,
        default=float(os.environ.get("VLLM_ENGINE_READY_TIMEOUT_S", "600")),
    )
    p.add_argument("--max-model-len", type=human_readable_int_or_auto, default=None)
    p.add_argument("--shutdown-timeout", type=float, default=0.0)
    add_http_limit_arguments(p, defaults=True)
    p.add_argument("--chat-template", default=None)
    p.add_argument("--default-chat-template-kwargs", type=_json_object, default=None)
    p.add_argument("--trust-request-chat-template", **opt_bool)
    p.add_argument("--exclude-tools-when-tool-choice-none", **opt_bool)
    p.add_argument("--enable-auto-tool-choice", **opt_bool)
    p.add_argument("--tool-call-parser", default=None)
    p.add_argument("--tool-strict-level", choices=["auto", "function", "parameter"], default="auto")
    p.add_argument("--reasoning-parser", default=None)
    p.add_argument(
        "--chat-template-content-format", choices=["auto", "openai", "string"], default="auto"
    )
    p.add_argument("--response-role", default="assistant")
    p.add_argument("--cohere-format", default="cmd4")
    p.add_argument(
        "--anthropic-disabled-thinking-effort",
        choices=["auto", "none", "low", "medium", "high", "xhigh", "max"],
        default="auto",
    )
    p.add_argument("--max-logprobs", type=int, default=20)
    p.add_argument("--stream-interval", type=int, default=1)
    p.add_argument("--sse-keep-alive-interval", type=int, default=0)
    p.add_argument("--fingerprint-mode", choices=["full", "hash", "custom", "none"], default="full")
    p.add_argument("--fingerprint-value", default=None)
    p.add_argument("--max-num-queued-reqs", type=int, default=None)
    p.add_argument("--max-num-queued-tokens", type=human_readable_int, default=None)
    p.add_argument("--return-tokens-as-token-ids", **opt_bool)
    p.add_argument("--enable-prompt-tokens-details", **opt_bool)
    p.add_argument("--enable-force-include-usage", **opt_bool)
    p.add_argument("--enable-request-id-headers", **opt_bool)
    p.add_argument("--enable-server-load-tracking", **opt_bool)
    p.add_argument("--enable-log-requests", action="store_true")
    p.add_argument("--enable-tokenizer-info-endpoint", **opt_bool)
    p.add_argument("--enable-scale-out", **opt_bool, help="serve the render routes")
    p.add_argument(
        "--enable-trace-replay", **opt_bool, help="the engines replay trace_decode_token_ids"
    )
    p.add_argument("--max-log-len", type=int, default=None)
    p.add_argument("--disable-log-stats", action="store_true")
    p.add_argument(
        "--otlp-traces-endpoint",
        default=None,
        help="export each request's OpenTelemetry span to this OTLP endpoint (the otlp extra)",
    )
    p.add_argument("--structured-outputs-config", type=_json_object, default=None)
    # Multimodal options the engines need too (cmd.flags routes them to both).
    p.add_argument("--limit-mm-per-prompt", type=_json_object, default=None)
    p.add_argument("--mm-processor-kwargs", type=_json_object, default=None)
    p.add_argument("--mm-hasher-algorithm", default=None)
    p.add_argument("--mm-processor-cache-gb", type=float, default=None)
    p.add_argument("--mm-processor-cache-type", default=None)
    p.add_argument("--mm-device-do-normalize", **{**opt_bool, "default": None})
    p.add_argument("--enable-mm-embeds", **opt_bool)
    p.add_argument("--interleave-mm-strings", **opt_bool)
    p.add_argument(
        "--lora-modules",
        nargs="+",
        default=None,
        help="LoRA adapters to load at startup: name=path, or JSON "
        '\'{"name": ..., "path": ..., "base_model_name": ...}\'',
    )
    p.add_argument("--api-key", nargs="+", default=None)
    p.add_argument(
        "--allowed-local-media-path",
        default=None,
        help="serve file:// media URLs from under this directory (default: refuse them)",
    )
    p.add_argument(
        "--allowed-media-domains",
        nargs="+",
        default=None,
        help="http(s) media URLs, and their redirects, must name one of these hosts",
    )
    p.add_argument(
        "--allow-private-media-addresses",
        **opt_bool,
        help="let media be fetched from loopback, private, link-local and other non-global "
        "addresses (refused by default)",
    )
    p.add_argument(
        "--media-io-kwargs",
        type=_json_object,
        default=None,
        help='per-modality media decoding defaults, e.g. \'{"video": {"num_frames": 40}}\'',
    )
    p.add_argument("--allowed-origins", type=_json_list, default=None)
    p.add_argument("--allowed-methods", type=_json_list, default=None)
    p.add_argument("--allowed-headers", type=_json_list, default=None)
    p.add_argument("--allow-credentials", **opt_bool)
    p.add_argument(
        "--api-server-count",
        type=int,
        default=1,
        help="frontend processes sharing the HTTP socket, each its own engine client",
    )
    p.add_argument("--python", default=None, help="interpreter for the managed engines")
    p.add_argument(
        "--data-parallel-address", "--handshake-host", dest="data_parallel_address",
        default="127.0.0.1",
    )  # fmt: skip
    p.add_argument(
        "--data-parallel-rpc-port", "--handshake-port", dest="data_parallel_rpc_port",
        type=int, default=None,
    )  # fmt: skip
    p.add_argument("--data-parallel-size", type=int, default=1)
    p.add_argument("--data-parallel-size-local", type=int, default=None)
    # the engines' parallel layout (for /get_world_size) and profiler (for /start_profile)
    p.add_argument("--tensor-parallel-size", type=int, default=None)
    p.add_argument("--pipeline-parallel-size", type=int, default=None)
    p.add_argument("--prefill-context-parallel-size", type=int, default=None)
    p.add_argument("--profiler-config", type=_json_object, default=None)
    p.add_argument("--kv-transfer-config", type=_json_object, default=None)
    _add_ignored_arguments(p)
    _add_negations(p)


def _add_ignored_arguments(p: argparse.ArgumentParser) -> None:
    """Options this frontend ignores (``cmd.flags``), read as vLLM's parser reads them, so that
    a bad value stops startup as it does there; given, they are logged and have no effect."""
    quiet: dict[str, Any] = {"default": None, "help": argparse.SUPPRESS}
    for name in (
        "enable_log_deltas", "cohere_is_reasoning_model", "log_error_stack",
        "disable_uvicorn_access_log", "disable_fastapi_docs", "enable_offline_docs",
        "aggregate_engine_logging",
    ):  # fmt: skip
        p.add_argument(flags.option_name(name), action="store_true", **quiet)
    for name, kind in (
        ("data_parallel_supervisor_port", int),
        ("dp_supervisor_probe_interval_s", float),
        ("dp_supervisor_probe_timeout_s", float),
        ("dp_supervisor_probe_failure_threshold", int),
        ("renderer_num_workers", int),
    ):
        p.add_argument(flags.option_name(name), type=kind, **quiet)
    p.add_argument(
        "--uvicorn-log-level",
        choices=["critical", "debug", "error", "info", "trace", "warning"],
        **quiet,
    )
    p.add_argument(
        "--log-level", choices=["CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG", "NOTSET"], **quiet
    )


def _add_negations(p: argparse.ArgumentParser) -> None:
    """``--no-X`` for each boolean ``--X`` (vLLM's BooleanOptionalAction spelling)."""
    for action in list(p._actions):
        if action.type is _bool or isinstance(action, argparse._StoreTrueAction):
            for option in action.option_strings:
                if option.startswith("--"):
                    p.add_argument(
                        "--no-" + option[2:], dest=action.dest, action="store_false",
                        help=argparse.SUPPRESS,
                    )  # fmt: skip


# `serve` flags that only concern launching/joining engines, not the frontend's behaviour.
_LAUNCH_ONLY = frozenset(
    {
        "model_tag",
        "headless",
        "python",
        "data_parallel_address",
        "data_parallel_rpc_port",
        "data_parallel_size_local",
    }
)


class ServeArgs(msgspec.Struct):
    """Parsed ``serve`` arguments plus the arguments forwarded to the engines."""

    ns: argparse.Namespace
    engine_args: list[str]

    def frontend_args(self) -> dict[str, Any]:
        """The ``vllm serve``-style argument dict (``--args-json`` vocabulary) for the config."""
        out: dict[str, Any] = {"model_tag": self.ns.model_tag}
        for key, value in vars(self.ns).items():
            if key not in _LAUNCH_ONLY and value is not None:
                out[key] = value
        return out


def _known_flags(parser: argparse.ArgumentParser) -> dict[str, str]:
    return {s: a.dest for a in parser._actions for s in a.option_strings}


# Our options that the launcher is given by ManagedEngineSpec itself, not as the user wrote them.
_LAUNCHER_SETS = frozenset(
    {
        "model_tag",
        "model",
        "headless",
        "data_parallel_size",
        "data_parallel_size_local",
        "data_parallel_address",
        "data_parallel_rpc_port",
    }
)


class FlagError(ValueError):
    """An option that cannot go where it was given (unknown, refused, or ours after ``--``)."""


def normalize_option(token: str) -> str:
    """``token`` (``--opt``, ``--opt=value``, ``-x``) with vLLM's aliases and underscores
    spelled as the canonical long option (``-tp=2`` -> ``--tensor-parallel-size=2``)."""
    head, sep, rest = token.partition("=")
    if head.startswith("--"):
        head = "--" + head[2:].replace("_", "-")
    return SHORT_ALIASES.get(head, head) + sep + rest


def option_dest(option: str) -> tuple[str | None, bool]:
    """The vLLM destination name of a normalized option (``--a-b.c`` -> ``a_b``) and whether it
    is a ``--no-`` negation; None for an option vLLM 0.32's ``serve`` does not have."""
    name = option.split("=", 1)[0].lstrip("-").split(".", 1)[0].replace("-", "_")
    if name in flags.FLAGS:
        return name, False
    if name.startswith("no_") and name[3:] in flags.FLAGS:
        return name[3:], True
    return None, False


def _neutral(dest: str, chunk: list[str], negated: bool) -> bool:
    if negated:
        return flags.is_neutral(dest, False)
    _, sep, inline = chunk[0].partition("=")
    values = ([inline] if sep else []) + chunk[1:]
    if not values:
        return flags.is_neutral(dest, True)
    text = " ".join(values)
    return any(
        text == (v if isinstance(v, str) else json.dumps(v))
        for v in flags.NEUTRAL_VALUES.get(dest, ())
        if not isinstance(v, bool)
    )


def _route_forwarded(chunk: list[str], *, verbatim: bool) -> list[str]:
    """Check a chunk whose option our parser does not take; what goes to the engines."""
    dest, negated = option_dest(chunk[0])
    if dest is None:
        if verbatim:
            return chunk  # after `--`, whatever the launcher's own vLLM accepts
        raise FlagError(f"unknown option {chunk[0].split('=', 1)[0]} (not a vllm serve option)")
    route = flags.FLAGS[dest]
    if route == "refused":
        if _neutral(dest, chunk, negated):
            return []
        raise FlagError(flags.refused_message([dest]))
    if route == "ignored":
        logger.info("ignoring option %s (%s)", flags.option_name(dest), flags.note(dest))
        return []
    if route in ("frontend", "both"):
        # Only reachable after `--`: the engines would take it without a word.
        raise FlagError(
            f"{flags.option_name(dest)} is an option of the frontend: give it before `--`"
        )
    return chunk


def partition(parser: argparse.ArgumentParser, argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split ``serve`` arguments into (ours, forwarded to the engines), as ``cmd.flags`` routes
    each option; raises FlagError for an option that cannot be honoured."""
    before, verbatim = split_passthrough(argv)
    known = _known_flags(parser)
    ours: list[str] = before[:1]  # the model
    forwarded: list[str] = []
    chunk: list[str] = []

    def flush() -> None:
        if not chunk:
            return
        dest = known.get(chunk[0].split("=", 1)[0])
        if dest is None:
            forwarded.extend(_route_forwarded(chunk, verbatim=False))
        else:
            ours.extend(chunk)
            if flags.FLAGS.get(dest) == "both" and dest not in _LAUNCHER_SETS:
                forwarded.extend(chunk)
        chunk.clear()

    for tok in before[1:]:
        if tok.startswith("-") and not _NUMBER.match(tok):
            flush()
            tok = normalize_option(tok)
        chunk.append(tok)
    flush()
    for part in _chunks(verbatim):
        head = normalize_option(part[0])
        dest = known.get(head.split("=", 1)[0])
        if dest is not None and flags.FLAGS.get(dest) == "both" and dest not in _LAUNCHER_SETS:
            ours.extend([head, *part[1:]])  # both sides read it, wherever it was given
        elif head.startswith("-") and not _NUMBER.match(head):
            _route_forwarded([head, *part[1:]], verbatim=True)
    return ours, forwarded + verbatim


def _chunks(tokens: Sequence[str]) -> list[list[str]]:
    out: list[list[str]] = []
    for tok in tokens:
        if (tok.startswith("-") and not _NUMBER.match(tok)) or not out:
            out.append([tok])
        else:
            out[-1].append(tok)
    return out


def parse_serve_args(parser: argparse.ArgumentParser, argv: Sequence[str]) -> ServeArgs:
    """Parse ``serve`` arguments with ``parser`` (built by ``add_serve_arguments``)."""
    argv = list(argv)
    if not argv or argv[0].startswith("-"):
        parser.error("the model must appear immediately after the command: serve MODEL [options]")
    try:
        ours, engine = partition(parser, argv)
    except FlagError as e:
        parser.error(str(e))
    ns = parser.parse_args(ours)
    if ns.model is not None and ns.model != ns.model_tag:
        parser.error(f"--model {ns.model} differs from the model argument {ns.model_tag}")
    ns.model = None
    if ns.data_parallel_size < 1:
        parser.error("--data-parallel-size must be at least 1")
    if ns.data_parallel_size_local is not None and ns.data_parallel_size_local < 0:
        parser.error("--data-parallel-size-local must not be negative")
    if ns.api_server_count < 1:
        parser.error("--api-server-count must be at least 1")
    if ns.headless and ns.api_server_count > 1:
        parser.error("--api-server-count cannot be combined with --headless")
    if ns.headless and ns.data_parallel_size_local == 0:
        parser.error("--headless cannot be combined with --data-parallel-size-local 0")
    return ServeArgs(ns=ns, engine_args=engine)
