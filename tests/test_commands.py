"""The command registry: every command is declared once (decode_analyze.COMMANDS) and the
parser, the help, the module docstring, the dispatch and the output checks follow from it."""
import decode_analyze as da
from helpers import ROOT, error_of, run

SESSION_CT = ROOT / "examples" / "session-ct.csv"


def test_the_module_docstring_lists_every_command_as_the_registry_does():
    assert da.command_list() in da.__doc__
    assert [line.split()[0] for line in da.command_list().splitlines()] == list(da.COMMANDS)


def help_of(capsys, *argv):
    assert run(*argv, "--help").code == 0
    return capsys.readouterr().out  # argparse prints its help on sys.stdout


def test_the_help_lists_every_command_with_its_summary(capsys):
    text = help_of(capsys)
    assert max(map(len, text.splitlines())) <= da.TEXT_WIDTH
    for command in da.COMMANDS.values():
        assert command.name in text and command.summary in text
    assert da.exit_status_text() in " ".join(text.split())


def test_each_command_draws_only_the_pictures_it_declares(capsys):
    for command in da.COMMANDS.values():
        help_text = help_of(capsys, command.name)
        assert ("--svg" in help_text) == ("svg" in command.pictures)
        assert ("--perfetto" in help_text) == ("perfetto" in command.pictures)


def test_every_exit_status_is_in_the_readme():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for status, meaning in da.EXIT_STATUS.items():
        assert f"{status} {meaning}" in readme


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
        run("compute", SESSION_CT).out.splitlines()[1:]
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
