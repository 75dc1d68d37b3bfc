"""The what-if's costs fitted on the user's own runs (summary's `calibration`, issue 36): on the
shared sweep against the figures its logs print, and on generated runs whose costs are known."""
import json
import re

import pytest

import decode_analyze as da
import tracegen
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
    4 ms a token where they took 9-13, the 4 MiB run in 2. 4 of 6 fall inside (README); each
    miss is in compute, which no setting changes, and says so."""
    held = {one["run"]: one for one in fit["leave_one_out"]}
    assert len(held) == 6
    inside = sorted(name for name, one in held.items() if one["inside"])
    assert inside == ["qwen3moe-l4-greedy-cache2mb-ct.csv"] + [
        f"qwen3moe-l4-greedy-serial-rep{i}-ct.csv" for i in (1, 2, 3)]
    for one in held.values():
        assert one["inside"] == (one["min"] <= one["decode_ms_per_token"] <= one["max"])
        assert one["inside"] or one["why"].startswith("its decode less I/O and cache management")
        # no band narrower than twice the repeats' spread of its base's mean, either way
        assert one["max"] - one["min"] >= 4 * fit["repeat_spread"] * 9.3 * 0.99
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
    assert "leave one out: 4 of 6 runs inside the band the others predict" in said
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


# A generated sweep (tests/tracegen.py): 4 lanes read at 1.5 ms a MiB, 1 lane at 4.0, a cache
# makes 4 lanes read at 1.9 and costs 0.2 ms a lookup; compute 40 ms give or take the repeats'.
KNOWN = {"4": 1.5, "1": 4.0, "4 cached": 1.9}
MANAGEMENT = 0.2
GENERATED = (("serial-rep1", 40.0, {}), ("serial-rep2", 41.5, {}), ("serial-rep3", 39.0, {}),
             ("lanes1", 40.5, {"lanes": 1, "ms_per_mib": KNOWN["1"]}),
             *((f"cache{experts}", compute, {"cache_experts": experts,
                                             "ms_per_mib": KNOWN["4 cached"],
                                             "management_ms_per_lookup": MANAGEMENT})
               for experts, compute in ((16, 40.2), (32, 39.6), (48, 40.8))))


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """(folder, {run: decode ms}, the fit summary --calibration-out wrote) of the sweep."""
    folder = tmp_path_factory.mktemp("generated")
    decodes = {name: tracegen.sweep_run(folder, name, compute, **settings)
               for name, compute, settings in GENERATED}
    runs = sorted(str(path) for path in folder.glob("*.csv"))
    result = run("summary", *runs, "--calibration-out", folder / "fit.json")
    assert result.code == 0 and result.err == "", result.err
    return folder, decodes, json.loads((folder / "fit.json").read_text())


def test_a_generated_sweep_gives_back_its_costs(generated):
    """Each ms per MiB within the log's rounding (1 ms a token) of the one the runs were made
    with; management a lookup inside its fitted range; each run predicted from the others is
    inside its band."""
    _, _, fit = generated
    for key, known in KNOWN.items():
        cost = fit["ms_per_mib"][key]
        mib = 24.0 if key != "4 cached" else 13.0  # the fewest MiB a token of theirs read
        assert cost["value"] == pytest.approx(known, abs=da.ENGINE_MS_ROUNDING / mib), key
    managing = fit["management_ms_per_lookup"]
    assert managing["min"] <= MANAGEMENT <= managing["max"] and managing["n"] == 3
    assert fit["repeat_spread"] == pytest.approx(1.25 / 76.1666, rel=1e-3)
    held = {one["run"]: one["inside"] for one in fit["leave_one_out"]}
    assert held == {f"{name}-ct.csv": True for name, _, settings in GENERATED
                    if "lanes" not in settings}


@pytest.mark.parametrize("base", ["serial-rep1", "serial-rep2", "serial-rep3"])
def test_the_calibrated_what_if_holds_the_generated_outcomes(generated, base):
    """Each serial repeat's what-if, calibrated on the sweep: every cache size and one lane,
    the band holds what the run with that setting then measured (its decode less theirs)."""
    folder, decodes, _ = generated
    pair = (folder / f"{base}-ct.csv", folder / f"{base}-io.csv")
    outcomes = {("io_threads", 1): decodes["lanes1"],
                **{("cache_mb", int(experts * tracegen.SWEEP_EXPERT_MIB)):
                   decodes[f"cache{experts}"] for experts in (16, 32, 48)}}
    what_if = report("report", *pair, "--what-if", "--cache-mb", "12,24,36", "--calibration",
                     folder / "fit.json")["what_if"]
    for (name, value), decode in outcomes.items():
        band = setting(what_if, name, value)["ms_per_token_saved"]
        assert band["point"] is None
        assert band["min"] <= decodes[base] - decode <= band["max"], (name, value, band)


def setting(what_if, name, value):
    return next(s for s in what_if["settings"] if s["setting"] == name and s["value"] == value)


def test_calibration_makes_the_what_if_use_the_users_costs(tmp_path, fit):
    """--calibration FILE: a cache's ms is the I/O now less the MiB it leaves at the cached
    runs' ms per MiB, less their management a lookup; a lane count the runs read at is its MiB
    at their ms per MiB; each widened by the range its repeats show of the run's decode (its log's),
    never above the I/O; overlap at most the share they hid.
    Each is said to be calibrated, and the cache verdict's stake is still the what-if's."""
    target = tmp_path / "fit.json"
    made = {**fit, "ms_per_mib": {**fit["ms_per_mib"], "1": {
        "value": 5.0, "min": 4.0, "max": 6.0, "n": 2, "residual": 1.0}},
        "overlap_hidden_share": {"value": 0.4, "min": 0.2, "max": 0.6, "n": 2, "residual": 0.2}}
    target.write_text(json.dumps(made))
    trace = str(SWEEP / "qwen3moe-l4-greedy-serial-rep1-io.csv")
    r = report("io", trace, "--what-if", "--cache-mb", "2", "--calibration", str(target))
    noise = 2 * fit["repeat_spread"] * logged("serial-rep1", r"decode ([0-9.]+) s/token") * 1e3
    cached = fit["ms_per_mib"]["4 cached"]
    fast, slow = cached["min"], cached["max"]
    managing = fit["management_ms_per_lookup"]
    estimate = r["io_wall_ms_per_token"]["estimate"]
    two = setting(r["what_if"], "cache_mb", 2)
    mib = two["figures"]["mib_per_token"]
    assert two["ms_per_token_saved"] == pytest.approx({
        "point": None, "min": estimate - mib["max"] * slow - managing["max"] * 8 - noise,
        "max": min(estimate - mib["min"] * fast - managing["min"] * 8 + noise, estimate)})
    assert two["method"].startswith("calibrated on 6 runs (--calibration)")
    one = setting(r["what_if"], "io_threads", 1)["ms_per_token_saved"]
    assert one == pytest.approx({"point": None,
                                 "min": estimate - r["mib_per_token"] * 6.0 - noise,
                                 "max": estimate - r["mib_per_token"] * 4.0 + noise})
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
