"""`vllm-frontend serve` splits its command line like vllm-rs and reads flags like `vllm serve`."""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys

import pytest

from vllm_frontend.cmd import flags
from vllm_frontend.cmd.config import ConfigError, config_from_args
from vllm_frontend.cmd.serve_args import HTTP_LIMIT_KEYS, add_serve_arguments, parse_serve_args


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vllm-frontend serve")
    add_serve_arguments(p)
    return p


def test_engine_flags_are_forwarded_with_their_values() -> None:
    args = parse_serve_args(
        _parser(),
        [
            "m",
            "--port", "9000",
            "-tp", "2",
            "--enforce-eager",
            "--max-logprobs", "-1",
            "--kv-cache-dtype=fp8",
            "--served-model-name", "a", "b",
            "--", "--gpu-memory-utilization", "0.5", "--some-later-engine-flag",
        ],
    )  # fmt: skip
    assert args.ns.port == 9000
    assert args.ns.max_logprobs == -1
    assert args.ns.served_model_name == ["a", "b"]
    # --max-logprobs and --served-model-name are read by both sides
    assert args.engine_args == [
        "--tensor-parallel-size", "2", "--enforce-eager", "--max-logprobs", "-1",
        "--kv-cache-dtype=fp8", "--served-model-name", "a", "b",
        "--gpu-memory-utilization", "0.5", "--some-later-engine-flag",
    ]  # fmt: skip


def test_options_both_sides_read_reach_the_managed_engines() -> None:
    """They used to stay with the frontend: the engines then loaded another revision, or
    compiled grammars with another backend, than the frontend served."""
    cmd = ["m", "--revision", "r1", "--tokenizer", "t", "--tokenizer-revision", "r2",
           "--hf-config-path", "h", "--generation-config", "vllm", "--max-model-len", "64",
           "--structured-outputs-config", '{"backend": "guidance"}', "--reasoning-parser",
           "qwen3", "--stream-interval", "2", "--disable-log-stats", "--shutdown-timeout", "3",
           "--tokenizer-mode", "mistral", "--data-parallel-size", "2", "--headless", "--model",
           "m"]  # fmt: skip
    args = parse_serve_args(_parser(), cmd)
    assert args.engine_args == cmd[1:-5]
    assert args.ns.revision == "r1" and args.ns.data_parallel_size == 2


@pytest.mark.parametrize(
    "argv,name",
    [
        (["--middleware", "m.w"], "--middleware"),
        (["--enable-tower-connector-lora"], "--enable-tower-connector-lora"),
        (["--tokenizer-mode=deepseek_v32"], "--tokenizer-mode"),
        (["--tokens-only"], "--tokens-only"),
        (["--no-such-option", "1"], "--no-such-option"),
        (["--", "--api-key", "k"], "--api-key"),
        (["--", "--enable-log-outputs"], "--enable-log-outputs"),
    ],
)
def test_an_option_that_cannot_be_honoured_stops_startup_naming_it(
    argv: list[str], name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_serve_args(_parser(), ["m", *argv])
    assert exit_info.value.code == 2
    assert name in capsys.readouterr().err


def test_refused_options_at_their_default_and_ignored_options_go_nowhere() -> None:
    args = parse_serve_args(
        _parser(),
        ["m", "--no-enable-scale-out", "--ssl-cert-reqs", "0",
         "--uvicorn-log-level", "debug", "--disable-fastapi-docs", "-q", "fp8"],
    )  # fmt: skip
    assert args.engine_args == ["--quantization", "fp8"]


def test_ignored_options_take_only_the_values_vllms_parser_takes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # What `vllm serve` 0.32 answered for each (exit status 2, this message on stderr).
    for argv, message in (
        (["--uvicorn-log-level", "bogus"], "argument --uvicorn-log-level: invalid choice: "
         "'bogus' (choose from 'critical', 'debug', 'error', 'info', 'trace', 'warning')"),
        (["--renderer-num-workers", "two"],
         "argument --renderer-num-workers: invalid int value: 'two'"),
        (["--dp-supervisor-probe-timeout-s", "x"],
         "argument --dp-supervisor-probe-timeout-s: invalid float value: 'x'"),
        (["--disable-fastapi-docs", "yes"], "unrecognized arguments: yes"),
    ):  # fmt: skip
        with pytest.raises(SystemExit) as exit_info:
            parse_serve_args(_parser(), ["m", *argv])
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err
    args = parse_serve_args(_parser(), ["m", "--log-level", "DEBUG", "--no-log-error-stack"])
    assert args.engine_args == []


def test_options_both_sides_read_are_taken_after_the_separator_too() -> None:
    args = parse_serve_args(_parser(), ["m", "--", "--enforce-eager", "--max-model-len", "48"])
    assert args.ns.max_model_len == 48
    assert args.engine_args == ["--enforce-eager", "--max-model-len", "48"]


def test_no_forms_and_underscores_are_vllms_spellings() -> None:
    ns = parse_serve_args(
        _parser(), ["m", "--enable-auto-tool-choice", "--no-enable-auto-tool-choice",
                    "--max_model_len", "32"],
    ).ns  # fmt: skip
    assert ns.enable_auto_tool_choice is False and ns.max_model_len == 32


def test_the_model_option_must_name_the_model() -> None:
    with pytest.raises(SystemExit):
        parse_serve_args(_parser(), ["m", "--model", "other"])


def test_the_readme_lists_every_route() -> None:
    readme = pathlib.Path(__file__).resolve().parents[2] / "README.md"
    assert flags.markdown_table() in readme.read_text()


def test_args_json_refuses_unknown_and_unhonoured_keys_and_takes_the_rest() -> None:
    with pytest.raises(ConfigError, match="no_such_key"):
        config_from_args({"model_tag": "m", "no_such_key": 1})
    with pytest.raises(ConfigError, match="--middleware"):
        config_from_args({"model_tag": "m", "middleware": ["a.b"]})
    cfg = config_from_args({"model_tag": "m", "model": "m", "tokenizer_mode": "auto",
                            "engine_ready_timeout_secs": 5, "cohere_format": "cmd3",
                            "data_parallel_size": 2, "uvicorn_log_level": "debug"})  # fmt: skip
    assert cfg.engine_ready_timeout_secs == 5 and cfg.cohere_format == "cmd3"


def test_model_must_come_first() -> None:
    with pytest.raises(SystemExit):
        parse_serve_args(_parser(), ["--port", "1", "m"])


def test_headless_and_external_engines_conflict() -> None:
    with pytest.raises(SystemExit):
        parse_serve_args(_parser(), ["m", "--headless", "--data-parallel-size-local", "0"])


def test_unsupported_option_fails_startup_naming_it() -> None:
    with pytest.raises(ConfigError, match="--default-mm-loras"):
        config_from_args({"model_tag": "m", "default_mm_loras": {"image": "/a"}})


def test_engine_only_and_harmless_options_are_accepted() -> None:
    cfg = config_from_args(
        {"model_tag": "m", "tensor_parallel_size": 2, "uvicorn_log_level": "debug", "port": 1}
    )
    assert cfg.port == 1 and cfg.served_model_names == ["m"]


def test_stream_interval_is_taken_and_a_bad_one_stops_startup() -> None:
    assert config_from_args({"model_tag": "m", "stream_interval": 3}).stream_interval == 3
    for bad in (0, -2, "3"):
        with pytest.raises(ConfigError, match="stream_interval"):
            config_from_args({"model_tag": "m", "stream_interval": bad})


def test_http_limits_reach_the_config_and_bad_ones_stop_startup() -> None:
    cfg = config_from_args({"model_tag": "m"})
    assert (cfg.h11_max_incomplete_event_size, cfg.h11_max_header_count) == (65536, 256)
    assert (cfg.http_timeout_head, cfg.http_timeout_body) == (30.0, 30.0)
    assert cfg.http_max_body_size == 64 * 1024 * 1024
    ns = parse_serve_args(
        _parser(),
        ["/m", "--http-timeout-head", "2", "--http-timeout-body", "3",
         "--h11-max-incomplete-event-size", "4096", "--h11-max-header-count", "10",
         "--http-max-body-size", "100", "--http-timeout-keep-alive", "7"],
    )  # fmt: skip
    cfg = config_from_args(ns.frontend_args())
    assert (cfg.http_timeout_head, cfg.http_timeout_body, cfg.http_timeout_keep_alive) == (2, 3, 7)
    assert (cfg.h11_max_incomplete_event_size, cfg.h11_max_header_count) == (4096, 10)
    assert cfg.http_max_body_size == 100
    for key, bad in [("http_timeout_head", 0), ("http_timeout_body", -1),
                     ("h11_max_header_count", 0), ("http_max_body_size", True)]:  # fmt: skip
        with pytest.raises(ConfigError, match=key):
            config_from_args({"model_tag": "m", key: bad})


def test_frontend_http_limit_flags_default_to_the_args_json() -> None:
    from vllm_frontend.cli import build_parser

    parser, _ = build_parser()
    base = ["frontend", "--listen-fd", "3", "--input-listener-fd", "4",
            "--output-listener-fd", "5", "--args-json", "{}"]  # fmt: skip
    ns = parser.parse_args(base)
    assert all(getattr(ns, key) is None for key in HTTP_LIMIT_KEYS)
    ns = parser.parse_args([*base, "--http-timeout-body", "4"])
    assert ns.http_timeout_body == 4.0


def test_sse_keep_alive_interval_is_taken_and_a_negative_one_stops_startup() -> None:
    cfg = config_from_args({"model_tag": "m", "sse_keep_alive_interval": 15})
    assert cfg.sse_keep_alive_interval == 15
    for bad in (-1, "x"):
        with pytest.raises(ConfigError, match="sse_keep_alive_interval"):
            config_from_args({"model_tag": "m", "sse_keep_alive_interval": bad})


def test_queue_limits_are_taken_and_bad_ones_stop_startup() -> None:
    cfg = config_from_args({"model_tag": "m", "max_num_queued_reqs": 8})
    assert (cfg.max_num_queued_reqs, cfg.max_num_queued_tokens) == (8, None)
    assert (
        config_from_args({"model_tag": "m", "max_num_queued_tokens": 0}).max_num_queued_tokens == 0
    )
    for key in ("max_num_queued_reqs", "max_num_queued_tokens"):
        for bad in (-1, "3", 2.5, True):
            with pytest.raises(ConfigError, match=key):
                config_from_args({"model_tag": "m", key: bad})


# The values our parser gives must be the ones vLLM's own `vllm serve` parser gives for the same
# command line (run in a subprocess: the frontend itself never imports vllm).
_VLLM_PARSE = """
import json, sys
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
p = make_arg_parser(FlexibleArgumentParser())
ns = p.parse_args(sys.argv[1:])
keys = json.loads(sys.stdin.read())
print(json.dumps({k: getattr(ns, k) for k in keys}, default=repr))
"""


def test_shared_flags_parse_to_the_same_values_as_vllm_serve() -> None:
    cmd = [
        "--served-model-name", "x", "y", "--max-logprobs", "5", "--api-key", "k1",
        "--chat-template-content-format", "openai", "--default-chat-template-kwargs",
        '{"enable_thinking": false}', "--trust-request-chat-template",
        "--return-tokens-as-token-ids", "--enable-request-id-headers", "--response-role", "bot",
        "--allowed-origins", '["http://a"]', "--stream-interval", "3",
        "--sse-keep-alive-interval", "15",
        "--enable-prompt-tokens-details", "--enable-force-include-usage",
        "--max-num-queued-reqs", "7", "--max-num-queued-tokens", "1K", "--max-model-len", "25.6k",
        "--h11-max-incomplete-event-size", "1000", "--h11-max-header-count", "9",
        "--allowed-media-domains", "a.example", "b.example", "--allowed-local-media-path", "/tmp",
        "--media-io-kwargs", '{"video": {"num_frames": 8}}',
    ]  # fmt: skip
    ours = parse_serve_args(_parser(), ["/m", *cmd]).frontend_args()
    keys = ["served_model_name", "max_logprobs", "api_key", "chat_template_content_format",
            "default_chat_template_kwargs", "trust_request_chat_template",
            "return_tokens_as_token_ids", "enable_request_id_headers", "response_role",
            "allowed_origins", "stream_interval", "sse_keep_alive_interval",
            "enable_prompt_tokens_details",
            "enable_force_include_usage", "max_num_queued_reqs",
            "max_num_queued_tokens", "max_model_len", "h11_max_incomplete_event_size",
            "h11_max_header_count", "allowed_media_domains", "allowed_local_media_path",
            "media_io_kwargs"]  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-c", _VLLM_PARSE, "--model", "/m", *cmd],
        input=json.dumps(keys),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    theirs = json.loads(out.stdout.strip().splitlines()[-1])
    for k in keys:
        assert ours[k] == theirs[k], k


def test_max_model_len_takes_vllms_spellings_and_bad_ones_stop_startup() -> None:
    # vLLM's human_readable_int_or_auto: -1 or "auto" for auto-fit, k/m/g/t decimal and K/M/G/T
    # binary suffixes, no decimals with a binary one; ModelConfig refuses below -1 at startup.
    for text, value in (("auto", -1), ("-1", -1), ("AUTO", -1), ("1k", 1000), ("1K", 1024),
                        ("2048", 2048), (" 4k ", 4000)):  # fmt: skip
        assert parse_serve_args(_parser(), ["m", "--max-model-len", text]).ns.max_model_len == value
    for bad in ("1.5K", "abc", "1e3"):
        with pytest.raises(SystemExit):
            parse_serve_args(_parser(), ["m", "--max-model-len", bad])
    for key in ("max_model_len", "max_logprobs"):
        with pytest.raises(ConfigError, match=key):
            config_from_args({"model_tag": "m", key: -2})


def test_media_flags_reach_the_config_and_the_policy(tmp_path: pathlib.Path) -> None:
    from vllm_frontend.cmd.assemble import media_policy

    args = parse_serve_args(
        _parser(),
        [
            "m",
            "--allowed-local-media-path", str(tmp_path),
            "--allowed-media-domains", "a.example", "b.example",
            "--allow-private-media-addresses",
            "--media-io-kwargs", '{"image": {"image_mode": "L"}}',
        ],
    )  # fmt: skip
    assert args.engine_args == []
    cfg = config_from_args(args.frontend_args())
    policy = media_policy(cfg)
    assert policy.allowed_local_media_path == str(tmp_path)
    assert policy.allowed_media_domains == ("a.example", "b.example")
    assert policy.allow_private_addresses is True
    assert policy.media_io_kwargs == {"image": {"image_mode": "L"}}
    default = media_policy(config_from_args({"model_tag": "m"}))
    assert (default.allow_private_addresses, default.allowed_media_domains) == (False, ())
    assert default.allowed_local_media_path == ""


def test_private_media_addresses_can_be_allowed_by_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("VLLM_FRONTEND_ALLOW_PRIVATE_MEDIA_ADDRESSES", "1")
    assert config_from_args({"model_tag": "m"}).allow_private_media_addresses is True


def test_a_bad_allowed_local_media_path_stops_startup(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        config_from_args({"model_tag": "m", "allowed_local_media_path": str(tmp_path / "x")})
    (tmp_path / "f").write_text("")
    with pytest.raises(ConfigError, match="must be a directory"):
        config_from_args({"model_tag": "m", "allowed_local_media_path": str(tmp_path / "f")})
    with pytest.raises(ConfigError, match="media_io_kwargs"):
        config_from_args({"model_tag": "m", "media_io_kwargs": '{"video": 3}'})


def test_media_environment_variables_are_read_as_vllm_reads_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from vllm_frontend.cmd.assemble import media_policy

    monkeypatch.setenv("VLLM_IMAGE_FETCH_TIMEOUT", "7")
    monkeypatch.setenv("VLLM_MEDIA_URL_ALLOW_REDIRECTS", "0")
    monkeypatch.setenv("VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB", "3")
    policy = media_policy(config_from_args({"model_tag": "m"}))
    assert (policy.image_fetch_timeout, policy.allow_redirects) == (7, False)
    assert policy.max_download_bytes == 3 * 1024 * 1024
    monkeypatch.setenv("VLLM_AUDIO_FETCH_TIMEOUT", "soon")
    with pytest.raises(ConfigError, match="VLLM_AUDIO_FETCH_TIMEOUT"):
        media_policy(config_from_args({"model_tag": "m"}))


def test_the_traces_endpoint_goes_to_both_sides_and_the_managed_engines_environment() -> None:
    """As in vLLM: the engines' configuration has it, and with one API server the engines it
    starts inherit ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (its ``init_tracer`` exports it)."""
    from vllm_frontend.cmd.runner import engine_environment

    cmd = ["m", "--otlp-traces-endpoint", "127.0.0.1:4317", "--collect-detailed-traces", "all"]
    args = parse_serve_args(_parser(), cmd)
    assert args.engine_args == cmd[1:]
    config = config_from_args(args.frontend_args())
    assert config.otlp_traces_endpoint == "127.0.0.1:4317"
    assert engine_environment(config) == {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "127.0.0.1:4317"}
    assert engine_environment(config_from_args({"model_tag": "m"})) == {}


def test_the_traces_endpoint_without_opentelemetry_stops_startup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "udp")
    with pytest.raises(ConfigError, match="Unsupported OTLP protocol 'udp' is configured"):
        config_from_args({"model_tag": "m", "otlp_traces_endpoint": "127.0.0.1:4317"})
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.resources", None)
    with pytest.raises(ConfigError, match=r"pip install 'vllm-frontend-py\[otlp\]'"):
        config_from_args({"model_tag": "m", "otlp_traces_endpoint": "127.0.0.1:4317"})
