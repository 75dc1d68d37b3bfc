#!/usr/bin/env python3
"""A seeded mutator over the real traces: cut, flip, inject bytes, bad numbers, odd CSV, line
shuffles, speculative reads, sizes whose sums pass 2^64, io of prefill rows only, compression;
and saved JSON reports with odd values put in; engine logs (NAME.log beside the case: mutated, appended, UTF-16,
random bytes, hostile long lines), --set values good and bad, the what-if's --calibration files
(the repo's real fits, mutated as saved reports are), one run given several times (its
path and a copy), and outputs aimed at an input. Every mutated file goes
through every command of the registry (decode_analyze.COMMANDS: as each of its inputs in turn,
beside a real partner; a mutated saved report through diff; diff's sides of runs, summary's
repeats), with and without --skip-bad-rows,
as text, JSON and Markdown, with the command's own switches at random, sometimes with --svg or
--perfetto where the command draws it, in-process. The cases are a fixed number drawn from the
seed, so that a run fails the same way on every machine. What must hold for every case:

  - no exception escapes main(), and the exit status is 0 or 1 (2 for a --set value refused);
  - no input (trace, copy, saved report, log, calibration) is written over;
  - every stderr line starts with 'decode-analyze: '; a failure says exactly one line;
  - JSON output parses, Markdown fits one GitHub comment; no case takes more than CASE_SECONDS
    (a hang), nor more than SECONDS_PER_MB per MB of its inputs.

  python3 tests/fuzz.py --seed 7 --cases 100       # prints a JSON summary; exit 1 on a failure

Failing inputs are written to --keep (default: a temporary folder) to reproduce them.
"""
import argparse
import bz2
import contextlib
import gzip
import io
import json
import lzma
import random
import shutil
import signal
import sys
import tempfile
import time
import traceback
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import decode_analyze  # noqa: E402

CASE_SECONDS = 10
SECONDS_PER_MB = 5  # a run's time per MB of its inputs (at least 1 MB): linear, never stuck
SOURCE_LINES = 240
BAD_NUMBERS = ["", "-1", "-7", "1e3", "1.5", "nan", "inf", str(2**64), str(2**64 - 1), "9" * 5000,
               "0x10", " 5", "5 ", "01", "+3", "\u0968", "\u0661", "true", "null", "0" * 30]
INJECTED = [b"\x00", b"\r", b'"', b",", b"\n", b"\xff\xfe", b"\xe2\x80\xae", b"\x1b[2J", b"#",
            b'""', b"\r\n", "é".encode(), b"\t", b" "]
OPTIONS = [(), ("--skip-bad-rows",), ("--format", "json"), ("--skip-bad-rows", "--format", "json"),
           ("--phase", "all", "--format", "json"), ("--turn", "1", "--skip", "2"),
           ("--format", "markdown"), ("--skip-bad-rows", "--format", "markdown", "--jobs", "1"),
           ("--phase", "prefill", "--ascii"), ("--format", "csv", "--skip-bad-rows")]


class Hang(Exception):
    pass


def sources():
    files = sorted((HERE / "data").glob("*.csv")) + sorted((HERE / "data" / "v2").glob("*.csv")) \
        + sorted((HERE.parent / "examples").glob("*.csv"))
    picked = {}
    for path in files:
        with open(path, "rb") as f:
            picked[f"{path.parent.name}/{path.name}"] = b"".join(
            line for _, line in zip(range(SOURCE_LINES), f))
    return picked


def mutate(data, rng):
    for _ in range(rng.randint(1, 3)):
        data = rng.choice(MUTATIONS)(data, rng)
    if rng.random() < 0.1:
        data = rng.choice([gzip.compress, bz2.compress, lzma.compress])(data)
    return data


def cut(data, rng):
    return data[:rng.randrange(len(data) + 1)]


def flip(data, rng):
    data = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        if data:
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    return bytes(data)


def inject(data, rng):
    at = rng.randrange(len(data) + 1)
    return data[:at] + rng.choice(INJECTED) * rng.randint(1, 4) + data[at:]


def bad_number(data, rng):
    lines = data.split(b"\n")
    body = [i for i, line in enumerate(lines) if line and not line.startswith(b"#")][1:]
    if not body:
        return data
    i = rng.choice(body)
    fields = lines[i].split(b",")
    fields[rng.randrange(len(fields))] = rng.choice(BAD_NUMBERS).encode()
    lines[i] = b",".join(fields)
    return b"\n".join(lines)


def odd_csv(data, rng):
    lines = data.split(b"\n")
    i = rng.randrange(len(lines))
    fields = lines[i].split(b",")
    j = rng.randrange(len(fields))
    fields[j] = rng.choice([b'"' + fields[j] + b'"', b'"' + fields[j] + b',x"', fields[j] + b'"',
                            b'"' + fields[j].replace(b"-", b'""') + b'"', fields[j] + b"\r"])
    lines[i] = b",".join(fields)
    if rng.random() < 0.3:
        return b"\r\n".join(lines)
    return b"\n".join(lines)


def shuffle_lines(data, rng):
    lines = data.split(b"\n")
    i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
    action = rng.randrange(4)
    if action == 0:
        lines.insert(j, lines[i])
    elif action == 1:
        lines[i], lines[j] = lines[j], lines[i]
    elif action == 2:
        del lines[i]
    else:
        lines[i:i] = [lines[i]] * rng.randint(2, 200)
    return b"\n".join(lines)


def io_rows(data):
    """(lines, indexes of the lines of an io trace's body): [] when it is no io trace."""
    lines = data.split(b"\n")
    if b"io_trace" not in data[:200]:
        return lines, []
    return lines, [i for i, line in enumerate(lines)
                   if line.count(b",") == 11 and line[:1].isdigit()]


def speculative(data, rng):
    """Some reads made speculative (spec=1): experts read only speculatively, whole tokens of
    speculative reads."""
    lines, body = io_rows(data)
    for i in rng.sample(body, min(len(body), rng.randint(1, 40))):
        fields = lines[i].split(b",")
        fields[7] = b"1"
        lines[i] = b",".join(fields)
    return b"\n".join(lines)


def huge(data, rng):
    """Sizes and latencies at the largest value the reader takes, on several reads of one
    token: their sums pass 2^64."""
    lines, body = io_rows(data)
    for i in body[:rng.randint(2, 12)]:
        fields = lines[i].split(b",")
        for column in rng.sample([8, 9, 10, 11], rng.randint(1, 4)):
            fields[column] = str(2**64 - 1).encode()
        lines[i] = b",".join(fields)
    return b"\n".join(lines)


def prefill_only(data, rng):
    """An io trace's decode rows dropped (a cache that held every expert after prefill reads
    nothing in decode): a pair must not charge the prefill's reads to decode."""
    lines, body = io_rows(data)
    decode = {i for i in body if lines[i].split(b",")[1:2] == [b"1"]}
    return b"\n".join(line for i, line in enumerate(lines) if i not in decode)


MUTATIONS = [cut, flip, inject, bad_number, odd_csv, shuffle_lines, speculative, huge,
             prefill_only]
HOSTILE_LINES = [b"compute: " + b", 1 " * 60_000, b"turn id=1: generated=1 " * 20_000,
                 b"moe-stream: read " + b"9" * 200_000, b"\x1b[" + b"1;" * 50_000 + b"m"]


def engine_log(logs, rng):
    """An engine log for a case: a real one mutated, two appended, in UTF-16, random bytes,
    or hostile long lines (a pattern that backtracks would take minutes on them)."""
    how = rng.randrange(6)
    real = rng.choice(logs)
    if how == 0:
        return mutate(real, rng)
    if how == 1:
        return real + rng.choice(logs)  # 2>> appends the next run's lines
    if how == 2:
        return real.decode("utf-8", "replace").encode("utf-16")
    if how == 3:
        return bytes(rng.randrange(256) for _ in range(rng.randint(0, 4000)))
    if how == 4:
        return real + b"\n".join(rng.sample(HOSTILE_LINES, rng.randint(1, 3)))
    return real


SETTINGS = ["cache_mb=2", "cache_mb=abc", "cache_mb=-1", "cache_mb=nan", "cache_mb=1e308",
            "mem_limit_mb=64", "mem_limit_mb=lots", "cores=0", "cores=2", "io_threads=1",
            "io_threads=64", "overlap=1", "cache=0", "prefetch=2", "colour=blue", "k=2", "ms=3",
            "=1", "cache_mb", "x=" + "9" * 50]
SORTS = ["run", "tokens", "io_ms_per_token", "hit_share", "overlap", "model", "io_threads"]
ODD_VALUES = [None, "x", -1, 0, 1e308, 1e400, 2**70, True, [], {}, [1, "a"], {"a": 1}, "\u202e"]


def mutate_report(text, rng):
    """A saved JSON report with one value somewhere replaced by an odd one, or a key dropped,
    or the text itself cut or flipped."""
    if rng.random() < 0.3:
        return rng.choice([cut, flip, inject])(text.encode(), rng)
    report = json.loads(text)
    node, key = report, None
    for _ in range(rng.randint(1, 6)):
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        key = rng.choice(keys) if keys else None
        if key is None or not isinstance(node[key], (dict, list)) or rng.random() < 0.3:
            break
        node, key = node[key], None
    if key is not None:
        if isinstance(node, dict) and rng.random() < 0.3:
            del node[key]
        else:
            node[key] = rng.choice(ODD_VALUES)
    return json.dumps(report).encode()


def alarm(signum, frame):
    raise Hang()


def check(argv, inputs=()):
    """None, or what went wrong with decode_analyze.main(argv); `inputs` are the files it
    may read, which it must leave as they were."""
    out, err = io.StringIO(), io.StringIO()
    before = {path: path.read_bytes() for path in inputs if path.exists()}
    allowed = SECONDS_PER_MB * max(1.0, sum(map(len, before.values())) / (1 << 20))
    started = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
    try:
        with contextlib.redirect_stderr(err):  # argparse's usage errors go to sys.stderr
            code = decode_analyze.main(argv, out=out, err=err)
    except Hang:
        return "hang"
    except BaseException:  # noqa: BLE001 - any escape is the failure being looked for
        return traceback.format_exc()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    if time.monotonic() - started > allowed:
        return f"slow: {time.monotonic() - started:.1f} s, over {allowed:.1f} s for its MB"
    changed = [str(path) for path, data in before.items()
               if not path.exists() or path.read_bytes() != data]
    if changed:
        return f"an input was written over: {changed}"
    lines = err.getvalue().splitlines()
    if code == 2 and "--set" in argv:  # a value the setting cannot take: argparse's usage
        return None if lines and ("error:" in lines[-1] or "--set" in lines[-1]) else \
            f"a usage error must say why: {lines!r}"
    if code not in (0, 1):
        return f"exit status {code}"
    if any(not line.startswith("decode-analyze: ") for line in lines):
        return f"stderr line without the prefix: {lines!r}"
    if code == 1 and (out.getvalue() or sum(": warning: " not in line for line in lines) != 1):
        return f"a failure must say one line and print nothing: {lines!r}"
    if code == 0 and "-o" in argv:  # the report went to the file: read it from there
        out = io.StringIO(Path(argv[argv.index("-o") + 1]).read_text(encoding="utf-8"))
    if code == 0 and "markdown" in argv and len(out.getvalue()) > 65536:
        return f"Markdown over one GitHub comment: {len(out.getvalue())} characters"
    if code == 0 and "json" in argv:
        try:
            json.loads(out.getvalue())
        except ValueError as exc:
            return f"JSON does not parse: {exc}"
    return picture_problem(argv) if code == 0 else None


def picture_problem(argv):
    """None, or what is wrong with the --svg (XML) or --perfetto (JSON) file a run wrote."""
    for option, parse in (("--svg", ET.parse), ("--perfetto", lambda p: json.loads(
            Path(p).read_text(encoding="utf-8")))):
        if option in argv:
            target = argv[argv.index(option) + 1]
            try:
                parse(target)
            except (ValueError, ET.ParseError, OSError) as exc:
                return f"{option} file does not parse: {exc}"
            Path(target).unlink()
    return None


def saved_reports(originals, folder):
    """{name: the JSON report of each source trace}, as --format json writes it."""
    reports = {}
    for name, data in originals.items():
        path = folder / f"source-{name.replace('/', '-')}"
        path.write_bytes(data)
        kind = "io" if b"io_trace" in data[:100] else "compute"
        out = io.StringIO()
        decode_analyze.main([kind, str(path), "--format", "json", "--phase", "all"], out=out,
                            err=io.StringIO())
        reports[name] = out.getvalue()
        path.unlink()
    return reports


def runs(case, rng):
    """The argv of every run of one case: each command with the mutated file as each of its
    inputs in turn, a real partner as the others (a saved report too, where any input is)."""
    for command in decode_analyze.COMMANDS.values():
        if not command.inputs:
            continue  # reads no trace (schema)
        switches = [flag for each in command.options
                    if each.settings.get("action") == "store_true" and rng.random() < 0.5
                    for flag in each.flags[:1]]
        pictures = [] if not case.pictures or case.pictures[0][2:] not in command.pictures \
            else case.pictures
        arrangements = [[case.path] + [case.partner] * (len(command.inputs) - 1)]
        arrangements += [[case.partner] * i + [case.path] + [case.partner] * (
            len(command.inputs) - 1 - i) for i in range(1, len(command.inputs))]
        if any(each.kind in ("any", "run") for each in command.inputs):
            arrangements.append([case.saved] + [case.partner] * (len(command.inputs) - 1))
        if any(each.kind == "any" for each in command.inputs):  # sides of repeated runs
            arrangements.append([case.partner, case.path, "vs", case.saved, case.path])
            # one run given three times, and a copy of it: one run a side
            arrangements.append([case.path, case.path, case.copy, "vs", case.partner,
                                 case.partner])
        if any(each.kind == "run" for each in command.inputs):  # orders, pairs, CT+IO, --sort
            arrangements += [[case.partner, case.path, case.saved, case.path, case.saved],
                             [f"{case.path}+{case.partner}", case.path],
                             [f"{case.partner}+{case.path}", "--sort", rng.choice(SORTS)]]
        if any(each.kind == "run" for each in command.inputs):
            arrangements.append([case.path, case.copy, case.path])
        for i, inputs in enumerate(arrangements):
            declared = ["--set", rng.choice(SETTINGS)] if any(
                each is decode_analyze.SET_OPTION for each in command.options) and \
                rng.random() < 0.3 else []
            # a calibration file, where the command's what-if takes one
            calibrated = ["--calibration", str(case.calibration)] if any(
                "--calibration" in each.flags for each in command.options) and \
                rng.random() < 0.3 else []
            # an output aimed at the case's trace or its log: refused, as both are read
            over = ["-o", str(rng.choice([case.log, case.path]))] \
                if case.path in inputs and rng.random() < 0.05 else []
            yield [command.name, *map(str, inputs), *switches, *case.options, *declared,
                   *calibrated, *(over or (pictures if i == 0 else []))]


class Case:
    def __init__(self, number, keep, rng):
        self.path, self.saved = keep / f"case-{number}.csv", keep / f"case-{number}.json"
        self.copy = keep / f"copy-{number}.csv"  # the case's bytes under another name
        self.log = keep / f"case-{number}.log"  # read as the case's NAME.log
        self.calibration = keep / f"fit-{number}.json"
        self.partner = keep / "partner.csv"
        self.options = list(rng.choice(OPTIONS))
        self.pictures = rng.choice([[], ["--svg", str(keep / "out.svg")],
                                    ["--perfetto", str(keep / "out.json"), "--tokens", "0:8"]])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cases", type=int, default=100)
    parser.add_argument("--first", type=int, default=0,
                        help="the number of the first case: a run of cases first..first+cases-1")
    parser.add_argument("--keep", type=Path)
    args = parser.parse_args()
    keep = args.keep or Path(tempfile.mkdtemp(prefix="decode-analyze-fuzz-"))
    keep.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGALRM, alarm)
    originals = sources()
    names = sorted(originals)
    reports = saved_reports(originals, keep)
    logs = [path.read_bytes() for path in sorted((HERE / "data").glob("*.log"))]
    fits = [path.read_text() for path in sorted((HERE / "data").glob("*/calibration.json"))]
    runs_made, failures = 0, []
    for number in range(args.first, args.first + args.cases):
        # Each case draws from its own generator: cases 0-399 are the same inputs whether one
        # run tries them all or two runs try 0-199 and 200-399 at once.
        rng = random.Random(f"{args.seed}:{number}")
        name = rng.choice(names)
        case = Case(number, keep, rng)
        case.path.write_bytes(mutate(originals[name], rng))
        case.copy.write_bytes(case.path.read_bytes())
        case.partner.write_bytes(originals[rng.choice(names)])
        case.saved.write_bytes(mutate_report(reports[rng.choice(names)], rng))
        case.log.write_bytes(engine_log(logs, rng))
        case.calibration.write_bytes(mutate_report(rng.choice(fits), rng))
        inputs = (case.path, case.copy, case.partner, case.saved, case.log, case.calibration)
        for argv in runs(case, rng):
            runs_made += 1
            read = [arg for arg, last in zip(argv, [""] + argv) if last != "-o"]
            given = [path for path in inputs if any(str(path) in arg for arg in read)]
            problem = check(argv, given + ([case.log] if case.path in given else []))
            if problem:
                failures.append({"case": number, "source": name, "argv": argv,
                                 "problem": problem[-2000:]})
        if not failures or failures[-1]["case"] != number:
            for path in (case.path, case.saved, case.copy, case.log, case.calibration):
                path.unlink()
    if not failures and args.keep is None:  # nothing to reproduce: no folder left behind
        shutil.rmtree(keep, ignore_errors=True)
    print(json.dumps({"seed": args.seed, "first": args.first, "cases": args.cases,
                      "runs": runs_made,
                      "failures": failures[:20], "kept": str(keep) if failures else None},
                     indent=1))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
