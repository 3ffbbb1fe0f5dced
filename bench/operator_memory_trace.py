"""What an operator holds, by where it was allocated: two tracemalloc snapshots of
`bench.operator_memory` (``BENCH_MEMORY_TRACE=<frames>``) compared.

    python -m bench.operator_memory_trace OLD NEW [--by lineno|traceback|filename] [--top 30]

The snapshots are in /tmp/bench-operator-memory/<replica>.trace.<n>, one per sample
(``<replica>.traces`` lists each sample's label and RSS in order: n = 1 is "start").
Prints each snapshot's traced total, then the largest growths, each with its count of
blocks, and with ``--by traceback`` the frames (innermost last). Frames of tracemalloc and
of this bench's hook are left out.
"""

from __future__ import annotations

import argparse
import sys
import tracemalloc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--by", default="lineno", choices=("lineno", "traceback", "filename"))
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args(argv)
    ignore = [
        tracemalloc.Filter(False, tracemalloc.__file__),
        tracemalloc.Filter(False, "<frozen importlib._bootstrap*>"),
        tracemalloc.Filter(False, "*sitecustomize.py"),
    ]
    old = tracemalloc.Snapshot.load(args.old).filter_traces(ignore)
    new = tracemalloc.Snapshot.load(args.new).filter_traces(ignore)
    for label, snap in (("old", old), ("new", new)):
        total = sum(s.size for s in snap.statistics("filename"))
        print(f"{label}: {total / 1e6:.1f} MB traced")
    diffs = new.compare_to(old, args.by)
    grown = sum(d.size_diff for d in diffs)
    print(f"difference: {grown / 1e6:+.1f} MB\n")
    for diff in diffs[: args.top]:
        print(
            f"{diff.size_diff / 1e3:+10.1f} kB {diff.count_diff:+8d} blocks "
            f"(now {diff.size / 1e3:.1f} kB)"
        )
        frames = diff.traceback.format() if args.by == "traceback" else [str(diff.traceback[0])]
        for line in frames:
            print(f"    {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
