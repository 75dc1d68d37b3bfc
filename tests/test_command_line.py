"""The command line: every command declared once (decode_analyze.COMMANDS), the parser, the
help, the docstring, the dispatch and the output checks following from it; --output written
atomically and never over an input; exit statuses; a signal ends every process of a run."""
import json
import os
import re
import signal
import stat
import subprocess
import sys
import time

import pytest

import decode_analyze as da
import tracegen
from helpers import REAL_TRACES, ROOT, TOOL, ct_text, error_of, run


SESSION_CT = ROOT / "examples" / "session-ct.csv"


def help_of(capsys, *argv):
    assert run(*argv, "--help").code == 0
    return capsys.readouterr().out  # argparse prints its help on sys.stdout


GOOD = ["0,1,4,0,0,MUL_MAT,Qcur-0,1000000,0", "0,1,4,1,0,ADD,l_out-0,3000000,2"]


def _is_zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


def command_list():
    """The commands, a line each, as the module docstring and the README list them."""
    return "\n".join(f"  {command.synopsis:<18} {command.summary}"
                     for command in da.COMMANDS.values())


def test_the_module_docstring_lists_every_command_as_the_registry_does():
    assert command_list() in da.__doc__
    assert [line.split()[0] for line in command_list().splitlines()] == list(da.COMMANDS)


def test_the_help_lists_every_command_with_its_summary(capsys):
    text = help_of(capsys)
    assert max(map(len, text.splitlines())) <= da.TEXT_WIDTH
    for command in da.COMMANDS.values():
        assert command.name in text and command.summary in text
    assert ", ".join(f"{status} {meaning}" for status, meaning in da.EXIT_STATUS.items()) in \
        " ".join(text.split())


def test_each_command_draws_only_the_pictures_it_declares(capsys):
    for command in da.COMMANDS.values():
        help_text = help_of(capsys, command.name)
        assert ("--svg" in help_text) == ("svg" in command.pictures)
        assert ("--perfetto" in help_text) == ("perfetto" in command.pictures)


def test_every_exit_status_is_in_the_usage_page():
    usage = (ROOT / "docs" / "usage.md").read_text(encoding="utf-8")
    for status, meaning in da.EXIT_STATUS.items():
        assert f"{status} {meaning}" in " ".join(usage.split())


def test_a_new_command_is_one_registry_entry(monkeypatch, capsys):
    """A command added to the registry is parsed, dispatched, drawn by its report kind's
    layout in every format, and its inputs are guarded against being written over."""
    def analyze(args, reading):
        return da.analyze_compute(args.trace, reading)
    added = da.Command("again", "again CT", "compute, once more", "The compute report again.",
                       (da.Input("trace", "compute", "a compute trace"),), (), analyze, ())
    monkeypatch.setitem(da.COMMANDS, "again", added)
    assert run("again", SESSION_CT, "--format", "json").json["ms_per_token"] == \
        run("compute", SESSION_CT, "--format", "json").json["ms_per_token"]
    assert run("again", SESSION_CT).out.splitlines()[1:] == \
        run("compute", SESSION_CT, "--no-engine-log").out.splitlines()[1:]  # again has no log
    assert "is the input" in error_of("again", SESSION_CT, "-o", SESSION_CT)
    assert "compute, once more" in help_of(capsys)


def test_stdin_for_two_inputs_is_refused_by_every_command_that_has_two():
    for command in da.COMMANDS.values():
        if len(command.inputs) > 1:
            assert "stdin can carry only one of the inputs" in error_of(
                command.name, "-", "-")


def test_an_output_over_any_input_is_refused(tmp_path):
    copy = tmp_path / "ct.csv"
    copy.write_bytes(SESSION_CT.read_bytes())
    for argv in (["compute", copy, "-o", copy], ["compute", copy, "--svg", copy],
                 ["diff", SESSION_CT, copy, "-o", copy],
                 ["report", copy, ROOT / "examples" / "session-io.csv", "--perfetto", copy]):
        assert "is the input" in error_of(*argv)
    assert copy.read_bytes() == SESSION_CT.read_bytes()


def test_output_writes_the_report_and_nothing_else(write, tmp_path):
    target = tmp_path / "report.json"
    result = run("compute", write(ct_text(GOOD)), "--format", "json", "--output", target)
    assert result.code == 0 and result.out == "" and result.err == ""
    assert json.loads(target.read_text(encoding="utf-8"))["ms_per_token"] == 4.0
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".decode-analyze-")] == []


def test_output_replaces_an_old_report_whole(write, tmp_path):
    target = tmp_path / "report.txt"
    target.write_text("an old report\n")
    assert run("compute", write(ct_text(GOOD)), "-o", target).code == 0
    text = target.read_text(encoding="utf-8")
    assert text.startswith("decode-analyze ") and "an old report" not in text


def test_text_to_a_file_is_utf8(tmp_path):
    target = tmp_path / "r.txt"
    assert run("compute", REAL_TRACES["qwen3moe-l4-ct-node.csv"], "-o", target).code == 0
    assert "▁" in target.read_text(encoding="utf-8") or "█" in target.read_text(encoding="utf-8")


def test_an_input_trace_is_never_overwritten(write):
    trace = write(ct_text(GOOD))
    before = trace.read_bytes()
    line = error_of("compute", trace, "--output", trace)
    assert line.endswith(f"{trace}: is the input {trace}: not writing over it")
    assert trace.read_bytes() == before


def test_an_unwritable_folder_is_one_line(write, tmp_path):
    target = tmp_path / "missing" / "r.json"
    line = error_of("compute", write(ct_text(GOOD)), "--output", target)
    assert line.endswith(f"{target}: cannot write: No such file or directory")
    assert not os.path.exists(target)


def test_the_file_gets_the_usual_permissions(write, tmp_path):
    import os
    trace = write(ct_text(GOOD))
    target = tmp_path / "report.md"
    mask = os.umask(0o022)
    try:
        assert run("compute", trace, "--format", "markdown", "-o", target).code == 0
    finally:
        os.umask(mask)
    assert target.stat().st_mode & 0o777 == 0o644


@pytest.mark.skipif(not hasattr(os, "fork") or not os.path.isdir("/proc"), reason="Linux only")
def test_sigterm_ends_both_processes(tmp_path):
    path = tracegen.write(tmp_path / "ct.csv", tracegen.compute_lines(n_layer=48,
                                                                      decode_tokens=160))
    assert path.stat().st_size > 16 << 20
    child = subprocess.Popen([*TOOL, "compute",
                              str(path), "--jobs", "2"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    workers = []
    deadline = time.time() + 20
    while not workers and time.time() < deadline:
        time.sleep(0.05)
        try:
            with open(f"/proc/{child.pid}/task/{child.pid}/children") as f:
                workers = [int(pid) for pid in f.read().split()]
        except OSError:
            break
    assert workers, "the run never started its second process"
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=20)
    assert child.returncode == 143 and err == b""
    time.sleep(0.2)
    for pid in workers:
        assert not os.path.exists(f"/proc/{pid}") or _is_zombie(pid)


def test_the_readme_lists_the_commands_as_the_registry_does():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "```\n" + command_list() + "\n```" in readme


def test_every_name_in_the_design_pages_layout_map_exists():
    import trace_io
    design = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    layout = design.partition("## Layout")[2].partition("\nA figure is one field")[0]
    names = set(re.findall(r"`([A-Za-z_][\w.]*)`", layout)) - {"decode_analyze.py"}
    assert len(names) > 40
    for name in names:
        first, *rest = name.split(".")
        if first == "trace_io":
            target = trace_io
        else:
            target = da if hasattr(da, first) else trace_io
            rest = [first, *rest]
        for part in rest:
            assert hasattr(target, part), name
            target = getattr(target, part)


def test_the_readme_is_read_in_five_minutes():
    """At most 200 lines, none over 100 columns; the first command in the first 15 lines and
    install in the first 30; no formula symbol and no name from the code; every page of docs/
    linked (the reference lives there)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= 200
    assert [line for line in lines if len(line) > 100] == []
    assert any(line.startswith("python3 -m decode_analyze report") for line in lines[:15])
    assert any("pip install" in line for line in lines[:30])
    assert not set("≤≥·×⌊⌈") & set(text)
    quoted = set(re.findall(r"`([A-Za-z_][\w.]*)`", text))
    assert not [name for name in quoted if "_" in name and hasattr(da, name)], quoted
    for page in (ROOT / "docs").glob("*.md"):
        assert f"(docs/{page.name})" in text, page.name


def test_the_readmes_first_command_runs_as_printed_from_cached_bytecode(tmp_path):
    """`python3 -m decode_analyze` in the clone prints the reviewed golden, and its second run
    reads the bytecode its first wrote (a script's is compiled on every run: 0.1 s of io's
    0.6)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    command = next(line for line in readme if line.startswith("python3 -m decode_analyze"))
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
           "PYTHONPYCACHEPREFIX": str(tmp_path)}  # the clone's own folder stays clean
    argv = [sys.executable, *command.split()[1:]]
    printed = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, check=True).stdout
    golden = (ROOT / "tests" / "golden" / "report-session.txt").read_bytes()
    assert printed == golden
    cached, = tmp_path.rglob("decode_analyze.*.pyc")
    written = cached.stat().st_mtime_ns
    subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, check=True)
    assert cached.stat().st_mtime_ns == written


def test_the_readme_excerpts_are_what_the_tool_prints():
    """Each excerpt's lines are lines of the reviewed golden output it names, in their order;
    the first is the first screen whole: the golden's lines up to a blank one, none cut."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    excerpts = re.findall(r"<!-- excerpt of tests/golden/(\S+):[^\n]*-->\n```text\n(.*?)```",
                          readme, re.S)
    assert len(excerpts) >= 6
    for name, excerpt in excerpts:
        golden = (ROOT / "tests" / "golden" / name).read_text(encoding="utf-8").splitlines()
        at = 0
        for line in excerpt.splitlines():
            assert line in golden[at:], (name, line)
            at = golden.index(line, at) + 1
    name, first = excerpts[0]
    golden = (ROOT / "tests" / "golden" / name).read_text(encoding="utf-8").splitlines()
    shown = first.splitlines()
    assert name == "report-session.txt" and golden[:len(shown)] == shown
    assert golden[len(shown)] == "" and len(shown) <= 30


def test_numbers_on_the_command_line_are_plain_ascii_with_one_message(capsys):
    """As trace values are: '٣:٥' (Arabic-Indic digits) is no step range, and --jobs 0 and
    --jobs -1 are refused with the same words; so is an empty step range (5:3)."""
    for argv, words in ((["--steps", "\u0663:\u0665"], "expected A:B with A <= B"),
                        (["--steps", "5:3"], "expected A:B with A <= B (either side optional), "
                                             "got '5:3'"),
                        (["--jobs", "0"], "expected a whole number >= 1, got '0'"),
                        (["--jobs", "-1"], "expected a whole number >= 1, got '-1'"),
                        (["--jobs", "\u0662"], "expected a whole number >= 1"),
                        (["--turn", " 1"], "expected a whole number >= 0")):
        assert run("compute", SESSION_CT, *argv).code == 2
        assert words in capsys.readouterr().err, argv
    assert run("diff", SESSION_CT, SESSION_CT, "--alpha", "nan").code == 2
    assert run("compute", SESSION_CT, "--steps", "70:", "--format", "json").json[
        "selection"]["steps"] == [70, None]


def test_an_output_onto_a_fifo_is_written_into_it_not_replaced(tmp_path):
    import os
    import threading
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()), daemon=True)
    reader.start()
    result = run("compute", SESSION_CT, "--format", "json", "-o", fifo)
    reader.join(10)
    assert result.code == 0 and got and json.loads(got[0])["kind"] == "compute"
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_an_output_onto_a_device_is_a_plain_write():
    """/dev/null, on every POSIX machine, is written to, never replaced by a file (it stays a
    character device and the run succeeds)."""
    assert run("compute", SESSION_CT, "-o", "/dev/null").code == 0
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system "
                    "(Linux has one): the full-disk error is then untestable")
def test_an_output_onto_a_full_device_is_one_line():
    assert "No space left on device" in error_of("compute", SESSION_CT, "-o", "/dev/full")
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_an_output_through_a_symlink_replaces_its_target(tmp_path):
    target, link = tmp_path / "report.json", tmp_path / "link.json"
    target.write_text("old")
    link.symlink_to(target)
    assert run("compute", SESSION_CT, "--format", "json", "-o", link).code == 0
    assert link.is_symlink() and json.loads(target.read_text())["kind"] == "compute"


def test_two_outputs_on_one_path_and_empty_paths_are_usage_errors(tmp_path, capsys):
    svg = tmp_path / "x.svg"
    for argv, words in ((["-o", svg, "--svg", svg], "--output and --svg are both"),
                        (["--svg", svg, "--perfetto", svg], "--svg and --perfetto are both"),
                        (["--svg", ""], "--svg: an empty path"),
                        (["-o", ""], "--output: an empty path")):
        result = run("compute", SESSION_CT, *argv)
        assert result.code == 2 and words in result.err, argv
    assert not svg.exists()


@pytest.mark.parametrize("unbuffered", ["", "1"])
def test_output_is_written_whole_or_the_run_fails(unbuffered):
    """A reader that goes away after 10 bytes: exit 141, whatever PYTHONUNBUFFERED says (with
    it, CPython's unbuffered stdout took a short write to the pipe as whole: exit 0, the rest
    dropped)."""
    env = {**os.environ, "PYTHONUNBUFFERED": unbuffered} if unbuffered else \
        {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    child = subprocess.Popen([*TOOL, "report",
                              SESSION_CT, ROOT / "examples" / "session-io.csv", "--format", "json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert child.stdout.read(10) == b'{\n "schema'
    child.stdout.close()
    assert child.wait(60) == 141
    assert child.stderr.read() == b""


@pytest.mark.parametrize("flag", ["-o", "--svg", "--engine-log-too"])
def test_an_output_over_the_log_a_run_reads_is_refused(tmp_path, flag):
    """`io run-io.csv -o run-io.log` replaced the log it had just read (exit 0); so did
    --engine-log L -o L, --svg, diff -o and summary -o."""
    trace = tmp_path / "run-io.csv"
    trace.write_bytes((REAL_TRACES["qwen3moe-l4-io-serial.csv"]).read_bytes())
    beside, named = tmp_path / "run-io.log", tmp_path / "named.log"
    for log in (beside, named):
        log.write_bytes((ROOT / "tests" / "data" / "qwen3moe-l4-io-serial.log").read_bytes())
    kept = beside.read_bytes()
    if flag == "--engine-log-too":
        argv = [["io", trace, "--engine-log", named, "-o", named]]
        target = named
    else:
        argv = [["io", trace, flag, beside], ["diff", trace, trace, flag, beside],
                ["summary", trace, flag, beside]]
        target = beside
    for each in argv:
        if each[0] == "summary" and flag == "--svg":
            continue  # summary draws no picture
        result = run(*each)
        assert result.code == 1 and "engine log" in result.err and "not writing over" in \
            result.err, each
        assert target.read_bytes() == kept


def test_a_sweep_runs_log_is_found_by_the_runs_name(tmp_path):
    """sweep/x-ct.csv and sweep/x-io.csv share sweep/x.log: each alone finds it."""
    assert da.log_beside([str(tmp_path / "x-io.csv")]) is None
    (tmp_path / "x.log").write_text("generation: 128 tokens, 0.009 s/token\n")
    assert da.log_beside([str(tmp_path / "x-io.csv")]) == str(tmp_path / "x.log")
    assert da.log_beside([str(tmp_path / "x_ct.csv.gz")]) == str(tmp_path / "x.log")
    assert da.log_beside([str(tmp_path / "x-io-serial.csv")]) is None


@pytest.mark.parametrize("argv", [["compute", "-", "-o", "{trace}"],
                                  ["compute", "-", "--svg", "{link}"],
                                  ["report", "-", "{io}", "--svg", "{hard}"]])
def test_stdin_redirected_from_a_file_is_never_written_over(tmp_path, argv):
    """`compute - -o ct.csv < ct.csv` replaced the trace with its report: stdin's own file
    (fstat: its device and inode) is an input, however the output names it (a symlink, a hard
    link); the run is refused and the file kept."""
    import subprocess
    trace = tmp_path / "ct.csv"
    original = (ROOT / "tests/data/sweep/qwen3moe-l4-greedy-serial-rep1-ct.csv").read_bytes()
    trace.write_bytes(original)
    (tmp_path / "link.csv").symlink_to(trace)
    os.link(trace, tmp_path / "hard.csv")
    io = ROOT / "tests/data/sweep/qwen3moe-l4-greedy-serial-rep1-io.csv"
    names = {"trace": trace, "link": tmp_path / "link.csv", "hard": tmp_path / "hard.csv",
             "io": io}
    with open(trace, "rb") as stdin:
        done = subprocess.run([*TOOL, *(part.format(**names) for part in argv)], stdin=stdin,
                              capture_output=True, text=True)
    assert done.returncode == 1 and "is the input <stdin>: not writing over it" in done.stderr
    assert trace.read_bytes() == original


def under_terminal(*argv, quiet_env=None):
    """(exit status, stdout, what stderr showed) of the tool with stderr a pseudo-terminal,
    progress drawn from the first chunk (DECODE_ANALYZE_PROGRESS_AFTER=0), outside CI."""
    import pty
    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["DECODE_ANALYZE_PROGRESS_AFTER"] = "0"
    child = subprocess.Popen([*TOOL, *map(str, argv)],
                             stdout=subprocess.PIPE, stderr=slave, env=env)
    os.close(slave)
    out = child.stdout.read()
    child.wait()
    shown = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the terminal's other end closed
            break
        if not chunk:
            break
        shown += chunk
    os.close(master)
    return child.returncode, out, shown


def test_a_long_read_shows_its_progress_on_a_terminal_only():
    """While a trace is read, one line on a terminal's stderr, rewritten in place (rows, the
    share of the file, rows a second) and cleared at the end; none in a pipe or with --quiet;
    stdout the same either way."""
    path = ROOT / "tests" / "data" / "qwen3moe-l4-ct-node.csv"  # 1.3 MB: several chunks
    code, out, shown = under_terminal("compute", path, "--jobs", "1")
    assert code == 0
    lines = shown.split(b"\r")
    drawn = [line for line in lines if line.startswith(b"reading ")]
    assert drawn and all(line.endswith(b"\x1b[K") for line in drawn)
    assert re.fullmatch(rb"reading qwen3moe-l4-ct-node\.csv: \d+% of 1 MB, [\d,]+ rows, "
                        rb"[\d,]+ rows/s\x1b\[K", drawn[-1])
    assert shown.endswith(b"\r\x1b[K")  # cleared: the terminal is left as it was
    piped = subprocess.run([*TOOL, "compute",
                            str(path), "--jobs", "1"], capture_output=True,
                           env={**os.environ, "DECODE_ANALYZE_PROGRESS_AFTER": "0"})
    assert piped.stdout == out and piped.stderr == b""
    code, quiet_out, quiet = under_terminal("compute", path, "--jobs", "1", "--quiet")
    assert code == 0 and quiet_out == out and b"reading " not in quiet


def test_a_progress_delay_that_is_no_number_is_the_default():
    """Bug: DECODE_ANALYZE_PROGRESS_AFTER=abc ended every command in a traceback at import."""
    done = subprocess.run([*TOOL, "--version"],
                          capture_output=True, env={**os.environ,
                                                    "DECODE_ANALYZE_PROGRESS_AFTER": "abc"})
    assert done.returncode == 0 and done.stderr == b""
