"""Request schemas describe errors only, so they are built on the first bad body, once."""

from __future__ import annotations

import subprocess
import sys

from vllm_frontend.server.validation import Int, LazyModel, Model


def test_lazy_model_builds_on_first_use_only_once() -> None:
    built: list[int] = []

    def build() -> Model:
        built.append(1)
        return Model("M", {"x": Int(ge=0)}, ["x"])

    lazy = LazyModel(build)
    assert built == []
    assert lazy.errors({"x": 1}, ("body",)) == []
    [missing] = lazy.errors({}, ("body",))
    assert (missing["type"], missing["loc"]) == ("missing", ("body", "x"))
    assert lazy.fields.keys() == {"x"} and lazy.required == {"x"} and lazy.name == "M"
    assert built == [1]


def test_a_valid_body_builds_no_schema() -> None:
    # In a fresh interpreter: other tests in this one may have built the schemas already.
    code = (
        "import vllm_frontend.server.protocol as p\n"
        "schema = p._COMPLETION_SCHEMA\n"
        "assert 'fields' not in vars(schema)\n"
        'p.parse_completion_request(b\'{"model": "m", "prompt": "hi"}\')\n'
        "assert 'fields' not in vars(schema)\n"
        "try:\n"
        '    p.parse_completion_request(b\'{"model": "m", "prompt": 3}\')\n'
        "except Exception as e:\n"
        "    assert 'body.prompt' in str(e), e\n"
        "else:\n"
        "    raise AssertionError('a bad prompt was accepted')\n"
        "assert 'prompt' in vars(schema)['fields']\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
