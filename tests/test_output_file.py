"""--output FILE (issue 10, part 3): the chosen format written atomically, nothing on stdout, an
input trace never overwritten."""
import json
import os

from helpers import REAL_TRACES, ct_text, error_of, run

GOOD = ["0,1,4,0,0,MUL_MAT,Qcur-0,1000000,0", "0,1,4,1,0,ADD,l_out-0,3000000,2"]


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
