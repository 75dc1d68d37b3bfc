"""Formats, JSON: every report is built from Records declared once (decode_analyze.KINDS),
real reports hold exactly the declared fields, and the JSON reference (docs/json.md) describes
every record and field as declared, in order."""
import json
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from helpers import ROOT  # noqa: E402  (puts the repository on the path)
import decode_analyze as da  # noqa: E402

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
        assert problems(report, da.KINDS[report["kind"]].record, path.name, seen) == []
        assert "warnings" in report
    declared = set()
    queue, visited = [kind.record for kind in da.KINDS.values()], set()
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


JSON_REFERENCE = ROOT / "docs" / "json.md"


def declared_records():
    """Every Record a report holds, once each: the reports first, then each record in the order
    the ones before it name it."""
    declared, queue = [], [kind.record for kind in da.KINDS.values()]
    while queue:
        record = queue.pop(0)
        if all(record is not other for other in declared):
            declared.append(record)
            queue += [da.inner_record(f) for f in record.fields
                      if isinstance(da.inner_record(f), da.Record)]
    return declared


UNDESCRIBED = "(to describe)"


def shape_words(field):
    """How docs/json.md ends a field's line: `[record]` a list of them, `{key: record}` a map
    of them, `(record)` one; nothing for a value."""
    if field.shape is None:
        return ""
    inner = getattr(da.inner_record(field), "name", "value")
    return " " + {da.ListOf: "[{}]", da.MapOf: "{{key: {}}}"}.get(
        type(field.shape), "({})").format(inner)


def documented(text):
    """docs/json.md read back: its head, and {section: (its Where line, [(field, line)])}."""
    head, _, body = text.partition("\n## ")
    sections = {}
    for section in ("## " + body).split("\n## ") if body else ():
        title, *lines = section.removeprefix("## ").splitlines()
        where = next((line for line in lines if line.startswith("Where: ")), "Where: ")
        fields = [(line[3:].split("`", 1)[0], line) for line in lines if line.startswith("- `")]
        sections[title] = (where, fields)
    return head, sections


def json_reference(text):
    """docs/json.md as the declarations order it: a section a kind of object, in the order
    the reports name them, a line a field with its shape; each description kept from `text`,
    a new one UNDESCRIBED."""
    head, sections = documented(text)
    lines = [head.rstrip("\n"), ""]
    for record in declared_records():
        where, fields = sections.get(record.name, ("Where: " + UNDESCRIBED, []))
        described = dict(fields)
        lines += [f"## {record.name}", "", where, ""]
        for field in record.fields:
            line = described.get(field.name)
            suffix = shape_words(field)
            text = line.split(": ", 1)[1] if line and ": " in line else UNDESCRIBED
            text = text.removesuffix(suffix) if suffix else text
            lines.append(f"- `{field.name}`: {text}{suffix}")
        lines.append("")
    return "\n".join(lines)


def test_the_json_reference_describes_every_record_and_field_as_declared():
    """docs/json.md (which replaced the schema command) says what every field holds: a
    section each Record, its fields the declared ones in their order, each described."""
    text = JSON_REFERENCE.read_text(encoding="utf-8")
    assert text == json_reference(text), \
        "docs/json.md is not the declared records: python3 tests/test_json.py --update"
    assert UNDESCRIBED not in text, "docs/json.md: describe each new field"
    _, sections = documented(text)
    assert list(sections) == [record.name for record in declared_records()]
    assert f"- `schema`: the JSON schema, {da.SCHEMA} " in text
    assert "<!-- json reference" not in (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_json_reference_check_catches_a_field_missing_or_undescribed():
    """The check above fails on a reference that lost a field or a section, or got a field
    the records do not declare."""
    text = JSON_REFERENCE.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    dropped = "".join(line for line in lines if not line.startswith("- `tool_version`"))
    assert json_reference(dropped) != dropped and UNDESCRIBED in json_reference(dropped)
    added = text.replace("- `kind`:", "- `kinds`: not a field\n- `kind`:", 1)
    assert json_reference(added) == text
    unknown = text.replace("## verdict\n", "## verdicts\n", 1)
    assert json_reference(unknown) != unknown


def test_a_per_token_series_is_written_as_json_dumps_writes_it_a_slice_at_a_time():
    """A series held as an array is written without a list of it or its whole text: the same
    numbers, separators and float digits as json.dumps, a NaN refused, and a long report in
    several chunks (each written as it is made)."""
    from array import array
    series = [array("i", range(-9000, 9000, 7)), array("i"),
              array("d", [i / 7 for i in range(9000)] + [1e-7, 1e300, -0.0, 2.5])]
    for values in series:
        text = "".join(da.json_chunks({"series": values}))
        assert text.splitlines()[1] == ' "series": ' + json.dumps(list(values))
        assert json.loads(text)["series"] == list(values)
    with pytest.raises(da.OutputError, match="not finite"):
        "".join(da.json_chunks({"series": array("d", [1.0] * 5000 + [float("nan")])}))
    assert len(list(da.json_chunks({"series": array("i", range(100000))}))) > 4


if __name__ == "__main__":
    import sys
    if sys.argv[1:] != ["--update"]:
        sys.exit("usage: python3 tests/test_json.py --update")
    JSON_REFERENCE.write_text(json_reference(JSON_REFERENCE.read_text(encoding="utf-8")),
                              encoding="utf-8")
