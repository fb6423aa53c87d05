"""Shared fixtures: the tiny Llama 3 test model, real vLLM engines, vllm-rs (see tests/support/)."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from _pytest.mark.expression import Expression

from tests.support.engines import HeadlessEngines, start_headless_engines, stop_all
from tests.support.hf_tokenizer import copy_rust_tokenizers_cheaply
from tests.support.module_caches import release_module_caches
from tests.support.module_costs import load_costs, slowest_first
from tests.support.shared_stacks import (
    EarlyStops,
    ToolServers,
    group_users,
    stop_after,
)
from tests.support.shared_stacks import tool_servers as _tool_servers
from tests.support.shared_tokenizer import release_shared_tokenizers
from tests.support.tiny_model import tiny_model_dir

# The frontends that tests start keep their tokenizer cache (vllm_frontend.text.tokenizer_cache)
# in a directory of this run's, not in the user's ~/.cache.
_CACHE_ROOT = tempfile.mkdtemp(prefix="vllm-frontend-test-cache-")
os.environ.setdefault("VLLM_FRONTEND_CACHE_ROOT", _CACHE_ROOT)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove this run's tokenizer cache."""
    shutil.rmtree(_CACHE_ROOT, ignore_errors=True)


# -- the fast loop (-m "not engine") never imports vLLM ------------------------------------------
# Tests that use vLLM, transformers or torch as a reference carry the `oracle` marker, and every
# oracle test also counts as an `engine` test: importing vLLM costs seconds and pulls in torch. A
# module whose every test is an oracle says so with a module-level `pytestmark`; it is then not even
# imported when the marker expression leaves it out, so its module-level imports cost nothing.

HEAVY_MODULES = ("vllm", "transformers", "torch")
_ORACLE_MODULE = re.compile(r"^pytestmark = pytest\.mark\.oracle\b", re.MULTILINE)
_ORACLE_MARKS = frozenset({"oracle", "engine"})


def _excludes_oracles(config: pytest.Config) -> bool:
    """Whether the run's ``-m`` expression leaves out a test marked `oracle` (and so `engine`)."""
    markexpr = config.getoption("markexpr", "")
    return bool(markexpr) and not Expression.compile(markexpr).evaluate(
        lambda name: name in _ORACLE_MARKS
    )


def pytest_ignore_collect(collection_path: pathlib.Path, config: pytest.Config) -> bool | None:
    """Skip importing whole-oracle modules when the marker expression deselects them anyway."""
    if collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    if _excludes_oracles(config) and _ORACLE_MODULE.search(collection_path.read_text()):
        return True
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every oracle test is also an engine test (before ``-m`` deselects)."""
    for item in items:
        if item.get_closest_marker("oracle") is not None:
            item.add_marker(pytest.mark.engine)


# -- engine stacks shared across packages (tests/support/shared_stacks.py) ------------------------
_EARLY_STOPS = EarlyStops()


class _SharedStacksPlugin:
    """Groups the modules sharing a stack and stops it after its last user."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        """Keep the ``--part`` asked for, order the no-engine part's modules slowest first
        (tests/support/module_costs.py) and run the modules sharing a stack one after another
        (after ``-m`` deselected)."""
        part = config.getoption("part")
        if part != "all":
            drop = [i for i in items if _starts_engines(i) != (part == "engines")]
            if drop:
                config.hook.pytest_deselected(items=drop)
                dropped = {id(i) for i in drop}
                items[:] = [i for i in items if id(i) not in dropped]
        if part == "others":
            items[:] = slowest_first(items, load_costs())
        _EARLY_STOPS.last_user = group_users(items)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Iterator[None]:
        """Stop a shared stack right after its last user's teardown."""
        yield
        _EARLY_STOPS.after_teardown(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After a module's last test, release the oracle objects the test modules cached
    (tests/support/module_caches.py) and the shared tokenizers of models other than the tiny
    Llama 3 (tests/support/shared_tokenizer.py): a worker would otherwise hold every module's."""
    yield
    if nextitem is None or nextitem.path != item.path:
        release_shared_tokenizers()
        release_module_caches(
            value
            for done in item.session.items
            if done.path == item.path and hasattr(done, "callspec")
            for value in done.callspec.params.values()
        )


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--part``: the whole suite, only the tests that start engines, or only the others."""
    parser.addoption(
        "--part",
        choices=("all", "engines", "others"),
        default="all",
        help="all tests, only those that start engines (engine-marked, not oracle), or the rest",
    )


def _starts_engines(item: pytest.Item) -> bool:
    # Tests that start engines run in the engine part (in order, one engine pair at a time: see
    # scripts/test); the others run on xdist workers, each module whole in one (``--dist
    # loadfile``: xdist 3.8's ``loadgroup`` cannot group under pytest 9, whose node ids it no
    # longer rewrites, so every test was scheduled alone and a module's expensive fixtures, the
    # vLLM oracles, were built on both workers).
    engine = item.get_closest_marker("engine") is not None
    return engine and item.get_closest_marker("oracle") is None


def pytest_configure(config: pytest.Config) -> None:
    """Register the shared-stack plugin; deep copies of Rust tokenizers are
    :func:`tests.support.hf_tokenizer.rust_copy` copies in the test processes."""
    config.pluginmanager.register(_SharedStacksPlugin(), "shared-stacks")
    copy_rust_tokenizers_cheaply()


@pytest.fixture(scope="session")
def tool_servers(tiny_model: pathlib.Path) -> Iterator[ToolServers]:
    """Our server and vLLM's, both with the llama3_json tool parser and the Responses store,
    each in front of its own engine; shared by every module that needs that configuration and
    stopped after the last of them."""
    stack = _tool_servers(tiny_model)
    yield stop_after(_EARLY_STOPS, "tool_servers", stack)
    stack.close()


@pytest.fixture(scope="session")
def mock_clients_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """vLLM's server and ours, each on a mock engine playing the same scripted tokens
    (tests/mock/test_clients_match_vllm.py's ``_stack``); shared by that module and the generated
    sweep of tests/mock/test_fuzz_match_vllm.py, which ran the same configuration twice, and
    stopped after the last of them. Every request of both modules goes to both servers, and the
    mock engines answer each request from the script alone, so one module's requests change
    nothing the other compares."""
    from tests.mock.test_clients_match_vllm import _stack

    def held() -> Iterator[Any]:
        with _stack(tmp_path_factory.mktemp("clients")) as stack:
            yield stack

    stack = held()
    yield stop_after(_EARLY_STOPS, "mock_clients_stack", stack)
    stack.close()


@pytest.fixture(scope="session")
def mock_vllm_stacks(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """vLLM's servers (each on its own mock engine) of tests/mock/test_admission_behind_frontends.py
    and test_behind_frontends.py, by module ("admission", "behind"), all started when the first
    of the two modules begins, so that each starts beside the other parameters' tests; each
    module waits for and stops its own (``.pop`` it), and this stops what is left after the last
    of the two modules. Only the modules whose ``vllm`` parameter runs get one."""
    from tests.mock import test_admission_behind_frontends, test_behind_frontends

    modules = {"admission": test_admission_behind_frontends, "behind": test_behind_frontends}

    def runs_vllm(item: pytest.Item, module: object) -> bool:
        callspec = getattr(item, "callspec", None)
        return getattr(item, "module", None) is module and "vllm" in (
            callspec.params.values() if callspec is not None else ()
        )

    wanted = [
        name
        for name, module in modules.items()
        if any(runs_vllm(item, module) for item in request.session.items)
    ]

    def held() -> Iterator[dict[str, Any]]:
        stacks: dict[str, Any] = {}
        try:
            for name in wanted:
                stacks[name] = modules[name].vllm_stack(tmp_path_factory.mktemp(name))
            yield stacks
        finally:
            for stack in stacks.values():
                stack.stop()

    stack = held()
    yield stop_after(_EARLY_STOPS, "mock_vllm_stacks", stack)
    stack.close()


@pytest.fixture(scope="session")
def recorded_idefics3_qwen2_audio(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, Any]]:
    """The recorded stacks (vLLM's server and ours, each on a recording mock engine) of
    tests/multimodal/test_idefics3_requests.py and test_qwen2_audio_requests.py, as futures by
    model, started at the same time (each module uses only its own) and stopped after the last
    of the two modules."""
    from tests.multimodal import test_idefics3_requests, test_qwen2_audio_requests
    from tests.multimodal.recorded import started_together

    stack = started_together({
        "idefics3": test_idefics3_requests.recorded(tmp_path_factory),
        "qwen2_audio": test_qwen2_audio_requests.recorded(tmp_path_factory),
    })  # fmt: skip
    yield stop_after(_EARLY_STOPS, "recorded_idefics3_qwen2_audio", stack)
    stack.close()


@pytest.fixture(scope="session")
def recorded_qwen_vl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The recorded stacks of tests/multimodal/test_engine_requests.py (Qwen2-VL) and
    test_qwen_vl_requests.py (Qwen2.5-VL, Qwen3-VL), as futures by model, started at the same
    time (each module uses only its own) and stopped after the last of the two modules."""
    from tests.multimodal import test_engine_requests, test_qwen_vl_requests
    from tests.multimodal.recorded import started_together

    stack = started_together({
        "qwen2_vl": test_engine_requests.recorded(tmp_path_factory),
        **{name: test_qwen_vl_requests.recorded(tmp_path_factory, name)
           for name in test_qwen_vl_requests.MODELS},
    })  # fmt: skip
    yield stop_after(_EARLY_STOPS, "recorded_qwen_vl", stack)
    stack.close()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """A run that leaves the engine tests out fails if anything imported vLLM or its kin."""
    if not _excludes_oracles(session.config):
        return
    loaded = [name for name in HEAVY_MODULES if name in sys.modules]
    if loaded:
        session.config.get_terminal_writer().line(
            f"the fast tests imported {', '.join(loaded)}: mark the test that needs it "
            "`@pytest.mark.oracle` (or give it the `engine` marker)",
            red=True,
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def tiny_model() -> pathlib.Path:
    """Directory of the tiny HF-format Llama 3 checkpoint (built once, cached between runs)."""
    return tiny_model_dir()


@pytest.fixture
def start_engines(
    request: pytest.FixtureRequest, tiny_model: pathlib.Path
) -> Iterator[Callable[..., HeadlessEngines]]:
    """`start_engines(handshake_port, count=1, **options)`: engines stopped after the test.

    Takes the options of tests.support.engines.start_headless_engines. The engines' log tails
    appear in the report of a failed test. Engines shared by many tests belong in a
    session-scoped fixture using `headless_engines(...)` instead.
    """
    started: list[HeadlessEngines] = []

    def start(handshake_port: int, count: int = 1, **options: Any) -> HeadlessEngines:
        options.setdefault("model", tiny_model)
        engines = start_headless_engines(handshake_port, count, **options)
        started.append(engines)
        return engines

    yield start
    for engines in started:
        stop_all([engines])
        request.node.add_report_section("teardown", "vLLM engine logs", engines.logs())


@pytest.fixture(scope="session")
def vllm_rs() -> pathlib.Path:
    """Path of vLLM's Rust frontend binary (downloaded once); skips the test if unavailable."""
    from tests.support.vllm_rs import VllmRsUnavailable, vllm_rs_path

    try:
        return vllm_rs_path()
    except VllmRsUnavailable as e:
        pytest.skip(f"vllm-rs unavailable: {e}")


@pytest.fixture
def created_series() -> Iterator[Callable[[bool], None]]:
    """Switches prometheus_client's ``_created`` series on or off; restores the setting after."""
    from tests.support.exposition import created_series_switch

    with created_series_switch() as switch:
        yield switch
