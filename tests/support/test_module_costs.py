"""The no-engine part's module order: measured slowest first, whole modules kept together."""

from __future__ import annotations

import pathlib
from dataclasses import dataclass

import pytest

from tests.support.module_costs import costs_from_junit, load_costs, slowest_first


@dataclass
class _Item:
    nodeid: str


def _ids(items: list[_Item]) -> list[str]:
    return [i.nodeid for i in items]


def test_a_slow_module_of_few_tests_goes_before_a_quick_module_of_many() -> None:
    items = [_Item("tests/a.py::t1"), _Item("tests/a.py::t2"), _Item("tests/a.py::t3"),
             _Item("tests/b.py::t1"), _Item("tests/c.py::t1"), _Item("tests/c.py::t2")]  # fmt: skip
    ordered = slowest_first(items, {"tests/a.py": 3.0, "tests/b.py": 240.0})
    assert _ids(ordered) == ["tests/b.py::t1", "tests/a.py::t1", "tests/a.py::t2",
                             "tests/a.py::t3", "tests/c.py::t1", "tests/c.py::t2"]  # fmt: skip


def test_unmeasured_modules_follow_most_tests_first_in_their_order() -> None:
    items = [_Item("tests/x.py::t1"), _Item("tests/y.py::t1"), _Item("tests/y.py::t2"),
             _Item("tests/z.py::t1")]  # fmt: skip
    assert _ids(slowest_first(items, {})) == [
        "tests/y.py::t1", "tests/y.py::t2", "tests/x.py::t1", "tests/z.py::t1"]  # fmt: skip


def test_junit_times_are_summed_per_module_file(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "tests" / "chat").mkdir(parents=True)
    (tmp_path / "tests" / "chat" / "test_a.py").write_text("")
    report = tmp_path / "r.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.chat.test_a" name="t1" time="1.5"/>'
        '<testcase classname="tests.chat.test_a.TestGroup" name="t2" time="2.0"/>'
        "</testsuite></testsuites>"
    )
    monkeypatch.chdir(tmp_path)
    assert costs_from_junit([report]) == {"tests/chat/test_a.py": 3.5}


def test_the_committed_table_names_existing_modules() -> None:
    root = pathlib.Path(__file__).resolve().parents[2]
    costs = load_costs()
    assert costs, "tests/module_costs.json is missing or empty"
    assert all((root / module).is_file() for module in costs), [
        m for m in costs if not (root / m).is_file()
    ]
