"""Top hot spots of a py-spy profile in raw (collapsed-stack) format.

    .venv/bin/py-spy record --pid PID --format raw --nolineno -o prof.txt   # then Ctrl-C
    .venv/bin/python bench/pyspy_summary.py prof.txt [--top 25]

Prints two markdown tables: functions by self time (the frame on top of the stack when sampled,
i.e. where the CPU was) and by inclusive time (the frame anywhere on the stack, counted once per
sample). Percentages are of all samples in the file (py-spy records only non-idle threads unless
--idle is given, so that is the process's busy time).
"""

from __future__ import annotations

import argparse
import collections
import pathlib
import re

# py-spy raw lines: "frame;frame;...;frame COUNT", frames like "func (module/file.py)" or
# "func (module/file.py:123)"; process/thread prefixes are frames too with --subprocesses.
_LINE = re.compile(r"^(?P<stack>.*) (?P<count>\d+)$")
_LINENO = re.compile(r":\d+\)$")


def summarize(path: pathlib.Path) -> tuple[int, collections.Counter[str], collections.Counter[str]]:
    """(total samples, self counts per frame, inclusive counts per frame)."""
    total = 0
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    for line in path.read_text(errors="replace").splitlines():
        m = _LINE.match(line.strip())
        if not m:
            continue
        n = int(m["count"])
        frames = [_LINENO.sub(")", f) for f in m["stack"].split(";") if f]
        frames = [f for f in frames if not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        total += n
        own[frames[-1]] += n
        for f in set(frames):
            incl[f] += n
    return total, own, incl


def main() -> int:
    """Print the hot-spot tables for one raw profile."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("profile", type=pathlib.Path)
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args()
    total, own, incl = summarize(args.profile)
    if not total:
        raise SystemExit(f"no samples in {args.profile}")
    print(f"{total} samples\n")
    for title, counts in (("self", own), ("inclusive", incl)):
        print(f"| function ({title}) | % of samples |\n|---|---:|")
        for frame, n in counts.most_common(args.top):
            print(f"| `{frame}` | {100 * n / total:.1f} |")
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
