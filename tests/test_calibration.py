"""The what-if's costs fitted on the user's own runs (summary's `calibration`, issue 36): on the
shared sweep against the figures its logs print, and on generated runs whose costs are known."""
import json
import re

import pytest

import decode_analyze as da
from helpers import ROOT, report, report_with_warnings, run

SWEEP = ROOT / "tests" / "data" / "sweep"
RUNS = sorted(str(path) for path in SWEEP.glob("*.csv"))


def logged(name, pattern):
    """A figure of a sweep run's log, read here with a pattern of its own."""
    text = (SWEEP / f"qwen3moe-l4-greedy-{name}.log").read_text()
    return float(re.search(pattern, text).group(1))


def mib_per_s(name):
    return logged(name, r"flash I/O [0-9.]+ s/token, ([0-9.]+) MiB/s")


@pytest.fixture(scope="module")
def fit():
    return report("summary", *RUNS)["calibration"]


def test_the_sweeps_ms_per_mib_is_its_logs(fit):
    """ms per MiB: the engine's flash I/O over the MiB read, 1000 / its MiB/s, by lanes and
    whether the run had a cache (a cache changes the reads' throughput)."""
    serial = [1000 / mib_per_s(f"serial-rep{i}") for i in (1, 2, 3)]
    cached = [1000 / mib_per_s(f"cache{size}mb") for size in (1, 2, 4)]
    for key, values in (("4", serial), ("4 cached", cached)):
        cost = fit["ms_per_mib"][key]
        mean = sum(values) / len(values)
        assert cost["n"] == 3
        assert cost["value"] == pytest.approx(mean, rel=1e-3)
        assert (cost["min"], cost["max"]) == pytest.approx((min(values), max(values)), rel=1e-3)
        assert cost["residual"] == pytest.approx(max(abs(v - mean) for v in values), rel=1e-3)


def test_management_a_lookup_is_the_logs_ms_over_the_lookups(fit):
    """4 layers x top-2 = 8 lookups a token; the log prints cache mgmt to 1 ms (0.001 s on the
    1 MiB run, 0.000 on the others), so each allows +- 0.5 ms."""
    printed = [logged(f"cache{size}mb", r"cache mgmt ([0-9.]+)") * 1000 for size in (1, 2, 4)]
    assert printed == [1.0, 0.0, 0.0]
    cost = fit["management_ms_per_lookup"]
    assert cost["value"] == pytest.approx(sum(printed) / 3 / 8)
    assert (cost["min"], cost["max"]) == pytest.approx((0.0, 1.5 / 8))
    assert fit["overlap_hidden_share"] is None  # no overlapped run in the sweep


def test_the_repeats_spread_is_the_serial_runs_half_range(fit):
    decodes = [report("compute", str(SWEEP / f"qwen3moe-l4-greedy-serial-rep{i}-ct.csv"),
                      "--no-engine-log")["ms_per_token"] for i in (1, 2, 3)]
    expected = (max(decodes) - min(decodes)) / 2 / (sum(decodes) / 3)
    assert fit["repeat_spread"] == pytest.approx(expected)


def test_each_run_predicted_from_the_others_and_every_miss_is_noise(fit):
    """The sweep ran on a busy machine: the 1 MiB run read the serial runs' bytes (0% hit) in
    4 ms a token where they took 9-13. 3 of 6 fall inside (README); each miss is in compute,
    which no setting changes, and says so."""
    held = {one["run"]: one for one in fit["leave_one_out"]}
    assert len(held) == 6
    inside = sorted(name for name, one in held.items() if one["inside"])
    assert inside == ["qwen3moe-l4-greedy-cache2mb-ct.csv", "qwen3moe-l4-greedy-serial-rep1-ct.csv",
                      "qwen3moe-l4-greedy-serial-rep3-ct.csv"]
    for one in held.values():
        assert one["inside"] == (one["min"] <= one["decode_ms_per_token"] <= one["max"])
        assert one["inside"] or one["why"].startswith("its compute")
        # no band narrower than the repeats' spread of its base's mean, either way
        assert one["max"] - one["min"] >= 2 * fit["repeat_spread"] * 9.3 * 0.99
    one_mib = held["qwen3moe-l4-greedy-cache1mb-ct.csv"]
    assert one_mib["base"] == [f"qwen3moe-l4-greedy-serial-rep{i}-ct.csv" for i in (1, 2, 3)]
    assert not one_mib["inside"] and one_mib["decode_ms_per_token"] < one_mib["min"]


def test_calibration_out_writes_the_fit_and_text_prints_it(tmp_path, fit):
    target = tmp_path / "calibration.json"
    result = run("summary", *RUNS, "--calibration-out", str(target))
    assert result.code == 0, result.err
    assert json.loads(target.read_text()) == fit
    said = " ".join(result.out.split())
    assert "calibration, fitted on 6 run(s)" in said
    assert "leave one out: 3 of 6 runs inside the band the others predict" in said
    assert "cache management ms a lookup: 0.0417 (0-0.188), n=3" in said
    log = SWEEP / "qwen3moe-l4-greedy-serial-rep1.log"
    refused = run("summary", *RUNS, "--calibration-out", str(log))
    assert refused.code != 0 and "not writing over it" in refused.err


def test_diff_fits_its_sides_runs_as_summary_does(tmp_path, fit):
    """The sides of a diff are runs that differ in a setting: the same fit as summary's over
    the same runs (the runs named as diff names them), written by --calibration-out too."""
    serial = [path for path in RUNS if "serial" in path]
    cached = [path for path in RUNS if "cache" in path]
    target = tmp_path / "calibration.json"
    result = run("diff", *serial, "vs", *cached, "--calibration-out", str(target))
    assert result.code == 0, result.err
    written = json.loads(target.read_text())
    assert written == report_with_warnings("diff", *serial, "vs", *cached)["calibration"]
    for name in ("ms_per_mib", "management_ms_per_lookup", "repeat_spread"):
        assert written[name] == fit[name]
    assert [one["inside"] for one in written["leave_one_out"]] == [
        one["inside"] for one in sorted(fit["leave_one_out"], key=lambda one: "cache" in one["run"])]
    assert "calibration, fitted on 6 run(s)" in result.out


def test_diff_of_fewer_than_two_pairs_fits_nothing(tmp_path):
    serial, overlap = (ROOT / "tests" / "data" / f"qwen3moe-l4-io-{mode}.csv"
                       for mode in ("serial", "overlap"))
    assert report_with_warnings("diff", str(serial), str(overlap))["calibration"] is None
    refused = run("diff", str(serial), str(overlap), "--calibration-out",
                  str(tmp_path / "fit.json"))
    assert refused.code == 2 and "a fit takes two runs or more that are pairs" in refused.err
    assert not (tmp_path / "fit.json").exists()


def sample(name, lanes, mib, cached=False, decode=None, lookups=0, management=None, io=None):
    return da.Sample(name, {"model": "m"}, lanes, cached, False, mib, io, management, lookups,
                     None, decode, {"model": "m", "io_threads": str(lanes),
                                    "cache_mb": str(mib) if cached else "0"})


def test_a_generated_sweep_gives_back_its_costs():
    """Runs made with known costs: 2 ms per MiB on 4 lanes, 3.5 on 1, a cache's management
    0.05 ms a lookup (16 lookups a token), compute 6 ms: the fit recovers each, and each run
    predicted from the others is inside its band."""
    compute, runs = 6.0, []
    for index, (lanes, rate) in enumerate(((4, 2.0), (4, 2.0), (1, 3.5), (4, 2.0))):
        io = 1.5 * rate
        runs.append(sample(f"serial{index}", lanes, 1.5, decode=compute + io, io=io))
    for mib in (1.0, 0.6):
        io, managing = mib * 2.0, 16 * 0.05
        runs.append(sample(f"cache{mib}", 4, mib, True, compute + io + managing, 16, managing,
                           io))
    fit = da.calibration(runs)
    assert fit["ms_per_mib"]["4"]["value"] == pytest.approx(2.0)
    assert fit["ms_per_mib"]["1"]["value"] == pytest.approx(3.5)
    assert fit["ms_per_mib"]["4 cached"]["residual"] == pytest.approx(0.0)
    assert fit["management_ms_per_lookup"]["value"] == pytest.approx(0.05)
    assert fit["repeat_spread"] == pytest.approx(0.0)
    held = {one["run"]: one for one in fit["leave_one_out"]}
    assert set(held) == {"serial0", "serial1", "serial3", "cache1.0", "cache0.6"}
    assert all(one["inside"] for one in held.values()), held


def setting(what_if, name, value):
    return next(s for s in what_if["settings"] if s["setting"] == name and s["value"] == value)


def test_calibration_makes_the_what_if_use_the_users_costs(tmp_path, fit):
    """--calibration FILE: a cache's ms is the I/O now less the MiB it leaves at the cached
    runs' ms per MiB (widened by the repeats' spread), less their management a lookup; a lane
    count the runs read at is its MiB at their ms per MiB; overlap at most the share they hid.
    Each is said to be calibrated, and the cache verdict's stake is still the what-if's."""
    target = tmp_path / "fit.json"
    made = {**fit, "ms_per_mib": {**fit["ms_per_mib"], "1": {
        "value": 5.0, "min": 4.0, "max": 6.0, "n": 2, "residual": 1.0}},
        "overlap_hidden_share": {"value": 0.4, "min": 0.2, "max": 0.6, "n": 2, "residual": 0.2}}
    target.write_text(json.dumps(made))
    trace = str(SWEEP / "qwen3moe-l4-greedy-serial-rep1-io.csv")
    r = report("io", trace, "--what-if", "--cache-mb", "2", "--calibration", str(target))
    spread = fit["repeat_spread"]
    cached = fit["ms_per_mib"]["4 cached"]
    fast, slow = cached["min"] * (1 - spread), cached["max"] * (1 + spread)
    managing = fit["management_ms_per_lookup"]
    estimate = r["io_wall_ms_per_token"]["estimate"]
    two = setting(r["what_if"], "cache_mb", 2)
    mib = two["figures"]["mib_per_token"]
    assert two["ms_per_token_saved"] == pytest.approx({
        "point": None, "min": estimate - mib["max"] * slow - managing["max"] * 8,
        "max": estimate - mib["min"] * fast - managing["min"] * 8})
    assert two["method"].startswith("calibrated on 6 runs (--calibration)")
    one = setting(r["what_if"], "io_threads", 1)["ms_per_token_saved"]
    assert one == pytest.approx({"point": None,
                                 "min": estimate - r["mib_per_token"] * 6.0 * (1 + spread),
                                 "max": estimate - r["mib_per_token"] * 4.0 * (1 - spread)})
    assert setting(r["what_if"], "overlap", 1)["ms_per_token_saved"]["max"] == \
        pytest.approx(estimate * 0.6)
    assert not setting(r["what_if"], "io_threads", 8)["method"].startswith("calibrated")
    judged = r["reuse"]["judged"]
    stake = re.search(r"could save at most ([0-9.]+) ms",
                      next(v for v in r["verdicts"] if v["id"] == "cache")["text"])
    assert stake and float(stake.group(1)) == pytest.approx(
        judged["ms_per_token_saved"]["max"], abs=0.006)


@pytest.mark.parametrize("content,said", [
    (b"", "not valid JSON"), (b"{not json", "not valid JSON"),
    (b"[1, 2]", "not a calibration: the JSON is not an object"), (b"{}", "no `runs` list"),
    (b'{"runs": [], "ms_per_mib": {"4": {"min": -1, "max": 2}}}', "a cost without a min"),
    (b'{"runs": [], "ms_per_mib": {"4": {"min": 1e999, "max": 2}}}', "a cost without a min"),
    (b'{"runs": [], "ms_per_mib": {"4": {"min": NaN, "max": 2}}}', "NaN is not a number"),
    (b'{"runs": [], "ms_per_mib": {}, "repeat_spread": 7}', "is not a share"),
    (b"\xff\xfe\x00", "not UTF-8 text")])
def test_a_bad_calibration_file_is_one_line_naming_it(tmp_path, content, said):
    bad = tmp_path / "fit.json"
    bad.write_bytes(content)
    result = run("io", str(SWEEP / "qwen3moe-l4-greedy-serial-rep1-io.csv"), "--what-if",
                 "--calibration", str(bad))
    assert result.code == 1 and "Traceback" not in result.err
    assert result.err.count("\n") == 1 and str(bad) in result.err and said in result.err
    missing = run("io", str(SWEEP / "qwen3moe-l4-greedy-serial-rep1-io.csv"), "--what-if",
                  "--calibration", str(tmp_path / "none.json"))
    assert missing.code == 1 and "none.json: no such file" in missing.err
