"""Every option of vLLM 0.32's ``vllm serve`` has a route (``cmd.flags``), read from vLLM's own
parser: a new or unclassified option fails here, and so does an option routed to the frontend
that ``serve`` would not recognise (it would be forwarded to the engines instead), or that the
configuration cannot take."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from vllm_frontend.cmd import flags
from vllm_frontend.cmd.config import FrontendConfig
from vllm_frontend.cmd.serve_args import add_serve_arguments, normalize_option, option_dest

pytestmark = pytest.mark.oracle


def _vllm_parser() -> argparse.ArgumentParser:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser: argparse.ArgumentParser = make_arg_parser(FlexibleArgumentParser())
    return parser


def _vllm_actions() -> list[argparse.Action]:
    return [a for a in _vllm_parser()._actions if a.dest != "help"]


def _engine_dests() -> set[str]:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    return {a.dest for a in AsyncEngineArgs.add_cli_args(FlexibleArgumentParser())._actions}


def test_every_vllm_serve_option_has_a_route() -> None:
    dests = {a.dest for a in _vllm_actions()}
    assert sorted(dests - set(flags.FLAGS)) == []
    assert sorted(set(flags.FLAGS) - dests) == []  # nothing classified that vLLM lacks


def test_options_routed_to_the_engines_alone_are_the_engines() -> None:
    """vLLM's own frontend options (FrontendArgs) are never merely forwarded to the engines,
    which would take them without a word; the exception forwards one that the engines' launcher
    itself applies to the engine config."""
    engine = _engine_dests()
    frontend_only = {d for d, r in flags.FLAGS.items() if r == "engine" and d not in engine}
    assert frontend_only == {"enable_flash_late_interaction"}


def test_serve_recognises_every_spelling_of_the_options_it_takes() -> None:
    ours = argparse.ArgumentParser()
    add_serve_arguments(ours)
    known = {s: a.dest for a in ours._actions for s in a.option_strings}
    for action in _vllm_actions():
        route = flags.FLAGS[action.dest]
        for option in action.option_strings:
            spelled = normalize_option(option)
            # every spelling leads back to its vLLM option
            assert option_dest(spelled)[0] == action.dest, option
            if route in ("frontend", "both"):
                assert known.get(spelled) == action.dest, option


def test_the_frontends_options_reach_its_configuration() -> None:
    fields = set(FrontendConfig.__struct_fields__)
    launch = {"model_tag", "model", "headless", "data_parallel_size", "data_parallel_size_local",
              "data_parallel_address", "data_parallel_rpc_port"}  # fmt: skip
    taken = {"structured_outputs_config"}  # read into structured_outputs_backend & reasoning
    for dest, route in flags.FLAGS.items():
        if route in ("frontend", "both") and dest not in launch | taken:
            assert dest in fields, dest


def test_neutral_values_are_vllms_defaults() -> None:
    defaults: dict[str, Any] = {a.dest: a.default for a in _vllm_actions()}
    for dest, values in flags.NEUTRAL_VALUES.items():
        assert flags.FLAGS[dest] == "refused", dest
        assert defaults[dest] in values, dest


def test_every_refused_or_ignored_option_says_why() -> None:
    for dest, route in flags.FLAGS.items():
        if route in ("refused", "ignored"):
            assert flags.note(dest), dest


@pytest.mark.parametrize(
    "values",
    [
        ["a=/p/a"],
        ["a=/p/a", "b=/p/b=c"],
        ['{"name": "a", "path": "/p/a"}'],
        ['{"name": "a", "path": "/p/a", "base_model_name": "m", "is_3d_lora_weight": true}'],
        ["", "a=/p/a"],
        ["a=/p/a,b=/p/b"],  # a comma: read as JSON, which it is not
        ['{"name": "a"}'],  # no path
        ['{"name": "a", "path": "/p", "rank": 8}'],  # an unknown field
    ],
)
def test_lora_modules_are_read_as_vllm_reads_them(values: list[str]) -> None:
    """``--lora-modules`` through ``serve`` and ``--args-json`` gives vLLM's ``LoRAModulePath``
    list, or stops startup where vLLM's parser does."""
    import dataclasses

    from vllm_frontend.cmd.config import ConfigError, config_from_args
    from vllm_frontend.cmd.serve_args import parse_serve_args

    try:
        theirs = _vllm_parser().parse_args(["m", "--lora-modules", *values]).lora_modules
    except SystemExit:
        theirs = None
    ours_parser = argparse.ArgumentParser()
    add_serve_arguments(ours_parser)
    try:
        ns = parse_serve_args(ours_parser, ["m", "--lora-modules", *values]).frontend_args()
        ours = config_from_args(ns).lora_modules
    except ConfigError:
        assert theirs is None
        return
    assert theirs is not None
    want = [dataclasses.asdict(m) for m in theirs]
    assert [
        {
            "name": m.name,
            "path": m.path,
            "base_model_name": m.base_model_name,
            "is_3d_lora_weight": m.is_3d_lora_weight,
        }
        for m in ours
    ] == want
    # what `vllm serve` hands a Rust-style frontend (--args-json) reads the same
    from vllm.entrypoints.serve.utils.api_utils import _jsonify_arg_value

    via_json = config_from_args({"model_tag": "m", "lora_modules": _jsonify_arg_value(theirs)})
    assert via_json.lora_modules == ours


@pytest.mark.parametrize(
    ("mode", "fingerprint"), [("custom", "fp"), ("none", None), ("full", None), ("hash", "error")]
)
def test_fingerprint_modes_are_taken_or_refused(mode: str, fingerprint: str | None) -> None:
    """``custom`` and ``none`` are vLLM's; ``full`` (no config hash to give) answers with none;
    ``hash`` stops startup."""
    from vllm_frontend.cmd.config import ConfigError, config_from_args

    try:
        config = config_from_args({"model_tag": "m", "fingerprint_mode": mode,
                                   "fingerprint_value": "fp"})  # fmt: skip
    except ConfigError:
        assert fingerprint == "error"
        return
    assert (config.fingerprint_value if config.fingerprint_mode == "custom" else None) == (
        fingerprint
    )
