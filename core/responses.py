"""Responses every app builds alike: a CSV download, and a streamed one for exports."""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Iterator, Sequence

from django.http import HttpResponse, StreamingHttpResponse

# A download's name goes into a header between quotes: plain characters only.
FILENAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}\.csv")


def csv_response(rows: Iterable[Sequence[object]], *, filename: str) -> HttpResponse:
    """`rows` (the header row first) as a CSV attachment: UTF-8, RFC 4180 (CRLF line ends,
    a cell quoted when it holds a comma, a quote or a line break). Cells are written as
    they are: no exporter here rewrites a cell that looks like a spreadsheet formula, since
    the prototype export is read back by its importer as it was written."""
    if not FILENAME_RE.fullmatch(filename):
        raise ValueError(f"filename must be letters, digits, '.', '_' or '-' (at most 100) ending in .csv, "
                         f"got {filename!r}")
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    csv.writer(response).writerows(rows)
    return response


# A text cell a spreadsheet would run as a formula (OWASP "CSV injection"): it starts with
# one of these. Such a cell is written with a leading apostrophe, which the spreadsheet shows
# as text; numbers are written as numbers (a negative one stays a number).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_safe_cell(value: object) -> object:
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


class _Line:
    """The csv writer's file: each write is handed back as the line it wrote."""

    def write(self, value: str) -> str:
        return value


def csv_stream_response(rows: Iterable[Sequence[object]], *, filename: str) -> StreamingHttpResponse:
    """`rows` (the header row first) streamed as a CSV attachment, a line at a time as the
    iterator yields them (a queryset's .iterator(): never the whole export in memory), with
    every text cell made safe for spreadsheets (csv_safe_cell); UTF-8, RFC 4180 (as csv_response)."""
    if not FILENAME_RE.fullmatch(filename):
        raise ValueError(f"filename must be letters, digits, '.', '_' or '-' (at most 100) ending in .csv, "
                         f"got {filename!r}")
    writer = csv.writer(_Line())

    def lines() -> Iterator[str]:
        for row in rows:
            yield writer.writerow([csv_safe_cell(cell) for cell in row])

    response = StreamingHttpResponse(lines(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
