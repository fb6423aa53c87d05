"""`--structured-outputs-config` reaches the requests' grammar backend, or stops startup."""

from __future__ import annotations

import typing

import pytest

from vllm_frontend.cmd.config import ConfigError, config_from_args
from vllm_frontend.text.structured_outputs import BACKENDS


@pytest.mark.oracle
def test_backend_names_are_vllms() -> None:
    pytest.importorskip("vllm")
    from vllm.config.structured_outputs import StructuredOutputsBackend

    assert set(BACKENDS) == set(typing.get_args(StructuredOutputsBackend))


@pytest.mark.parametrize("value", [{"backend": "guidance"}, '{"backend": "guidance"}'])
def test_configured_backend_is_the_one_requests_name(value: object) -> None:
    config = config_from_args({"model_tag": "m", "structured_outputs_config": value})
    assert config.structured_outputs_backend == "guidance"


def test_default_backend_is_auto() -> None:
    assert config_from_args({"model_tag": "m"}).structured_outputs_backend == "auto"


def test_unknown_backend_stops_startup_naming_the_choices() -> None:
    with pytest.raises(ConfigError, match="xgrammar"):
        config_from_args({"model_tag": "m", "structured_outputs_config": {"backend": "llama"}})


def test_reasoning_parser_named_in_the_structured_outputs_config_is_used() -> None:
    config = config_from_args(
        {"model_tag": "m", "structured_outputs_config": {"reasoning_parser": "deepseek_r1"}}
    )
    assert config.reasoning_parser == "deepseek_r1"
