"""`python -m sparksim fault --node-dir DIR ...`: break a node's host the way Sparks break."""

import sys

from sparksim.cluster import TOOLS, write_wrappers
from sparksim.host.node import ROCE_DEVICES, NodeInfo, load_node, save_node
from sparksim.host.procfs import write_proc_tree
from sparksim.host.sysfs import write_node_tree

USAGE = ("usage: python -m sparksim fault --node-dir DIR {link-down DEV|link-up DEV|"
         "mtu NETDEV N|slow-rtt USEC|rtt-rise USEC|gid-index DEV N|image-missing IMAGE|image-id IMAGE ID|"
         "compaction N|engine-args [--sim-* FLAGS...]|gpu-busy PROCESS|tool-missing TOOL|tool-present TOOL|"
         "clear}")


def fault_command(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] != "--node-dir":
        print(USAGE, file=sys.stderr)
        return 2
    node = load_node(argv[1])
    try:
        apply_fault(node, argv[2], argv[3:])
    except (ValueError, IndexError) as error:
        print(f"sparksim fault: {error}\n{USAGE}", file=sys.stderr)
        return 2
    return 0


def apply_fault(node: NodeInfo, kind: str, values: list[str]) -> None:
    faults = node.faults
    if kind == "clear":
        faults.clear()
    elif kind in ("link-down", "link-up"):
        device = _device(values[0])
        down = set(faults.get("link_down", []))
        down.add(device) if kind == "link-down" else down.discard(device)
        faults["link_down"] = sorted(down)
    elif kind == "mtu":
        faults.setdefault("mtu", {})[values[0]] = int(values[1])
    elif kind == "slow-rtt":
        faults["slow_rtt_usec"] = float(values[0])
    elif kind == "rtt-rise":
        # Each perftest client run adds this to the node's RTT: a link that keeps getting worse.
        faults["rtt_rise_usec"] = float(values[0])
    elif kind == "gpu-busy":
        faults["gpu_busy"] = values[0]
    elif kind in ("tool-missing", "tool-present"):
        if values[0] not in TOOLS:
            raise ValueError(f"no stand-in named {values[0]!r}")
        missing = set(faults.get("tools_missing", []))
        missing.add(values[0]) if kind == "tool-missing" else missing.discard(values[0])
        faults["tools_missing"] = sorted(missing)
    elif kind == "gid-index":
        index = int(values[1])
        if index < 3:
            raise ValueError("the RoCE v2 IPv4 entry follows the two link-local ones: index >= 3")
        faults.setdefault("gid_index", {})[_device(values[0])] = index
    elif kind == "image-missing":
        faults["image_missing"] = sorted({*faults.get("image_missing", []), values[0]})
    elif kind == "image-id":
        faults.setdefault("image_ids", {})[values[0]] = values[1]
    elif kind == "engine-args":
        # Appended to every `vllm serve` the shim starts on this node; none clears them.
        faults["engine_args"] = list(values)
    elif kind == "compaction":
        faults["compaction_proactiveness"] = int(values[0])
    else:
        raise ValueError(f"unknown fault {kind!r}")
    save_node(node)
    write_node_tree(node)
    write_proc_tree(node)
    write_wrappers(node)


def _device(name: str) -> str:
    if name in ROCE_DEVICES:
        return name
    for device, netdev in ROCE_DEVICES.items():
        if netdev == name:
            return device
    raise ValueError(f"no RoCE device or netdev named {name!r}")
