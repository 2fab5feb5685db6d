"""The hub stand-in's repositories on disk: `<hub_root>/<org>/<name>/` holds `repo.json`
(commit, gated, tokens allowed) and the files under `files/`. Hashes are the hub's: a git
blob sha1 for every file, a sha256 for files stored in LFS (over `LFS_THRESHOLD` bytes)."""

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from sparksim.files import write_atomically

# The hub keeps files from 10 MB in LFS; a smaller threshold lets tests exercise both paths.
LFS_THRESHOLD = 64 * 1024
CHUNK = 1024 * 1024


@dataclass
class RepoFile:
    path: str
    size: int
    blob_id: str  # git blob sha1, the hub's ETag for a regular file
    sha256: str = ""  # set for LFS files: the ETag the hub links to

    @property
    def lfs(self) -> bool:
        return bool(self.sha256)

    @property
    def etag(self) -> str:
        return self.sha256 or self.blob_id


@dataclass
class Repo:
    repo_id: str
    commit: str
    gated: bool = False
    tokens: list[str] = field(default_factory=list)  # tokens granted access to a gated repo
    files: list[RepoFile] = field(default_factory=list)
    directory: Path = Path()

    def file(self, path: str) -> RepoFile | None:
        return next((item for item in self.files if item.path == path), None)

    def total_bytes(self) -> int:
        return sum(item.size for item in self.files)


def repo_dir(root: Path, repo_id: str) -> Path:
    return Path(root) / repo_id


def file_hashes(path: Path) -> tuple[str, str]:
    """(git blob sha1, sha256) of a file, read once."""
    size = path.stat().st_size
    blob = hashlib.sha1(f"blob {size}\0".encode(), usedforsecurity=False)
    plain = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            blob.update(chunk)
            plain.update(chunk)
    return blob.hexdigest(), plain.hexdigest()


def deterministic_bytes(seed: str, size: int) -> bytes:
    """Reproducible content of `size` bytes (the same file on every run and every node)."""
    out = bytearray()
    counter = 0
    while len(out) < size:
        out += hashlib.sha256(f"{seed}:{counter}".encode()).digest() * 64
        counter += 1
    return bytes(out[:size])


def create_repo(
    root: str | Path,
    repo_id: str,
    files: dict[str, bytes | int],
    *,
    gated: bool = False,
    tokens: list[str] | None = None,
) -> Repo:
    """Write a repository; an int stands for that many reproducible bytes. The commit is a
    hash of the listing, so the same files give the same commit."""
    directory = repo_dir(Path(root), repo_id)
    (directory / "files").mkdir(parents=True, exist_ok=True)
    entries = []
    for name, content in sorted(files.items()):
        target = directory / "files" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, int):
            _write_generated(target, f"{repo_id}/{name}", content)
        else:
            target.write_bytes(content)
        blob_id, sha256 = file_hashes(target)
        size = target.stat().st_size
        entries.append(RepoFile(name, size, blob_id, sha256 if size > LFS_THRESHOLD else ""))
    listing = "\n".join(f"{item.path} {item.blob_id}" for item in entries)
    commit = hashlib.sha1(f"{repo_id}\n{listing}".encode(), usedforsecurity=False).hexdigest()
    repo = Repo(repo_id, commit, gated, list(tokens or []), entries, directory)
    document = {
        "repo_id": repo_id,
        "commit": commit,
        "gated": gated,
        "tokens": repo.tokens,
        "files": [vars(item) for item in entries],
    }
    write_atomically(directory / "repo.json", json.dumps(document, indent=1))
    return repo


def _write_generated(target: Path, seed: str, size: int) -> None:
    block = deterministic_bytes(seed, min(size, CHUNK))
    with target.open("wb") as handle:
        left = size
        while left > 0:
            handle.write(block[: min(left, len(block))])
            left -= len(block)


def load_repo(root: Path, repo_id: str) -> Repo | None:
    directory = repo_dir(root, repo_id)
    path = directory / "repo.json"
    if ".." in repo_id.split("/") or not path.is_file():
        return None
    data = json.loads(path.read_text())
    files = [RepoFile(**item) for item in data["files"]]
    return Repo(data["repo_id"], data["commit"], bool(data["gated"]), list(data["tokens"]), files, directory)
