"""A local stand-in for the Hugging Face Hub's HTTP API, enough for `huggingface_hub`'s
`snapshot_download` with `HF_ENDPOINT` pointing here: model info (`sha`, `siblings`), the
recursive tree listing (sizes, blob ids, LFS sha256), and `resolve` with the hub's headers
(`ETag`, `X-Repo-Commit`; LFS files answer 302 to a CDN path with `X-Linked-Etag` and
`X-Linked-Size`), byte ranges for resumed downloads, and gated repos that want a token."""

import argparse
import asyncio
import json
import time
from collections import deque
from pathlib import Path

from aiohttp import web

from sparksim.hub.repos import Repo, RepoFile, load_repo

SEND_CHUNK = 64 * 1024
LAST_MODIFIED = "2026-05-01T00:00:00.000Z"


def error(status: int, code: str, message: str) -> web.Response:
    return web.json_response(
        {"error": message}, status=status, headers={"X-Error-Code": code, "X-Error-Message": message}
    )


class HubServer:
    def __init__(self, root: Path, rate_bytes_s: float = 0.0, cdn_origin: str = "") -> None:
        self.root = root
        # LFS bytes come from another origin, as the hub's CDN: the client reads a file's
        # metadata on the redirect itself and follows it only to download.
        self.cdn_origin = cdn_origin
        self.paced_since = time.monotonic()
        self.paced_bytes = 0
        self.rate_bytes_s = rate_bytes_s
        # What arrived, for tests: path, method, range, and whether a token came (never its value).
        self.requests: deque[dict[str, object]] = deque(maxlen=1000)

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self.record])
        app.router.add_get("/api/models/{org}/{name}", self.model_info)
        app.router.add_get("/api/models/{org}/{name}/revision/{revision}", self.model_info)
        app.router.add_get("/api/models/{org}/{name}/tree/{revision}", self.tree)
        app.router.add_get("/{org}/{name}/resolve/{revision}/{path:.+}", self.resolve)
        app.router.add_get("/_cdn/{org}/{name}/{etag}/{path:.+}", self.cdn)
        app.router.add_get("/_sim/requests", self.sim_requests)
        app.router.add_post("/_sim/rate", self.sim_rate)
        return app

    @web.middleware
    async def record(self, request: web.Request, handler):  # type: ignore[no-untyped-def]
        if not request.path.startswith("/_sim/"):
            self.requests.append(
                {
                    "method": request.method,
                    "path": request.path,
                    "range": request.headers.get("Range", ""),
                    "authorized": "Authorization" in request.headers,
                }
            )
        return await handler(request)

    # --- lookups ----------------------------------------------------------------------
    def repo_or_error(self, request: web.Request) -> Repo | web.Response:
        repo_id = f"{request.match_info['org']}/{request.match_info['name']}"
        repo = load_repo(self.root, repo_id)
        if repo is None:
            return error(401, "RepoNotFound", "Repository not found")
        revision = request.match_info.get("revision", "main")
        if revision not in ("main", repo.commit):
            return error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return repo

    def access_error(self, request: web.Request, repo: Repo) -> web.Response | None:
        if not repo.gated:
            return None
        header = request.headers.get("Authorization", "")
        token = header.removeprefix("Bearer ").strip() if header.startswith("Bearer ") else ""
        if not token:
            return error(
                401,
                "GatedRepo",
                f"Access to model {repo.repo_id} is restricted. You must have "
                "access to it and be authenticated to access it. Please log in.",
            )
        if token not in repo.tokens:
            return error(
                403,
                "GatedRepo",
                f"Access to model {repo.repo_id} is restricted and you are not "
                "in the authorized list. Visit the model page to ask for access.",
            )
        return None

    # --- the API ----------------------------------------------------------------------
    async def model_info(self, request: web.Request) -> web.Response:
        repo = self.repo_or_error(request)
        if isinstance(repo, web.Response):
            return repo
        return web.json_response(
            {
                "_id": repo.commit[:24],
                "id": repo.repo_id,
                "modelId": repo.repo_id,
                "sha": repo.commit,
                "private": False,
                "gated": "manual" if repo.gated else False,
                "disabled": False,
                "lastModified": LAST_MODIFIED,
                "tags": [],
                "downloads": 0,
                "likes": 0,
                "siblings": [{"rfilename": item.path} for item in repo.files],
                "usedStorage": repo.total_bytes(),
            }
        )

    async def tree(self, request: web.Request) -> web.Response:
        repo = self.repo_or_error(request)
        if isinstance(repo, web.Response):
            return repo
        entries = []
        for item in repo.files:
            entry: dict[str, object] = {"type": "file", "oid": item.blob_id, "size": item.size, "path": item.path}
            if item.lfs:
                entry["lfs"] = {"oid": item.sha256, "size": item.size, "pointerSize": 134}
            entries.append(entry)
        return web.json_response(entries)

    async def resolve(self, request: web.Request) -> web.StreamResponse:
        repo = self.repo_or_error(request)
        if isinstance(repo, web.Response):
            return repo
        item = repo.file(request.match_info["path"])
        if item is None:
            return error(404, "EntryNotFound", f'{request.match_info["path"]} does not exist on "main"')
        denied = self.access_error(request, repo)
        if denied is not None:
            return denied
        headers = {"X-Repo-Commit": repo.commit, "Accept-Ranges": "bytes"}
        if item.lfs:
            headers.update(
                {
                    "X-Linked-Etag": f'"{item.sha256}"',
                    "X-Linked-Size": str(item.size),
                    "ETag": f'"{item.blob_id}"',
                    "Location": f"{self.cdn_origin}/_cdn/{repo.repo_id}/{item.sha256}/{item.path}",
                }
            )
            return web.Response(status=302, headers=headers)
        headers["ETag"] = f'"{item.blob_id}"'
        return await self.send(request, repo, item, headers)

    async def cdn(self, request: web.Request) -> web.StreamResponse:
        repo_id = f"{request.match_info['org']}/{request.match_info['name']}"
        repo = load_repo(self.root, repo_id)
        item = repo.file(request.match_info["path"]) if repo else None
        if repo is None or item is None or item.sha256 != request.match_info["etag"]:
            return web.Response(status=404, text="Not Found")
        return await self.send(request, repo, item, {"ETag": f'"{item.sha256}"', "Accept-Ranges": "bytes"})

    async def send(
        self, request: web.Request, repo: Repo, item: RepoFile, headers: dict[str, str]
    ) -> web.StreamResponse:
        start, end = 0, item.size - 1
        ranged = parse_range(request.headers.get("Range", ""), item.size)
        if ranged is not None:
            start, end = ranged
            headers["Content-Range"] = f"bytes {start}-{end}/{item.size}"
        length = max(0, end - start + 1)
        response = web.StreamResponse(status=206 if ranged is not None else 200, headers=headers)
        response.content_length = length
        await response.prepare(request)
        if request.method == "HEAD":
            return response
        sent = 0
        with (repo.directory / "files" / item.path).open("rb") as handle:
            handle.seek(start)
            while sent < length:
                chunk = handle.read(min(SEND_CHUNK, length - sent))
                if not chunk:
                    break
                await response.write(chunk)
                sent += len(chunk)
                await self.pace(len(chunk))
        await response.write_eof()
        return response

    async def pace(self, sent: int) -> None:
        """Hold all downloads together to the configured rate (0: as fast as the disk), as
        one uplink would."""
        self.paced_bytes += sent
        if self.rate_bytes_s > 0:
            ahead = self.paced_bytes / self.rate_bytes_s - (time.monotonic() - self.paced_since)
            if ahead > 0:
                await asyncio.sleep(ahead)

    async def sim_requests(self, request: web.Request) -> web.Response:  # noqa: ARG002 (aiohttp's handler)
        return web.json_response(list(self.requests))

    async def sim_rate(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.rate_bytes_s = float(body.get("rate_bytes_s", 0))
        self.paced_since, self.paced_bytes = time.monotonic(), 0
        return web.json_response({"rate_bytes_s": self.rate_bytes_s})


def parse_range(header: str, size: int) -> tuple[int, int] | None:
    """`bytes=START-[END]` (the one form huggingface_hub sends to resume); None otherwise."""
    if not header.startswith("bytes="):
        return None
    first, _, last = header[6:].split(",")[0].partition("-")
    if not first.strip().isdigit():
        return None
    start = int(first)
    end = int(last) if last.strip().isdigit() else size - 1
    return (start, min(end, size - 1)) if start < size else (size, size - 1)


def hub_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m sparksim hub")
    parser.add_argument("--root", required=True, help="repositories made by sparksim.hub.repos.create_repo")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cdn-port", type=int, required=True, help="where LFS files are served from")
    parser.add_argument("--rate-bytes-s", type=float, default=0.0, help="cap each download's rate (0: none)")
    args = parser.parse_args(argv)
    server = HubServer(Path(args.root), args.rate_bytes_s, f"http://{args.host}:{args.cdn_port}")
    asyncio.run(serve(server, args.host, [args.port, args.cdn_port]))
    return 0


async def serve(server: HubServer, host: str, ports: list[int]) -> None:
    runner = web.AppRunner(server.app(), access_log=None)
    await runner.setup()
    for port in ports:
        await web.TCPSite(runner, host, port).start()
    print(json.dumps({"hub": f"http://{host}:{ports[0]}", "cdn": server.cdn_origin}), flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
