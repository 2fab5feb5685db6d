import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from core.checks import unknown_environment_variables
from core.env import env_bool, env_float, env_int, env_list, env_str, env_url, names_read, unknown_variables


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
    env = {k: v for k, v in os.environ.items() if k != "PORTAL_SECRET_KEY"}
    env.update(PORTAL_DEBUG="0")
    result = subprocess.run([sys.executable, "-c", "import portal.settings"], env=env, capture_output=True, text=True)
    assert result.returncode != 0
    assert "PORTAL_SECRET_KEY" in result.stderr


# --- unknown and retired PORTAL_* variables ---------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
RETIRED = {"PORTAL_GATEWAY_TOKENIZE_THRESHOLD": "no longer a setting: now a constant "
                                                 "(portal.tuning.GATEWAY_TOKENIZE_THRESHOLD = 0.5)"}


def run_with_env(argv: list[str], **portal_env: str) -> subprocess.CompletedProcess[str]:
    """argv with this environment's PORTAL_* variables replaced by `portal_env`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PORTAL_")}
    env.update(PORTAL_DEBUG="1", **portal_env)
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_a_typo_is_reported_with_the_closest_known_name() -> None:
    messages = unknown_variables({"PORTAL_GATEWAY_DEFAULT_LAN": "qwen"}, ["PORTAL_GATEWAY_DEFAULT_LANE"], RETIRED)
    assert messages == ["PORTAL_GATEWAY_DEFAULT_LAN: unknown setting, ignored; did you mean PORTAL_GATEWAY_DEFAULT_LANE?"]


def test_a_known_variable_and_other_prefixes_are_not_reported() -> None:
    environ = {"PORTAL_GATEWAY_DEFAULT_LANE": "qwen", "GATEWAY_DEFAULT_LAN": "x", "PATH": "/bin"}
    assert unknown_variables(environ, ["PORTAL_GATEWAY_DEFAULT_LANE"], RETIRED) == []


def test_an_unknown_variable_like_no_setting_gets_no_suggestion() -> None:
    # The shared prefix alone must not make every name look like PORTAL_PORT.
    assert unknown_variables({"PORTAL_FOO": "1"}, ["PORTAL_PORT", "PORTAL_HOST"], RETIRED) == [
        "PORTAL_FOO: unknown setting, ignored"]


def test_a_retired_variable_says_it_is_a_constant_now() -> None:
    messages = unknown_variables({"PORTAL_GATEWAY_TOKENIZE_THRESHOLD": "0.7"}, ["PORTAL_GATEWAY_MAX_N"], RETIRED)
    assert messages == ["PORTAL_GATEWAY_TOKENIZE_THRESHOLD: no longer a setting: now a constant "
                        "(portal.tuning.GATEWAY_TOKENIZE_THRESHOLD = 0.5); remove it from the environment"]


def test_a_shadow_variable_of_before_the_rename_names_its_mirror_variable() -> None:
    from django.conf import settings

    messages = unknown_variables({"PORTAL_GATEWAY_SHADOW_BASE_URL": "http://x/v1"}, ["PORTAL_GATEWAY_MIRROR_BASE_URL"],
                                 settings.RETIRED_VARIABLES)
    assert messages == ["PORTAL_GATEWAY_SHADOW_BASE_URL: renamed: set PORTAL_GATEWAY_MIRROR_BASE_URL instead; "
                        "remove it from the environment"]


def test_the_readers_record_every_name_they_are_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PORTAL_NEVER_SET_ANYWHERE", raising=False)
    assert env_int("PORTAL_NEVER_SET_ANYWHERE", 3) == 3
    assert "PORTAL_NEVER_SET_ANYWHERE" in names_read()


def test_loading_the_settings_logs_unknown_and_retired_variables_but_not_known_ones() -> None:
    result = run_with_env([sys.executable, "-c", "import portal.settings"], PORTAL_GATEWAY_DEFAULT_LAN="qwen",
                          PORTAL_ROUTER_CACHE_SIZE="10", PORTAL_GATEWAY_MAX_N="4", PORTAL_PORT="8123")
    assert result.returncode == 0, result.stderr
    assert "PORTAL_GATEWAY_DEFAULT_LAN: unknown setting, ignored; did you mean PORTAL_GATEWAY_DEFAULT_LANE?" in result.stderr
    assert ("PORTAL_ROUTER_CACHE_SIZE: no longer a setting: now a constant (portal.tuning.ROUTER_CACHE_SIZE = 4096)"
            in result.stderr)
    assert "PORTAL_GATEWAY_MAX_N" not in result.stderr and "PORTAL_PORT" not in result.stderr
    assert "PORTAL_DEBUG" not in result.stderr


def test_the_run_command_reports_them_on_its_own_terminal() -> None:
    # --help exits before anything starts, after the settings (which give its defaults) loaded.
    result = run_with_env([sys.executable, "-m", "portal.launcher", "--help"], PORTAL_PROT="8123", PORTAL_HOST="0.0.0.0")
    assert result.returncode == 0, result.stderr
    assert "PORTAL_PROT: unknown setting, ignored; did you mean PORTAL_PORT?" in result.stderr
    assert "PORTAL_HOST" not in result.stderr


def test_manage_py_check_reports_them_as_portal_w001() -> None:
    result = run_with_env([sys.executable, "manage.py", "check"], PORTAL_METRICS_TOKN="secret")
    assert result.returncode == 0, result.stderr
    assert ("(portal.W001) PORTAL_METRICS_TOKN: unknown setting, ignored; did you mean PORTAL_METRICS_TOKEN?"
            in result.stderr)


def test_the_check_returns_one_warning_per_message(settings: Any) -> None:
    settings.ENV_WARNINGS = ["PORTAL_X: unknown setting, ignored"]
    found = unknown_environment_variables(app_configs=None, databases=None)
    assert [(message.id, message.msg, message.level) for message in found] == [
        ("portal.W001", "PORTAL_X: unknown setting, ignored", checks.WARNING)]
    settings.ENV_WARNINGS = []
    assert unknown_environment_variables(app_configs=None, databases=None) == []


def env_example() -> dict[str, str]:
    lines = (ROOT / ".env.example").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def test_env_example_lists_only_settings_and_at_most_fifty() -> None:
    example = env_example()
    assert 0 < len(example) <= 50
    # The example file as the whole environment: no warning (every name is read, none retired).
    env = {k: v for k, v in os.environ.items() if not k.startswith("PORTAL_")}
    env.update({name: value for name, value in example.items() if name.startswith("PORTAL_")},
               PORTAL_VAR_DIR=str(ROOT / "var"))  # the example's /app/var is the container's
    result = subprocess.run([sys.executable, "-c", "from portal import settings; print(len(settings.ENV_WARNINGS))"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "0", result.stderr
    assert not set(example) & set(django_settings.RETIRED_VARIABLES)


def test_the_configuration_reference_names_every_variable_and_every_retired_one() -> None:
    reference = (ROOT / "docs" / "configuration.md").read_text()
    missing = [name for name in [*env_example(), *django_settings.RETIRED_VARIABLES] if f"`{name}`" not in reference]
    assert missing == []
