"""Log lines in vLLM's format (`INFO 11-29 18:40:01 [api_server.py:1880] ...`)."""

import sys
import time
import zlib


def log(level: str, source: str, message: str) -> None:
    stamp = time.strftime("%m-%d %H:%M:%S")
    line_number = 100 + zlib.crc32(source.encode()) % 1900  # stable, plausible line numbers
    sys.stdout.write(f"{level} {stamp} [{source}:{line_number}] {message}\n")
    sys.stdout.flush()
