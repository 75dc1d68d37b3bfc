"""What a run is, beyond its preamble: the settings declared (--set), implied by the engine's log
or shown by the trace; a cached run's own cache, from the misses its trace holds; the cache
what-if that stays honest on such a trace; and diff's check of a prediction against the run that
tried it. Each figure is checked against a count made here from the trace's rows."""
from collections import Counter, defaultdict

import pytest

import decode_analyze
from helpers import REAL_TRACES, ROOT, report, report_with_warnings, run, trace_rows

DATA = ROOT / "tests" / "data"
PREFETCH = REAL_TRACES["qwen3moe-l4-io-prefetch.csv"]  # --cache-mb 2 --prefetch 1
SERIAL = REAL_TRACES["qwen3moe-l4-io-serial.csv"]
OVERLAP = REAL_TRACES["qwen3moe-l4-io-overlap.csv"]
SESSION = [ROOT / "examples" / "session-ct.csv", ROOT / "examples" / "session-io.csv"]


def demanded(path):
    """{(turn, phase, step): {(layer, expert)}} of the demand reads, counted with csv."""
    found = defaultdict(set)
    for row in trace_rows(path):
        if row["spec"] == "0":
            found[row["turn"], row["phase"], int(row["step"])].add((row["layer"], row["expert"]))
    return found


def by_hand(path):
    """(short (token, layer) pairs, decode hits, decode lookups, prefill lookups): top-2 of 8
    experts, 4 layers, and decode tokens from the prefill's step + 1 to the last step."""
    tokens = demanded(path)
    prefill = sum(len(experts) for (_, phase, _), experts in tokens.items() if phase == "0")
    decode = {key: experts for key, experts in tokens.items() if key[1] == "1"}
    first = max(step for (_, phase, step) in tokens if phase == "0") + 1
    lookups = (max(step for (_, _, step) in decode) - first + 1) * 4 * 2
    short = sum(1 for experts in decode.values() for layer, count in
                Counter(layer for layer, _ in experts).items() if count < 2)
    misses = sum(len(experts) for experts in decode.values())
    return short, lookups - misses, lookups, prefill


def test_a_cached_run_is_told_by_its_own_trace():
    own = report("io", PREFETCH, "--cache")["run_cache"]
    short, hits, lookups, prefill = by_hand(PREFETCH)
    assert short == 136 and lookups == 1024  # the numbers ../shared/traces/README.md gives
    assert own["detected"] and own["top_k"] == 2 and own["layers"] == 4
    assert own["decode_lookups"] == lookups and own["lookups"] == lookups + prefill
    assert own["decode_hit_share"] == hits / lookups == pytest.approx(0.133, abs=5e-4)
    assert own["hit_share"] == hits / (lookups + prefill)
    assert abs(own["hit_share"] * 100 - 13.0) < 0.1  # the engine's, prefill counted


@pytest.mark.parametrize("path", [SERIAL, OVERLAP])
def test_a_run_without_a_cache_shows_none(path):
    """Its trace says so, and its log too: a moe-stream line, no moe-cache line (the engine
    prints one whenever a cache ran), so a compute trace alone knows it as well."""
    r = report("io", path, "--cache", "--no-engine-log")
    assert not r["run_cache"]["detected"] and r["run_cache"]["decode_hit_share"] == 0
    assert r["settings"]["cache"] == {"value": "0", "source": "trace"}
    assert report("io", path, "--cache")["settings"]["cache"] == {"value": "0", "source": "log"}
    assert "moe-cache" not in path.with_suffix(".log").read_text()


def test_the_session_says_it_had_a_cache_and_its_hit_share_per_turn():
    r = report("report", *SESSION)
    engine_turns = r["engine"]["turns"]
    assert r["io"]["settings"]["cache"]["value"] == "1"
    assert len(engine_turns) == 4
    for turn, own in zip(engine_turns, r["io"]["run_cache"]["turns"]):
        assert abs(turn["tool_cache_hit_pct"] - turn["cache_hit_pct"]) < 1
        assert turn["tool_cache_hit_pct"] == own["hit_share"] * 100
    assert "cache: this run had one" in run("report", *SESSION, "--explain").out


def test_a_turn_chosen_is_still_set_beside_its_turn_line():
    """Bug: with --turn 2 every turn line said 'trace ?' and 'traced n/a': turns were matched
    only when the traces held as many as the log. The trace's turn 2 is turn id=3."""
    whole = {t["turn"]: t for t in report("report", *SESSION)["engine"]["turns"]}
    chosen = report("report", *SESSION, "--turn", "2")["engine"]["turns"]
    assert [t["trace_turn"] for t in chosen] == [None, None, 2, None]
    third = next(t for t in chosen if t["turn"] == 3)
    for name in ("tool_read_mib", "tool_cache_hit_pct", "tool_ms_per_token"):
        assert third[name] == whole[3][name], name
    text = " ".join(run("report", *SESSION, "--turn", "2").out.split())
    assert "turn 3 (trace 2): 64 generated, hit 13.5% (traced 12.9), read 88.2 MiB " \
        "(traced 88.2)" in text
    # Bug: the turns --turn left out said "(trace none) ... (traced n/a) ...; not in the
    # traces", which hold them
    assert "turn 1: 64 generated, hit 13.2%, read 87.8 MiB; not selected (--turn)" in text
    assert "not in the traces" not in text and "trace none" not in text


def test_a_cache_that_never_hit_is_simulated_at_its_size_for_the_engines_figures():
    """The sweep's 1 MiB run: its cache (0.9 MiB, 5 experts) served nothing, so its trace holds
    every lookup and shows no cache; the engine's 0.0% hit, 1045 evictions and 1018 re-reads
    had no figure of the tool's beside them. The LRU at its size (5 experts: 0.94 MiB,
    printed 0.9) gives them exactly."""
    ct, io = (ROOT / "tests/data/sweep" / f"qwen3moe-l4-greedy-cache1mb-{kind}.csv"
              for kind in ("ct", "io"))
    r = report_with_warnings("report", ct, io)
    assert r["io"]["meta"]["cache"] == "1" and not r["io"]["run_cache"]["detected"]
    figures = r["engine"]["figures"]
    for name, engine, tool in (("hit_pct", 0.0, 0.0), ("evictions", 1045, 1045),
                               ("rereads", 1018, 1018)):
        assert (figures[name]["engine"], figures[name]["tool"]) == (engine, tool), name
        assert figures[name]["agrees"], name
    # the same from the io trace alone, with the what-if asked
    alone = report_with_warnings("io", io, "--what-if")["engine"]["figures"]
    assert alone["evictions"]["tool"] == 1045
    assert report_with_warnings("io", io)["engine"]["figures"]["evictions"]["tool"] is None


@pytest.mark.parametrize("run_name, experts", [("cache1mb", 5), ("cache2mb", 10),
                                              ("cache4mb", 21)])
def test_a_logs_resident_mib_is_the_whole_experts_nearest_it(run_name, experts):
    """Bug: the log prints the cache's resident MiB to 0.1 (0.9, 1.9, 3.9 for --cache-mb 1, 2,
    4 of 192 KiB experts: 5, 10 and 21 of them, 0.94, 1.88 and 3.94 MiB), and the tool took the
    experts that fit under the printed figure: 4 and 20, one short, so evictions came out at
    1046 and 572 against the engine's 1045 and 571. Now each is the engine's exactly."""
    ct, io = (ROOT / "tests/data/sweep" / f"qwen3moe-l4-greedy-{run_name}-{kind}.csv"
              for kind in ("ct", "io"))
    r = report_with_warnings("report", ct, io)
    figures = r["engine"]["figures"]
    assert figures["evictions"]["tool"] == figures["evictions"]["engine"]
    assert figures["rereads"]["tool"] == figures["rereads"]["engine"]
    own = float(r["io"]["meta"]["cache_mb"])
    at_own = next(s for s in r["what_if"]["settings"] if s["setting"] == "cache_mb"
                  and s["value"] == own)
    assert at_own["figures"]["experts"]["point"] == experts
    expert_mib = 196608 / (1 << 20)
    assert round(experts * expert_mib, 1) == own  # what the log printed
    # a whole size is the engine's --cache-mb: the experts that fit under it
    whole = report_with_warnings("report", ct, io, "--cache-mb", "1,2,4")["what_if"]
    assert {s["value"]: s["figures"]["experts"]["point"] for s in whole["settings"]
            if s["setting"] == "cache_mb" and s["value"]} == {1: 5, 2: 10, 4: 21}


def test_the_engines_cache_figures_agree_on_the_cached_run():
    figures = report("io", PREFETCH, "--cache")["engine"]["figures"]
    for name, engine in (("hit_pct", 13.0), ("evictions", 904), ("rereads", 884)):
        assert figures[name]["engine"] == engine and figures[name]["agrees"], name
    assert figures["evictions"]["tool"] == 904  # 914 lookups traced - 10 experts resident


def test_a_cached_runs_what_if_never_simulates_its_misses():
    r = report("io", PREFETCH, "--what-if")
    assert r["reuse"]["lru"] == []
    sizes = {s["value"]: s for s in r["what_if"]["settings"] if s["setting"] == "cache_mb"}
    own, ceiling = r["run_cache"], 1 - r["reuse"]["experts"] / r["run_cache"]["lookups"]
    # the cache off, its own size (the log's resident MiB), twice that, all 32
    assert sorted(sizes) == [0, 1.9, 3.8, 6]
    # off, every lookup is read: its MiB over the share it missed
    assert sizes[0]["figures"]["mib_per_token"]["point"] == pytest.approx(
        r["mib_per_token"] / (1 - own["hit_share"]))
    assert sizes[1.9]["figures"]["hit_share"] == {"point": own["hit_share"],
                                                  "min": own["hit_share"],
                                                  "max": own["hit_share"]}
    assert sizes[3.8]["figures"]["hit_share"] == {"point": None, "min": own["hit_share"],
                                                  "max": ceiling}
    assert sizes[6]["figures"]["hit_share"]["point"] == ceiling
    assert sizes[6]["figures"]["experts_share"] == 1.0
    offered = {(s["setting"], s["value"]) for s in r["what_if"]["settings"]}
    assert ("prefetch", 1) not in offered and ("prefetch", 0) in offered
    verdict = next(v for v in r["verdicts"] if v["id"] == "cache")
    assert verdict["flagged"] is None and "13.0%" in verdict["text"]


def test_a_declared_setting_joins_the_preamble_and_marks_its_source():
    r = report("io", SERIAL, "--what-if", "--set", "mem_limit_mb=3", "--set", "cache_mb=2",
               "--no-engine-log")
    assert r["meta"]["mem_limit_mb"] == "3" and r["meta"]["cache_mb"] == "2"
    assert r["settings"]["mem_limit_mb"] == {"value": "3", "source": "declared"}
    assert {s["value"]: s["fits"] for s in r["what_if"]["settings"]
            if s["setting"] == "cache_mb"} == {0: None, 2: None, 3: None}  # 0: the cache off
    # 6 MiB of experts: 2 and 3 fit
    bigger = report("io", SERIAL, "--cache-mb", "2,4", "--set", "mem_limit_mb=3")
    fits = {s["value"]: s["fits"] for s in bigger["what_if"]["settings"]
            if s["setting"] == "cache_mb"}
    assert fits == {2: None, 4: False}
    header = run("io", SERIAL, "--set", "mem_limit_mb=3").out.splitlines()[3]
    assert "mem_limit_mb=3 (declared)" in header


def test_cache_0_declared_overrides_what_the_trace_shows():
    """The trace's cache is inferred (tokens that read fewer experts than the router picks): a
    router that picks fewer by design is declared cache=0, and every part reads it, said once
    beside what it overrides."""
    r = report_with_warnings("io", PREFETCH, "--cache", "--set", "cache=0")
    assert r["run_cache"]["detected"] and r["settings"]["cache"]["source"] == "declared"
    assert r["reuse"]["lru"]  # simulated, as the user said there was no cache
    said = [w for w in r["warnings"] if "no cache, as declared" in w]
    assert len(said) == 1 and "the trace's tokens read fewer experts than the router picks" in \
        said[0] and said[0].endswith("the declaration stands")


def test_cache_mb_0_declared_is_no_cache_everywhere(tmp_path):
    """Bug: --set cache_mb=0 on a cached run was shown beside 'this run's cache (cache_mb=0):
    hit 13.3%' and the log's cache=1, unsaid. cache_mb=0 declared is cache=0: the log's cache
    yields, said once, and no part of the report calls the run cached."""
    ct, io = (ROOT / "tests" / "data" / "sweep" / f"qwen3moe-l4-greedy-cache2mb-{part}.csv"
              for part in ("ct", "io"))
    r = report_with_warnings("report", ct, io, "--set", "cache_mb=0")
    said = [w for w in r["warnings"] if "no cache, as declared" in w]
    assert len(said) == 1 and "cache=1 (log)" in said[0]
    assert "cache" not in r["io"]["meta"] and r["io"]["meta"]["cache_mb"] == "0"
    assert r["pair"]["cache_mgmt_ms_per_token"] == 0.0
    text = run("report", ct, io, "--set", "cache_mb=0").out
    assert "this run's cache" not in text and "cache=1" not in text


@pytest.mark.parametrize("bad", ["cache_mb", "=2", "Cache=1", "cache=a b", "k=" + "9" * 41])
def test_a_malformed_setting_is_a_usage_error(bad, capsys):
    assert run("io", SERIAL, "--set", bad).code == 2  # argparse's own message, on stderr
    assert "argument --set: expected KEY=VALUE" in capsys.readouterr().err


def test_the_log_implies_settings_and_a_contradiction_is_a_warning(tmp_path):
    log = decode_analyze.read_engine_log(str(DATA / "qwen3moe-l4-io-prefetch.log"))
    reading = decode_analyze.Reading(decode_analyze.Selection(), False, None, 1)
    settings = decode_analyze.reading_with_log(reading, log).settings
    assert [(s.key, s.value, s.source) for s in settings] == [
        ("cache_mb", "1.9", "log"), ("cache", "1", "log"), ("moe_stream", "1", "log"),
        ("prefetch", "1", "log")]
    overlapped = DATA / "qwen3moe-l4-io-overlap.log"
    r = report_with_warnings("io", SERIAL, "--engine-log", overlapped)
    assert r["meta"]["overlap"] == "0" and "overlap" not in r["settings"]
    assert any("the log says overlap=1, the preamble overlap=0" in warning
               for warning in r["warnings"])


def test_summary_shows_the_settings_that_tell_the_runs_apart():
    r = report("summary", SERIAL, PREFETCH, OVERLAP)
    assert r["keys"] == ["overlap", "cache", "cache_mb", "prefetch"]
    assert [row["settings"] for row in r["runs"]] == [
        {"overlap": "0", "cache": "0", "cache_mb": None, "prefetch": None},
        {"overlap": "0", "cache": "1", "cache_mb": "1.9", "prefetch": "1"},
        {"overlap": "1", "cache": "0", "cache_mb": None, "prefetch": None}]
    serial, prefetch, _ = r["runs"]
    assert prefetch["hit_share"] == report("io", PREFETCH, "--cache")["run_cache"]["hit_share"]
    assert prefetch["engine_hit_share"] == 0.13 and prefetch["engine_ms_per_token"] == 16.0
    assert serial["engine_disagrees"] == []
    without = report("summary", SERIAL, PREFETCH, "--no-engine-log")
    assert without["runs"][1]["engine_ms_per_token"] is None
    assert "cache_mb" not in without["keys"]


def test_diff_checks_the_bases_prediction_against_the_run_that_tried_it():
    r = report("diff", SERIAL, PREFETCH)
    rows = {row["figure"]: row for row in r["prediction_check"]}
    assert {row["setting"] for row in r["prediction_check"]} == {"cache_mb"}
    hit, mib = rows["hit_share"], rows["mib_per_token"]
    predicted = report("io", SERIAL, "--cache-mb", "2")["what_if"]["settings"]
    at_two = next(s for s in predicted if s["setting"] == "cache_mb")["figures"]
    assert hit["value"] == 1.9 and hit["predicted"] == at_two["hit_share"]  # 1.9 MiB: 10 too
    assert round(hit["predicted"]["point"], 3) == 0.130 and hit["within"]
    assert hit["measured"] == report("io", PREFETCH, "--cache")["run_cache"]["hit_share"]
    assert round(mib["predicted"]["point"], 2) == 1.38 and mib["within"]
    assert mib["measured"] == report("io", PREFETCH)["mib_per_token"]
    assert rows["io_wall_ms_per_token"]["unit"] == "ms"
    assert "did the prediction hold?" in run("diff", SERIAL, PREFETCH).out


def test_no_prediction_without_a_changed_setting():
    assert report("diff", SERIAL, SERIAL)["prediction_check"] == []


@pytest.mark.parametrize("measured, expected", [(1.0, True), (1.05, True), (1.06, False),
                                                 (0.5, True), (0.47, False), (None, None)])
def test_within_is_the_band_widened_by_the_tolerance(measured, expected):
    band = decode_analyze.FIGURE(point=None, min=0.5, max=1.0)
    assert decode_analyze.held(band, measured) is expected


# ── speculative decoding: per generated position wherever the figures are per token ──
SPECULATIVE = [DATA / "synthetic" / "speculative-ct.csv", DATA / "synthetic" / "speculative-io.csv"]


def test_a_speculative_pairs_what_if_and_summary_are_per_generated_position():
    pair = report("report", *SPECULATIVE)
    decodes = pair["compute"]["decodes"]
    per_decode = decodes["positions"] / decodes["decodes"]
    assert per_decode == 2  # 7 decodes, 14 positions
    alone = report("io", SPECULATIVE[1], "--what-if")["what_if"]["settings"]
    for mine, theirs in zip(pair["what_if"]["settings"], alone):
        assert mine["setting"] == theirs["setting"]
        for bound in ("min", "max"):
            theirs_ms = theirs["ms_per_token_saved"][bound]
            assert mine["ms_per_token_saved"][bound] == (
                None if theirs_ms is None else pytest.approx(
                    theirs_ms * pair["io"]["tokens"] / decodes["positions"]))
    assert "what would it buy (per generated position" in run("report", *SPECULATIVE).out
    row = report("summary", "+".join(map(str, SPECULATIVE)))["runs"][0]
    assert row["positions_per_decode"] == per_decode
    assert row["decode_ms_per_token"] == pytest.approx(
        pair["compute"]["ms_per_token"] / per_decode)
    assert row["mib_per_token"] == pytest.approx(pair["pair"]["io_mib_per_token"] / per_decode)
    assert row["decode_ms_p50"] == pair["compute"]["token_ms"]["p50"]  # a decode's spread


def test_a_speculative_stake_gives_its_per_position_figures():
    pair = report("report", *SPECULATIVE)
    stake = next(v["text"] for v in pair["pair"]["verdicts"] if v["id"] == "cache")
    decode = pair["pair"]["decode_ms_per_token"]
    assert f"of {decode / 2:.2f} ms)" in stake and "per generated position" in stake


def test_diff_compares_ms_per_generated_position():
    r = report("diff", SPECULATIVE[0], SPECULATIVE[0])
    rows = [row for section in r["sections"] for row in section["rows"]]
    found = next(row for row in rows if row["name"] == "ms per generated position")
    assert found["base"] == report("compute", SPECULATIVE[0])["decodes"]["ms_per_position"]


def test_a_speculative_router_verdict_gives_its_per_position_ms():
    pair = report("report", *SPECULATIVE)
    router = next(v["text"] for v in pair["pair"]["verdicts"] if v["id"] == "router_wait")
    assert f"(per generated position {pair['pair']['router_ms_per_token'] / 2:.2f} ms)" in router


@pytest.mark.parametrize("compressed", ["compute", "io"])
def test_summary_pairs_a_run_whatever_its_files_compression(tmp_path, compressed):
    import gzip
    sources = {"compute": REAL_TRACES["qwen3moe-l4-ct-node.csv"], "io": SERIAL}
    paths = []
    for kind, source in sources.items():
        path = tmp_path / f"x-pair-{'ct' if kind == 'compute' else 'io'}.csv"
        if kind == compressed:
            path = path.with_name(path.name + ".gz")
            path.write_bytes(gzip.compress(source.read_bytes()))
        else:
            path.write_bytes(source.read_bytes())
        paths.append(path)
    (row,) = report("summary", *reversed(paths))["runs"]
    assert row["kind"] == "report" and row["mib_per_token"] == pytest.approx(
        report("report", *sources.values())["pair"]["io_mib_per_token"])


@pytest.mark.parametrize("declared, said", [
    ("cache_mb=abc", "cache_mb takes MiB"), ("cache_mb=-1", "cache_mb takes MiB"),
    ("cache_mb=nan", "cache_mb takes MiB"), ("cache_mb=inf", "cache_mb takes MiB"),
    ("cache_mb=1e308", "cache_mb takes MiB"), ("mem_limit_mb=lots", "mem_limit_mb takes MiB"),
    ("mem_limit_mb=0", "mem_limit_mb takes MiB"), ("cores=0", "cores takes a whole number"),
    ("io_threads=2.5", "io_threads takes a whole number"), ("overlap=yes", "overlap takes 0 or 1"),
    ("cache_mb", "expected KEY=VALUE")])
def test_a_known_setting_takes_a_value_it_can_read_or_is_a_usage_error(declared, said, capsys):
    """--set took anything: cache_mb=abc, -1, nan, inf, 1e308, mem_limit_mb=lots and cores=0
    were shown as declared and then ignored."""
    for command in (["io", SERIAL], ["summary", SERIAL], ["diff", SERIAL, OVERLAP]):
        result = run(*command, "--set", declared)
        assert result.code == 2, (command, declared)
        assert said in capsys.readouterr().err, (command, declared)


def test_a_setting_given_twice_with_two_values_is_refused_and_an_unknown_one_said():
    twice = run("io", SERIAL, "--set", "cache_mb=2", "--set", "cache_mb=4")
    assert twice.code == 2 and "--set cache_mb: given as 2 and 4: give one" in twice.err
    assert run("io", SERIAL, "--set", "cache_mb=2", "--set", "cache_mb=2").code == 0
    unknown = run("io", SERIAL, "--set", "colour=blue", "--format", "json")
    assert unknown.code == 0 and "--set colour: not a setting this tool reads" in unknown.err
    assert unknown.json["settings"]["colour"] == {"value": "blue", "source": "declared"}


def test_summary_and_diff_take_set_for_every_run():
    """A router that picks fewer than top-k by design needs cache=0 in summary and diff too."""
    r = report_with_warnings("summary", SERIAL, PREFETCH, "--set", "cache=0")
    assert [row["settings"].get("cache", r["common"].get("cache")) for row in r["runs"]] == \
        ["0", "0"]
    # declared the same, but reading other bytes: two rows, said
    assert any("not repeats, listed apart" in warning for warning in r["warnings"])
    diff = report_with_warnings("diff", SERIAL, PREFETCH, "--set", "mem_limit_mb=64")
    assert all(change["key"] != "mem_limit_mb" for found in diff["preamble_changes"]
               for change in found)  # declared for both sides: no change
    io = report_with_warnings("io", PREFETCH, "--set", "cache=0", "--what-if")
    assert io["settings"]["cache"]["source"] == "declared"


def test_declared_lanes_below_the_traces_are_said_and_the_traces_stand():
    """io --set io_threads=2 on a 4-lane trace put the estimate (4.30) below its own minimum
    (7.13) and said 'one lane' beside a lane table of 4."""
    plain = report("io", SERIAL)
    result = run("io", SERIAL, "--set", "io_threads=2", "--format", "json")
    assert result.code == 0
    assert "io_threads=2 declared, but the trace read on 4 lanes: the trace's lanes stand" in \
        result.err
    declared = result.json
    assert declared["lanes"] == 4 and len(declared["by_lane"]) == 4
    assert declared["io_wall_ms_per_token"] == plain["io_wall_ms_per_token"]
    wall = declared["io_wall_ms_per_token"]
    assert wall["min"] <= wall["estimate"] <= wall["max"]


def test_a_declared_text_value_has_no_unit_in_csv():
    """--set ms=3 gave the unit ms, --set k=2 experts, to cells that are text."""
    out = run("io", SERIAL, "--set", "ms=3", "--set", "k=2", "--format", "csv").out
    cells = [line.split(",") for line in out.splitlines()]
    values = [row for row in cells if row[0] in ("meta", "settings.ms", "settings.k")]
    assert values and all(row[-1] == "" for row in values if row[4]), values


@pytest.mark.parametrize("key", ["prefetch", "ngram"])
def test_a_log_setting_the_whole_trace_refutes_is_dropped_and_said(tmp_path, key):
    """Bug: a log's prefetch with no speculative read in the trace, or its ngram with no decode
    covering two positions, was kept as a setting, unsaid. Over the whole decode the trace's
    word stands; a selection of some tokens refutes nothing."""
    lines = {"prefetch": "moe-prefetch: 20.0 MiB speculative, 3/40 experts useful (7%)\n",
             "ngram": "ngram: 114/114 drafts accepted (100.0%), 3.48 tokens per verify decode "
                      "(46 decodes for 160 tokens)\n"}
    source = SERIAL if key == "prefetch" else DATA / "qwen3moe-l4-ct-node.csv"
    trace = tmp_path / ("run-io.csv" if key == "prefetch" else "run-ct.csv")
    trace.write_bytes(source.read_bytes())
    log = (DATA / "qwen3moe-l4-io-serial.log").read_text() + lines[key]
    (tmp_path / "run.log").write_text(log)
    command = "io" if key == "prefetch" else "compute"
    r = report_with_warnings(command, trace, "--engine-log", tmp_path / "run.log")
    assert key not in r["settings"] and key not in r["meta"]
    said = [w for w in r["warnings"] if f"the engine's log says {key}=1" in w]
    assert len(said) == 1 and said[0].endswith("the trace's word stands")
    some = report_with_warnings(command, trace, "--engine-log", tmp_path / "run.log",
                                "--steps", "64:80")
    assert some["settings"][key] == {"value": "1", "source": "log"}
