"""``LazyModule``: a module name bound to a stand-in imports the module on first use and then
names the module itself."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from vllm_frontend.lazy import LazyModule, loaded


def test_first_use_imports_the_module_and_rebinds_the_name() -> None:
    namespace: dict[str, Any] = {}
    namespace["js"] = stand_in = LazyModule("json", namespace, "js")
    assert namespace["js"].dumps([1]) == "[1]"
    assert namespace["js"] is sys.modules["json"]
    assert stand_in.loads("2") == 2  # a stale reference still works


def test_a_name_rebound_meanwhile_is_left_alone() -> None:
    namespace: dict[str, Any] = {}
    stand_in = LazyModule("json", namespace, "js")
    namespace["js"] = "something else"
    assert stand_in.dumps(None) == "null"
    assert namespace["js"] == "something else"


def test_nothing_is_imported_before_first_use() -> None:
    code = (
        "import sys\n"
        "from vllm_frontend.lazy import LazyModule, loaded\n"
        "colorsys = LazyModule('colorsys', globals(), 'colorsys')\n"
        "print('colorsys' in sys.modules, loaded('colorsys') is None)\n"
        "colorsys.rgb_to_hsv(0, 0, 0)\n"
        "print('colorsys' in sys.modules, loaded('colorsys') is colorsys)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True", "True", "True"]


def test_loaded_names_only_imported_modules() -> None:
    assert loaded("sys") is sys
    assert loaded("a_module_nobody_has") is None


def test_submodules_come_with_the_module() -> None:
    code = (
        "import sys\n"
        "from vllm_frontend.lazy import LazyModule\n"
        "email = LazyModule('email', globals(), 'email', ('email.utils',))\n"
        "print('email.utils' in sys.modules)\n"
        "print(email.utils.quote('a\"b'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", 'a\\"b']
