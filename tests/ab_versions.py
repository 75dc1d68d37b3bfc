#!/usr/bin/env python3
"""Two checkouts of the tool, old and new, timed in one process with their runs alternating, so
that a noisy machine slows both alike: single-process folds, CPU time, min and median.

  git worktree add /tmp/old 7f7b15e
  python3 tests/bench.py --quick --dir /tmp/bench          # makes the traces
  python3 tests/ab_versions.py /tmp/old . --dir /tmp/bench  # new/old per case

Not a test: pytest does not collect it.
"""
import argparse
import importlib
import io
import statistics
import sys
import time
from pathlib import Path


def load(tag, root):
    """decode_analyze and trace_io of one checkout, under names of their own."""
    for name in ("trace_io", "decode_analyze"):
        sys.modules.pop(name, None)
    sys.path.insert(0, str(root))
    try:
        reader, tool = importlib.import_module("trace_io"), importlib.import_module("decode_analyze")
    finally:
        sys.path.pop(0)
    for name in ("trace_io", "decode_analyze"):
        sys.modules[f"{tag}_{name}"] = sys.modules.pop(name)
    for module in (reader, tool):  # one process each: the fold itself is what is compared
        if hasattr(module, "PARALLEL_MIN_BYTES"):
            module.PARALLEL_MIN_BYTES = 1 << 60
    return tool


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--dir", type=Path, required=True, help="the benchmark's traces")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--only", help="run the cases whose command line holds this text")
    args = parser.parse_args()
    tools = {"old": load("old", args.old), "new": load("new", args.new)}
    cases = [["compute", "ct420.csv"], ["io", "io500k.csv"], ["io", "io500k.csv", "--adjacent"]]
    cases = [case for case in cases if not args.only or args.only in " ".join(case)]
    for command, name, *options in cases:
        argv = [command, str(args.dir / name), *options]
        times = {"old": [], "new": []}
        for _ in range(args.rounds):
            for tag, tool in tools.items():
                start = time.process_time()
                tool.main(argv, out=io.StringIO(), err=io.StringIO())
                times[tag].append(time.process_time() - start)
        old, new = times["old"], times["new"]
        print(f"{' '.join([command, name, *options]):32s} new/old: min "
              f"{min(new) / min(old):.3f}, median "
              f"{statistics.median(new) / statistics.median(old):.3f} "
              f"(old min {min(old):.2f} s)", flush=True)


if __name__ == "__main__":
    main()
