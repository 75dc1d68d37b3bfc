#!/usr/bin/env python3
"""Benchmark decode-analyze side by side, in one run, with a bare csv.reader pass over the same
file, the reference script (../shared/reference, when it is there) and, when installed, DuckDB
and polars doing the core group-bys (benchmark-only peers, never dependencies of the tool).

"stdlib floor" is the work every fold written in Python does before it sums anything: as many
processes as the tool uses read the file, split it into fields and convert the integer columns
it needs (FLOOR below). Against the bare pass, it shows how much of a floor set as a ratio to
that pass is left for the fold itself.

Traces are generated (tests/tracegen.py: 48 layers of real llama.cpp node names, prefill +
decode, faults on expert matmuls; io with 4 lanes, 4 sizes, chunked slices, spec reads). Every
command runs as its own process; each cell is the median of the trials with [min-max], and the
peak RSS of the largest process. The commands of one row run in turns, trial by trial, so that
a slow spell of a shared machine falls on all of them alike; ratios are between their medians.

  python3 tests/bench.py                  # everything (the reference's --adjacent takes minutes)
  python3 tests/bench.py --quick          # skip the reference runs
  python3 tests/bench.py --trials 5 --dir /tmp/bench
  python3 tests/bench.py --only calibration  # report --calibration, summary --calibration-out
  python3 tests/bench.py --only long      # a 20,000-token layer trace; bytes a token per format

Not a test: pytest does not collect it, and its numbers go in docs/performance.md by hand.
"""
import argparse
import importlib.util
import os
import statistics
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
DUCKDB = """import duckdb, sys
kind, path = sys.argv[1], sys.argv[2]
src = f"read_csv('{path}', comment='#', header=true)"
if kind == "compute":
    duckdb.sql(f"select op, sum(wall_ns), count(*), sum(majflt) from {src} where phase = 1 "
               f"group by op").fetchall()
    duckdb.sql(f"select turn, step, sum(wall_ns) from {src} where phase = 1 "
               f"group by turn, step").fetchall()
else:
    duckdb.sql(f"select lane, read_bytes, spec, layer, count(*), sum(latency_ns) from {src} "
               f"where phase = 1 group by lane, read_bytes, spec, layer").fetchall()
    duckdb.sql(f"select turn, step, count(*), sum(read_bytes) from {src} where phase = 1 "
               f"group by turn, step").fetchall()
"""
POLARS = """import polars as pl, sys
kind, path = sys.argv[1], sys.argv[2]
frame = pl.scan_csv(path, comment_prefix="#").filter(pl.col("phase") == 1)
if kind == "compute":
    frame.group_by("op").agg(pl.col("wall_ns").sum(), pl.len(), pl.col("majflt").sum()).collect()
    frame.group_by("turn", "step").agg(pl.col("wall_ns").sum()).collect()
else:
    frame.group_by("lane", "read_bytes", "spec", "layer").agg(
        pl.len(), pl.col("latency_ns").sum()).collect()
    frame.group_by("turn", "step").agg(pl.len(), pl.col("read_bytes").sum()).collect()
"""

# The floor under any fold in this language: in as many processes as the tool uses, read the
# file in 256 KiB batches, split them into fields, slice out the columns a command needs and
# convert its integer columns, and nothing else: no validation, no token, no sum, no report.
FLOOR = """import json, os, sys
path, ints, wanted = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(",")
with open(path, "rb") as f:
    while True:
        start, line = f.tell(), f.readline()
        if not line.startswith(b"#"):
            break
columns = line.decode().rstrip("\\r\\n").split(",")
width, body, size = len(columns), start + len(line), os.path.getsize(path)
jobs = min(8, len(os.sched_getaffinity(0)))
def line_start(offset):
    if offset <= body or offset >= size:
        return min(max(offset, body), size)
    with open(path, "rb") as f:
        f.seek(offset - 1)
        f.readline()
        return f.tell()
def fold(begin, end):
    with open(path, "rb") as f:
        f.seek(begin)
        remainder = b""
        while begin < end:
            raw = f.read(min(1 << 18, end - begin))
            begin += len(raw)
            chunk = remainder + raw
            cut = chunk.rfind(b"\\n") + 1 if begin < end else len(chunk)
            chunk, remainder = chunk[:cut], chunk[cut:]
            flat = chunk.decode().replace("\\n", "\\n,").split(",")
            for name in wanted:
                column = flat[columns.index(name)::width]
                if name in ints:
                    json.loads("[" + ",".join(column) + "]")
cuts = [line_start(body + (size - body) * i // jobs) for i in range(jobs + 1)]
children = []
for i in range(1, jobs):
    pid = os.fork()
    if pid == 0:
        fold(cuts[i], cuts[i + 1])
        os._exit(0)
    children.append(pid)
fold(cuts[0], cuts[1])
for pid in children:
    os.waitpid(pid, 0)
"""
# What each case's fold must read: (integer columns, every column it needs).
FLOOR_COLUMNS = {
    "compute": ("wall_ns,majflt", "turn,phase,step,layer,op,name,wall_ns,majflt"),
    "io": ("req_bytes,latency_ns",
           "turn,phase,step,layer,expert,lane,spec,req_bytes,read_bytes,latency_ns"),
    "io --adjacent": ("offset,req_bytes,latency_ns", "turn,phase,step,layer,expert,lane,spec,"
                                                      "offset,req_bytes,read_bytes,latency_ns"),
}


class Timing:
    """The wall times of one command's trials and its peak RSS."""

    def __init__(self, times, peak_mib):
        self.times, self.peak_mib = times, peak_mib
        self.median = statistics.median(times)

    def cell(self):
        if len(self.times) == 1:
            return f"{self.median:.2f} s"
        return f"{self.median:.2f} s [{min(self.times):.2f}-{max(self.times):.2f}]"


def run_once(argv):
    """(wall seconds, peak RSS in MiB) of running argv as a child process."""
    start = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    errors = child.stderr.read().decode(errors="replace")
    child.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(map(str, argv))}\n{errors}")
    return wall, usage.ru_maxrss / 1024  # KiB on Linux


def measure(argvs, trials):
    """A Timing for each of argvs, run in turns (trial 1 of each, then trial 2 of each...), so
    that a slow spell of a shared machine falls on all of them alike and their ratios hold."""
    times, peaks = [[] for _ in argvs], [0.0] * len(argvs)
    for _ in range(trials):
        for i, argv in enumerate(argvs):
            wall, peak = run_once(argv)
            times[i].append(wall)
            peaks[i] = max(peaks[i], peak)
    return [Timing(each, peak) for each, peak in zip(times, peaks)]


def generate(directory):
    traces = {
        "ct420": ("compute", dict(n_layer=48, decode_tokens=420)),
        "ct3m": ("compute", dict(n_layer=48, decode_tokens=1220)),
        # io500k's compute trace, a row a layer segment: ab_versions --in-turn's pair
        "ct1430": ("compute", dict(n_layer=48, decode_tokens=1430, layers=True)),
        "io500k": ("io", dict(n_layer=48, decode_tokens=1430, reads_per_token=350)),
        "io420": ("io", dict(n_layer=48, decode_tokens=420, reads_per_token=350)),
        "io1m": ("io", dict(n_layer=48, decode_tokens=2860, reads_per_token=350)),
        "io3m": ("io", dict(n_layer=48, decode_tokens=8580, reads_per_token=350)),
    }
    paths = {}
    for name, (kind, options) in traces.items():
        path = directory / f"{name}.csv"
        if not path.exists():
            lines = tracegen.compute_lines(**options) if kind == "compute" else \
                tracegen.io_lines(**options)
            tracegen.write(path, lines)
        paths[name] = path
    paths["ct420q"] = quoted_copy(paths["ct420"])
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


def peers():
    found = {}
    for name, script in (("duckdb", DUCKDB), ("polars", POLARS)):
        if importlib.util.find_spec(name):
            found[name] = script
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, help="where to keep the generated traces")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="skip the reference runs")
    parser.add_argument("--only", choices=("calibration", "long"),
                        help="only the calibration's cases (what a fit costs report and summary)"
                             " or the long runs' (a 20,000-token layer trace; memory a token)")
    args = parser.parse_args()
    directory = args.dir or Path(tempfile.mkdtemp(prefix="decode-analyze-bench-"))
    directory.mkdir(parents=True, exist_ok=True)
    paths = generate(directory)
    python, trials = sys.executable, args.trials
    tool = [python, str(TOOL)]
    others = peers()
    if args.only == "calibration":
        return calibration_cases(tool, paths, directory, trials)
    if args.only == "long":
        return long_run_cases(tool, directory, trials)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores ({len(os.sched_getaffinity(0))}"
          f" usable); median [min-max] of {trials} trials; traces in {directory}; peers: "
          f"{', '.join(others) or 'none installed'}\n")

    cases = [("compute --layers, 48 layers, 420 tokens", "ct420", ["compute", "--layers"]),
             ("compute --layers, 3M rows", "ct3m", ["compute", "--layers"]),
             ("io, 500k reads", "io500k", ["io"]),
             ("io --adjacent, 500k reads", "io500k", ["io", "--adjacent"]),
             ("io --adjacent --cache, 500k reads", "io500k", ["io", "--adjacent", "--cache"]),
             ("io, 1M reads", "io1m", ["io"]),
             ("io --adjacent --cache, 1M reads", "io1m", ["io", "--adjacent", "--cache"])]
    print("| case | rows | this tool | bare csv.reader | this / bare | stdlib floor | "
          "floor / bare | " + "".join(f"{name} | " for name in others) + "peak RSS |")
    print("|---" * (8 + len(others)) + "|")
    results = {}
    for label, name, (command, *options) in cases:
        path = str(paths[name])
        needs = FLOOR_COLUMNS["io --adjacent" if "--adjacent" in options else command]
        mine, bare, floor, *peer_timings = measure(
            [[*tool, command, path, *options], [python, "-c", BARE, path],
             [python, "-c", FLOOR, path, *needs]]
            + [[python, "-c", script, command, path] for script in others.values()], trials)
        results[label] = mine
        peer_cells = "".join(timing.cell() + " | " for timing in peer_timings)
        print(f"| {label} | {rows_of(path):,} | {mine.cell()} | {bare.cell()} | "
              f"{mine.median / bare.median:.2f}x | {floor.cell()} | "
              f"{floor.median / bare.median:.2f}x | {peer_cells}{mine.peak_mib:.0f} MiB |",
              flush=True)

    # report reads its two files at once: against compute and io run one after the other.
    ct, io = str(paths["ct420"]), str(paths["io420"])
    pair, ct_alone, io_alone = measure([[*tool, "report", ct, io], [*tool, "compute", ct, "--layers"],
                                        [*tool, "io", io, "--adjacent", "--cache"]], trials)
    alone = ct_alone.median + io_alone.median
    print("\n| case | report CT IO | compute + io --adjacent --cache, one after the other | "
          "report / sequential |")
    print("|---" * 4 + "|")
    print(f"| 420-token pair | {pair.cell()} | {alone:.2f} s | {pair.median / alone:.2f}x |")

    # --jobs: one process against the default.
    one, default = measure([[*tool, "compute", str(paths["ct3m"]), "--layers", "--jobs", "1"],
                            [*tool, "compute", str(paths["ct3m"]), "--layers"]], trials)
    print("\n| case | --jobs 1 | default --jobs | default / 1 | peak RSS --jobs 1 |")
    print("|---" * 5 + "|")
    print(f"| compute --layers, 3M rows | {one.cell()} | {default.cell()} | "
          f"{default.median / one.median:.2f}x | {one.peak_mib:.0f} MiB |")

    # Memory on 3M rows, one trial each: the largest process, in one process and by default.
    print("\n| case, 3M rows | peak RSS, --jobs 1 | peak RSS, default --jobs |")
    print("|---" * 3 + "|")
    for label, name, argv in (("compute --layers", "ct3m", ["compute", "--layers"]),
                              ("io", "io3m", ["io"]),
                              ("io --adjacent --cache", "io3m", ["io", "--adjacent", "--cache"])):
        alone, default = measure([[*tool, argv[0], str(paths[name]), *argv[1:], "--jobs", "1"],
                                  [*tool, argv[0], str(paths[name]), *argv[1:]]], 1)
        print(f"| {label} | {alone.peak_mib:.0f} MiB | {default.peak_mib:.0f} MiB |", flush=True)

    # Quoted names: only the quoted lines may take the slow path (issue 8: within 1.2x).
    plain_ct, quoted_ct = measure([[*tool, "compute", str(paths["ct420"])],
                                   [*tool, "compute", str(paths["ct420q"])]], trials)
    print("\n| case | unquoted | one quoted name per layer | quoted / unquoted |")
    print("|---" * 4 + "|")
    print(f"| compute, 420 tokens | {plain_ct.cell()} | {quoted_ct.cell()} | "
          f"{quoted_ct.median / plain_ct.median:.2f}x |", flush=True)

    if REFERENCE.exists() and not args.quick:
        print("\n| case | this tool | reference | reference / this | peak RSS reference |")
        print("|---" * 5 + "|")
        for label, name, command in (("compute, 420 tokens", "ct420", ["compute"]),
                                     ("io, 500k reads", "io500k", ["io"])):
            mine, = measure([[*tool, *command[:1], str(paths[name]), *command[1:]]], trials)
            theirs, = measure([[python, str(REFERENCE), *command[:1], str(paths[name])]], 1)
            print(f"| {label} | {mine.cell()} | {theirs.cell()} | "
                  f"{theirs.median / mine.median:.1f}x | {theirs.peak_mib:.0f} MiB |", flush=True)


REAL = HERE / "data"


def real_runs():
    """Every real run the repository holds, as summary takes them: the sweep's and the 48-layer
    repeats' pairs, the session pair, the single traces."""
    pairs = [f"{ct}+{ct.with_name(ct.name.replace('-ct.csv', '-io.csv'))}" for ct in
             sorted((REAL / "sweep").glob("*-ct.csv"))]
    pairs += [f"{ct}+{ct.with_name(ct.name.replace('-ct.csv', '-io.csv.gz'))}" for ct in
              sorted((REAL / "l48-repeats").glob("*-ct.csv"))]
    examples = HERE.parent / "examples"
    pairs.append(f"{examples / 'session-ct.csv'}+{examples / 'session-io.csv'}")
    return pairs + [str(path) for path in sorted(REAL.glob("*-l4-*.csv"))]


def calibration_cases(tool, paths, directory, trials):
    """What a calibration costs: report with --calibration against report (a fit of the
    pair's own model), and summary over every real run with --calibration-out against it
    without (issue 49: each within 1.1x)."""
    ct, io = str(paths["ct420"]), str(paths["io420"])
    fit = directory / "calibration.json"
    subprocess.run([*tool, "summary", f"{ct}+{io}", "--calibration-out", str(fit)], check=True,
                   stdout=subprocess.DEVNULL)
    plain, calibrated = measure([[*tool, "report", ct, io],
                                 [*tool, "report", ct, io, "--calibration", str(fit)]], trials)
    runs = real_runs()
    written = directory / "real-calibration.json"
    alone, out = measure([[*tool, "summary", *runs],
                          [*tool, "summary", *runs, "--calibration-out", str(written)]], trials)
    print("| case | without | with | with / without |")
    print("|---" * 4 + "|")
    print(f"| report, 420-token pair, --calibration | {plain.cell()} | {calibrated.cell()} | "
          f"{calibrated.median / plain.median:.2f}x |")
    print(f"| summary, {len(runs)} real runs, --calibration-out | {alone.cell()} | {out.cell()} | "
          f"{out.median / alone.median:.2f}x |")


def long_run_cases(tool, directory, trials):
    """A long run at layer granularity, as the engine recommends for one (48 layers, 20,000
    decode tokens, 97 rows a token, and its I/O trace): compute against the reference script
    and a bare csv.reader pass, report against the two files' bare passes. Then memory a token:
    the same trace over 5,000 and 20,000 tokens, and a one-row-a-token trace over 250,000 and
    1,000,000 tokens in each format; the growth between the two, over the tokens added, is
    what a token costs (a fixed base cancels)."""
    python = tool[0]
    made = {}
    for name, lines in (("long-ct-5k", lambda: tracegen.compute_lines(
                             n_layer=48, decode_tokens=5000, layers=True)),
                        ("long-ct-20k", lambda: tracegen.compute_lines(
                             n_layer=48, decode_tokens=20000, layers=True)),
                        ("long-io-20k", lambda: tracegen.io_lines(
                             n_layer=48, decode_tokens=20000, reads_per_token=40)),
                        ("one-row-250k", lambda: tracegen.one_row_lines(250000)),
                        ("one-row-1m", lambda: tracegen.one_row_lines(1000000))):
        made[name] = directory / f"{name}.csv"
        if not made[name].exists():
            tracegen.write(made[name], lines())
    ct, io = str(made["long-ct-20k"]), str(made["long-io-20k"])
    argvs = [[*tool, "compute", ct], [python, "-c", BARE, ct], [*tool, "report", ct, io],
             [python, "-c", BARE, io]]
    if REFERENCE.exists():
        argvs.append([python, str(REFERENCE), "compute", ct])
    mine, bare, pair, bare_io, *theirs = measure(argvs, trials)
    print("| case, 48 layers x 20,000 tokens | this tool | bare csv.reader | this / bare | "
          "reference | reference / this |")
    print("|---" * 6 + "|")
    reference = f"{theirs[0].cell()} | {theirs[0].median / mine.median:.1f}x" if theirs \
        else "not found | -"
    print(f"| compute, {rows_of(made['long-ct-20k']):,} rows | {mine.cell()} | {bare.cell()} | "
          f"{mine.median / bare.median:.2f}x | {reference} |")
    bares = bare.median + bare_io.median
    print(f"| report CT IO, +{rows_of(made['long-io-20k']):,} reads | {pair.cell()} | "
          f"{bares:.2f} s (both) | {pair.median / bares:.2f}x | - | - |", flush=True)

    print("\n| case | format | tokens | peak RSS | bytes a token over the smaller run |")
    print("|---" * 5 + "|")
    for label, small, large, tokens, formats in (
            ("compute, 48-layer layer trace", "long-ct-5k", "long-ct-20k", (5000, 20000),
             ("text",)),
            ("compute, one row a token", "one-row-250k", "one-row-1m", (250000, 1000000),
             ("text", "json", "csv"))):
        for fmt in formats:
            few, many = measure([[*tool, "compute", str(made[small]), "--format", fmt],
                                 [*tool, "compute", str(made[large]), "--format", fmt]], 1)
            grown = (many.peak_mib - few.peak_mib) * (1 << 20) / (tokens[1] - tokens[0])
            print(f"| {label} | {fmt} | {tokens[0]:,} / {tokens[1]:,} | {few.peak_mib:.0f} / "
                  f"{many.peak_mib:.0f} MiB | {grown:.0f} |", flush=True)


if __name__ == "__main__":
    main()
