"""Secret container env values of a lane. Stored encrypted (Lane.secret_env, lanes.crypto);
everywhere else — revisions, audit diffs, plans and dry runs, pages, the API, sockets —
the value is the mark `[secret]`. The launch plan renders `-e NAME=[secret]`; only the
worker, right before a command goes to the node, puts the decrypted value in its place
(`fill_secret_env`), and the job log redacts the value."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping

SECRET_MARK = "[secret]"
# Names treated as secret without being marked: HF_TOKEN, WANDB_API_KEY, DB_PASSWORD, ...
DEFAULT_SECRET_NAME = re.compile(r"(?:^|_)(TOKEN|KEY|SECRET|PASSWORD)$", re.IGNORECASE)


def is_secret_name(name: str) -> bool:
    return bool(DEFAULT_SECRET_NAME.search(name))


def env_with_marks(plain: Mapping[str, str], secret_names: list[str] | Mapping[str, str]) -> dict[str, str]:
    """The container env as a revision, a plan and a page see it: secret values are marks."""
    env = {str(k): str(v) for k, v in plain.items()}
    for name in secret_names:
        env[name] = SECRET_MARK
    return env


def marked_names(env: Mapping[str, object]) -> list[str]:
    return sorted(name for name, value in env.items() if value == SECRET_MARK)


def fill_secret_env(command: str, values: Mapping[str, str]) -> str:
    """The command the node runs: each quoted `NAME=[secret]` word replaced by the quoted
    real value (the plan quotes every word; a value cannot break out of its quotes)."""
    for name, value in values.items():
        command = command.replace(shlex.quote(f"{name}={SECRET_MARK}"), shlex.quote(f"{name}={value}"))
    return command


def redact_env(env: Mapping[str, object]) -> dict[str, object]:
    """An env mapping from before secrets were separated: secret-looking values → the mark."""
    return {name: SECRET_MARK if is_secret_name(name) else value for name, value in env.items()}
