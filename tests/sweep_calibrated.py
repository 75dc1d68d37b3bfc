#!/usr/bin/env python3
"""Issue 65's calibrated criterion on the shared 48-layer sweep (../shared/traces): for each
one-setting change, the sweep less that setting's runs is fitted (summary --calibration-out),
and each quiet serial repeat's report reads the fit; the prediction is held against the mean of
the setting's runs' logged decodes less the quiet repeats' mean, as tests/test_sweep_criteria.py
holds the uncalibrated one. Prints each prediction, then how many were inside (band widened by
5% of the base decode), the median band over the decode, and how many fits were not used.

  python3 tests/sweep_calibrated.py ../shared/traces   # about 3 minutes: six fits of 20 runs

Not a test: pytest does not collect it (it reads ../shared, which a fresh clone lacks).
"""
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from test_sweep_criteria import CHANGES, NAME, logged_decode


def main(traces):
    sweep, repeats = traces / "l48-sweep", traces / "l48-repeats"
    quiet = [repeats / NAME.format("serial-rep9")] + [sweep / NAME.format(f"serial-rep{i}")
                                                      for i in (10, 11, 12)]
    quiet_mean = statistics.mean(logged_decode(base.with_name(base.name + ".log"))
                                 for base in quiet)
    runs = sorted(path.with_name(path.name[:-len("-ct.csv")])
                  for folder in (sweep, repeats) for path in folder.glob("*-ct.csv"))
    tool = [sys.executable, str(Path(__file__).resolve().parents[1] / "decode_analyze.py")]
    inside, widths, unused = 0, [], 0
    with tempfile.TemporaryDirectory() as folder:
        for change, names in CHANGES.items():
            own = {sweep / NAME.format(name) for name in names}
            effect = quiet_mean - statistics.mean(
                logged_decode(sweep / (NAME.format(name) + ".log")) for name in names)
            fit = Path(folder) / "fit.json"
            kept = [str(run.with_name(run.name + suffix)) for run in runs if run not in own
                    for suffix in ("-ct.csv", "-io.csv.gz")]
            subprocess.run([*tool, "summary", *kept, "--calibration-out", fit],
                           capture_output=True, check=True)
            for base in quiet:
                report = json.loads(subprocess.run(
                    [*tool, "report", base.with_name(base.name + "-ct.csv"),
                     base.with_name(base.name + "-io.csv.gz"), "--cache-mb", "64,256,512",
                     "--io-threads", "1,2,8", "--calibration", fit, "--format", "json"],
                    capture_output=True, check=True, text=True).stdout)
                unused += not report["what_if"]["calibrated"]["used"]
                decode = report["pair"]["decode_ms_per_token"]
                saved = next(s for s in report["what_if"]["settings"]
                             if (s["setting"], s["value"]) == change)["ms_per_token_saved"]
                if None in (saved["min"], saved["max"]):
                    widths.append(float("inf"))
                    print(base.name, change, "not known")
                    continue
                held = saved["min"] - 0.05 * decode <= effect <= saved["max"] + 0.05 * decode
                inside += held
                widths.append((saved["max"] - saved["min"]) / decode)
                print(base.name, change, f"{saved['min']:+.1f} to {saved['max']:+.1f}, "
                      f"measured {effect:+.1f}", "inside" if held else "outside")
    print(f"inside {inside} of {len(widths)}, median band {statistics.median(widths):.0%} of "
          f"the decode, fits not used {unused} of {len(widths)}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("../shared/traces"))
