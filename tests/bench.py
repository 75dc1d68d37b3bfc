#!/usr/bin/env python3
"""Benchmark decode-analyze side by side with the reference script and a bare csv.reader pass.

Generates realistic traces (tests/tracegen.py: 48 layers of real llama.cpp node names, prefill
+ decode, faults on expert matmuls; io with 4 lanes, 4 sizes, chunked slices, spec reads), then
runs every command as its own process, in one run, and reports the minimum wall time over the
trials (the floor is the signal; the rest is scheduler noise) and each process's peak RSS.

  python3 tests/bench.py                  # everything (the reference's --adjacent takes minutes)
  python3 tests/bench.py --quick          # skip the slowest reference runs
  python3 tests/bench.py --trials 5 --dir /tmp/bench

Not a test: pytest does not collect it, and its numbers go in the README by hand.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import tracegen  # noqa: E402

TOOL = HERE.parent / "decode_analyze.py"
REFERENCE = HERE.parent.parent / "shared" / "reference" / "decode-analyze.py"
BARE = "import csv, sys\nfor row in csv.reader(open(sys.argv[1], newline='')): pass\n"


def measure(argv, trials):
    """(min wall seconds, max peak RSS in MiB) of running argv as a child process."""
    best, peak = None, 0
    for _ in range(trials):
        start = time.perf_counter()
        child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(child.pid, 0)
        elapsed = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        errors = child.stderr.read().decode(errors="replace")
        child.stderr.close()
        if child.returncode != 0:
            raise SystemExit(f"failed ({child.returncode}): {' '.join(argv)}\n{errors}")
        best = elapsed if best is None else min(best, elapsed)
        peak = max(peak, usage.ru_maxrss / 1024)  # KiB on Linux
    return best, peak


def generate(directory):
    traces = {
        "ct300": ("compute", dict(n_layer=48, decode_tokens=300)),
        "io1000": ("io", dict(n_layer=48, decode_tokens=1000, reads_per_token=350)),
        "ct3m": ("compute", dict(n_layer=48, decode_tokens=1220)),
        "io1m": ("io", dict(n_layer=48, decode_tokens=2860, reads_per_token=350)),
    }
    paths = {}
    for name, (kind, options) in traces.items():
        path = directory / f"{name}.csv"
        if not path.exists():
            lines = tracegen.compute_lines(**options) if kind == "compute" else \
                tracegen.io_lines(**options)
            tracegen.write(path, lines)
        paths[name] = path
    return paths


def quoted_copy(path):
    """The same trace with one node name per layer quoted (legal CSV that needs no quoting):
    only those lines may take the line-by-line path."""
    quoted = path.with_name(path.stem + "-quoted.csv")
    if not quoted.exists():
        with open(path) as source, open(quoted, "w") as out:
            for line in source:
                if ",ffn_moe_out-" in line:
                    fields = line.split(",")
                    fields[6] = f'"{fields[6]}"'
                    line = ",".join(fields)
                out.write(line)
    return quoted


def rows_of(path):
    with open(path, "rb") as f:
        return sum(1 for line in f if not line.startswith(b"#")) - 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, help="where to keep the generated traces")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--quick", action="store_true",
                        help="skip the reference on 3M rows and with --adjacent (minutes each)")
    args = parser.parse_args()
    directory = args.dir or Path(tempfile.mkdtemp(prefix="decode-analyze-bench-"))
    directory.mkdir(parents=True, exist_ok=True)
    paths = generate(directory)
    python = sys.executable
    have_reference = REFERENCE.exists()

    cases = [
        ("compute, per-node, 300 tokens", paths["ct300"], ["compute"], args.trials, True),
        ("compute, per-node, 3M rows", paths["ct3m"], ["compute"], 1, not args.quick),
        ("io, 1000 tokens", paths["io1000"], ["io"], args.trials, True),
        ("io --adjacent, 1000 tokens", paths["io1000"], ["io", "--adjacent"], args.trials,
         not args.quick),
    ]
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores; minimum of "
          f"{args.trials} trials (1 for the 3M-row trace); traces in {directory}\n")
    header = ("| case | rows | this tool | reference | bare csv.reader | reference / this | "
              "this / bare | peak RSS this | peak RSS reference |")
    print(header)
    print("|---" * 9 + "|")
    for label, path, command, trials, with_reference in cases:
        sub, *options = command
        mine, mine_rss = measure([python, str(TOOL), sub, str(path), *options], trials)
        bare, _ = measure([python, "-c", BARE, str(path)], trials)
        if have_reference and with_reference:
            theirs, theirs_rss = measure([python, str(REFERENCE), sub, str(path), *options],
                                         1 if "adjacent" in label else trials)
            ref_cells = (f"{theirs:.2f} s", f"{theirs / mine:.1f}x", f"{theirs_rss:.0f} MiB")
        else:
            ref_cells = ("not run", "", "")
        print(f"| {label} | {rows_of(path):,} | {mine:.2f} s | {ref_cells[0]} | {bare:.2f} s | "
              f"{ref_cells[1]} | {mine / bare:.2f}x | {mine_rss:.0f} MiB | {ref_cells[2]} |",
              flush=True)

    # Quoted names: only the quoted lines may take the slow path (issue 8: within 1.2x).
    quoted = quoted_copy(paths["ct300"])
    plain_ct, _ = measure([python, str(TOOL), "compute", str(paths["ct300"])], args.trials)
    quoted_ct, _ = measure([python, str(TOOL), "compute", str(quoted)], args.trials)
    print("\n| case | rows | unquoted | one quoted name per layer | quoted / unquoted |")
    print("|---" * 5 + "|")
    print(f"| compute, 300 tokens | {rows_of(quoted):,} | {plain_ct:.2f} s | {quoted_ct:.2f} s | "
          f"{quoted_ct / plain_ct:.2f}x |", flush=True)

    # The LRU what-if against the same run without it (the reference has no such thing).
    io1m = str(paths["io1m"])
    plain, plain_rss = measure([python, str(TOOL), "io", io1m], args.trials)
    cached, cached_rss = measure([python, str(TOOL), "io", io1m, "--cache"], args.trials)
    print("\n| case | rows | io | io --cache | --cache / io | peak RSS io | peak RSS --cache |")
    print("|---" * 7 + "|")
    print(f"| io, 1M reads | {rows_of(paths['io1m']):,} | {plain:.2f} s | {cached:.2f} s | "
          f"{cached / plain:.2f}x | {plain_rss:.0f} MiB | {cached_rss:.0f} MiB |")


if __name__ == "__main__":
    main()
