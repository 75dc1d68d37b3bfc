#!/usr/bin/env python3
"""Whether two checkouts of decode-analyze write the same JSON, byte for byte, on every trace
this repository knows: examples/, tests/data/ (v1 and v2), ../shared/traces/ and, given
--bench DIR, the benchmark's synthetic traces there (tests/bench.py --dir DIR makes them).

  python3 tests/same_json.py OLD NEW [--bench /tmp/bench]

OLD and NEW are folders holding decode_analyze.py (a `git worktree add /tmp/old REV` of the
revision before a change, and `.`). Every command is run by both, on the same absolute paths,
so that the paths written into the reports agree. Prints one line per differing case and a
closing count; exits 1 when any differ. Not a test: a refactoring's check, run by hand.
"""
import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SHARED = ROOT.parent / "shared" / "traces"


def traces(bench):
    """(compute traces, io traces, pairs, diff input lists) to run."""
    folders = [ROOT / "examples", ROOT / "tests" / "data", ROOT / "tests" / "data" / "v2",
               ROOT / "tests" / "data" / "synthetic"]
    if SHARED.is_dir():
        folders.append(SHARED)
    if bench:
        folders.append(Path(bench))
    files = sorted(path for folder in folders for path in folder.glob("*.csv"))
    compute = [path for path in files if "ct" in path.name]
    io = [path for path in files if "io" in path.name]
    data = ROOT / "tests" / "data"
    pairs = [(ROOT / "examples" / "session-ct.csv", ROOT / "examples" / "session-io.csv"),
             (data / "qwen3moe-l4-ct-node.csv", data / "qwen3moe-l4-io-serial.csv"),
             (data / "qwen3moe-l4-ct-layers.csv", data / "qwen3moe-l4-io-overlap.csv"),
             (data / "gemma4-l4-ct-node.csv", data / "gemma4-l4-io-serial.csv"),
             (data / "v2" / "ct.csv", data / "v2" / "io.csv")]
    if bench and (Path(bench) / "ct420.csv").exists():
        pairs.append((Path(bench) / "ct420.csv", Path(bench) / "io420.csv"))
    diffs = [[data / "qwen3moe-l4-ct-node.csv", data / "qwen3moe-l4-ct-layers.csv"],
             [data / "qwen3moe-l4-io-serial.csv", data / "qwen3moe-l4-io-overlap.csv",
              data / "qwen3moe-l4-io-prefetch.csv"],
             [ROOT / "examples" / "session-ct.csv", data / "qwen3moe-l4-ct-node.csv"],
             [data / "gemma4-l4-ct-node.csv", data / "gemma4-l4-ct-node.csv"]]
    return compute, io, pairs, diffs


def cases(bench):
    compute, io, pairs, diffs = traces(bench)
    for path in compute:
        for jobs in ("1", "2"):
            yield ["compute", path, "--layers", "--jobs", jobs]
    for path in io:
        yield ["io", path, "--adjacent", "--cache"]
        yield ["io", path, "--jobs", "1"]
    for compute_path, io_path in pairs:
        yield ["report", compute_path, io_path]
    for paths in diffs:
        yield ["diff", *paths]


def output(checkout, argv):
    done = subprocess.run([sys.executable, str(Path(checkout) / "decode_analyze.py"),
                           *map(str, argv), "--format", "json"], capture_output=True)
    return done.returncode, done.stdout


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--bench", metavar="DIR", help="also the synthetic traces in DIR")
    args = parser.parse_args(argv)
    same = differ = 0
    for case in cases(args.bench):
        if output(args.old, case) == output(args.new, case):
            same += 1
        else:
            differ += 1
            print("differs:", " ".join(map(str, case)))
    print(f"{same} of {same + differ} identical")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
