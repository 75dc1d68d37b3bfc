"""Robustness: a bounded fuzz run (tests/fuzz.py, a seeded mutator over the real traces) as its
own process. A fixed number of cases drawn from a fixed seed, so that it tries the same inputs
on every machine: no traceback, no hang, and the whole run's peak memory under 200 MB."""
import json
import sys

from helpers import ROOT, run_measured

CASES = 400  # about 20 s here


def test_fuzz_finds_no_traceback_no_hang_and_stays_small():
    status, out, err, peak = run_measured(
        [sys.executable, ROOT / "tests" / "fuzz.py", "--seed", "2026", "--cases", CASES], 120)
    summary = json.loads(out)
    assert summary["failures"] == [], json.dumps(summary["failures"], indent=1)
    assert status == 0 and summary["cases"] == CASES
    assert summary["runs"] >= CASES * 9  # every command, each input mutated in turn
    assert peak < 200
