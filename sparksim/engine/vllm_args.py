"""`vllm serve` flags parsed like vLLM does, plus sparksim's own `--sim-*` switches.

Errors leave through argparse (exit 2, "vllm serve: error: ...") or as ConfigError, which the
runner prints the way vLLM prints a failed engine start.
"""

import argparse
import json
import re
from typing import Any

KV_CACHE_DTYPES = [
    "auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla",
    "nvfp4", "nvfp4_ds_mla",
]
EXECUTOR_BACKENDS = ["ray", "mp", "uni", "external_launcher"]

HUMAN_NUMBER = re.compile(r"^(\d+(?:\.\d+)?)([kKmMgGtT]?)$")
DECIMAL = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def human_readable_int(value: str) -> int:
    """vLLM's convention: lowercase suffixes are decimal (1k=1000), uppercase binary (1K=1024)."""
    match = HUMAN_NUMBER.match(value.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"invalid human_readable_int value: '{value}'")
    number, suffix = match.groups()
    multiplier = BINARY[suffix] if suffix in BINARY else DECIMAL[suffix]
    return int(float(number) * multiplier)


def max_model_len_value(value: str) -> int | None:
    if value == "auto" or value == "-1":
        return None
    return human_readable_int(value)


def json_value(value: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"invalid loads value: '{value}' ({error})") from error


def spread_value(value: str) -> float:
    """--sim-decode-spread: a share of the batch's rate, 0 <= spread < 1 (at 1 the slowest
    stream of a large batch would stop)."""
    spread = float(value)
    if not 0.0 <= spread < 1.0:
        raise argparse.ArgumentTypeError(f"must be at least 0 and below 1, got {value}")
    return spread


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vllm serve",
        usage="vllm serve [model_tag] [options]",
        description="Launch a local OpenAI-compatible API server to serve LLM completions.",
        allow_abbrev=False,
    )
    parser.add_argument("model_tag", nargs="?", default=None)
    add_engine_arguments(parser)
    add_cluster_arguments(parser)
    add_runtime_arguments(parser)
    add_sim_arguments(parser)
    return parser


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """The model, its context and batch sizes, memory, speculative decoding and CUDA graphs."""
    add = parser.add_argument
    add("--model", default=None)
    add("--host", default=None)
    add("--port", type=int, default=8000)
    add("--served-model-name", nargs="+", default=None)
    add("--max-model-len", type=max_model_len_value, default=None)
    add("--tensor-parallel-size", "-tp", type=int, default=1)
    add("--pipeline-parallel-size", "-pp", type=int, default=1)
    add("--data-parallel-size", "-dp", type=int, default=1)
    add("--max-num-seqs", type=int, default=256)
    add("--max-num-batched-tokens", type=human_readable_int, default=None)
    add("--kv-cache-memory-bytes", type=human_readable_int, default=None)
    add("--gpu-memory-utilization", type=float, default=0.9)
    add("--kv-cache-dtype", choices=KV_CACHE_DTYPES, default="auto")
    add("--block-size", type=int, default=16)
    add("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True)
    add("--enable-chunked-prefill", action=argparse.BooleanOptionalAction, default=None)
    add("--speculative-config", type=json_value, default=None)
    add("--compilation-config", "-O", type=json_value, default=None)
    add("--max-cudagraph-capture-size", type=int, default=None)
    add("--cuda-graph-sizes", nargs="+", type=int, default=None)
    add("--enforce-eager", action="store_true")


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """The executor and a multi-node launch's ranks and rendezvous."""
    add = parser.add_argument
    add("--distributed-executor-backend", choices=EXECUTOR_BACKENDS, default=None)
    add("--nnodes", "-n", type=int, default=1)
    add("--node-rank", "-r", type=int, default=0)
    add("--master-addr", default="127.0.0.1")
    add("--master-port", type=int, default=29501)
    add("--headless", action="store_true")


def add_runtime_arguments(parser: argparse.ArgumentParser) -> None:
    """Loading, kernels, parsers, the API server and logging (most accepted and ignored)."""
    add = parser.add_argument
    add("--trust-remote-code", action="store_true")
    add("--attention-backend", default=None)
    add("--moe-backend", default=None)
    add("--disable-custom-all-reduce", action="store_true")
    add("--scheduler-reserve-full-isl", action=argparse.BooleanOptionalAction, default=True)
    add("--async-scheduling", action=argparse.BooleanOptionalAction, default=None)
    add("--scheduling-policy", choices=("fcfs", "priority"), default="fcfs")
    add("--quantization", "-q", default=None)
    add("--dtype", default="auto")
    add("--limit-mm-per-prompt", type=json_value, default=None)
    add("--reasoning-parser", default=None)
    add("--enable-auto-tool-choice", action="store_true")
    add("--tool-call-parser", default=None)
    add("--chat-template", default=None)
    add("--tokenizer", default=None)
    add("--revision", default=None)
    add("--download-dir", default=None)
    add("--load-format", default="auto")
    add("--seed", type=int, default=None)
    add("--swap-space", type=float, default=4)
    add("--max-logprobs", type=int, default=20)
    add("--api-key", default=None)
    add("--generation-config", default="auto")
    add("--override-generation-config", type=json_value, default=None)
    add("--hf-overrides", type=json_value, default=None)
    add("--enable-expert-parallel", action="store_true")
    add("--enable-request-id-headers", action="store_true")
    add("--disable-log-requests", action="store_true")
    add("--enable-log-requests", action="store_true")
    add("--disable-log-stats", action="store_true")
    add("--uvicorn-log-level", default="info")
    add("--max-log-len", type=int, default=None)
    add("--disable-fastapi-docs", action="store_true")


def add_sim_arguments(parser: argparse.ArgumentParser) -> None:
    sim = parser.add_argument_group("sparksim", "simulation switches (not vLLM flags)")
    add = sim.add_argument
    add("--time-scale", type=float, default=None, help="real seconds per simulated second")
    add("--sim-profile", choices=["deepseek", "deepseek-tp4", "deepseek-tp2-1m", "qwen", "qwen-next"], default=None)
    add("--sim-prefill-tok-s", type=float, default=None)
    add("--sim-cached-prefill-tok-s", type=float, default=None)
    add("--sim-base-ttft-s", type=float, default=None)
    add("--sim-decode-tok-s", type=float, default=None)
    add("--sim-decode-falloff", type=float, default=None)
    add("--sim-decode-spread", type=spread_value, default=None,
        help="how far the speeds of streams sharing a decode batch spread around its rate")
    add("--sim-startup-s", type=float, default=None, help="simulated seconds to load")
    add("--sim-spec-acceptance", type=float, default=0.6)
    add("--sim-abort-on-disconnect", choices=["write", "immediate"], default="write",
        help="when a streaming request whose client went away is aborted: at the next write "
             "to it (a request dropped during prefill is prefilled to the end, as seed 003's "
             "timed-out requests were) or at once (a stock vLLM behind uvicorn)")
    add("--sim-memory-gib", type=float, default=None)
    add("--sim-placement-timeout-s", type=float, default=None,
        help="simulated seconds to wait for Ray GPUs / native ranks (exact when given)")
    add("--sim-refuse-connections-s", type=float, default=None)
    add("--sim-unavailable", action="store_true", help="answer 503 to everything")
    add("--sim-die-after-requests", type=int, default=None)
    add("--sim-die-mid-stream-after-tokens", type=int, default=None)
    add("--sim-latency-s", type=float, default=0.0, help="real seconds added to each request")
    add("--sim-exit-on-death", action="store_true")
    add("--sim-hang", action="store_true", help="health 200, no token ever")
    add("--sim-hang-after-tokens", type=int, default=None, help="stuck mid-stream after K tokens")
    add("--sim-gibberish", action="store_true", help="every token the same '!'")
    add("--sim-leak-gib-per-s", type=float, default=0.0, help="memory leaked per simulated second")
    add("--sim-fail-start", default=None, metavar="TEXT",
        help="fail after loading weights with this error (e.g. seed 004's AssertionError)")
    add("--sim-node-dir", default=None)
    add("--sim-state-dir", default=None)


def parse_serve_args(argv: list[str]) -> argparse.Namespace:
    """Parse `vllm serve ...` arguments (argv after `serve`); exits 2 like vLLM on bad flags."""
    parser = build_parser()
    args = parser.parse_args(argv)
    model = args.model_tag or args.model
    if model is None:
        parser.error("the following arguments are required: model_tag")
    args.model = model
    return args
