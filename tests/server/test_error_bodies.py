"""An error body stays valid JSON when its message quotes a lone surrogate from the request.

A JSON body may spell a lone surrogate as ``\\ud800``; JSON decoders (ours, and vLLM's) turn it
into a Python string that UTF-8 cannot encode, and an error message that quotes it (an unknown
model name, a bad value) must still be written. vLLM's own frontend fails there with a 500 (its
JSON response encodes to UTF-8 strictly), so there is no oracle: the body must be the usual
error JSON with the surrogate written back as its escape, and everything else as UTF-8.
"""

from __future__ import annotations

import json

from vllm_frontend.server import errors


def test_a_message_quoting_a_lone_surrogate_is_written_with_its_escape() -> None:
    response = errors.error_response(errors.NotFound("The model `\ud800x` é does not exist."))
    assert response.status == 404
    body = bytes(response.body)
    assert b"\\ud800x` \xc3\xa9 does" in body
    assert json.loads(body) == {
        "error": {
            "message": "The model `\ud800x` é does not exist.",
            "type": "NotFoundError",
            "param": None,
            "code": 404,
        }
    }


def test_a_param_with_a_lone_surrogate_is_escaped_too() -> None:
    body = errors.error_json("bad", "BadRequestError", 400, param="\udfff")
    assert body == (
        b'{"error":{"message":"bad","type":"BadRequestError","param":"\\udfff","code":400}}'
    )
    assert json.loads(body)["error"]["param"] == "\udfff"
