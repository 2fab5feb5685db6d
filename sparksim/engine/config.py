"""Engine configuration built from `vllm serve` flags, the node and the timing profile."""

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from sparksim.host.node import DEFAULT_MEMORY_GIB, NodeInfo, load_node
from sparksim.timing import PROFILES, TimingProfile, profile_for_model, with_overrides

GIB = 1024**3
ACTIVATION_OVERHEAD_GIB = 4.0
DEFAULT_GRAPH_CAPTURE_SIZE = 512
KV_DTYPE_TOKEN_FACTOR = {"nvfp4": 2.0, "nvfp4_ds_mla": 2.0, "bfloat16": 0.5, "float16": 0.5}


class ConfigError(Exception):
    """A configuration vLLM would refuse at start-up; the message mimics vLLM's."""


@dataclass
class FaultSwitches:
    refuse_connections_s: float | None = None  # close the listener for this long (real s)
    unavailable: bool = False  # answer 503 to everything
    die_after_requests: int | None = None
    die_mid_stream_after_tokens: int | None = None
    latency_s: float = 0.0  # real seconds before each request is handled
    hold: bool = False  # requests wait, once received, until the hold is lifted (a lane that is slow for as long as a test needs)
    slow_prefill_factor: float = 1.0  # prefill and first-token time multiplied (a struggling lane: TTFT grows)
    exit_on_death: bool = False
    # A hung engine (vllm#39863): /health and /v1/models answer 200, requests are accepted,
    # and no token ever comes: the engine core stops stepping. hang_after_tokens: stuck
    # mid-stream, the core stops after that many more tokens.
    hang: bool = False
    hang_after_tokens: int | None = None
    gibberish: bool = False  # every generated token is the same "!" (garbage kernels on sm121)
    leak_gib_per_s: float = 0.0  # memory taken from the node per simulated second (engine.memory)


@dataclass
class EngineConfig:
    model: str
    served_model_names: list[str]
    host: str
    port: int
    profile: TimingProfile
    time_scale: float
    max_model_len: int
    max_num_seqs: int
    max_logprobs: int
    kv_pool_tokens: int
    block_size: int
    enable_prefix_caching: bool
    kv_cache_dtype: str
    gpu_memory_utilization: float
    kv_cache_gib: float
    memory_budget_gib: float  # what this engine takes from its node's unified memory
    spec_method: str | None
    spec_tokens: int
    spec_acceptance: float
    graph_capture_tokens: int | None  # None: enforce-eager
    tensor_parallel_size: int
    nnodes: int
    node_rank: int
    master_addr: str
    master_port: int
    headless: bool
    executor: str
    placement_timeout_s: float  # simulated seconds
    placement_min_real_s: float  # a floor in real seconds, so scaled-down clusters still wait
    node_dir: Path | None
    state_dir: Path | None
    faults: FaultSwitches = field(default_factory=FaultSwitches)
    fail_start: str | None = None
    reasoning_parser: str | None = None
    # When a streaming request whose client went away is aborted. "write" (default): when
    # the server next writes to it, so a request dropped while it prefills is prefilled to
    # the end (nothing is written before its first token), then aborted; seed 003's
    # timed-out cold requests were (docs/sparksim.md, "Client disconnects"). "immediate":
    # the moment the connection closes, as a stock vLLM behind uvicorn should.
    abort_on_disconnect: str = "write"
    # vLLM's --scheduling-policy: "fcfs" (arrival order) or "priority" (sparksim.engine.priority).
    scheduling_policy: str = "fcfs"

    def scaled(self, simulated_seconds: float) -> float:
        return simulated_seconds * self.time_scale

    @property
    def graph_seqs(self) -> int | None:
        """How many sequences fit in the captured CUDA graphs; beyond that decode runs eager.

        With speculative decoding a decode step carries max_num_seqs x (1 + k) tokens, so a
        capture size of 8 covers only 1-2 streams at k=3 (seed 003).
        """
        if self.graph_capture_tokens is None:
            return 0
        return self.graph_capture_tokens // (1 + self.spec_tokens)


def build_engine_config(args: argparse.Namespace) -> EngineConfig:
    node = load_node(args.sim_node_dir) if args.sim_node_dir else None
    profile = _profile(args)
    time_scale = args.time_scale if args.time_scale is not None else _node_time_scale(node)
    if time_scale <= 0:
        raise ConfigError(f"sparksim: --time-scale must be positive, got {time_scale}")
    validate_parallelism(args)
    world = args.tensor_parallel_size * args.pipeline_parallel_size
    memory_gib = args.sim_memory_gib or (node.memory_gib if node else DEFAULT_MEMORY_GIB)
    weights_per_gpu = profile.weights_gib / world
    kv_gib = _kv_cache_gib(args, memory_gib, weights_per_gpu)
    tokens_per_gib = profile.kv_tokens_per_gib * KV_DTYPE_TOKEN_FACTOR.get(args.kv_cache_dtype, 1.0)
    kv_pool_tokens = int(kv_gib * tokens_per_gib)
    max_model_len = _max_model_len(args, profile, kv_pool_tokens, tokens_per_gib, kv_gib)
    spec_method, spec_tokens = _speculative(args.speculative_config)
    graph_tokens = _graph_capture_tokens(args)
    executor = args.distributed_executor_backend or ("mp" if world > 1 else "uni")
    return EngineConfig(
        model=args.model,
        served_model_names=args.served_model_name or [args.model],
        host=_bind_host(args.host, node),
        port=args.port,
        profile=profile,
        time_scale=time_scale,
        max_model_len=max_model_len,
        max_num_seqs=args.max_num_seqs,
        max_logprobs=args.max_logprobs,
        kv_pool_tokens=kv_pool_tokens,
        block_size=args.block_size,
        enable_prefix_caching=args.enable_prefix_caching,
        kv_cache_dtype=args.kv_cache_dtype,
        gpu_memory_utilization=args.gpu_memory_utilization,
        kv_cache_gib=kv_gib,
        memory_budget_gib=weights_per_gpu + kv_gib + ACTIVATION_OVERHEAD_GIB,
        spec_method=spec_method,
        spec_tokens=spec_tokens,
        spec_acceptance=args.sim_spec_acceptance,
        graph_capture_tokens=graph_tokens,
        tensor_parallel_size=args.tensor_parallel_size,
        nnodes=args.nnodes,
        node_rank=args.node_rank,
        master_addr=args.master_addr,
        master_port=args.master_port,
        headless=args.headless,
        executor=executor,
        placement_timeout_s=_placement_timeout(args),
        placement_min_real_s=0.0 if args.sim_placement_timeout_s is not None else 5.0,
        node_dir=Path(args.sim_node_dir) if args.sim_node_dir else None,
        state_dir=Path(args.sim_state_dir) if args.sim_state_dir else None,
        faults=_faults(args),
        scheduling_policy=args.scheduling_policy,
        fail_start=args.sim_fail_start,
        reasoning_parser=args.reasoning_parser,
        abort_on_disconnect=args.sim_abort_on_disconnect,
    )


def _profile(args: argparse.Namespace) -> TimingProfile:
    profile = (PROFILES[args.sim_profile] if args.sim_profile
               else profile_for_model(args.model, args.tensor_parallel_size))
    return with_overrides(
        profile,
        prefill_tok_s=args.sim_prefill_tok_s,
        cached_prefill_tok_s=args.sim_cached_prefill_tok_s,
        base_ttft_s=args.sim_base_ttft_s,
        decode_tok_s=args.sim_decode_tok_s,
        decode_falloff=args.sim_decode_falloff,
        decode_spread=args.sim_decode_spread,
        startup_s=args.sim_startup_s,
        batch_tokens=args.max_num_batched_tokens,
    )


def _kv_cache_gib(args: argparse.Namespace, memory_gib: float, weights_per_gpu: float) -> float:
    """The KV cache per GPU, refused as vLLM refuses it (its messages)."""
    if not 0.0 < args.gpu_memory_utilization <= 1.0:
        raise ConfigError(
            "GPU memory utilization must be within (0, 1]. "
            f"Got {args.gpu_memory_utilization}."
        )
    if args.kv_cache_memory_bytes is not None:
        kv_gib = args.kv_cache_memory_bytes / GIB
    else:
        kv_gib = args.gpu_memory_utilization * memory_gib - weights_per_gpu
        kv_gib -= ACTIVATION_OVERHEAD_GIB
    if kv_gib <= 0:
        raise ConfigError(
            "No available memory for the cache blocks. Try increasing "
            "`gpu_memory_utilization` when initializing the engine."
        )
    return kv_gib


def _graph_capture_tokens(args: argparse.Namespace) -> int | None:
    """Tokens the captured CUDA graphs cover; None when the engine runs eager."""
    if args.enforce_eager:
        return None
    graph_tokens: int | None = args.max_cudagraph_capture_size
    if graph_tokens is None and args.cuda_graph_sizes:
        graph_tokens = max(args.cuda_graph_sizes)
    if graph_tokens is None:
        graph_tokens = DEFAULT_GRAPH_CAPTURE_SIZE
    return graph_tokens


def _faults(args: argparse.Namespace) -> FaultSwitches:
    return FaultSwitches(
        refuse_connections_s=args.sim_refuse_connections_s,
        unavailable=args.sim_unavailable,
        die_after_requests=args.sim_die_after_requests,
        die_mid_stream_after_tokens=args.sim_die_mid_stream_after_tokens,
        latency_s=args.sim_latency_s,
        exit_on_death=args.sim_exit_on_death,
        hang=args.sim_hang,
        hang_after_tokens=args.sim_hang_after_tokens,
        gibberish=args.sim_gibberish,
        leak_gib_per_s=args.sim_leak_gib_per_s,
    )


def validate_parallelism(args: argparse.Namespace) -> None:
    world = args.tensor_parallel_size * args.pipeline_parallel_size
    if args.nnodes < 1 or not 0 <= args.node_rank < args.nnodes:
        raise ConfigError(f"node_rank ({args.node_rank}) must be in [0, nnodes={args.nnodes}).")
    if args.nnodes > 1:
        if args.distributed_executor_backend == "ray":
            raise ConfigError(
                "--nnodes/--node-rank are for the multiprocessing executor; with "
                "distributed_executor_backend=ray, start a Ray cluster instead."
            )
        if world != args.nnodes:
            # One GB10 per Spark: the world must span exactly the nodes given.
            raise ConfigError(
                f"World size ({world}) must equal nnodes ({args.nnodes}) x GPUs per node (1) "
                f"for multi-node serving (tensor_parallel_size={args.tensor_parallel_size}, "
                f"pipeline_parallel_size={args.pipeline_parallel_size})."
            )
    elif args.headless:
        raise ConfigError("--headless is only valid for multi-node serving (--nnodes > 1).")
    elif world > 1 and args.distributed_executor_backend != "ray":
        raise ConfigError(
            f"World size ({world}) is larger than the number of available GPUs (1) in this "
            "node. If this is intentional and you are using:\n"
            "- ray, set '--distributed-executor-backend ray'.\n"
            "- multiprocessing, set '--nnodes' appropriately."
        )


def _max_model_len(
    args: argparse.Namespace,
    profile: TimingProfile,
    kv_pool_tokens: int,
    tokens_per_gib: float,
    kv_gib: float,
) -> int:
    derived = profile.max_model_len
    if args.max_model_len is None:
        # "auto" shrinks to what fits (seed 004: 1,048,576 became 937,472 on a later start).
        return min(derived, kv_pool_tokens)
    if args.max_model_len > derived:
        raise ConfigError(
            f"User-specified max_model_len ({args.max_model_len}) is greater than the derived "
            f"max_model_len (max_position_embeddings={derived} in model's config.json). "
            "To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1."
        )
    if args.max_model_len > kv_pool_tokens:
        needed = args.max_model_len / tokens_per_gib
        raise ConfigError(
            f"To serve at least one request with the models's max seq len "
            f"({args.max_model_len}), ({needed:.2f} GiB KV cache is needed, which is larger "
            f"than the available KV cache memory ({kv_gib:.2f} GiB). Based on the available "
            f"memory, the estimated maximum model length is {kv_pool_tokens}. Try increasing "
            "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
        )
    return int(args.max_model_len)


def _placement_timeout(args: argparse.Namespace) -> float:
    if args.sim_placement_timeout_s is not None:
        return float(args.sim_placement_timeout_s)
    # vLLM waits 1800 s for a Ray placement group; torch.distributed's default is 600 s.
    return 1800.0 if args.distributed_executor_backend == "ray" else 600.0


def _speculative(config: object) -> tuple[str | None, int]:
    if config is None:
        return None, 0
    if not isinstance(config, dict):
        raise ConfigError(f"speculative_config must be a JSON object, got {config!r}")
    tokens = config.get("num_speculative_tokens")
    if not isinstance(tokens, int) or tokens < 1:
        raise ConfigError("num_speculative_tokens must be provided with speculative decoding")
    method = config.get("method")
    return (str(method) if method else "ngram"), tokens


def _node_time_scale(node: NodeInfo | None) -> float:
    return node.time_scale if node else 1.0


def _bind_host(host: str | None, node: NodeInfo | None) -> str:
    # A Spark's 0.0.0.0 is all of its interfaces; a simulated node only owns its 127.0.0.x.
    if node is not None and (host is None or host in ("0.0.0.0", "::", "")):
        return node.address
    return host or "127.0.0.1"
