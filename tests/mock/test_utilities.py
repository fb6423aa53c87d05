"""Utility calls get the replies a vLLM 0.32 engine gives, in vLLM's result envelope."""

from __future__ import annotations

import pytest
from vllm.v1.engine import EngineCoreOutputs, FinishReason
from vllm.v1.serial_utils import UtilityResult

from tests.mock.fake_frontend import FakeFrontend, connected, make_request
from vllm_frontend.mock.core import MockEngineOptions
from vllm_frontend.mock.engine import MockEngineGroup

pytestmark = pytest.mark.oracle  # imports vLLM or transformers as the reference


def _result(frontend: FakeFrontend, method: str, *args: object, client: int = 0) -> object:
    out = frontend.call(method, *args, client=client)
    assert out.failure_message is None, out.failure_message
    assert isinstance(out.result, UtilityResult)
    return out.result.result


@pytest.mark.parametrize(
    ("method", "args", "expected"),
    [
        ("get_supported_tasks", (), ["generate"]),
        ("is_sleeping", (), False),
        ("is_scheduler_paused", (), False),
        ("reset_prefix_cache", (), True),
        ("reset_prefix_cache", (False, False), True),
        ("reset_mm_cache", (), None),
        ("reset_encoder_cache", (), None),
        ("list_loras", (), []),
        ("get_weight_version", (), "default"),
        ("execute_dummy_batch", (), None),
        ("profile", (True,), None),
        ("collective_rpc", ("get_model_name", 5.0, [], {}), [None]),
    ],
)
def test_startup_and_serving_utilities_answer_like_vllm(
    mock_pair: tuple[FakeFrontend, MockEngineGroup],
    method: str,
    args: tuple[object, ...],
    expected: object,
) -> None:
    frontend, _ = mock_pair
    assert _result(frontend, method, *args) == expected


def test_unknown_method_and_wrong_arity_fail_without_harming_the_engine(
    mock_pair: tuple[FakeFrontend, MockEngineGroup],
) -> None:
    frontend, _ = mock_pair
    unknown = frontend.call("no_such_method")
    assert unknown.result is None
    assert unknown.failure_message == (
        "Call to no_such_method method failed: "
        "'EngineCoreProc' object has no attribute 'no_such_method'"
    )
    too_many = frontend.call("is_sleeping", 1, 2)
    assert too_many.failure_message.startswith("Call to is_sleeping method failed: ")
    private = frontend.call("_handle_client_request")
    assert private.failure_message is not None
    lora = frontend.call("add_lora", ["adapter", 1, "/path"])
    assert lora.failure_message.startswith("Call to add_lora method failed")
    assert _result(frontend, "is_sleeping") is False


def test_weight_version_is_stamped_on_step_messages(
    mock_pair: tuple[FakeFrontend, MockEngineGroup],
) -> None:
    frontend, _ = mock_pair
    assert _result(frontend, "set_weight_version", "v2") is None
    assert _result(frontend, "get_weight_version") == "v2"
    frontend.add(make_request("r", [1], max_tokens=2))
    _, messages = frontend.run_until_finished(["r"])
    assert {m.weight_version for m in messages} == {"v2"}


def test_pause_with_abort_finishes_requests_and_queues_new_ones_until_resume(
    mock_pair: tuple[FakeFrontend, MockEngineGroup],
) -> None:
    frontend, _ = mock_pair
    frontend.add(make_request("old", [1], max_tokens=100_000))
    frontend.recv()
    assert _result(frontend, "pause_scheduler", "abort") is None
    per_request, _ = frontend.run_until_finished(["old"])
    assert per_request["old"][-1].finish_reason == FinishReason.ABORT
    assert _result(frontend, "is_scheduler_paused") is True
    frontend.add(make_request("new", [1], max_tokens=2))
    with pytest.raises(TimeoutError):
        frontend.recv(timeout=0.3)  # nothing runs while paused
    assert _result(frontend, "resume_scheduler") is None
    per_request, _ = frontend.run_until_finished(["new"])
    assert per_request["new"][-1].finish_reason == FinishReason.LENGTH


def test_sleep_and_wake_up(mock_pair: tuple[FakeFrontend, MockEngineGroup]) -> None:
    frontend, _ = mock_pair
    assert _result(frontend, "sleep", 1, "abort") is None
    assert _result(frontend, "is_sleeping") is True
    assert _result(frontend, "wake_up", None) is True
    assert _result(frontend, "is_sleeping") is False


def test_utility_replies_go_to_the_calling_client() -> None:
    with connected(MockEngineOptions(step_ms=1), num_clients=2) as (frontend, _):
        assert _result(frontend, "get_supported_tasks", client=1) == ["generate"]
        with pytest.raises(TimeoutError):
            frontend.recv(client=0, timeout=0.2)


def test_replies_carry_the_engine_index() -> None:
    with connected(MockEngineOptions(data_parallel_size=4), engines=(3,)) as (frontend, _):
        call_id = frontend.utility("is_sleeping", engine=3)
        msg = frontend.recv()
    assert isinstance(msg, EngineCoreOutputs)
    assert msg.engine_index == 3
    assert msg.utility_output.call_id == call_id
    assert msg.outputs == []
