"""What a simulated Spark's `nvidia-smi` knows, and the node's `bin/nvidia-smi`: a POSIX sh
script generated from it.

The portal's node probe runs `nvidia-smi` on every node every scrape tick. On a real Spark
that runs on the Spark; with simulated Sparks it runs on the portal's machine, so the
stand-in must cost what a small tool costs there — one `sh` reading a few files with
builtins, not a Python interpreter (~65 ms of CPU a call). `python -m sparksim tool
nvidia-smi` (sparksim.host.tools.nvidia_smi) answers the same query forms with the same
output, status and errors; the tests hold the two side by side.

The script is rewritten with the node's other wrappers whenever node.json changes (cluster
up, every fault), so the node's identity and its faults are baked in. What changes between
faults — whether an engine holds the GPU — it reads at each call from the budget files the
engines keep in `proc/.budgets` (the same files, the same liveness rule as
`procfs.engines_gib`: a budget counts while its process runs and is not a zombie).
"""

from __future__ import annotations

import shlex

from sparksim.host.node import NodeInfo
from sparksim.host.procfs import budgets_dir

DRIVER_VERSION = "580.95.05"
BANNER = (
    f"NVIDIA-SMI {DRIVER_VERSION}  Driver Version: {DRIVER_VERSION}  CUDA Version: 13.0",
    "|   0  NVIDIA GB10                    On  |   0000000F:01:00.0 Off |                  N/A |",
)
ENGINE_PROCESS = "python3"


def gpu_fields(node: NodeInfo, busy: bool) -> dict[str, tuple[str, str]]:
    """Field -> (value, unit). Memory is [N/A] on a GB10: GPU and CPU share one memory."""
    return {
        "name": ("NVIDIA GB10", ""),
        "driver_version": (DRIVER_VERSION, ""),
        "utilization.gpu": ("96" if busy else "0", " %"),
        "power.draw": ("42.37" if busy else "11.02", " W"),
        "temperature.gpu": ("61" if busy else "38", ""),
        "memory.used": ("[N/A]", ""),
        "memory.total": ("[N/A]", ""),
        "memory.free": ("[N/A]", ""),
        "index": ("0", ""),
        "uuid": (f"GPU-{node.host_number:08x}-5f2a-4c1b-9e77-0000{node.host_number:08x}", ""),
        "pci.bus_id": ("0000000F:01:00.0", ""),
        "compute_cap": ("12.1", ""),
    }


def engine_app(node: NodeInfo) -> dict[str, str]:
    return {"pid": str(4100 + node.host_number), "process_name": ENGINE_PROCESS, "name": ENGINE_PROCESS}


def foreign_app(node: NodeInfo) -> dict[str, str] | None:
    """The `gpu-busy` fault's process, if any."""
    process = node.faults.get("gpu_busy")
    if not process:
        return None
    return {"pid": str(5200 + node.host_number), "process_name": str(process), "name": str(process)}


def _field_cases(node: NodeInfo) -> str:
    """One `case` arm per field: sets v (value), u (unit appended to values) and h (the
    header's unit suffix), the busy-dependent ones behind `$busy`."""
    idle, busy = gpu_fields(node, busy=False), gpu_fields(node, busy=True)
    arms = []
    for name, (value, unit) in idle.items():
        header = f" [{unit.strip()}]" if unit else ""
        busy_value = busy[name][0]
        if busy_value == value:
            assign = f"v={shlex.quote(value)}"
        else:
            assign = f'if [ -n "$busy" ]; then v={shlex.quote(busy_value)}; else v={shlex.quote(value)}; fi'
        arms.append(f"    {shlex.quote(name)}) {assign}; u={shlex.quote(unit)}; h={shlex.quote(header)} ;;")
    return "\n".join(arms)


def _app_lines(node: NodeInfo) -> str:
    """Shell that prints one line per GPU process for the requested names ($names, one per line)."""
    lines = []
    engine = engine_app(node)
    lines.append('if [ -n "$busy" ]; then app ' + " ".join(shlex.quote(engine[k]) for k in ("pid", "process_name", "name"))
                 + "; fi")
    foreign = foreign_app(node)
    if foreign is not None:
        lines.append("app " + " ".join(shlex.quote(foreign[k]) for k in ("pid", "process_name", "name")))
    return "\n".join(lines)


def nvidia_smi_script(node: NodeInfo) -> str:
    budgets = shlex.quote(str(budgets_dir(node)))
    banner = " ".join(shlex.quote(line) for line in BANNER)
    return f"""#!/bin/sh
# nvidia-smi of simulated Spark {node.name}: written by sparksim (sparksim/host/smi.py) from
# node.json; answers like `python -m sparksim tool nvidia-smi`. Builtins only: no child process.

# An engine holds the GPU while its budget file names a live, non-zombie process.
busy=
for b in {budgets}/*.json; do
    [ -r "$b" ] || continue
    line=
    {{ read -r line < "$b"; }} 2>/dev/null
    pid=${{line#*'"pid": '}}; pid=${{pid%%[,\\}}]*}}
    gib=${{line#*'"gib": '}}; gib=${{gib%%[,\\}}]*}}
    case $pid in ''|*[!0-9]*) continue ;; esac
    case $gib in -*|*[!0-9.eE+-]*) continue ;; *[1-9]*) ;; *) continue ;; esac
    stat=
    {{ read -r stat < "/proc/$pid/stat"; }} 2>/dev/null || [ -n "$stat" ] || continue
    state=${{stat##*') '}}; state=${{state%% *}}
    [ "$state" = Z ] && continue
    busy=1
    break
done

query= query_set= format=csv format_set= apps= apps_set= bare= next=
for arg do
    if [ "$next" = 1 ]; then bare=$arg; next=2; fi
    case $arg in
        --query-gpu=*) [ -n "$query_set" ] || {{ query=${{arg#--query-gpu=}}; query_set=1; }} ;;
        --query-gpu) [ -n "$next" ] || next=1 ;;
        --format=*) [ -n "$format_set" ] || {{ format=${{arg#--format=}}; format_set=1; }} ;;
        --query-compute-apps=*) [ -n "$apps_set" ] || {{ apps=${{arg#--query-compute-apps=}}; apps_set=1; }} ;;
    esac
done

# The names of a comma-separated list, each stripped, one per line in $names.
split() {{
    names= rest=$1,
    while [ -n "$rest" ]; do
        n=${{rest%%,*}}; rest=${{rest#*,}}
        n=${{n#"${{n%%[![:space:]]*}}"}}; n=${{n%"${{n##*[![:space:]]}}"}}
        names="$names$n
"
    done
}}

if [ -n "$apps_set" ]; then
    split "$apps"
    case $format in *noheader*) ;; *)
        out= sep=
        while IFS= read -r n; do out="$out$sep$n"; sep=', '; done <<EOF
${{names%?}}
EOF
        printf '%s\\n' "$out" ;;
    esac
    app() {{
        out= sep=
        while IFS= read -r n; do
            case $n in pid) f=$1 ;; process_name) f=$2 ;; name) f=$3 ;; *) f='[N/A]' ;; esac
            out="$out$sep$f"; sep=', '
        done <<EOF
${{names%?}}
EOF
        printf '%s\\n' "$out"
    }}
{_indent(_app_lines(node))}
    exit 0
fi

if [ -z "$query_set" ]; then
    case $next in
        1) echo 'nvidia-smi: option --query-gpu needs a list of fields' >&2; exit 2 ;;
        2) query=$bare ;;
        *) printf '%s\\n' {banner}; exit 0 ;;
    esac
fi

case ,$format, in *,nounits,*) nounits=1 ;; *) nounits= ;; esac
split "$query"
header= values= sep=
while IFS= read -r n; do
    case $n in
{_field_cases(node)}
    *) printf 'Field "%s" is not a valid field to query.\\n' "$n" >&2; exit 2 ;;
    esac
    if [ -n "$nounits" ]; then header="$header$sep$n"; else header="$header$sep$n$h"; fi
    if [ -n "$nounits" ] || [ "$v" = '[N/A]' ]; then values="$values$sep$v"; else values="$values$sep$v$u"; fi
    sep=', '
done <<EOF
${{names%?}}
EOF
case ,$format, in *,noheader,*) ;; *) printf '%s\\n' "$header" ;; esac
printf '%s\\n' "$values"
"""


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())
