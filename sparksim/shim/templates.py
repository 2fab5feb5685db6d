"""The small part of Go templates that `docker --format` users write."""

import json
import re
import shlex
from typing import Any

EXPRESSION = re.compile(r"\{\{\s*(.*?)\s*\}\}")


def lookup(data: Any, path: str) -> Any:
    value = data
    for part in path.strip(".").split("."):
        if not part:
            continue
        value = value.get(part) if isinstance(value, dict) else None
    return value


def go_value(value: Any) -> str:
    if value is None:
        return "<no value>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "map[" + " ".join(f"{key}:{go_value(item)}" for key, item in value.items()) + "]"
    if isinstance(value, list):
        return "[" + " ".join(go_value(item) for item in value) + "]"
    return str(value)


def evaluate(expression: str, data: Any) -> str:
    words = shlex.split(expression)
    if not words:
        return ""
    if words[0] == "json" and len(words) == 2:
        return json.dumps(lookup(data, words[1]))
    if words[0] == "index" and len(words) == 3:
        container = lookup(data, words[1])
        return go_value(container.get(words[2]) if isinstance(container, dict) else None)
    if words[0].startswith("."):
        return go_value(lookup(data, words[0]))
    raise ValueError(f'template: :1: function "{words[0]}" not defined')


def render(template: str, data: Any) -> str:
    # docker's formatter turns the two-character escapes into real tabs and newlines.
    template = template.replace("\\t", "\t").replace("\\n", "\n")
    return EXPRESSION.sub(lambda match: evaluate(match.group(1), data), template)
