"""The no-engine part's modules, slowest first, so that its two xdist workers finish together.

xdist's ``--dist loadfile`` hands whole modules to whichever worker is free, in the order it is
given them; by default it orders them by their number of tests, which puts a module of two tests
and a four-minute oracle fixture last, where one worker runs it while the other idles. The
measured seconds of each module (``tests/module_costs.json``, written from a run's JUnit XML by
this module's ``__main__``) order them instead, longest first (scripts/test passes
``--no-loadscope-reorder`` so that xdist keeps this order). Modules missing from the table (new
ones) follow, most tests first, as xdist would have ordered them.

    python -m tests.support.module_costs run1.xml run2.xml ...   # update the table
"""

from __future__ import annotations

import json
import pathlib
import sys
import xml.etree.ElementTree as ElementTree
from collections import Counter
from collections.abc import Sequence
from typing import Protocol, TypeVar

COSTS_PATH = pathlib.Path(__file__).resolve().parents[1] / "module_costs.json"


class _Item(Protocol):
    nodeid: str


_T = TypeVar("_T", bound=_Item)


def module_of(nodeid: str) -> str:
    """The module part of a pytest node id (``tests/x/test_y.py``)."""
    return nodeid.split("::", 1)[0]


def load_costs(path: pathlib.Path = COSTS_PATH) -> dict[str, float]:
    """The measured seconds of each module (empty if there is no table)."""
    try:
        table = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in table.get("seconds", {}).items()}


def slowest_first(items: Sequence[_T], costs: dict[str, float]) -> list[_T]:
    """``items`` with whole modules moved, slowest measured module first; unmeasured modules
    after them, most tests first; each module's tests keep their order."""
    counts = Counter(module_of(i.nodeid) for i in items)
    first_seen: dict[str, int] = {}
    for item in items:
        first_seen.setdefault(module_of(item.nodeid), len(first_seen))

    def key(item: _T) -> tuple[float, int, int]:
        module = module_of(item.nodeid)
        return (-costs.get(module, 0.0), -counts[module], first_seen[module])

    return sorted(items, key=key)  # stable: a module's tests keep their order


def costs_from_junit(paths: Sequence[pathlib.Path]) -> dict[str, float]:
    """Seconds per module (setup, call and teardown of every test) from JUnit XML reports."""
    seconds: Counter[str] = Counter()
    for path in paths:
        for case in ElementTree.parse(path).iter("testcase"):
            classname = case.get("classname", "")
            module = classname.split(".")
            # pytest's classname: the module's dotted path, then any test classes.
            while module and not (pathlib.Path(*module).with_suffix(".py")).is_file():
                module.pop()
            if module:
                seconds[str(pathlib.Path(*module).with_suffix(".py"))] += float(
                    case.get("time", "0")
                )
    return dict(seconds)


def _main(argv: list[str]) -> None:
    # The modules measured now replace their old entries; the others keep theirs.
    costs = load_costs() | costs_from_junit([pathlib.Path(a) for a in argv])
    table = {
        "about": "seconds per module of the no-engine part, from JUnit XML of runs whose oracle "
        "references were not cached, as in CI (python -m tests.support.module_costs)",
        "seconds": {m: round(s, 1) for m, s in sorted(costs.items(), key=lambda kv: -kv[1])},
    }
    COSTS_PATH.write_text(json.dumps(table, indent=1) + "\n")


if __name__ == "__main__":
    _main(sys.argv[1:])
