"""A node's images: every reference is present unless removed (`rmi`, or the `image-missing`
fault), with the Id docker would show. `pull`, `load` and `save` keep `<sim_dir>/images.json`
(reference → Id, size), the store `df` counts. A saved image is a small tar (manifest.json,
the config named by the Id, one layer whose sha256 the manifest records), so a copy that
lost bytes fails to load, as with docker."""

import hashlib
import io
import json
import sys
import tarfile
from pathlib import Path
from typing import Any

from sparksim.files import write_atomically
from sparksim.host.node import NodeInfo, save_node
from sparksim.shim.containers import image_id
from sparksim.shim.options import UsageError, parse_options

IMAGE_SIZE = 24_137_921_536  # what `docker image inspect` shows for a vLLM image
LAYER_BYTES = 256 * 1024


def store_path(node: NodeInfo) -> Path:
    return Path(node.sim_dir) / "images.json"


def image_store(node: NodeInfo) -> dict[str, dict[str, Any]]:
    path = store_path(node)
    return dict(json.loads(path.read_text())) if path.is_file() else {}


def save_store(node: NodeInfo, store: dict[str, dict[str, Any]]) -> None:
    write_atomically(store_path(node), json.dumps(store, indent=1, sort_keys=True))


def image_available(node: NodeInfo, image: str) -> bool:
    return image not in node.faults.get("image_missing", [])


def node_image_id(node: NodeInfo, image: str) -> str:
    override = node.faults.get("image_ids", {}).get(image)
    if override:
        return override if override.startswith("sha256:") else f"sha256:{override}"
    stored = image_store(node).get(image)
    return str(stored["id"]) if stored else image_id(image)


def set_present(node: NodeInfo, image: str, ident: str) -> None:
    missing = [item for item in node.faults.get("image_missing", []) if item != image]
    node.faults["image_missing"] = missing
    node.faults.get("image_ids", {}).pop(image, None)
    save_node(node)
    store = image_store(node)
    store[image] = {"id": ident, "size": IMAGE_SIZE}
    save_store(node, store)


def pull(node: NodeInfo, argv: list[str]) -> int:
    options = parse_options(argv, {"--platform": "platform"}, {"-q": "quiet", "--quiet": "quiet"}, "pull")
    if len(options.rest) != 1:
        raise UsageError('"docker pull" requires exactly 1 argument.')
    image = options.rest[0]
    if node.faults.get("registry_down"):
        print(
            f'Error response from daemon: Get "https://{image.split("/")[0]}/v2/": dial tcp: i/o timeout',
            file=sys.stderr,
        )
        return 1
    ident = image_id(image)
    set_present(node, image, ident)
    if "quiet" not in options.flags:
        print(f"{image.split('@')[0]}: Pulling from {image.split('/', 1)[-1].split('@')[0].split(':')[0]}")
        print(f"Digest: sha256:{ident[7:]}\nStatus: Downloaded newer image for {image}")
    print(image)
    return 0


def remove(node: NodeInfo, argv: list[str]) -> int:
    options = parse_options(argv, {}, {"-f": "force", "--force": "force"}, "rmi", stop_at_positional=False)
    code = 0
    for image in options.rest:
        if not image_available(node, image):
            print(f"Error response from daemon: No such image: {image}", file=sys.stderr)
            code = 1
            continue
        node.faults["image_missing"] = sorted({*node.faults.get("image_missing", []), image})
        save_node(node)
        store = image_store(node)
        store.pop(image, None)
        save_store(node, store)
        print(f"Untagged: {image}\nDeleted: {node_image_id(node, image)}")
    return code


def layer_bytes(ident: str) -> bytes:
    seed = hashlib.sha256(ident.encode()).digest()
    return (seed * (LAYER_BYTES // len(seed) + 1))[:LAYER_BYTES]


def save(node: NodeInfo, argv: list[str]) -> int:
    options = parse_options(argv, {"-o": "output", "--output": "output"}, {}, "save", stop_at_positional=False)
    if len(options.rest) != 1:
        raise UsageError('"docker save" requires exactly 1 argument (sparksim saves one image at a time).')
    image = options.rest[0]
    if not image_available(node, image):
        print(f"Error response from daemon: reference does not exist: {image}", file=sys.stderr)
        return 1
    ident = node_image_id(node, image)
    layer = layer_bytes(ident)
    layer_name = f"blobs/sha256/{hashlib.sha256(layer).hexdigest()}"
    manifest = [{"Config": f"blobs/sha256/{ident[7:]}", "RepoTags": [image], "Layers": [layer_name]}]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in (
            ("manifest.json", json.dumps(manifest).encode()),
            (manifest[0]["Config"], json.dumps({"architecture": "arm64"}).encode()),
            (layer_name, layer),
        ):
            info = tarfile.TarInfo(str(name))
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    output = options.last("output")
    if output:
        Path(output).write_bytes(buffer.getvalue())
    else:
        sys.stdout.buffer.write(buffer.getvalue())
        sys.stdout.flush()
    return 0


def load(node: NodeInfo, argv: list[str]) -> int:
    options = parse_options(argv, {"-i": "input", "--input": "input"}, {"-q": "quiet", "--quiet": "quiet"}, "load")
    source = options.last("input")
    data = Path(source).read_bytes() if source else sys.stdin.buffer.read()
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r") as archive:
            manifest = json.loads(_member(archive, "manifest.json"))[0]
            layers = [(name, _member(archive, name)) for name in manifest["Layers"]]
    except (tarfile.TarError, KeyError, IndexError, ValueError, OSError):
        print("Error processing tar file(exit status 1): unexpected EOF", file=sys.stderr)
        return 1
    for name, layer in layers:
        if hashlib.sha256(layer).hexdigest() != name.rsplit("/", 1)[-1]:
            print(f"Error processing tar file: layer {name} failed its checksum", file=sys.stderr)
            return 1
    ident = "sha256:" + str(manifest["Config"]).rsplit("/", 1)[-1]
    for image in manifest["RepoTags"]:
        set_present(node, str(image), ident)
        print(f"Loaded image: {image}")
    return 0


def _member(archive: tarfile.TarFile, name: str) -> bytes:
    handle = archive.extractfile(name)
    if handle is None:
        raise KeyError(name)
    return handle.read()
