"""The repository stands on its own: no tracked file refers to files outside the clone.

A user clones only this repository. Scripts, tests and benchmarks that read a sibling directory
(the developers' `shared/` notes beside the checkout) or an absolute path of the developers'
machines work here and nowhere else, so every tracked text file is searched for such references.
"""

from __future__ import annotations

import pathlib
import re
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]

# A path into the sibling directory, built as a string or with pathlib, or an absolute path of
# the machines this project is developed on.
FORBIDDEN = re.compile(
    r"""\.\./shared\b"""  # the sibling directory, relative
    r"""|[/\\]work[/\\]"""  # the developers' absolute paths
    r"""|/\s*["']shared["']"""  # a pathlib join onto it
    r"""|\bshared/(?:fixtures|protocol-vectors|docs|hooks)\b"""  # its folders by name
)


def tracked_files() -> list[pathlib.Path]:
    """Every file git tracks in the repository (the test is skipped outside a git checkout)."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [REPO / name for name in out.decode().split("\0") if name]


def offending_lines(text: str) -> list[str]:
    """The lines of ``text`` that refer outside the repository."""
    return [line.strip() for line in text.splitlines() if FORBIDDEN.search(line)]


def test_pattern_catches_the_known_forms() -> None:
    """The search recognises each way the tree used to refer to the sibling directory."""
    sibling = "sha" + "red"  # spelled in two, so that this file does not name it either
    for line in (
        f'SHARED_FIXTURES = REPO_ROOT.parent / "{sibling}" / "fixtures"',
        f'VECTORS = pathlib.Path("/work/{sibling}/protocol-vectors")',
        f"see ../{sibling}/docs/engine-protocol.md",
        f"templates in {sibling}/fixtures/chat-templates",
    ):
        assert offending_lines(line) == [line]
    for line in ("shared=sibling_counts,", "a shared machine", '("batched", "flat", "shared")'):
        assert offending_lines(line) == []


def test_no_tracked_file_refers_outside_the_repository() -> None:
    """Nothing tracked names the sibling directory or a developer machine's absolute path."""
    found: dict[str, list[str]] = {}
    files = tracked_files()
    assert len(files) > 100  # the listing worked
    for path in files:
        if path == pathlib.Path(__file__).resolve() or not path.is_file():
            continue  # this file spells the patterns out; or deleted, not yet committed
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binary data (protocol vectors)
        lines = offending_lines(text)
        if lines:
            found[str(path.relative_to(REPO))] = lines
    assert found == {}
