"""Command dispatch for `python -m sparksim`."""

USAGE = """usage: python -m sparksim COMMAND ...

commands:
  engine --port P --model M [vllm serve flags] [--sim-* flags]   one engine, standalone
  vllm serve MODEL [flags]                      what a container runs for `vllm serve`
  cluster up --root DIR --nodes a,b --base-address 127.0.0.11 [--time-scale X] [--memory-gib N]
  cluster down --root DIR
  docker --node-dir DIR ARGS...                 the docker stand-in of one node
  ray --node-dir DIR --container NAME start|status ...
  fault --node-dir DIR {link-down DEV|link-up DEV|mtu NETDEV N|slow-rtt USEC|gid-index DEV N|
                        image-missing IMAGE|image-id IMAGE ID|compaction N|
                        engine-args [--sim-* FLAGS...]|clear}
  hub --root DIR --port P [--host H] [--rate-bytes-s N]   the Hugging Face Hub stand-in
  power-cycle --node-dir DIR                    a hard power cycle (ends a wedge; new boot id)
  tool NAME --node-dir DIR ARGS...              nvidia-smi ibdev2netdev ip ping ib_write_lat
                                                ib_read_lat ib_send_lat ib_write_bw
"""


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "engine":
        from sparksim.engine.runner import run

        return run(rest)
    if command == "vllm":
        from sparksim.engine.runner import run

        if rest[:1] != ["serve"]:
            print("usage: vllm serve [model_tag] [options]")
            return 2
        return run(rest[1:])
    if command == "cluster":
        from sparksim.cluster import cluster_command

        return cluster_command(rest)
    if command == "docker":
        from sparksim.shim.docker import docker_command

        return docker_command(rest)
    if command == "ray":
        from sparksim.shim.ray import ray_command

        return ray_command(rest)
    if command == "fault":
        from sparksim.host.faults import fault_command

        return fault_command(rest)
    if command == "hub":
        from sparksim.hub.server import hub_command

        return hub_command(rest)
    if command == "power-cycle":
        from sparksim.host.power import power_cycle_command

        return power_cycle_command(rest)
    if command == "tool":
        from sparksim.host.tools import tool_command

        return tool_command(rest)
    print(USAGE)
    return 2
