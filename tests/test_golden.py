"""Golden outputs: every command in every format on the example session and real engine traces,
compared byte for byte with files under tests/golden/ that were reviewed by hand once.

A change that moves an output on purpose rewrites them (then read the diff before committing):

  python3 tests/test_golden.py --update
"""
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from helpers import ROOT, difference, run  # noqa: E402

GOLDEN = HERE / "golden"
SESSION = ("examples/session-ct.csv", "examples/session-io.csv")
DATA = "tests/data/"

def sweep_run(name):
    """A run of the shared sweep as CT+IO."""
    return "+".join(DATA + f"sweep/qwen3moe-l4-greedy-{name}-{kind}.csv" for kind in ("ct", "io"))


# name -> the command's arguments (paths relative to the repository's root)
COMMANDS = {
    "compute-session": ["compute", SESSION[0], "--layers"],
    "compute-qwen-layers": ["compute", DATA + "qwen3moe-l4-ct-layers.csv"],
    "compute-gemma-node": ["compute", DATA + "gemma4-l4-ct-node.csv", "--top", "6"],
    "compute-faults": ["compute", DATA + "synthetic/faults-ct.csv", "--layers", "--phase", "all"],
    "report-faults": ["report", DATA + "synthetic/faults-ct.csv", DATA + "synthetic/faults-io.csv"],
    "report-speculative": ["report", DATA + "synthetic/speculative-ct.csv",
                           DATA + "synthetic/speculative-io.csv"],
    "report-stretch": ["report", DATA + "synthetic/stretch-ct.csv",
                       DATA + "synthetic/stretch-io.csv"],
    "io-session": ["io", SESSION[1], "--adjacent", "--cache"],
    "io-qwen-prefetch": ["io", DATA + "qwen3moe-l4-io-prefetch.csv", "--adjacent", "--cache",
                         "--layers"],
    "io-qwen-what-if": ["io", DATA + "qwen3moe-l4-io-serial.csv", "--what-if", "--cache-mb",
                        "1,2,4"],
    "io-gemma-serial": ["io", DATA + "gemma4-l4-io-serial.csv"],
    "io-unread-log": ["io", DATA + "gemma4-l4-io-serial.csv", "--engine-log",
                      DATA + "synthetic/unread.log"],
    "report-session": ["report", *SESSION],
    "report-gemma": ["report", DATA + "gemma4-l4-ct-node.csv", DATA + "gemma4-l4-io-serial.csv"],
    "report-qwen-layers": ["report", DATA + "qwen3moe-l4-ct-layers.csv",
                           DATA + "qwen3moe-l4-io-serial.csv", "--layers"],
    "diff-io": ["diff", DATA + "qwen3moe-l4-io-serial.csv", DATA + "qwen3moe-l4-io-overlap.csv"],
    "diff-compute": ["diff", DATA + "qwen3moe-l4-ct-node.csv", SESSION[0]],
    "diff-runs": ["diff", *(DATA + f"runs/base-{i}-ct.csv" for i in range(1, 5)), "vs",
                  *(DATA + f"runs/new-{i}-ct.csv" for i in range(1, 5)),
                  "--fail-if-worse", "ms_per_token=20%"],
    "diff-sweep": ["diff", *(sweep_run(f"serial-rep{i}") for i in (1, 2, 3)), "vs",
                   sweep_run("cache2mb")],
    # a fit that validated its bands (a generated sweep, tests/data/busy), and one that did
    # not (the real 4-layer sweep's: the defaults stand)
    "report-calibrated": ["report", DATA + "busy/serial-q1-ct.csv", DATA + "busy/serial-q1-io.csv",
                          "--calibration", DATA + "busy/calibration.json", "--io-threads", "2,8"],
    "report-calibration-unused": [
        "report", DATA + "sweep/qwen3moe-l4-greedy-serial-rep1-ct.csv",
        DATA + "sweep/qwen3moe-l4-greedy-serial-rep1-io.csv", "--calibration",
        DATA + "sweep/calibration.json", "--io-threads", "2,8"],
    "timeline-pair": ["timeline", DATA + "v2/ct.csv", DATA + "v2/io.csv"],
    "timeline-compute": ["timeline", DATA + "v2/ct.csv"],
    "summary-sweep": ["summary", DATA + "qwen3moe-l4-io-serial.csv",
                      DATA + "qwen3moe-l4-io-overlap.csv", DATA + "qwen3moe-l4-ct-node.csv",
                      *SESSION, "--sort", "overlap"],
    "summary-repeats": ["summary", *(DATA + f"runs/{side}-{i}-ct.csv" for side in ("base", "new")
                                     for i in range(1, 5))],
    "summary-calibration": ["summary", *(DATA + "sweep/" + path.name for path in
                                         sorted((HERE / "data" / "sweep").glob("*.csv")))],
    "io-qwen-explain": ["io", DATA + "qwen3moe-l4-io-serial.csv", "--what-if", "--explain"],
}
FORMATS = {"text": "txt", "markdown": "md", "json": "json"}
# One picture per command that draws one (they are large; their structure is tested elsewhere).
PICTURES = ("compute-session", "io-session", "report-session", "diff-io", "diff-runs")
# Tidy CSV of one case per command (a line per JSON value: the rest would only repeat them).
CSV_CASES = ("compute-faults", "io-qwen-what-if", "report-faults", "diff-io", "summary-sweep",
             "timeline-pair", "diff-runs", "summary-repeats")


def cases():
    for name, argv in COMMANDS.items():
        for format_, ending in FORMATS.items():
            yield f"{name}.{ending}", argv + ["--format", format_], None
    for name in CSV_CASES:
        yield f"{name}.csv", COMMANDS[name] + ["--format", "csv"], None
    for name in PICTURES:
        yield f"{name}.svg", COMMANDS[name] + ["--format", "json"], "svg"


def produce(argv, picture, folder):
    """What the command writes: stdout, or the picture it writes to a file."""
    if picture:
        target = Path(folder) / "picture.svg"
        result = run(*argv, f"--{picture}", target)
        assert result.code == 0, result.err
        return target.read_text(encoding="utf-8")
    result = run(*argv)
    assert result.code == 0, result.err
    return result.out


@pytest.fixture
def at_root(monkeypatch):
    monkeypatch.chdir(ROOT)


@pytest.mark.parametrize("name,argv,picture", list(cases()), ids=lambda v: str(v)[:40])
def test_output_is_the_reviewed_one(name, argv, picture, at_root, tmp_path):
    expected = (GOLDEN / name).read_bytes().decode("utf-8")  # CSV's CRLF kept as written
    changed = difference(produce(argv, picture, tmp_path), expected)
    assert changed is None, \
        f"{name} changed ({changed}): if on purpose, python3 tests/test_golden.py --update"


def update():
    import os
    import tempfile
    os.chdir(ROOT)
    GOLDEN.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        for name, argv, picture in cases():
            (GOLDEN / name).write_bytes(produce(argv, picture, folder).encode("utf-8"))
    print(f"rewrote {len(list(cases()))} golden files in {GOLDEN}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        sys.exit("usage: python3 tests/test_golden.py --update")
    update()
