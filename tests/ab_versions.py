#!/usr/bin/env python3
"""Two checkouts of the tool, old and new, timed in one process with their runs alternating (and
which goes first alternating by round), so that a noisy machine slows both alike: single-process
folds, CPU time: new/old of the minimums, of the medians, and the median of each round's own
ratio (paired), with the old side's spread (its slowest run over its fastest); or with
--processes, whole `python3 decode_analyze.py` runs (start-up and --jobs included), CPU time.

  git worktree add /tmp/old 7f7b15e
  python3 tests/bench.py --quick --dir /tmp/bench          # makes the traces
  python3 tests/ab_versions.py /tmp/old . --dir /tmp/bench  # new/old per case
  python3 tests/ab_versions.py /tmp/old . --dir /tmp/bench --processes --rounds 6  # whole
  # processes, the 3M-row traces and the real long pair (../shared/traces) among them
  python3 tests/ab_versions.py /tmp/old . --dir /tmp/bench --processes --wall --only io500k
  # ... their wall time (run it again beside `yes > /dev/null` for a busy machine)
  python3 tests/ab_versions.py /tmp/old . --dir /tmp/bench --instructions --only io500k
  # instructions counted under valgrind: the same figure whatever the machine's load
  python3 tests/ab_versions.py /tmp/old . --dir /tmp/bench --run-as module \
      --in-turn ct1430.csv io500k.csv
  # report of a pair against its two commands in turn, each from cached bytecode

The last case runs a different command line on each side: the new checkout's `io --what-if`
against the old one's `io --adjacent --cache` (what the what-if may cost: at most 1.3x).

Not a test: pytest does not collect it.
"""
import argparse
import gc
import importlib
import io
import os
import shutil
import statistics
import subprocess
import sys
import time
from functools import partial
from operator import truediv
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


def in_process(tools, argvs, order):
    """{tag: CPU seconds} of one single-process fold of its argv by each checkout, in `order`;
    each starts with no garbage of the run before it left to collect."""
    spent = {}
    for tag in order:
        gc.collect()
        start = time.process_time()
        tools[tag].main(argvs[tag], out=io.StringIO(), err=io.StringIO())
        spent[tag] = time.process_time() - start
    return spent


# How a checkout is run (--run-as): `script`, `python3 decode_analyze.py`, which compiles the
# whole file on every run (CPython caches no bytecode for a script); `module`, `python3 -m
# decode_analyze` in the clone, which runs the module from its cached bytecode (runpy, as -m
# does, from the checkout's folder whatever the working directory); `installed`, the
# `decode-analyze` command `pip install .` makes, which imports it from its cached bytecode.
MODULE = ("import runpy, sys; sys.path[0] = sys.argv.pop(1); "
          "runpy.run_module('decode_analyze', run_name='__main__', alter_sys=True)")
INSTALLED = ("import sys; sys.path[0] = sys.argv.pop(1); sys.argv[0] = 'decode-analyze'; "
             "import decode_analyze; decode_analyze.run_and_exit()")
RUN_AS = {"script": lambda root: [str(root / "decode_analyze.py")],
          "module": lambda root: ["-c", MODULE, str(root)],
          "installed": lambda root: ["-c", INSTALLED, str(root)]}
run_as = {"old": "script", "new": "script"}


def script(root, argv, tag="new"):
    """The command line that runs a checkout's tool as a user does."""
    return [sys.executable, *RUN_AS[run_as[tag]](root), *argv]


def cache_bytecode(roots):
    """Let the children write and read bytecode, under a folder of its own (it mirrors each
    source's path, so the checkouts' stay apart, and the checkouts stay clean), and write it
    now, so that no timed run compiles."""
    os.environ["PYTHONPYCACHEPREFIX"] = "/tmp/ab_versions_pyc"
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    for tag, root in roots.items():
        subprocess.run(script(root, ["--version"], tag), stdout=subprocess.DEVNULL, check=True)


def as_processes(roots, argvs, order):
    """{tag: CPU seconds of the process tree} of each checkout run as --run-as says, with its
    default --jobs: start-up included."""
    spent = {}
    for tag in order:
        child = subprocess.Popen(script(roots[tag], argvs[tag], tag), stdout=subprocess.DEVNULL)
        _, _, usage = os.wait4(child.pid, 0)
        spent[tag] = usage.ru_utime + usage.ru_stime
    return spent


def as_walls(roots, argvs, order):
    """{tag: wall seconds} of each checkout run as --run-as says, with its default --jobs: what
    the user waits for (a second process on a busy core costs CPU, not wall)."""
    spent = {}
    for tag in order:
        start = time.perf_counter()
        subprocess.run(script(roots[tag], argvs[tag], tag), stdout=subprocess.DEVNULL, check=False)
        spent[tag] = time.perf_counter() - start
    return spent


def instructions(roots, argvs, order):
    """{tag: instructions executed} by each checkout run as `python3 decode_analyze.py ...
    --jobs 1` under valgrind's callgrind: the same count on every run, however busy the
    machine (CPU time varies by 10-25% between repeats here), start-up included."""
    counted = {}
    for tag in order:
        jobs = ["--jobs", "1"] if argvs[tag][0] != "--version" else []
        done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                               *script(roots[tag], argvs[tag] + jobs, tag)],
                              capture_output=True, text=True, check=False)
        counted[tag] = int(done.stderr.split("Collected : ")[1].split()[0])
    return counted


# The real long pair: a session of the real engine (../shared/traces beside the repository).
REAL_PAIR = [str(Path(__file__).resolve().parents[2] / "shared" / "traces" / name)
             for name in ("qwen3moe-l4-session-ct-node.csv", "qwen3moe-l4-session-ct-node-io.csv")]


def report_in_turn(root, pair, rounds):
    """The new checkout's `report CT IO` against its `compute CT` then `io IO --what-if` (the
    analyses report makes), wall time, alternating which goes first: one ratio a round."""
    def wall(*argv):
        start = time.perf_counter()
        subprocess.run(script(root, [*argv, "--no-engine-log"]), stdout=subprocess.DEVNULL,
                       check=True)
        return time.perf_counter() - start
    ratios = []
    for round_number in range(rounds):
        timed = [lambda: wall("report", *pair),
                 lambda: wall("compute", pair[0]) + wall("io", pair[1], "--what-if")]
        first, second = (timed if round_number % 2 == 0 else timed[::-1])
        one, other = first(), second()
        ratios.append(one / other if round_number % 2 == 0 else other / one)
    print(f"report / (compute + io --what-if) in turn: median {statistics.median(ratios):.3f}, "
          f"min {min(ratios):.3f}, max {max(ratios):.3f} ({rounds} rounds)")


def in_dir(folder, word):
    """A benchmark trace's name as its path in the traces' folder; any other word as it is."""
    return str(folder / word) if word.endswith(".csv") and (folder / word).exists() else word


def main():
    global run_as
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--dir", type=Path, required=True, help="the benchmark's traces")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--only", help="run the cases whose command line holds this text")
    parser.add_argument("--processes", action="store_true",
                        help="time whole processes (start-up and --jobs included), not folds")
    parser.add_argument("--wall", action="store_true",
                        help="with --processes: their wall time, not their CPU time")
    parser.add_argument("--run-as", default="script", metavar="MODE[,MODE]",
                        help="with --processes, --instructions or --in-turn: how each checkout "
                             "is run, one mode for both or OLD's,NEW's: script (`python3 "
                             "decode_analyze.py`, compiled on every run; the default), module "
                             "(`python3 -m decode_analyze`) or installed (`decode-analyze`), "
                             "both from cached bytecode")
    parser.add_argument("--in-turn", nargs=2, metavar=("CT", "IO"),
                        help="time NEW's report of this pair against its compute and io "
                             "--what-if run in turn (OLD is not run)")
    parser.add_argument("--instructions", action="store_true",
                        help="count the instructions of one process each (valgrind; one round: "
                             "the count does not vary), not time")
    args = parser.parse_args()
    modes = args.run_as.split(",")
    if len(modes) > 2 or not set(modes) <= set(RUN_AS):
        parser.error(f"--run-as: one or two of {', '.join(RUN_AS)}, comma-separated")
    run_as = dict(zip(("old", "new"), modes * (3 - len(modes))))
    if modes != ["script"] and not (args.processes or args.instructions or args.in_turn):
        parser.error("--run-as runs processes: give it with --processes, --instructions or "
                     "--in-turn")
    if args.in_turn:
        if "script" not in modes:
            cache_bytecode({"new": args.new})
        report_in_turn(args.new, [in_dir(args.dir, word) for word in args.in_turn], args.rounds)
        return
    cases = [["compute", "ct420.csv"], ["io", "io500k.csv"], ["io", "io500k.csv", "--adjacent"],
             ["io", "io500k.csv", "--adjacent", "--cache"]]
    what_if = ["io", "io500k.csv", "--what-if"]  # new's, against old's --adjacent --cache
    if args.instructions:
        if not shutil.which("valgrind"):
            parser.error("--instructions counts under valgrind, which is not installed")
        cases.append(["--version"])  # start-up alone
        cases += [["report", *REAL_PAIR], ["compute", REAL_PAIR[0]],
                  ["io", REAL_PAIR[1], "--what-if"]]  # the real session: --only traces
        roots = {"old": args.old, "new": args.new}
        timed, args.rounds = partial(instructions, roots), 1
    elif args.processes:
        cases[0].append("--layers")
        cases += [["compute", "ct3m.csv"], ["io", "io3m.csv", "--what-if"],
                  ["report", REAL_PAIR[0], REAL_PAIR[1]],
                  ["report", REAL_PAIR[0], REAL_PAIR[1], "--format", "json"], ["--version"]]
        roots = {"old": args.old, "new": args.new}
        timed = partial(as_walls if args.wall else as_processes, roots)
    else:
        tools = {"old": load("old", args.old), "new": load("new", args.new)}
        timed = partial(in_process, tools)
    if set(run_as.values()) != {"script"}:
        cache_bytecode(roots)
    runs = [(case, case) for case in cases] + [(cases[3], what_if)]
    runs = [run for run in runs if not args.only or args.only in " ".join(run[1])
            or run[1] == ["--version"]]  # start-up, counted with every choice of cases
    for old_case, new_case in runs:
        argvs = {tag: [in_dir(args.dir, word) for word in case]
                 for tag, case in (("old", old_case), ("new", new_case))}
        times = {"old": [], "new": []}
        for round_number in range(args.rounds):  # who goes first alternates
            order = ("old", "new") if round_number % 2 == 0 else ("new", "old")
            for tag, seconds in timed(argvs, order).items():
                times[tag].append(seconds)
        old, new = times["old"], times["new"]
        label = " ".join(Path(word).name for word in new_case[:2])
        options = " ".join(new_case[2:]) + (f" (old: {' '.join(old_case[2:])})"
                                            if old_case != new_case else "")
        if args.instructions:
            print(f"{label:48s} {options:38s} new/old: {new[0] / old[0]:.3f} of instructions "
                  f"(old {old[0] / 1e9:.2f} G)", flush=True)
            continue
        # The rounds' own ratios, and how far the old side's runs spread: a spread above the
        # bound one is testing says that this machine cannot tell it at that moment.
        paired = statistics.median(map(truediv, new, old))
        print(f"{label:48s} {options:38s} new/old: min {min(new) / min(old):.3f}, median "
              f"{statistics.median(new) / statistics.median(old):.3f}, paired {paired:.3f} "
              f"(old min {min(old):.2f} s, spread {max(old) / min(old):.2f}x)", flush=True)


if __name__ == "__main__":
    main()
