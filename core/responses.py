"""Responses every app builds alike: a CSV download."""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Sequence

from django.http import HttpResponse

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
