"""Formats, JSON: every report is built from Records declared once (decode_analyze.REPORTS),
real reports hold exactly the declared fields, and the README's JSON reference is the one
drawn from the declarations.

After changing a Record: python3 tests/test_json.py --update (rewrites the README's block)."""
import json
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from helpers import ROOT  # noqa: E402  (puts the repository on the path)
import decode_analyze as da  # noqa: E402

README = ROOT / "README.md"
BEGIN, END = "<!-- json reference: tests/test_json.py --update -->", "<!-- end of json reference -->"
GOLDEN_JSON = sorted((HERE / "golden").glob("*.json"))


def problems(value, record, where, seen):
    """What in the object `value` does not match `record`: keys not declared or out of the
    declared order, a field missing (a `later` one may be). The (record, field) pairs seen are
    added to `seen`."""
    if not isinstance(value, dict):
        return [f"{where}: not an object"]
    found = []
    if list(value) != [name for name in record.names if name in value]:
        found.append(f"{where}: keys {list(value)} against {record.names}")
    missing = set(record.names) - set(record.later) - set(value)
    if missing:
        found.append(f"{where}: missing {sorted(missing)}")
    for field in record.fields:
        if field.name in value:
            seen.add((record.name, field.name))
            found += shape_problems(value[field.name], field.shape, f"{where}.{field.name}",
                                    seen)
    return found


def shape_problems(held, shape, where, seen):
    inner = getattr(shape, "record", shape)
    if inner is None or held is None:
        return []
    if isinstance(shape, da.ListOf):
        items = [item for each in held for item in (each if isinstance(each, list) else [each])]
        return [p for i, item in enumerate(items) for p in problems(item, inner, f"{where}[{i}]",
                                                                    seen)]
    if isinstance(shape, da.MapOf):
        return [p for key, item in held.items() if item is not None
                for p in problems(item, inner, f"{where}.{key}", seen)]
    return problems(held, inner, where, seen)


def test_every_real_report_holds_exactly_the_declared_fields():
    seen = set()
    for path in GOLDEN_JSON:
        report = json.loads(path.read_text(encoding="utf-8"))
        assert problems(report, da.REPORTS[report["kind"]], path.name, seen) == []
        assert "warnings" in report
    declared = set()
    queue, visited = list(da.REPORTS.values()), set()
    while queue:
        record = queue.pop()
        if id(record) in visited:
            continue
        visited.add(id(record))
        for field in record.fields:
            declared.add((record.name, field.name))
            inner = getattr(field.shape, "record", field.shape)
            if isinstance(inner, da.Record):
                queue.append(inner)
    assert declared - seen == set(), "declared but in no golden report"


def test_a_record_refuses_a_missing_or_an_unknown_field():
    with pytest.raises(AssertionError):
        da.RANGE(min=1, max=2)
    with pytest.raises(AssertionError):
        da.RANGE(min=1, max=2, estimate=2, mean=3)
    assert list(da.RANGE(estimate=2, max=2, min=1)) == ["min", "max", "estimate"]  # declared order


def readme_block(text):
    head, _, rest = text.partition(BEGIN + "\n")
    block, _, tail = rest.partition(END)
    return head, block, tail


def test_the_readme_json_reference_is_drawn_from_the_records():
    _, block, _ = readme_block(README.read_text(encoding="utf-8"))
    assert block == da.json_reference(), "python3 tests/test_json.py --update"


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        sys.exit("usage: python3 tests/test_json.py --update")
    head, _, tail = readme_block(README.read_text(encoding="utf-8"))
    README.write_text(head + BEGIN + "\n" + da.json_reference() + END + tail, encoding="utf-8")
    print("README.md: JSON reference rewritten")
