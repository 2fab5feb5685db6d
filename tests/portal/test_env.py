import pytest
from django.core.exceptions import ImproperlyConfigured

from core.env import env_bool, env_float, env_int, env_list, env_str, env_url


def test_env_int_rejects_non_numbers_naming_the_variable(monkeypatch):
    monkeypatch.setenv("PORTAL_X", "eight")
    with pytest.raises(ImproperlyConfigured, match="PORTAL_X: must be a whole number"):
        env_int("PORTAL_X", 1)


def test_env_int_enforces_bounds(monkeypatch):
    monkeypatch.setenv("PORTAL_X", "70000")
    with pytest.raises(ImproperlyConfigured, match="PORTAL_X: must be at most 65535"):
        env_int("PORTAL_X", 1, maximum=65535)
    monkeypatch.setenv("PORTAL_X", "0")
    with pytest.raises(ImproperlyConfigured, match="at least 1"):
        env_int("PORTAL_X", 1, minimum=1)


def test_env_int_reads_and_defaults(monkeypatch):
    monkeypatch.delenv("PORTAL_X", raising=False)
    assert env_int("PORTAL_X", 7) == 7
    monkeypatch.setenv("PORTAL_X", " 42 ")
    assert env_int("PORTAL_X", 7) == 42


def test_env_bool_rejects_ambiguous_values(monkeypatch):
    monkeypatch.setenv("PORTAL_FLAG", "maybe")
    with pytest.raises(ImproperlyConfigured, match="PORTAL_FLAG: must be one of"):
        env_bool("PORTAL_FLAG", False)
    monkeypatch.setenv("PORTAL_FLAG", "Yes")
    assert env_bool("PORTAL_FLAG", False) is True
    monkeypatch.setenv("PORTAL_FLAG", "0")
    assert env_bool("PORTAL_FLAG", True) is False


def test_env_float_rejects_bad_values(monkeypatch):
    monkeypatch.setenv("PORTAL_RATIO", "1,5")
    with pytest.raises(ImproperlyConfigured, match="PORTAL_RATIO: must be a number"):
        env_float("PORTAL_RATIO", 0.5)
    monkeypatch.setenv("PORTAL_RATIO", "2")
    with pytest.raises(ImproperlyConfigured, match="at most 1"):
        env_float("PORTAL_RATIO", 0.5, maximum=1)


def test_env_str_required_without_default(monkeypatch):
    monkeypatch.delenv("PORTAL_SECRET", raising=False)
    with pytest.raises(ImproperlyConfigured, match="PORTAL_SECRET: required"):
        env_str("PORTAL_SECRET")


def test_env_url_checks_the_scheme_and_host(monkeypatch):
    monkeypatch.setenv("REDIS_URL", "http://127.0.0.1:6379")
    with pytest.raises(ImproperlyConfigured, match=r"REDIS_URL: must be a URL starting with one of redis://"):
        env_url("REDIS_URL", None, schemes=("redis",))
    monkeypatch.setenv("REDIS_URL", "redis://")
    with pytest.raises(ImproperlyConfigured, match="has no host"):
        env_url("REDIS_URL", None, schemes=("redis",))
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:6379/2")
    assert env_url("REDIS_URL", None, schemes=("redis",)) == "redis://127.0.0.1:6379/2"


def test_env_list_splits_on_commas(monkeypatch):
    monkeypatch.setenv("PORTAL_HOSTS", "a.example, b.example,,")
    assert env_list("PORTAL_HOSTS", []) == ["a.example", "b.example"]


def test_settings_refuse_production_without_a_secret_key():
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PORTAL_SECRET_KEY"}
    env.update(PORTAL_DEBUG="0")
    result = subprocess.run([sys.executable, "-c", "import portal.settings"], env=env, capture_output=True, text=True)
    assert result.returncode != 0
    assert "PORTAL_SECRET_KEY" in result.stderr
