#!/usr/bin/env python3
"""Two checkouts of the tool, old and new, timed in one process with their runs alternating, so
that a noisy machine slows both alike: single-process folds, CPU time, min and median; or with
--processes, whole `python3 decode_analyze.py` runs (start-up and --jobs included), CPU time.

  git worktree add /tmp/old 7f7b15e
  python3 tests/bench.py --quick --dir /tmp/bench          # makes the traces
  python3 tests/ab_versions.py /tmp/old . --dir /tmp/bench  # new/old per case
  python3 tests/ab_versions.py /tmp/old . --dir /tmp/bench --processes  # whole processes

Not a test: pytest does not collect it.
"""
import argparse
import importlib
import io
import os
import statistics
import subprocess
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


def in_process(tools, argv):
    """{tag: CPU seconds} of one single-process fold of argv by each checkout."""
    spent = {}
    for tag, tool in tools.items():
        start = time.process_time()
        tool.main(argv, out=io.StringIO(), err=io.StringIO())
        spent[tag] = time.process_time() - start
    return spent


def as_processes(roots, argv):
    """{tag: CPU seconds of the process tree} of each checkout run as `python3
    decode_analyze.py` with its default --jobs: start-up (compiling the script) included."""
    spent = {}
    for tag, root in roots.items():
        child = subprocess.Popen([sys.executable, str(root / "decode_analyze.py"), *argv],
                                 stdout=subprocess.DEVNULL)
        _, _, usage = os.wait4(child.pid, 0)
        spent[tag] = usage.ru_utime + usage.ru_stime
    return spent


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--dir", type=Path, required=True, help="the benchmark's traces")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--only", help="run the cases whose command line holds this text")
    parser.add_argument("--processes", action="store_true",
                        help="time whole processes (start-up and --jobs included), not folds")
    args = parser.parse_args()
    cases = [["compute", "ct420.csv"], ["io", "io500k.csv"], ["io", "io500k.csv", "--adjacent"]]
    if args.processes:
        cases[0].append("--layers")
        cases += [["io", "io500k.csv", "--adjacent", "--cache"], ["--version", ""]]
        roots = {"old": args.old, "new": args.new}
        timed = lambda argv: as_processes(roots, argv)  # noqa: E731
    else:
        tools = {"old": load("old", args.old), "new": load("new", args.new)}
        timed = lambda argv: in_process(tools, argv)  # noqa: E731
    cases = [case for case in cases if not args.only or args.only in " ".join(case)]
    for command, name, *options in cases:
        argv = [command, str(args.dir / name), *options] if name else [command]
        times = {"old": [], "new": []}
        for _ in range(args.rounds):
            for tag, seconds in timed(argv).items():
                times[tag].append(seconds)
        old, new = times["old"], times["new"]
        print(f"{' '.join([command, name, *options]):40s} new/old: min "
              f"{min(new) / min(old):.3f}, median "
              f"{statistics.median(new) / statistics.median(old):.3f} "
              f"(old min {min(old):.2f} s)", flush=True)


if __name__ == "__main__":
    main()
