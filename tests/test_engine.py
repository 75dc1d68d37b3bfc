"""The engine's own end-of-run lines (NAME.log beside a trace, or --engine-log): read anywhere in
the file, each figure beside the tool's with their ratio, within the tolerance (docs/figures.md) on every
real run, and a log of another run said as a warning."""
import json

import pytest

import decode_analyze
from helpers import REAL_TRACES, ROOT, run

DATA = ROOT / "tests" / "data"
LOGGED = sorted(path.stem for path in DATA.glob("*.log"))
SESSION = [REAL_TRACES["qwen3moe-l4-session-ct-node.csv"],
           REAL_TRACES["qwen3moe-l4-session-ct-node-io.csv"]]


def engine_of(*argv):
    result = run(*argv, "--format", "json")
    assert result.code == 0, result.err
    return json.loads(result.out)["engine"], result.err


def command_of(name):
    return "io" if "-io-" in name else "compute"


def test_every_real_trace_has_its_log_here():
    assert len(LOGGED) == 8 and all((DATA / f"{name}.csv").exists() for name in LOGGED)


@pytest.mark.parametrize("name", LOGGED)
def test_the_log_beside_a_trace_is_read_and_every_shared_figure_agrees(name):
    engine, err = engine_of(command_of(name), DATA / f"{name}.csv")
    assert engine["log"] == str(DATA / f"{name}.log")
    compared = {figure: values for figure, values in engine["figures"].items()
                if values["tool"] is not None}
    assert compared and all(values["agrees"] for values in compared.values()), compared
    for values in compared.values():
        assert values["ratio"] is None or values["ratio"] == pytest.approx(
            values["tool"] / values["engine"])
    assert "warning" not in err


def test_the_figures_are_the_logs_in_the_tools_units():
    """The serial io run: `read 204.0 MiB (1.59 MiB/token), decode 0.039 s/token (compute
    0.034 + cache mgmt 0.000 + flash I/O 0.005 s/token, 344 MiB/s)`, 128 tokens."""
    engine, _ = engine_of("io", DATA / "qwen3moe-l4-io-serial.csv")
    figures = engine["figures"]
    assert figures["read_mib"]["engine"] == 204.0 and figures["mib_per_token"]["engine"] == 1.59
    assert figures["decode_ms_per_token"]["engine"] == 39.0
    assert figures["compute_ms_per_token"]["engine"] == 34.0
    # the finer flash I/O: read MiB / MiB/s / tokens (the 4.63 ms of ../shared/traces/README.md)
    assert figures["flash_io_ms_per_token"]["engine"] == pytest.approx(204.0 / 344 / 128 * 1000)
    # the tool's: the trace's decode reads (203.96 MiB) and its I/O estimate
    report = json.loads(run("io", DATA / "qwen3moe-l4-io-serial.csv", "--format", "json").out)
    assert figures["read_mib"]["tool"] == report["read_bytes"] / (1 << 20)
    assert figures["flash_io_ms_per_token"]["tool"] == \
        report["io_wall_ms_per_token"]["estimate"]
    assert figures["decode_ms_per_token"]["tool"] is None  # an io trace has no decode wall


def test_a_session_pair_finds_its_shared_log_and_each_turns_reads_match():
    engine, err = engine_of("report", *SESSION)
    assert engine["log"].endswith("session.log") and "warning" not in err
    turns = engine["turns"]
    assert [turn["turn"] for turn in turns] == [1, 2, 3, 4]
    assert [turn["generated"] for turn in turns] == [64, 48, 64, 32]
    for turn in turns:  # the engine prints one decimal
        assert turn["tool_read_mib"] == pytest.approx(turn["read_mib"], abs=0.05)


def test_a_log_of_another_run_is_a_warning_naming_the_figure():
    engine, err = engine_of("compute", DATA / "qwen3moe-l4-ct-layers.csv", "--engine-log",
                            DATA / "gemma4-l4-ct-node.log")
    assert engine["figures"]["decode_ms_per_token"]["agrees"] is False
    assert "decode_ms_per_token" in err and "another run" in err


def test_no_engine_log_ignores_it_and_both_options_are_refused():
    engine, _ = engine_of("io", DATA / "qwen3moe-l4-io-serial.csv", "--no-engine-log")
    assert engine is None
    result = run("io", DATA / "qwen3moe-l4-io-serial.csv", "--no-engine-log", "--engine-log",
                 DATA / "qwen3moe-l4-io-serial.log")
    assert result.code == 2 and result.err.count("\n") == 1 and "--no-engine-log" in result.err


def test_a_missing_log_is_a_one_line_error(tmp_path):
    result = run("io", DATA / "qwen3moe-l4-io-serial.csv", "--engine-log", tmp_path / "none.log")
    assert result.code == 1 and result.err.count("\n") == 1 and "none.log" in result.err
    assert "Traceback" not in result.err


def test_lines_are_found_anywhere_and_everything_else_is_ignored(tmp_path):
    log = tmp_path / "run.log"
    log.write_bytes(b"llama_model_loader: junk\n\xff\xfe not text\n"
                    b"[info] moe-stream: read 204.0 MiB (1.59 MiB/token), decode 0.039 s/token "
                    b"(compute 0.034 + cache mgmt 0.000 + flash I/O 0.005 s/token, 344 MiB/s)\r\n"
                    b"moe-cache: 13.0% hit, resident 1.9 MiB\n"
                    b"generation: 128 tok")  # cut short: not a line of the grammar
    figures, turns = decode_analyze.read_engine_log(str(log))[1:3]
    assert figures["read_mib"].value == 204.0 and figures["hit_pct"].value == 13.0
    assert "tokens" not in figures and turns == []
    # without the tokens, flash I/O is the engine's printed ms
    assert figures["flash_io_ms_per_token"].value == 5.0


def test_a_selection_of_some_tokens_is_not_compared():
    engine, err = engine_of("compute", DATA / "qwen3moe-l4-ct-node.csv", "--skip", "8")
    assert all(values["tool"] is None for values in engine["figures"].values())
    assert "warning" not in err


def test_the_text_shows_the_log_in_the_header_and_the_figures_beside_each_other():
    out = run("io", DATA / "qwen3moe-l4-io-serial.csv", "--full").out
    assert f"  engine log: {DATA / 'qwen3moe-l4-io-serial.log'}" in out
    line = next(line for line in out.splitlines() if line.lstrip().startswith("read_mib"))
    assert line.split() == ["read_mib", "204.000", "203.958", "1.000", "yes"]


@pytest.mark.parametrize("seed", range(3))
def test_a_mangled_log_never_raises_past_its_figures(tmp_path, seed):
    """Bytes cut, flipped and injected into a real log: figures or none, never a traceback."""
    import random
    rng = random.Random(seed)
    text = bytearray((DATA / "qwen3moe-l4-io-prefetch.log").read_bytes())
    for _ in range(200):
        mangled = bytearray(text)
        for _ in range(rng.randint(1, 8)):
            at = rng.randrange(len(mangled))
            mangled[at:at + rng.randint(0, 3)] = bytes(rng.randrange(256)
                                                        for _ in range(rng.randint(0, 3)))
        log = tmp_path / "run.log"
        log.write_bytes(bytes(mangled))
        figures = decode_analyze.read_engine_log(str(log)).figures
        assert all(value.value >= 0 and value.rounding > 0 for value in figures.values())
    result = run("io", DATA / "qwen3moe-l4-io-prefetch.csv", "--engine-log", log)
    assert result.code == 0 and "Traceback" not in result.err


def test_the_two_log_options_are_refused_before_any_trace_is_read(monkeypatch):
    def read(*args, **kwargs):
        raise AssertionError("a trace was read")
    monkeypatch.setattr(decode_analyze, "fold_file", read)
    result = run("io", DATA / "qwen3moe-l4-io-serial.csv", "--no-engine-log", "--engine-log",
                 DATA / "qwen3moe-l4-io-serial.log")
    assert result.code == 2 and "--no-engine-log" in result.err


def mutated_logs(seed, count):
    """Real logs cut, flipped, with digits grown past any float or int, or lines repeated."""
    import random
    rng = random.Random(seed)
    logs = [path.read_bytes() for path in sorted(DATA.glob("*.log"))]
    for _ in range(count):
        text = bytearray(rng.choice(logs))
        how = rng.randrange(5)
        at = rng.randrange(len(text))
        if how == 0:
            del text[at:]
        elif how == 1:
            text[at] = rng.randrange(256)
        elif how == 2:
            text[at:at] = b"9" * rng.choice((20, 400, 5000))
        elif how == 3:
            text[at:at] = rng.choice((b"\x00", b"\xff\xfe", b"\r", b"\x1b[31m", b"nan", b"-1"))
        else:
            text += text * rng.randrange(1, 50)
        yield bytes(text)


def test_a_mangled_log_is_read_without_a_traceback(tmp_path):
    log = tmp_path / "run.log"
    # the cached run's first 400 lines (its first tokens): the log is what is under test, and
    # a few tokens read each of its figures as the whole trace would
    trace = tmp_path / "prefetch-io.csv"
    trace.write_text("".join((DATA / "qwen3moe-l4-io-prefetch.csv").read_text().splitlines(
        keepends=True)[:400]))
    for text in mutated_logs(seed=24, count=120):
        log.write_bytes(text)
        result = run("io", trace, "--cache", "--engine-log", log, "--format", "json")
        assert result.code == 0, result.err
        assert "Traceback" not in result.err


def test_a_line_with_a_number_past_any_engine_figure_is_no_engine_line(tmp_path):
    # int() refuses 5000 digits (a traceback before the patterns bounded their digits); 400
    # digits are past any float
    huge = "9" * 5000
    log = tmp_path / "huge.log"
    log.write_text(f"turn id={huge}: generated=5 n_prompt=1 cache_hit=13.2% read_mib=1.0\n"
                   f"moe-cache: {huge[:400]}% hit, resident 1.9 MiB\n"
                   f"turn id=1: generated={huge} n_prompt=1 cache_hit=1.0% read_mib=2.0\n")
    figures, turns = decode_analyze.read_engine_log(str(log))[1:3]
    assert figures == {} and turns == []


def test_reading_a_log_is_linear_in_its_length(tmp_path):
    """A line of `compute: , 1 ` repeated backtracked in the patterns' `.*` (6 s at 104 KB,
    97 s at 416 KB); now each line is read at a bounded cost a character, and a line past
    LOG_LINE_MOST is none of the engine's."""
    import time
    log = tmp_path / "hostile.log"
    short = "compute: " + ", 1 " * 1000  # 4 KB: under the line bound, so it is matched
    log.write_text((short + "\n") * 200 + "compute: " + ", 1 " * 104_000 + "\n"
                   "moe-overlap: stall 0.003 s/token\n")
    started = time.process_time()
    figures = decode_analyze.read_engine_log(str(log)).figures
    assert time.process_time() - started < 2.0  # was minutes; linear reading takes ~0.1 s
    assert figures == {"stall_ms_per_token": decode_analyze.EngineValue(3.0, 0.5)}


def test_colour_codes_are_stripped_and_utf16_is_decoded(tmp_path):
    text = ("\x1b[1;32mgeneration:\x1b[0m 128 tokens, 0.039 s/token (25.633 tok/s)\n"
            "moe-stream: read 204.0 MiB (1.59 MiB/token), decode 0.039 s/token (compute 0.034 "
            "+ cache mgmt 0.000 + flash I/O 0.005 s/token, 344 MiB/s)\n")
    for name, data in (("colour.log", text.encode()),
                       ("utf16.log", text.encode("utf-16")),  # with its byte-order mark
                       ("utf16be.log", b"\xfe\xff" + text.encode("utf-16-be"))):
        (tmp_path / name).write_bytes(data)
        figures = decode_analyze.read_engine_log(str(tmp_path / name)).figures
        assert figures["tokens"].value == 128, name
        # the finer flash I/O needs the tokens: 204.0 / 344 / 128 s
        assert figures["flash_io_ms_per_token"].value == pytest.approx(204.0 / 344 / 128 * 1e3)


def test_a_log_of_two_runs_appended_is_read_as_its_last_and_said(tmp_path):
    first = (DATA / "qwen3moe-l4-io-prefetch.log").read_text()  # a cached run
    last = (DATA / "qwen3moe-l4-io-serial.log").read_text()
    log = tmp_path / "appended.log"
    log.write_text(first + last)
    read = decode_analyze.read_engine_log(str(log))
    assert read.runs == 2 and "hit_pct" not in read.figures
    assert read.figures["read_mib"].value == 204.0
    engine, err = engine_of("io", DATA / "qwen3moe-l4-io-serial.csv", "--engine-log", log)
    assert "2 runs" in err and "last run" in err and "another run" not in err
    assert all(figure["agrees"] is not False for figure in engine["figures"].values())


def test_repeated_turn_lines_start_a_new_session():
    text = "".join(f"turn id={turn}: generated=8 n_prompt=4 n_past=12 cache_hit=1.0% "
                   f"read_mib=2.0\n" for turn in (1, 2, 1, 2, 3))
    assert [found[0] for _, found in decode_analyze.engine_lines(text)] == [1, 2, 1, 2, 3]


def test_a_session_log_appended_twice_is_its_last_session(tmp_path):
    log = tmp_path / "twice.log"
    log.write_text((ROOT / "examples" / "session.log").read_text() * 2)
    read = decode_analyze.read_engine_log(str(log))
    assert read.runs == 2 and [turn[0] for turn in read.turns] == [1, 2, 3, 4]


def test_a_log_with_no_engine_line_is_said_to_have_none(tmp_path):
    for name, data in (("binary.log", bytes(range(256)) * 40),
                       ("empty.log", b""),
                       ("other.log", b"llama_model_loader: loaded meta data\n")):
        log = tmp_path / name
        log.write_bytes(data)
        engine, err = engine_of("io", DATA / "qwen3moe-l4-io-serial.csv", "--engine-log", log)
        assert engine["figures"] == {} and "no line of the engine's" in err, name


def test_an_undefined_ratio_is_n_a_not_n_ax_and_the_figures_not_compared_are_named():
    """Issue 50's words: a ratio with no value printed '(n/ax, ...)'; '7 of 10 agree' did not
    name the 3 it left."""
    import decode_analyze
    assert decode_analyze.times(None, ".2f") == "n/a"
    assert decode_analyze.times(2.5, ".2f") == "2.50x"
    from helpers import REAL_TRACES, run
    out = " ".join(run("io", str(REAL_TRACES["qwen3moe-l4-io-serial.csv"])).out.split())
    assert "n/ax" not in out
    assert "the rest the tool derives or lacks: tokens," in out


def test_a_cached_runs_first_screen_gives_its_own_hit_share():
    """Issue 50: a cached run's own result was not on its first screen (io --cache, report):
    its hit share now heads it, the prefill-counted one the engine's own 13.0%."""
    from helpers import REAL_TRACES, ROOT, run
    out = run("io", str(REAL_TRACES["qwen3moe-l4-io-prefetch.csv"]), "--cache").out
    first = " ".join(out.split("\n\n")[0].split())
    assert "this run's cache (cache_mb=1.9): hit 13.3% of the decode's expert lookups (13.0% " \
           "with prefill's), 904 evictions" in first
    assert "moe-cache: 13.0% hit" in (ROOT / "tests/data/qwen3moe-l4-io-prefetch.log").read_text()
    sweep = ROOT / "tests/data/sweep/qwen3moe-l4-greedy-cache1mb"
    report = run("report", f"{sweep}-ct.csv", f"{sweep}-io.csv").out
    assert "this run's cache (cache_mb=0.9): hit 0.0%" in " ".join(
        report.split("\n\n")[0].split())


@pytest.mark.parametrize("figures", ["read_mib=1,043.4", "read_mib=87.8 tok_s=1,234.5"])
def test_a_number_with_thousands_separators_is_said_not_understood(tmp_path, figures):
    """Bug: a turn line's `read_mib=1,043.4` was read as 1 MiB (its number cut at the comma),
    then blamed on the trace. The engine prints no separator: such a line is said unread."""
    log = tmp_path / "session.log"
    log.write_text(f"turn id=1: generated=64 n_prompt=64 n_past=128 cache_hit=13.2% {figures}\n")
    read = decode_analyze.read_engine_log(str(log))
    assert read.turns == [] and [lead for _, lead, _ in read.unread] == ["turn id="]


def test_a_run_without_a_log_makes_no_token_row(monkeypatch, tmp_path):
    """The traced turns are asked of a log that has turns only: a token's row is made on
    demand (its p99 read latency sorted out of its reads), and a run without a log once made
    every token's to compare with no turn: 2% of an io run's instructions."""
    trace = tmp_path / "io.csv"  # no log beside it
    trace.write_bytes((DATA / "qwen3moe-l4-io-serial.csv").read_bytes())
    made = []
    row = decode_analyze.io_token_row
    monkeypatch.setattr(decode_analyze, "io_token_row",
                        lambda *args: made.append(1) or row(*args))
    assert run("io", trace).code == 0
    assert len(made) == decode_analyze.SLOWEST  # the heaviest tokens' rows alone
