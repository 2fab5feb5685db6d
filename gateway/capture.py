"""Prompt storage for keys that opt in (ApiKey.log_prompts, the one opt-in): the secrets
removed from a prompt before it is ever stored, wherever it is stored — the request log's
prompt text, the router's replay set (CapturedPrompt: the text the router embeds, cut to
CAPTURE_MAX_CHARS, the key's last CAPTURE_PER_KEY), and so what judged comparisons
(gateway.judge) may read. One retention for all of it: the request log's
(GATEWAY_LOG_RETENTION_DAYS). Pure functions, no I/O."""

from __future__ import annotations

import re

CAPTURE_PER_KEY = 500  # the key's last prompts kept
CAPTURE_MAX_CHARS = 8000  # a prompt's head and tail beyond this are what the router embeds anyway
REDACTED = "[REDACTED]"

# Secrets an agent's prompt may carry (pasted configs, logs, env files). Each pattern's text
# is replaced by [REDACTED]; for `name = value` forms only the value is.
SECRET_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("private key block", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)", re.S)),
    ("API key (sk-…)", re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}")),
    ("GitHub token", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}")),
    ("Slack token", re.compile(r"\bxox[abprs]-[A-Za-z0-9\-]{10,}")),
    ("AWS access key id", re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b")),
    ("JWT", re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}")),
    ("bearer token", re.compile(r"(?i)(\bbearer\s+)[A-Za-z0-9._~+/\-]{12,}=*")),
    ("URL credentials", re.compile(r"(?i)(\b[a-z][a-z0-9+.\-]*://[^\s:/@]+:)[^\s@/]+(@)")),
    ("password / secret / token assignment", re.compile(
        r"(?i)(\b[\w.\-]*(?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key)[\w.\-]*\b[\"']?\s*[:=]\s*[\"']?)"
        r"[^\s\"',;]{4,}")),
)


def redact_secrets(text: str) -> str:
    """The text with every match of SECRET_PATTERNS replaced (keeping a `name = ` prefix)."""
    for _, pattern in SECRET_PATTERNS:
        if pattern.groups == 2:
            text = pattern.sub(lambda m: f"{m.group(1)}{REDACTED}{m.group(2)}", text)
        elif pattern.groups == 1:
            text = pattern.sub(lambda m: f"{m.group(1)}{REDACTED}", text)
        else:
            text = pattern.sub(REDACTED, text)
    return text


def stored_prompt(text: str, max_chars: int | None = None) -> str:
    """What is stored: cut to max_chars when given (head and tail, as the router reads a
    long text), then redacted — the cut first, so a secret split by it is still caught
    whole on each side or cut away. The request log keeps the whole prompt, redacted."""
    if max_chars is not None and len(text) > max_chars:
        half = max_chars // 2
        text = text[:half] + " … " + text[-half:]
    return redact_secrets(text)


def captured_text(text: str) -> str:
    """The replay set's text (CapturedPrompt): the prompt the router embeds, cut and redacted."""
    return stored_prompt(text, CAPTURE_MAX_CHARS)

