"""Reading and writing labelled texts (prototypes, evaluation prompts) as CSV or JSON.
Pure: a malformed file raises `ImportProblem` naming the line, before anything is saved."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

from core.validators import has_control_characters

LABEL_RE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
MAX_TEXT_CHARS = 20_000
FORMATS = ("csv", "json")


class ImportProblem(ValueError):
    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line


@dataclass(frozen=True)
class LabelledText:
    text: str
    label: str
    enabled: bool = True


def _row(line: int, text: object, label: object, enabled: object = True) -> LabelledText:
    if not isinstance(text, str) or not text.strip():
        raise ImportProblem(line, "`text` is missing or empty")
    if len(text) > MAX_TEXT_CHARS:
        raise ImportProblem(line, f"`text` is longer than {MAX_TEXT_CHARS} characters")
    if has_control_characters(text):  # PostgreSQL cannot store a NUL: it was a 500
        raise ImportProblem(line, "`text` contains a NUL or control character")
    if not isinstance(label, str) or not LABEL_RE.match(label.strip()):
        shown = repr(label) if len(repr(label)) <= 40 else repr(label)[:37] + "..."
        raise ImportProblem(line, f"`label` {shown} must be lower-case letters, digits and _ (e.g. long_reasoning)")
    if isinstance(enabled, str):
        lowered = enabled.strip().lower()
        if lowered not in {"", "1", "0", "true", "false", "yes", "no"}:
            raise ImportProblem(line, f"`enabled` must be true or false, got {enabled!r}")
        enabled = lowered in {"", "1", "true", "yes"}
    if not isinstance(enabled, bool):
        raise ImportProblem(line, "`enabled` must be true or false")
    return LabelledText(text=text.strip(), label=label.strip(), enabled=enabled)


def parse_labelled(content: str, fmt: str) -> list[LabelledText]:
    if fmt == "csv":
        return _parse_csv(content)
    if fmt == "json":
        return _parse_json(content)
    raise ImportProblem(1, f"unknown format {fmt!r}: use csv or json")


def _parse_csv(content: str) -> list[LabelledText]:
    reader = csv.reader(io.StringIO(content.lstrip("\ufeff")), strict=True)
    try:
        header = [cell.strip().lower() for cell in next(reader)]
    except StopIteration:
        raise ImportProblem(1, "the file is empty: the first line must be the header label,text") from None
    except csv.Error as exc:
        raise ImportProblem(1, str(exc)) from None
    if "text" not in header or "label" not in header:
        raise ImportProblem(1, f"the header must name the columns text and label (found {', '.join(header) or 'nothing'})")
    unknown = set(header) - {"text", "label", "enabled"}
    if unknown:
        raise ImportProblem(1, f"unknown columns: {', '.join(sorted(unknown))}")
    rows: list[LabelledText] = []
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            raise ImportProblem(reader.line_num, str(exc)) from None
        line = reader.line_num
        if not any(cell.strip() for cell in cells):
            continue
        if len(cells) != len(header):
            raise ImportProblem(line, f"expected {len(header)} columns ({', '.join(header)}), found {len(cells)}")
        values = dict(zip(header, cells, strict=True))
        rows.append(_row(line, values["text"], values["label"], values.get("enabled", "")))
    return rows


def _item_lines(content: str) -> list[int]:
    """The line on which each element of a top-level JSON array starts."""
    lines, depth, in_string, escaped, line, expecting = [], 0, False, False, 1, False
    for char in content:
        if char == "\n":
            line += 1
        if in_string:
            escaped = not escaped and char == "\\"
            if char == '"' and not escaped:
                in_string = False
            continue
        if depth == 1 and expecting and not char.isspace() and char not in ",]":
            lines.append(line)
            expecting = False
        if char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth == 1:
                expecting = True
        elif char in "]}":
            depth -= 1
        elif char == "," and depth == 1:
            expecting = True
    return lines


def _parse_json(content: str) -> list[LabelledText]:
    try:
        data = json.loads(content)
    except json.JSONDecodeError as exc:
        raise ImportProblem(exc.lineno, f"not valid JSON: {exc.msg}") from None
    if not isinstance(data, list):
        raise ImportProblem(1, 'the file must be a JSON array of {"text": …, "label": …} objects')
    lines = _item_lines(content)
    rows = []
    for index, item in enumerate(data):
        line = lines[index] if index < len(lines) else 1
        if not isinstance(item, dict):
            raise ImportProblem(line, f"item {index + 1} is not an object")
        unknown = set(item) - {"text", "label", "enabled"}
        if unknown:
            raise ImportProblem(line, f"item {index + 1} has unknown keys: {', '.join(sorted(unknown))}")
        rows.append(_row(line, item.get("text"), item.get("label"), item.get("enabled", True)))
    return rows


def render_labelled(rows: Iterable[LabelledText], fmt: str) -> str:
    if fmt == "json":
        return json.dumps([{"text": r.text, "label": r.label, "enabled": r.enabled} for r in rows], indent=1,
                          ensure_ascii=False) + "\n"
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["label", "text", "enabled"])
    for r in rows:
        writer.writerow([r.label, r.text, "true" if r.enabled else "false"])
    return out.getvalue()
