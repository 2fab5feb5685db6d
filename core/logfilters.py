"""Logging filters. A refused request (403, or 400/413 for a suspicious or oversized one) is
expected traffic, not a failure: Django logs it with the exception's traceback attached; one
line says all there is to say."""

from __future__ import annotations

import logging


class ForbiddenOneLine(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if isinstance(status, int) and 400 <= status < 500:
            record.exc_info = None
            record.exc_text = None
        return True
