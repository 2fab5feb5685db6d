"""The one settings module. Everything comes from the environment (see .env.example)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import dj_database_url
import django_stubs_ext
from celery.schedules import crontab  # noqa: F401  (apps add crontab entries to BEAT_SCHEDULE)

from core.env import env_bool, env_float, env_int, env_list, env_str, env_url

django_stubs_ext.monkeypatch()  # lets admin.ModelAdmin[Model] etc. run as written for mypy

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("PORTAL_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("PORTAL_DEBUG", True)
_DEV_SECRET = "dev-only-secret-key-not-for-production-use-0123456789abcdef"
SECRET_KEY = env_str("PORTAL_SECRET_KEY", _DEV_SECRET if DEBUG else None)
if not DEBUG and SECRET_KEY == _DEV_SECRET:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured("PORTAL_SECRET_KEY: must be set to a private value when PORTAL_DEBUG=0")

# Fernet key that encrypts SSH private keys at rest (lanes.crypto). The dev default is public:
# production must set its own (python -c "from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())").
_DEV_CREDENTIALS_KEY = "ZGV2LW9ubHkta2V5LW5vdC1mb3ItcHJvZHVjdGlvbiE="
CREDENTIALS_KEY = env_str("PORTAL_CREDENTIALS_KEY", _DEV_CREDENTIALS_KEY if DEBUG else None)

ALLOWED_HOSTS = env_list("PORTAL_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("PORTAL_CSRF_TRUSTED_ORIGINS", [])
SESSION_COOKIE_SECURE = env_bool("PORTAL_SECURE_COOKIES", not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "channels",
    "core",
    "lanes",
    "jobs",
    "routing",
    "gateway",
    "benchmarks",
    "metrics",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "core.middleware.RefuseControlCharacters",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "portal.urls"
ASGI_APPLICATION = "portal.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "core.roles.roles_context",
            ],
        },
    },
]

# Embedded default: SQLite in var/. Production: DATABASE_URL=postgres://...
DATABASE_URL = env_url(
    "DATABASE_URL", f"sqlite:///{VAR_DIR / 'portal.sqlite3'}", schemes=("sqlite", "postgres", "postgresql")
)
DATABASES: dict[str, Any] = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=60)}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # Web, worker and beat share one SQLite file: wait for locks instead of failing at once.
    DATABASES["default"]["OPTIONS"] = {"timeout": 20, "transaction_mode": "IMMEDIATE"}
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    VAR_DIR.mkdir(parents=True, exist_ok=True)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Embedded default: the run command starts a private redis-server on this port.
EMBEDDED_REDIS_PORT = env_int("PORTAL_EMBEDDED_REDIS_PORT", 6390, minimum=1, maximum=65535)
REDIS_URL = env_url("REDIS_URL", f"redis://127.0.0.1:{EMBEDDED_REDIS_PORT}/0", schemes=("redis", "rediss"))
# Keys and channel groups are prefixed so that parallel test workers never see each other.
REDIS_PREFIX = env_str("PORTAL_REDIS_PREFIX", "portal") + os.environ.get("PYTEST_XDIST_WORKER", "")

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        # redis-py's async client times a read out after 5 s by default, exactly the 5 s
        # blocking pop channels_redis waits on: every idle socket would die and drop events.
        "CONFIG": {
            "hosts": [{"address": REDIS_URL, "socket_timeout": 30}],
            "prefix": f"{REDIS_PREFIX}:asgi",
            "capacity": 5000,
        },
    }
}

CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": REDIS_PREFIX,
    }
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
# Front-end libraries come from the npm registry (package.json, pinned), served by the portal.
STATICFILES_DIRS = [
    BASE_DIR / "static",
    ("vendor/bootstrap", BASE_DIR / "node_modules" / "bootstrap" / "dist"),
    ("vendor/chartjs", BASE_DIR / "node_modules" / "chart.js" / "dist"),
    ("vendor/swagger-ui", BASE_DIR / "node_modules" / "swagger-ui-dist"),
]
WHITENOISE_USE_FINDERS = True

# Celery: Redis is the broker; every job is a Celery task.
CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True  # a job survives a worker crash; the runner's claim stops doubles
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_TASK_DEFAULT_QUEUE = f"{REDIS_PREFIX}-default"
# Periodic work (beat's tasks: heartbeat, reaper, purge, lane health watcher, scrapes) has its own
# queue and worker process, so four 40-minute launches can never starve it. Every task named in
# CELERY_BEAT_SCHEDULE goes there (portal.celery routes it); a periodic task also run on demand
# opts in by being listed in PERIODIC_TASKS.
PERIODIC_QUEUE = f"{REDIS_PREFIX}-periodic"
PERIODIC_TASKS: list[str] = []
WORKER_CONCURRENCY = env_int("PORTAL_WORKER_CONCURRENCY", 4, minimum=1, maximum=256)
PERIODIC_WORKER_CONCURRENCY = env_int("PORTAL_PERIODIC_WORKER_CONCURRENCY", 3, minimum=1, maximum=64)
# The longest a job may run (its time_limit_s parameter); Celery's hard limit adds 90 s.
JOBS_MAX_TIME_LIMIT_S = env_float("PORTAL_JOBS_MAX_TIME_LIMIT_S", 86_400.0, minimum=60, maximum=7 * 86_400)
# Redis redelivers an unacknowledged task after the visibility timeout: below the longest job's
# limit, a launch still waiting for health would be handed to a second worker.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": int(JOBS_MAX_TIME_LIMIT_S) + 600,
                                   "global_keyprefix": f"{REDIS_PREFIX}:"}
CELERY_TASK_ALWAYS_EAGER = False
# Every beat entry carries an `expires` no longer than its period: a run still queued when
# the next one is due is dropped by the worker instead of piling up behind a slow or hung one
# (tests/portal/test_periodic_queue.py holds every entry to it).
CELERY_BEAT_SCHEDULE: dict[str, dict[str, Any]] = {
    # a late heartbeat would claim "alive now" for a backlogged worker: drop it
    "portal-heartbeat": {"task": "core.tasks.publish_heartbeat", "schedule": 10.0, "options": {"expires": 10.0}},
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "filters": {"forbidden_one_line": {"()": "core.logfilters.ForbiddenOneLine"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain",
                             "filters": ["forbidden_one_line"]}},
    "root": {"handlers": ["console"], "level": env_str("PORTAL_LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}

# Portal-wide knobs.
HEALTHZ_TIMEOUT_S = env_float("PORTAL_HEALTHZ_TIMEOUT_S", 1.0, minimum=0.05, maximum=30)

# --- gateway --- (the gateway app: the OpenAI-compatible /v1/ endpoint)
# Lane that model="auto" goes to until the semantic router decides (empty = the first serving lane).
GATEWAY_DEFAULT_LANE = env_str("PORTAL_GATEWAY_DEFAULT_LANE", "")
# Upstream (vLLM) timeouts, seconds. A timeout is never retried nor failed over: the lane may have the request.
GATEWAY_CONNECT_TIMEOUT_S = env_float("PORTAL_GATEWAY_CONNECT_TIMEOUT_S", 3.0, minimum=0.1, maximum=60)
GATEWAY_READ_TIMEOUT_S = env_float("PORTAL_GATEWAY_READ_TIMEOUT_S", 600.0, minimum=1, maximum=7200)
GATEWAY_MAX_CONNECTIONS = env_int("PORTAL_GATEWAY_MAX_CONNECTIONS", 1000, minimum=1)
# Largest /v1 request body (bytes): 413 above it, from content-length and while reading. A 1M-token
# prompt is ~4 MB of text; JSON escaping and tool schemas can double it.
GATEWAY_MAX_BODY_BYTES = env_int("PORTAL_GATEWAY_MAX_BODY_BYTES", 16 * 1024 * 1024, minimum=1024, maximum=2**31)
# Bodies above this size are parsed and validated in worker processes (gateway.large) and
# forwarded as the client's bytes with the gateway's few edits, so they never hold the web process's
# GIL; at most WORKERS run at once and QUEUE wait, beyond that 503 with retry-after. The workers run
# at this niceness (0-19): on a busy machine the web process's small requests get the CPU first.
GATEWAY_LARGE_BODY_BYTES = env_int("PORTAL_GATEWAY_LARGE_BODY_BYTES", 256 * 1024, minimum=1024, maximum=2**31)
GATEWAY_LARGE_BODY_WORKERS = env_int("PORTAL_GATEWAY_LARGE_BODY_WORKERS", 2, minimum=1, maximum=64)
GATEWAY_LARGE_BODY_QUEUE = env_int("PORTAL_GATEWAY_LARGE_BODY_QUEUE", 4, minimum=0, maximum=1024)
GATEWAY_LARGE_BODY_NICENESS = env_int("PORTAL_GATEWAY_LARGE_BODY_NICENESS", 10, minimum=0, maximum=19)
# Bytes of large bodies one web process reads per second, all clients together (up to one second's
# worth at once; 0: unpaced). Past it the reader waits and TCP holds the client back
# (gateway.pace), so a flood of huge bodies cannot take the event loop from small requests.
GATEWAY_LARGE_BODY_BYTES_PER_S = env_int("PORTAL_GATEWAY_LARGE_BODY_BYTES_PER_S", 32 * 1024 * 1024, minimum=0,
                                         maximum=2**40)
# Longest wait for Redis on a request's path (the admission and release scripts, seconds): past
# it the connection is given up and reopened, and the request fails closed (500) instead of hanging.
GATEWAY_REDIS_TIMEOUT_S = env_float("PORTAL_GATEWAY_REDIS_TIMEOUT_S", 5.0, minimum=0.05, maximum=120)
# Bytes of large bodies one web process holds at once, from the first byte read until the request
# ends (0: unbounded); past it a large body gets 503 server_busy with retry-after (one is always let in).
GATEWAY_LARGE_BODY_HELD_MAX_BYTES = env_int("PORTAL_GATEWAY_LARGE_BODY_HELD_MAX_BYTES", 256 * 1024 * 1024,
                                            minimum=0, maximum=2**40)
# Largest `n` (choices per request) a client may ask for: every choice is a sequence on the lane.
GATEWAY_MAX_N = env_int("PORTAL_GATEWAY_MAX_N", 8, minimum=1, maximum=128)
# In-process caches of API keys and lanes (revocation is immediate anyway, through Redis).
GATEWAY_KEY_CACHE_TTL_S = env_float("PORTAL_GATEWAY_KEY_CACHE_TTL_S", 30.0, minimum=0, maximum=3600)
GATEWAY_LANE_CACHE_TTL_S = env_float("PORTAL_GATEWAY_LANE_CACHE_TTL_S", 2.0, minimum=0, maximum=600)
# Circuit breaker per lane and process: open after N consecutive upstream failures, for S seconds.
GATEWAY_BREAKER_FAILURES = env_int("PORTAL_GATEWAY_BREAKER_FAILURES", 5, minimum=1)
GATEWAY_BREAKER_COOLDOWN_S = env_float("PORTAL_GATEWAY_BREAKER_COOLDOWN_S", 10.0, minimum=0.1)
# Replicas (gateway.replicas): a conversation stays on its replica unless that one
# has more than factor × (all outstanding + 1) / replicas + slack requests in flight; every
# worker shares breakers and in-flight counts through Redis, read this often.
GATEWAY_REPLICA_LOAD_FACTOR = env_float("PORTAL_GATEWAY_REPLICA_LOAD_FACTOR", 1.25, minimum=1.0, maximum=100)
GATEWAY_REPLICA_LOAD_SLACK = env_int("PORTAL_GATEWAY_REPLICA_LOAD_SLACK", 2, minimum=0, maximum=10_000)
GATEWAY_HEALTH_SYNC_S = env_float("PORTAL_GATEWAY_HEALTH_SYNC_S", 0.25, minimum=0.01, maximum=60)
# Idempotency-Key: how long a finished answer is kept for replay, and the largest one kept.
GATEWAY_IDEMPOTENCY_TTL_S = env_int("PORTAL_GATEWAY_IDEMPOTENCY_TTL_S", 600, minimum=1)
GATEWAY_IDEMPOTENCY_MAX_BYTES = env_int("PORTAL_GATEWAY_IDEMPOTENCY_MAX_BYTES", 1_048_576, minimum=0)
# Context guard: below this share of the lane's limit the cheap estimate suffices; above, ask /tokenize.
GATEWAY_TOKENIZE_THRESHOLD = env_float("PORTAL_GATEWAY_TOKENIZE_THRESHOLD", 0.5, minimum=0, maximum=1)
# Request log: batch size and flush interval of the in-process writer; retention and purge batch.
GATEWAY_LOG_BATCH = env_int("PORTAL_GATEWAY_LOG_BATCH", 500, minimum=1)
GATEWAY_LOG_FLUSH_S = env_float("PORTAL_GATEWAY_LOG_FLUSH_S", 1.0, minimum=0.01)
GATEWAY_LOG_RETENTION_DAYS = env_int("PORTAL_GATEWAY_LOG_RETENTION_DAYS", 30, minimum=1)
GATEWAY_PURGE_BATCH = env_int("PORTAL_GATEWAY_PURGE_BATCH", 10_000, minimum=1)
GATEWAY_PURGE_MAX_SECONDS = env_float("PORTAL_GATEWAY_PURGE_MAX_SECONDS", 240.0, minimum=1)
# Mirrored traffic: off unless a base URL is set (an external OpenAI-compatible endpoint).
GATEWAY_MIRROR_BASE_URL = env_str("PORTAL_GATEWAY_MIRROR_BASE_URL", "")
GATEWAY_MIRROR_API_KEY = env_str("PORTAL_GATEWAY_MIRROR_API_KEY", "")
GATEWAY_MIRROR_MODEL = env_str("PORTAL_GATEWAY_MIRROR_MODEL", "")
GATEWAY_MIRROR_SHARE = env_float("PORTAL_GATEWAY_MIRROR_SHARE", 0.01, minimum=0, maximum=1)
GATEWAY_MIRROR_TIMEOUT_S = env_float("PORTAL_GATEWAY_MIRROR_TIMEOUT_S", 120.0, minimum=1)
# httpx logs every request at INFO: on the gateway's hot path that is a log line per call.
_gateway_loggers: Any = LOGGING["loggers"]
_gateway_loggers.update({"httpx": {"level": "WARNING"}, "httpx2": {"level": "WARNING"}})
# The request log's retention runs with the metrics' storage step (metrics.tasks.maintain_storage):
# on PostgreSQL it drops whole day partitions, on SQLite it deletes in batches (routing's purge).

# --- jobs --- (jobs: runner, transports, live logs)
# Seconds between a running job's heartbeats, and how often it looks for a cancel request.
JOBS_HEARTBEAT_S = env_float("PORTAL_JOBS_HEARTBEAT_S", 5.0, minimum=0.1, maximum=300)
JOBS_CANCEL_POLL_S = env_float("PORTAL_JOBS_CANCEL_POLL_S", 0.5, minimum=0.05, maximum=30)
# A running job without a heartbeat for this long is marked lost by the reaper (beat).
JOBS_LOST_AFTER_S = env_float("PORTAL_JOBS_LOST_AFTER_S", 60.0, minimum=1, maximum=86_400)
JOBS_REAPER_INTERVAL_S = env_float("PORTAL_JOBS_REAPER_INTERVAL_S", 30.0, minimum=1, maximum=3600)
# Time limit of a job (launch: the health wait plus this); Celery's soft/hard limits sit above it.
JOBS_DEFAULT_TIME_LIMIT_S = env_float("PORTAL_JOBS_DEFAULT_TIME_LIMIT_S", 900.0, minimum=5, maximum=86_400)
# After a cancel or time-out, how long a launch may take to stop what it started (stop plan).
JOBS_CANCEL_CLEANUP_S = env_float("PORTAL_JOBS_CANCEL_CLEANUP_S", 150.0, minimum=5, maximum=480)
JOBS_LAUNCH_WAIT_DEFAULT_S = env_float("PORTAL_JOBS_LAUNCH_WAIT_DEFAULT_S", 2400.0, minimum=1, maximum=86_400)
# Live logs: lines are cut at this many characters; batches are flushed this often / this big.
JOBS_LOG_MAX_LINE_CHARS = env_int("PORTAL_JOBS_LOG_MAX_LINE_CHARS", 8192, minimum=80, maximum=1_000_000)
JOBS_LOG_FLUSH_S = env_float("PORTAL_JOBS_LOG_FLUSH_S", 0.1, minimum=0.01, maximum=10)
JOBS_LOG_BATCH_LINES = env_int("PORTAL_JOBS_LOG_BATCH_LINES", 1000, minimum=1, maximum=100_000)
# SSH: connect timeout and keepalive interval (seconds).
JOBS_SSH_CONNECT_TIMEOUT_S = env_float("PORTAL_JOBS_SSH_CONNECT_TIMEOUT_S", 10.0, minimum=0.5, maximum=120)
JOBS_SSH_KEEPALIVE_S = env_float("PORTAL_JOBS_SSH_KEEPALIVE_S", 15.0, minimum=1, maximum=600)
CELERY_BEAT_SCHEDULE.update(
    {"jobs-reap-lost": {"task": "jobs.tasks.reap_lost_jobs", "schedule": JOBS_REAPER_INTERVAL_S,
                        "options": {"expires": JOBS_REAPER_INTERVAL_S}}}
)
# RDMA watchdog: seconds between two measurements of each multi-node lane, and the first of
# the 100 ports its ib_send_lat pairs use (one per lane).
FABRIC_WATCHDOG_INTERVAL_S = env_float("PORTAL_FABRIC_WATCHDOG_INTERVAL_S", 30.0, minimum=1, maximum=3600)
FABRIC_WATCHDOG_BASE_PORT = env_int("PORTAL_FABRIC_WATCHDOG_BASE_PORT", 18400, minimum=1024, maximum=65000)
CELERY_BEAT_SCHEDULE.update({"fabric-rdma-watchdog": {
    "task": "jobs.tasks.rdma_watchdog", "schedule": FABRIC_WATCHDOG_INTERVAL_S,
    # A tick that outlives the next one is dropped rather than measured twice at once.
    "options": {"expires": FABRIC_WATCHDOG_INTERVAL_S},
}})

# --- lanes --- (nodes, lanes, launch plans)
# The demo's simulated cluster (sparksim): where its node directories live, and real
# seconds per simulated second (1.0 = the seeds' timings; smaller is faster).
SIM_ROOT = Path(env_str("PORTAL_SIM_ROOT", str(VAR_DIR / "sparksim")))
# How the worker reaches the portal's own /v1/ gateway (benchmarks through the gateway).
GATEWAY_URL = env_str("PORTAL_GATEWAY_URL", "http://127.0.0.1:8080")
SIM_TIME_SCALE = env_float("PORTAL_SIM_TIME_SCALE", 1.0, minimum=0.0001, maximum=100)
# The lane health watcher (lanes.watcher, on the periodic queue): probe interval, failed probes in a
# row before a serving lane is failed / a node unreachable, and the probes' timeouts (seconds).
LANES_WATCH_INTERVAL_S = env_float("PORTAL_LANES_WATCH_INTERVAL_S", 10.0, minimum=0.2, maximum=3600)
LANES_WATCH_FAILURES = env_int("PORTAL_LANES_WATCH_FAILURES", 2, minimum=1, maximum=100)
LANES_WATCH_CONNECT_TIMEOUT_S = env_float("PORTAL_LANES_WATCH_CONNECT_TIMEOUT_S", 1.0, minimum=0.05, maximum=30)
LANES_WATCH_TIMEOUT_S = env_float("PORTAL_LANES_WATCH_TIMEOUT_S", 2.0, minimum=0.05, maximum=60)
CELERY_BEAT_SCHEDULE.update(
    {"lanes-health-watcher": {"task": "lanes.tasks.watch_lane_health", "schedule": LANES_WATCH_INTERVAL_S,
                              # a tick queued behind a slow one is stale by the next: drop it
                              "options": {"expires": LANES_WATCH_INTERVAL_S}}}
)

# --- router --- (the routing app: the semantic router behind model="auto")
# The decision's matrix product (200 × 384) is tiny: OpenBLAS's own thread pool only adds
# waiting for its threads — ~9 ms a request on a busy 2-core machine, measured. Set before
# numpy is first imported (the apps load after settings); onnxruntime has its own threads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# The encoder's directory: model.onnx + tokenizer.json (+ encoder.json). `make` installs the
# demo model here; production puts bge-small-en-v1.5 in its own directory (docs/guide-team-lead.md).
ROUTER_MODEL_DIR = Path(env_str("PORTAL_ROUTER_MODEL_DIR", str(BASE_DIR / "var" / "models" / "all-minilm-l6-v2-int8")))
# onnxruntime threads per process (0 = one per core).
ROUTER_THREADS = env_int("PORTAL_ROUTER_THREADS", 0, minimum=0, maximum=64)
# Most queries embedded in one forward pass, and identical queries kept in memory.
ROUTER_MAX_BATCH = env_int("PORTAL_ROUTER_MAX_BATCH", 32, minimum=1, maximum=512)
ROUTER_CACHE_SIZE = env_int("PORTAL_ROUTER_CACHE_SIZE", 4096, minimum=0, maximum=1_000_000)
# How long a gateway process trusts its copy of the published version before asking Redis
# (a publish is seen by every process within this).
ROUTER_VERSION_CHECK_S = env_float("PORTAL_ROUTER_VERSION_CHECK_S", 0.25, minimum=0, maximum=10)
# Conversation affinity: a conversation is known by its first N messages and keeps its lane
# (and the lane's prefix cache) for this long. 0 messages = off.
ROUTER_AFFINITY_MESSAGES = env_int("PORTAL_ROUTER_AFFINITY_MESSAGES", 2, minimum=0, maximum=20)
ROUTER_AFFINITY_TTL_S = env_int("PORTAL_ROUTER_AFFINITY_TTL_S", 3600, minimum=1)
# Shadow evaluation: the share of routed requests on which the shadow draft also decides.
ROUTER_SHADOW_SHARE = env_float("PORTAL_ROUTER_SHADOW_SHARE", 0.1, minimum=0, maximum=1)
# --- metrics --- (scrapes, samples, charts, alerts, the portal's own /metrics)
# Scrape interval of every serving lane's /metrics and every node (s), and each target's time budget.
METRICS_SCRAPE_INTERVAL_S = env_float("PORTAL_METRICS_SCRAPE_INTERVAL_S", 5.0, minimum=0.5, maximum=3600)
METRICS_SCRAPE_TIMEOUT_S = env_float("PORTAL_METRICS_SCRAPE_TIMEOUT_S", 2.0, minimum=0.1, maximum=60)
# Window of the latency percentiles (TTFT, inter-token, end-to-end p50/p95): bucket deltas
# between the reading about this long ago and now, like Prometheus' histogram_quantile over
# rate(...[1m]). At least one scrape interval; rates stay per interval.
METRICS_PERCENTILE_WINDOW_S = env_float("PORTAL_METRICS_PERCENTILE_WINDOW_S", 60.0, minimum=1, maximum=3600)
if METRICS_PERCENTILE_WINDOW_S < METRICS_SCRAPE_INTERVAL_S:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(
        f"PORTAL_METRICS_PERCENTILE_WINDOW_S: must be at least the scrape interval "
        f"(PORTAL_METRICS_SCRAPE_INTERVAL_S = {METRICS_SCRAPE_INTERVAL_S:g} s); got {METRICS_PERCENTILE_WINDOW_S:g}"
    )
# Targets scraped at once (HTTP connections, SSH channels); the rest wait for a slot.
METRICS_SCRAPE_CONCURRENCY = env_int("PORTAL_METRICS_SCRAPE_CONCURRENCY", 64, minimum=1, maximum=1024)
# Retention: raw samples (days), 1-minute (days) and 1-hour (days) downsamples.
METRICS_RAW_RETENTION_DAYS = env_int("PORTAL_METRICS_RAW_RETENTION_DAYS", 2, minimum=1, maximum=366)
METRICS_MINUTE_RETENTION_DAYS = env_int("PORTAL_METRICS_MINUTE_RETENTION_DAYS", 30, minimum=1, maximum=3660)
METRICS_HOUR_RETENTION_DAYS = env_int("PORTAL_METRICS_HOUR_RETENTION_DAYS", 400, minimum=1, maximum=36600)
# PostgreSQL: daily partitions created this many days ahead.
METRICS_PARTITIONS_AHEAD_DAYS = env_int("PORTAL_METRICS_PARTITIONS_AHEAD_DAYS", 3, minimum=1, maximum=60)
# Bearer token of GET /metrics (Prometheus format); empty = the endpoint answers 404.
METRICS_TOKEN = env_str("PORTAL_METRICS_TOKEN", "")
# Alert rules (a rule with an empty threshold is off).
METRICS_ALERT_KV_PCT = env_float("PORTAL_METRICS_ALERT_KV_PCT", 95.0, minimum=0, maximum=100)
METRICS_ALERT_KV_FOR_S = env_float("PORTAL_METRICS_ALERT_KV_FOR_S", 300.0, minimum=0)
METRICS_ALERT_TTFT_P95_MS = env_float("PORTAL_METRICS_ALERT_TTFT_P95_MS", 5000.0, minimum=0)
METRICS_ALERT_NODE_MEM_GIB = env_float("PORTAL_METRICS_ALERT_NODE_MEM_GIB", 4.0, minimum=0)
METRICS_ALERT_SWAP_GIB = env_float("PORTAL_METRICS_ALERT_SWAP_GIB", 0.0, minimum=0)
METRICS_ALERT_SCRAPE_FAILURES = env_int("PORTAL_METRICS_ALERT_SCRAPE_FAILURES", 3, minimum=1)
# Optional webhook: alert changes POSTed as JSON, retried with exponential backoff.
METRICS_ALERT_WEBHOOK_URL = env_str("PORTAL_METRICS_ALERT_WEBHOOK_URL", "")
METRICS_WEBHOOK_TIMEOUT_S = env_float("PORTAL_METRICS_WEBHOOK_TIMEOUT_S", 5.0, minimum=0.1, maximum=120)
METRICS_WEBHOOK_MAX_ATTEMPTS = env_int("PORTAL_METRICS_WEBHOOK_MAX_ATTEMPTS", 6, minimum=1, maximum=50)
METRICS_WEBHOOK_BACKOFF_S = env_float("PORTAL_METRICS_WEBHOOK_BACKOFF_S", 5.0, minimum=0.1, maximum=3600)
CELERY_BEAT_SCHEDULE.update(
    {
        "metrics-scrape": {"task": "metrics.tasks.scrape_tick", "schedule": METRICS_SCRAPE_INTERVAL_S,
                           "options": {"expires": METRICS_SCRAPE_INTERVAL_S}},
        # idempotent recomputations: the next run covers a dropped one
        "metrics-downsample": {"task": "metrics.tasks.downsample", "schedule": 60.0, "options": {"expires": 60.0}},
        # a hung receiver holds a run for up to its timeout per delivery: runs queued behind it expire
        "metrics-webhooks": {"task": "metrics.tasks.deliver_webhooks", "schedule": 5.0, "options": {"expires": 5.0}},
        "metrics-maintain-storage": {"task": "metrics.tasks.maintain_storage", "schedule": crontab(minute="23"),
                                     "options": {"expires": 3600.0}},
    }
)
