"""The model files logic without I/O: what an inventory says, rsync's progress, the rate
window's ETA, the verification's verdicts, and the names and paths that may reach a shell."""

from __future__ import annotations

import json
import shlex

import pytest

from jobs.weights.copy_scripts import parse_verify, rsync_script, verify_command
from jobs.weights.progress import RateWindow, describe, parse_download_progress, parse_rsync_progress
from jobs.weights.scan import parse_scan
from lanes.model_files import (
    cache_repo_shell,
    file_path_error,
    find_model,
    inventory_script,
    model_presence,
    node_files_view,
    remote_cache_repo,
    repo_folder,
    weights_check_command,
)

COMMIT = "c" * 40


def scan_line(have: dict[str, int], tree: dict[str, int] | None, cut: int = 0) -> str:
    entry = {"model_id": "org/m", "commit": COMMIT, "refs": ["main"], "have": have,
             "tree": tree, "incomplete_blobs": cut}
    return "MODELS\t" + json.dumps([entry])


def test_an_inventory_is_complete_only_against_the_hubs_list():
    whole = parse_scan([scan_line({"a": 1, "b": 2}, {"a": 1, "b": 2}), "DF\t/dev/x 100 40 60 40% /"])
    assert whole["models"][0]["complete"] and whole["free_bytes"] == 60 and whole["disk_bytes"] == 100
    assert model_presence(whole, "org/m", "") == ("complete", "2 files, 3 B")
    assert find_model(whole, "org/m", COMMIT) is not None and find_model(whole, "org/m", "v2") is None
    short = parse_scan([scan_line({"a": 1}, {"a": 1, "b": 2})])
    assert model_presence(short, "org/m", "main")[0] == "partial" and "1 of 2 files" in short["models"][0]["problem"]
    cut = parse_scan([scan_line({"a": 1}, {"a": 1}, cut=1)])
    assert "in progress or cut off" in cut["models"][0]["problem"]
    unknown = parse_scan([scan_line({"a": 1}, None)])
    assert not unknown["models"][0]["complete"] and "completeness unknown" in unknown["models"][0]["problem"]
    assert model_presence({}, "org/m", "main")[0] == "unknown"
    assert model_presence(whole, "org/other", "main")[0] == "missing"


def test_images_come_from_inspect_lines_and_a_missing_one_is_left_out():
    found = parse_scan(["IMAGE\timg@sha256:aa\tsha256:" + "1" * 64 + ' ["img@sha256:aa"]', "IMAGE\tgone:1\t",
                        "IMAGE\tloaded:1\tsha256:" + "2" * 64 + " []", "IMAGE\tbad:1\tsha256:" + "3" * 64 + " {oops"])
    assert found["images"] == [
        {"reference": "img@sha256:aa", "id": "sha256:" + "1" * 64, "digests": ["img@sha256:aa"]},
        {"reference": "loaded:1", "id": "sha256:" + "2" * 64, "digests": []},  # only loaded: no registry digest
        {"reference": "bad:1", "id": "sha256:" + "3" * 64, "digests": []},
    ]
    shown = node_files_view(found)["images"]
    assert [image["undigested"] for image in shown] == [False, True, True]
    assert "a lane pinned by digest will not find it" in shown[1]["digest_words"]
    assert node_files_view({"images": [{"reference": "old:1", "id": "sha256:0"}]})["images"][0]["undigested"] is False
    script = inventory_script(["img; rm -rf /"])
    assert "'img; rm -rf /'" in script


def test_rsync_progress_lines_and_the_eta_of_the_last_seconds():
    line = "    123,456,789  45%   12.34MB/s    0:00:12 (xfr#1, to-chk=0/3)"
    assert parse_rsync_progress(line, 1000).done == 123_456_789  # type: ignore[union-attr]
    assert parse_rsync_progress("sending incremental file list", 10) is None
    assert parse_download_progress("PROGRESS\t50\t200") is not None
    now = [0.0]
    window = RateWindow(window_s=5.0, clock=lambda: now[0])
    for second in range(11):
        now[0] = float(second)
        window.add(second * 100)
    assert window.rate() == pytest.approx(100.0)
    assert window.eta_s(1000, 2000) == pytest.approx(10.0)
    assert describe(1024, 2048, 512.0, 75.0) == "1.0 KiB of 2.0 KiB (50%), 512 B/s, ETA 1:15"


def test_the_verification_names_each_bad_file():
    checked, problems = parse_verify(["BAD\tmodel-2.safetensors\tcontent differs from the hub's hash", "CHECKED\t6\t1"])
    assert checked == 6 and problems == ["model-2.safetensors: content differs from the hub's hash"]
    assert parse_verify([]) == (-1, ["the verification did not finish"])


@pytest.mark.parametrize("bad", ["../etc", "org/../x", "org", "org/m; rm -rf /", "/abs/path", "org/$(id)"])
def test_a_model_id_that_could_leave_the_cache_never_reaches_a_shell(bad):
    with pytest.raises(ValueError):
        repo_folder(bad)
    assert "python3" not in weights_check_command(bad, "main")


def test_paths_stay_inside_the_cache_and_are_quoted():
    assert cache_repo_shell("org/m.v2") == "\"${SPARK_HF_HOME:-$HOME/.cache/huggingface}\"/hub/models--org--m.v2"
    assert remote_cache_repo("", "org/m") == ".cache/huggingface/hub/models--org--m"
    assert remote_cache_repo("/sim/spark2", "org/m") == "/sim/spark2/hf/hub/models--org--m"
    assert file_path_error("shards/model-1.safetensors") == ""
    assert file_path_error("../../.ssh/authorized_keys") and file_path_error("/etc/passwd")
    assert shlex.quote(COMMIT) in verify_command("org/m", COMMIT)


def test_the_rsync_script_keeps_the_key_in_a_private_file_and_quotes_every_word():
    key = "-----BEGIN OPENSSH PRIVATE KEY-----\nabc'def\n-----END OPENSSH PRIVATE KEY-----"
    script = rsync_script(model_id="org/m", commit=COMMIT, key=key, host_key="ssh-ed25519 AAAA", user="spark",
                          address="192.168.100.12", port=22, target_sim_dir="")
    assert "umask 077" in script and "trap 'rm -f \"$k\" \"$kh\" \"$l\"' EXIT" in script
    assert shlex.quote(key) in script  # one quoted word, whatever the key holds
    assert "StrictHostKeyChecking=yes" in script and "UserKnownHostsFile=$kh" in script
    assert " spark@192.168.100.12:.cache/huggingface/hub/models--org--m/ " in script  # shlex.quote: nothing to escape
    assert "--partial" in script and "--info=progress2" in script and '--files-from="$l"' in script
    assert f"{shlex.quote(COMMIT)} > \"$l\" || exit 1" in script  # only that revision's paths travel
