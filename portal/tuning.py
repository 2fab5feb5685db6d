"""Internal tuning knobs: constants, not environment variables (an operator has no reason to
change them; docs/configuration.md, "Not settings any more"). Each comment names what chose the
value (a perf/ script, a test) or what it protects. portal.settings imports every name here, so
code reads them as settings.X and tests vary them with pytest-django's `settings` fixture."""

from __future__ import annotations

# --- portal ---
# Each /healthz check's timeout: the answer stays well inside compose's 5 s healthcheck timeout.
HEALTHZ_TIMEOUT_S = 1.0
# Slots of the periodic worker: the health watcher, the scrape and an hour's long purge each hold
# one at once (perf/lane_watcher.py measured the watcher's share of one).
PERIODIC_WORKER_CONCURRENCY = 3

# --- gateway ---
# A dead lane is refused fast (and a refused connection fails over safely).
GATEWAY_CONNECT_TIMEOUT_S = 3.0
# Pooled upstream connections per web process: far above the 200 streams of perf/gateway_overhead.py.
GATEWAY_MAX_CONNECTIONS = 1000
# Bodies above LARGE_BODY_BYTES are parsed and validated in worker processes (gateway.large) and
# forwarded as the client's bytes with the gateway's few edits, so they never hold the web process's
# GIL; at most WORKERS run at once and QUEUE wait, beyond that 503 with retry-after. The workers run
# at NICENESS (0-19): on a busy machine the web process's small requests get the CPU first.
# Chosen with perf/gateway_overhead.py --large-bodies (and its printed validation cost per body).
GATEWAY_LARGE_BODY_BYTES = 256 * 1024
GATEWAY_LARGE_BODY_WORKERS = 2
GATEWAY_LARGE_BODY_QUEUE = 4
GATEWAY_LARGE_BODY_NICENESS = 10
# Longest wait for Redis on a request's path (the admission and release scripts, seconds): past
# it the connection is given up and reopened, and the request fails closed (500) instead of hanging.
# Its cost measured with perf/gateway_overhead.py --quick (~4 us a call).
GATEWAY_REDIS_TIMEOUT_S = 5.0
# A request's release without an in-flight slot to free (its tokens' counts, its budgets' charge,
# its idempotency record) waits up to this long to leave with the next admission's write instead
# of a write of its own (perf/gateway_budgets.py: the gateway's CPU a budgeted request adds, 127 to 77 us).
GATEWAY_RELEASE_LINGER_S = 0.002
# In-process caches of API keys and lanes (s): revocation and lane saves reach every process at
# once through Redis; these only bound how long a missed message lasts.
GATEWAY_KEY_CACHE_TTL_S = 30.0
GATEWAY_LANE_CACHE_TTL_S = 2.0
# Circuit breaker per lane replica, shared by every worker: open after N consecutive upstream
# failures, for S seconds, so a dead replica costs a refused connection now and then, not per request.
GATEWAY_BREAKER_FAILURES = 5
GATEWAY_BREAKER_COOLDOWN_S = 10.0
# Replicas (gateway.replicas): a conversation stays on its replica unless that one
# has more than factor × (all outstanding + 1) / replicas + slack requests in flight; every
# worker shares breakers and in-flight counts through Redis, read this often (s).
# Chosen with perf/replicas_affinity.py (affinity against round-robin, 1 and 2 workers).
GATEWAY_REPLICA_LOAD_FACTOR = 1.25
GATEWAY_REPLICA_LOAD_SLACK = 2
GATEWAY_HEALTH_SYNC_S = 0.25
# Fair queue (gateway.fair): how often each worker refreshes its waiters' heartbeats and its
# held slots' leases and asks for a dispatch (s: what a lost wake-up message costs), and how
# long a heartbeat or lease lives (s: what a crashed worker's places and slots hold the lane).
# tests/gateway/test_fair.py (a client that leaves, a queue across two workers).
GATEWAY_FAIR_TICK_S = 0.5
GATEWAY_FAIR_HEARTBEAT_S = 10.0
# A lane of at least this many slots per replica, under half full as a worker last saw it (and not
# found full by it in the last 4 ticks), takes a slot without a Redis call (a request that outlives a
# tick is counted there from that tick): perf/gateway_fairness.py's one-client figure. Fewer slots:
# always asked.
GATEWAY_FAIR_FAST_MIN_SLOTS = 8
# Idempotency-Key: how long a finished answer is kept for replay (s), and the largest one kept
# (bytes): they bound Redis's memory; an SDK's retries come within seconds.
GATEWAY_IDEMPOTENCY_TTL_S = 600
GATEWAY_IDEMPOTENCY_MAX_BYTES = 1_048_576
# Context guard: below this share of the lane's limit the cheap estimate (bytes bound tokens)
# suffices; above, ask /tokenize: the extra round trip only for prompts that might not fit.
GATEWAY_TOKENIZE_THRESHOLD = 0.5
# Request log writer: rows per batch and flush interval (s), one COPY a batch (chosen with
# perf/gateway_overhead.py, where bulk_create had cost a fifth of the process's CPU). The
# interval is what a SIGKILL of the web process can lose (perf/gateway_kill_loss.py: 0.70 s
# of answers at 1.0 s): 0.25 s, four COPYs a second at most when the batch does not fill first.
GATEWAY_LOG_BATCH = 500
GATEWAY_LOG_FLUSH_S = 0.25
# Without partitions (SQLite), the purge's rows per batch and time budget of one run (s): each
# batch a short transaction (tests/gateway/test_purge.py: a million rows while writes go on).
GATEWAY_PURGE_BATCH = 10_000
GATEWAY_PURGE_MAX_SECONDS = 240.0
# Mirrored traffic: a hung external endpoint holds a replay (and its body) no longer than this (s).
GATEWAY_MIRROR_TIMEOUT_S = 120.0

# --- jobs ---
# Seconds between a running job's heartbeats (one small UPDATE), and how often it looks for a
# cancel request (a cancel is seen within half a second).
JOBS_HEARTBEAT_S = 5.0
JOBS_CANCEL_POLL_S = 0.5
# A running job without a heartbeat for this long (12 beats) is marked lost by the reaper (beat),
# which runs this often.
JOBS_LOST_AFTER_S = 60.0
JOBS_REAPER_INTERVAL_S = 30.0
# After a cancel or time-out, how long a launch may take to stop what it started (its stop plan;
# the longest job + this + 90 s stays inside the broker's visibility timeout: tests/portal/test_periodic_queue.py).
JOBS_CANCEL_CLEANUP_S = 150.0
# A launch's health wait when its lane sets none (wait_timeout_s): a cold start may take 40 minutes.
JOBS_LAUNCH_WAIT_DEFAULT_S = 2400.0
# Live logs: lines are cut at this many characters; batches are flushed this often / this big.
# Chosen with perf/job_log_throughput.py (10,000 lines/s under 0.5 s behind; half the delay is the flush).
JOBS_LOG_MAX_LINE_CHARS = 8192
JOBS_LOG_FLUSH_S = 0.1
JOBS_LOG_BATCH_LINES = 1000
# SSH: connect timeout and keepalive interval (s): an unreachable Spark fails a job in seconds.
JOBS_SSH_CONNECT_TIMEOUT_S = 10.0
JOBS_SSH_KEEPALIVE_S = 15.0

# --- lanes ---
# The health watcher's probe timeouts, connect and read (s), chosen with perf/lane_watcher.py
# (a dead head node costs a tick at most connect + 2 × read).
LANES_WATCH_CONNECT_TIMEOUT_S = 1.0
LANES_WATCH_TIMEOUT_S = 2.0

# --- router ---
# onnxruntime threads per process (0 = one per core; they sleep between ops, never spin:
# routing.encoder.session_options), most queries embedded in one forward pass, and identical
# queries kept in memory: chosen with perf/router.py (32 concurrent clients: 3.1× the decisions
# a second micro-batched; a cached decision 0.13 ms) and perf/router_speed.py (one thread: as
# fast on short prompts at some loads, 2× slower on 225-token ones).
ROUTER_THREADS = 0
ROUTER_MAX_BATCH = 32
ROUTER_CACHE_SIZE = 4096
# How long a gateway process trusts its copy of the published version before asking Redis (a
# publish is seen by every process within this); perf/router.py --gateway-only measures auto's cost.
ROUTER_VERSION_CHECK_S = 0.25
# How long a conversation keeps its lane (and the lane's prefix cache), s: an agent session's pauses.
ROUTER_AFFINITY_TTL_S = 3600
# Shadow evaluation: the share of routed requests on which the shadow draft also decides (from the
# same embedding: the pick costs 0.14 ms in perf/router.py).
ROUTER_SHADOW_SHARE = 0.1
# Judged comparison (gateway.judge): the most tokens the draft's lane may answer with (the
# client's own max_tokens when lower), and how long each of its two calls may take (s).
ROUTER_JUDGE_ANSWER_MAX_TOKENS = 1024
ROUTER_JUDGE_TIMEOUT_S = 120.0

# --- metrics ---
# Each target's time budget (s) and the targets scraped at once (HTTP connections, SSH channels;
# the rest wait for a slot): perf/live_metrics.py --part scrape (50 lanes + 20 Sparks, none failed).
METRICS_SCRAPE_TIMEOUT_S = 2.0
METRICS_SCRAPE_CONCURRENCY = 64
# PostgreSQL: daily partitions created this many days ahead, so missed storage steps never send
# writes to the default partition (perf/live_metrics.py --part retention).
METRICS_PARTITIONS_AHEAD_DAYS = 3
# Alert webhook: each POST's timeout (s), attempts, and the first backoff (s, doubled each retry:
# 5 … 80 s, about 2.5 minutes in all, so a receiver down that long still gets every change).
METRICS_WEBHOOK_TIMEOUT_S = 5.0
METRICS_WEBHOOK_MAX_ATTEMPTS = 6
METRICS_WEBHOOK_BACKOFF_S = 5.0

# The guardian (guardian.services, jobs.kinds.lane_guard; tests/guardian/test_tick.py, tests/jobs/test_launch_guard.py):
# readings (or canaries) in a row that must miss before a replica is stalled — one slow moment is not a
# stall; a canary's timeout (Dynamo sends its canary with 3 s); how often a starting lane's nodes are read
# (a leak of 10 GiB/s real goes from the 8 GiB floor to 0 in 0.8 s in the launch test; a Spark's start-up
# drains far slower).
GUARDIAN_MISSES = 3
GUARDIAN_CANARY_TIMEOUT_S = 3.0
GUARDIAN_MEMORY_INTERVAL_S = 1.0
# The lane page flags a budget whose node reports more memory in use than it counts by more than this.
LANES_BUDGET_MARGIN_GIB = 4.0
# Sign-in with OpenID Connect (portal.oidc): the timeout (s) of each call to the provider (token,
# userinfo, JWKS), so a hung provider fails the sign-in instead of holding a web worker.
OIDC_HTTP_TIMEOUT_S = 10.0
