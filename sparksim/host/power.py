"""`python -m sparksim power-cycle --node-dir DIR`: a hard power cycle of a simulated Spark
(the only way out of a wedge, sparksim.host.wedge)."""

import sys

from sparksim.host.node import NodeInfo, load_node
from sparksim.host.procfs import budgets_dir, write_proc_tree
from sparksim.host.wedge import new_boot_id, wedged_path
from sparksim.shim.containers import all_containers, kill_processes


def power_cycle(node: NodeInfo) -> str:
    """Hard power cycle: everything that ran is gone, the node answers again, new boot id."""
    for container in all_containers(node):
        kill_processes(node, container)  # SIGKILL ends a stopped process too
    directory = budgets_dir(node)
    for path in directory.glob("*.json") if directory.is_dir() else []:
        path.unlink(missing_ok=True)
    wedged_path(node).unlink(missing_ok=True)
    value = new_boot_id(node)
    write_proc_tree(node)
    return value


def power_cycle_command(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "--node-dir":
        print("usage: python -m sparksim power-cycle --node-dir DIR", file=sys.stderr)
        return 2
    node = load_node(argv[1])
    print(f"{node.name}: powered off and on; boot id {power_cycle(node)}")
    return 0
