"""Logging filters. A refused request (403) is expected traffic, not a failure: Django logs
it with the PermissionDenied traceback attached; one line says all there is to say."""

from __future__ import annotations

import logging


class ForbiddenOneLine(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "status_code", None) == 403:
            record.exc_info = None
            record.exc_text = None
        return True
