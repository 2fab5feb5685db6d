"""The one settings module. What an operator sets comes from the environment (docs/configuration.md,
.env.example); the internal tuning knobs are constants of portal.tuning, imported here, so code
reads both as settings.X and tests vary both with pytest-django's `settings` fixture. A variable
named PORTAL_* that no setting reads is reported at start-up (ENV_WARNINGS, check portal.W001)."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import dj_database_url
import django_stubs_ext
from celery.schedules import crontab  # noqa: F401  (apps add crontab entries to BEAT_SCHEDULE)

from core.env import (
    env_bool,
    env_float,
    env_int,
    env_json_object,
    env_list,
    env_str,
    env_time_zone,
    env_url,
    names_read,
    unknown_variables,
)
from portal.tuning import *  # noqa: F403  (the internal constants are settings too: code reads settings.X)
from portal.tuning import JOBS_REAPER_INTERVAL_S, OIDC_HTTP_TIMEOUT_S

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
    "core",  # first: its createsuperuser (which gives the admin role) stands in for auth's
    "core.admin_apps.PortalAdminConfig",  # django.contrib.admin with the portal's site
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "channels",
    "lanes",
    "jobs",
    "routing",
    "gateway",
    "benchmarks",
    "metrics",
    "guardian",
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

# --- sign-in with the company's identity provider --- (OpenID Connect, portal.oidc; off while
# PORTAL_OIDC_CLIENT_ID is empty). Endpoints as the provider's /.well-known/openid-configuration
# lists them; the client secret is read here only and never logged.
OIDC_ENABLED = bool(env_str("PORTAL_OIDC_CLIENT_ID", ""))
OIDC_PROVIDER_NAME = env_str("PORTAL_OIDC_PROVIDER_NAME", "your company account")
OIDC_RP_CLIENT_ID = env_str("PORTAL_OIDC_CLIENT_ID", "")
OIDC_RP_CLIENT_SECRET = env_str("PORTAL_OIDC_CLIENT_SECRET", "")
OIDC_ISSUER = env_str("PORTAL_OIDC_ISSUER", "")
OIDC_OP_AUTHORIZATION_ENDPOINT = env_str("PORTAL_OIDC_AUTHORIZATION_ENDPOINT", "")
OIDC_OP_TOKEN_ENDPOINT = env_str("PORTAL_OIDC_TOKEN_ENDPOINT", "")
OIDC_OP_USER_ENDPOINT = env_str("PORTAL_OIDC_USERINFO_ENDPOINT", "")
OIDC_OP_JWKS_ENDPOINT = env_str("PORTAL_OIDC_JWKS_ENDPOINT", "")
OIDC_RP_SIGN_ALGO = env_str("PORTAL_OIDC_SIGN_ALGO", "RS256")
OIDC_RP_SCOPES = env_str("PORTAL_OIDC_SCOPES", "openid email profile")
OIDC_GROUPS_CLAIM = env_str("PORTAL_OIDC_GROUPS_CLAIM", "groups")
OIDC_USERNAME_CLAIM = env_str("PORTAL_OIDC_USERNAME_CLAIM", "preferred_username")
# {"roles": {group: role}, "teams": {group: [team, ...]}} (core.oidc_map; checked at start-up).
OIDC_GROUP_MAP = env_json_object("PORTAL_OIDC_GROUP_MAP", "PORTAL_OIDC_GROUP_MAP_FILE")
# A first sign-in whose user name is a local account's: refused, unless this is on and the
# provider vouches for the same e-mail (email_verified); never a superuser (break-glass stays local).
OIDC_LINK_LOCAL_ACCOUNTS = env_bool("PORTAL_OIDC_LINK_LOCAL_ACCOUNTS", False)
# Local passwords for superusers only (break-glass) once single sign-on is on.
OIDC_LOCAL_LOGIN_SUPERUSERS_ONLY = env_bool("PORTAL_OIDC_LOCAL_LOGIN_SUPERUSERS_ONLY", False)
if OIDC_ENABLED:
    from django.core.exceptions import ImproperlyConfigured

    for _name, _value in [("CLIENT_SECRET", OIDC_RP_CLIENT_SECRET), ("ISSUER", OIDC_ISSUER),
                          ("AUTHORIZATION_ENDPOINT", OIDC_OP_AUTHORIZATION_ENDPOINT),
                          ("TOKEN_ENDPOINT", OIDC_OP_TOKEN_ENDPOINT), ("USERINFO_ENDPOINT", OIDC_OP_USER_ENDPOINT),
                          ("JWKS_ENDPOINT", OIDC_OP_JWKS_ENDPOINT)]:
        if not _value:
            raise ImproperlyConfigured(f"PORTAL_OIDC_{_name}: required when PORTAL_OIDC_CLIENT_ID is set")
OIDC_USE_PKCE = True
OIDC_USE_NONCE = True
OIDC_TIMEOUT = OIDC_HTTP_TIMEOUT_S
OIDC_CREATE_USER = True
OIDC_CALLBACK_CLASS = "portal.oidc_views.Callback"
OIDC_AUTHENTICATE_CLASS = "portal.oidc_views.Authenticate"
LOGIN_REDIRECT_URL_FAILURE = "login"
AUTHENTICATION_BACKENDS = ["core.auth.LocalBackend", "portal.oidc.ProviderBackend"]

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

# A refused CSRF check under /api/ answers in the API's shape (401 without a session).
CSRF_FAILURE_VIEW = "core.api.csrf_failure"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "filters": {"forbidden_one_line": {"()": "core.logfilters.ForbiddenOneLine"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain",
                             "filters": ["forbidden_one_line"]}},
    "root": {"handlers": ["console"], "level": env_str("PORTAL_LOG_LEVEL", "INFO")},
    # Django's own handlers off (its DEBUG console handler printed every 403 with its traceback,
    # unfiltered, into var/log/web.log): its records reach the root's filtered console only.
    "loggers": {"django": {"handlers": [], "level": "INFO", "propagate": True},
                "django.db.backends": {"level": "WARNING"}},
}

# make run (portal.launcher): address and port of its web process.
RUN_HOST = env_str("PORTAL_HOST", "127.0.0.1")
RUN_PORT = env_int("PORTAL_PORT", 8080, minimum=1, maximum=65535)

# --- gateway --- (the gateway app: the OpenAI-compatible /v1/ endpoint)
# Lane that model="auto" goes to until the semantic router decides (empty = the first serving lane).
GATEWAY_DEFAULT_LANE = env_str("PORTAL_GATEWAY_DEFAULT_LANE", "")
# Upstream (vLLM) read timeout, seconds. A timeout is never retried nor failed over: the lane may have the request.
GATEWAY_READ_TIMEOUT_S = env_float("PORTAL_GATEWAY_READ_TIMEOUT_S", 600.0, minimum=1, maximum=7200)
# Largest /v1 request body (bytes): 413 above it, from content-length and while reading. A 1M-token
# prompt is ~4 MB of text; JSON escaping and tool schemas can double it.
GATEWAY_MAX_BODY_BYTES = env_int("PORTAL_GATEWAY_MAX_BODY_BYTES", 16 * 1024 * 1024, minimum=1024, maximum=2**31)
# Bytes of large bodies (portal.tuning.GATEWAY_LARGE_BODY_BYTES) one web process reads per second, all
# clients together (up to one second's worth at once; 0: unpaced). Past it the reader waits and TCP holds the client back
# (gateway.pace), so a flood of huge bodies cannot take the event loop from small requests.
GATEWAY_LARGE_BODY_BYTES_PER_S = env_int("PORTAL_GATEWAY_LARGE_BODY_BYTES_PER_S", 32 * 1024 * 1024, minimum=0,
                                         maximum=2**40)
# Bytes of large bodies one web process holds at once, from the first byte read until the request
# ends (0: unbounded); past it a large body gets 503 server_busy with retry-after (one is always let in).
GATEWAY_LARGE_BODY_HELD_MAX_BYTES = env_int("PORTAL_GATEWAY_LARGE_BODY_HELD_MAX_BYTES", 256 * 1024 * 1024,
                                            minimum=0, maximum=2**40)
# Largest `n` (choices per request) a client may ask for: every choice is a sequence on the lane.
GATEWAY_MAX_N = env_int("PORTAL_GATEWAY_MAX_N", 8, minimum=1, maximum=128)
# Fair share of a full lane (gateway.fair, docs/guide-admin.md "Fair share"): a replica takes
# Lane.gateway_slots (else max_num_seqs) requests at once; more wait in its queue, ordered fairly
# across keys. Off: every request goes straight to the engine (its own first-come queue).
GATEWAY_FAIR_QUEUE = env_bool("PORTAL_GATEWAY_FAIR_QUEUE", True)
# Requests waiting for one replica (more: 503 server_busy at once), and the longest wait (s: then 503).
GATEWAY_FAIR_MAX_QUEUE = env_int("PORTAL_GATEWAY_FAIR_MAX_QUEUE", 512, minimum=1, maximum=1_000_000)
GATEWAY_FAIR_MAX_WAIT_S = env_float("PORTAL_GATEWAY_FAIR_MAX_WAIT_S", 60.0, minimum=0.1, maximum=3600)
# A batch request that has waited this long (s) goes next, before interactive ones: never starved.
GATEWAY_FAIR_BATCH_AGING_S = env_float("PORTAL_GATEWAY_FAIR_BATCH_AGING_S", 30.0, minimum=0, maximum=3600)
# Headroom: while another key (flow) is active — its latest request under GATEWAY_FAIR_ACTIVE_S
# ago — the last GATEWAY_FAIR_RESERVE_SLOTS slots of a replica go only to a flow holding none, so
# its next request starts at once (an engine never evicts a running request for it). 0: none.
GATEWAY_FAIR_RESERVE_SLOTS = env_int("PORTAL_GATEWAY_FAIR_RESERVE_SLOTS", 1, minimum=0, maximum=64)
GATEWAY_FAIR_ACTIVE_S = env_float("PORTAL_GATEWAY_FAIR_ACTIVE_S", 10.0, minimum=0.1, maximum=3600)
# Request log retention (days).
GATEWAY_LOG_RETENTION_DAYS = env_int("PORTAL_GATEWAY_LOG_RETENTION_DAYS", 30, minimum=1)
# Token budgets' days and months are calendar ones in this zone (an IANA name).
GATEWAY_BUDGET_TIME_ZONE = env_time_zone("PORTAL_GATEWAY_BUDGET_TIME_ZONE", "UTC")
# Mirrored traffic: off unless a base URL is set (an external OpenAI-compatible endpoint).
GATEWAY_MIRROR_BASE_URL = env_str("PORTAL_GATEWAY_MIRROR_BASE_URL", "")
GATEWAY_MIRROR_API_KEY = env_str("PORTAL_GATEWAY_MIRROR_API_KEY", "")
GATEWAY_MIRROR_MODEL = env_str("PORTAL_GATEWAY_MIRROR_MODEL", "")
GATEWAY_MIRROR_SHARE = env_float("PORTAL_GATEWAY_MIRROR_SHARE", 0.01, minimum=0, maximum=1)
# httpx logs every request at INFO: on the gateway's hot path that is a log line per call.
_gateway_loggers: Any = LOGGING["loggers"]
_gateway_loggers.update({"httpx": {"level": "WARNING"}, "httpx2": {"level": "WARNING"}})
# The request log's retention runs with the metrics' storage step (metrics.tasks.maintain_storage):
# on PostgreSQL it drops whole day partitions, on SQLite it deletes in batches (gateway.services).

# --- jobs --- (jobs: runner, transports, live logs)
# Time limit of a job (launch: the health wait plus this); Celery's soft/hard limits sit above it.
JOBS_DEFAULT_TIME_LIMIT_S = env_float("PORTAL_JOBS_DEFAULT_TIME_LIMIT_S", 900.0, minimum=5, maximum=86_400)
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
# The demo's simulated cluster (sparksim): its node directories live in the var directory (a
# local node's sim_dir must be under it), and real seconds per simulated second (1.0 = the seeds'
# timings; smaller is faster).
SIM_ROOT = VAR_DIR / "sparksim"
# How the worker reaches the portal's own /v1/ gateway (benchmarks through the gateway).
GATEWAY_URL = env_str("PORTAL_GATEWAY_URL", "http://127.0.0.1:8080")
SIM_TIME_SCALE = env_float("PORTAL_SIM_TIME_SCALE", 1.0, minimum=0.0001, maximum=100)
# Where a model download job's huggingface_hub client fetches from (its HF_ENDPOINT): the
# hub, a mirror, or sparksim's hub stand-in.
HF_ENDPOINT = env_str("PORTAL_HF_ENDPOINT", "https://huggingface.co")
# The lane health watcher (lanes.watcher, on the periodic queue): probe interval, and failed probes
# in a row before a serving lane is failed / a node unreachable.
LANES_WATCH_INTERVAL_S = env_float("PORTAL_LANES_WATCH_INTERVAL_S", 10.0, minimum=0.2, maximum=3600)
LANES_WATCH_FAILURES = env_int("PORTAL_LANES_WATCH_FAILURES", 2, minimum=1, maximum=100)
# The probes' timeouts: portal.tuning.
CELERY_BEAT_SCHEDULE.update(
    {"lanes-health-watcher": {"task": "lanes.tasks.watch_lane_health", "schedule": LANES_WATCH_INTERVAL_S,
                              # a tick queued behind a slow one is stale by the next: drop it
                              "options": {"expires": LANES_WATCH_INTERVAL_S}}}
)

# --- guardian --- (lanes.liveness rules; the launch's smoke prompt and memory guard in jobs; the
# periodic progress/canary/memory watch in the guardian app). Each part turns off on its own.
# The launch ends with a deterministic prompt whose answer must be sane text (off: 0).
GUARDIAN_SMOKE = env_bool("PORTAL_GUARDIAN_SMOKE", True)
# MemAvailable floor per node (GiB) for a starting or serving lane: below it the engine on that node is
# stopped (0: the memory guard is off). Read every GUARDIAN_MEMORY_INTERVAL_S (portal.tuning) while a lane starts.
GUARDIAN_MEMORY_FLOOR_GIB = env_float("PORTAL_GUARDIAN_MEMORY_FLOOR_GIB", 8.0, minimum=0, maximum=1024)
# Forward progress of serving replicas: the guardian's tick (0: off), the window without progress while
# requests run before a replica is stalled (with GUARDIAN_MISSES readings in a row agreeing: portal.tuning).
GUARDIAN_INTERVAL_S = env_float("PORTAL_GUARDIAN_INTERVAL_S", 2.0, minimum=0, maximum=600)
GUARDIAN_PROGRESS_WINDOW_S = env_float("PORTAL_GUARDIAN_PROGRESS_WINDOW_S", 15.0, minimum=1, maximum=3600)
# The canary on an idle replica: a 1-token completion every interval (0: off; its timeout: portal.tuning).
GUARDIAN_CANARY_INTERVAL_S = env_float("PORTAL_GUARDIAN_CANARY_INTERVAL_S", 5.0, minimum=0, maximum=3600)
if GUARDIAN_INTERVAL_S > 0:
    CELERY_BEAT_SCHEDULE.update({"guardian-tick": {
        "task": "guardian.tasks.guardian_tick", "schedule": GUARDIAN_INTERVAL_S,
        "options": {"expires": GUARDIAN_INTERVAL_S}}})

# --- router --- (the routing app: the semantic router behind model="auto")
# The decision's matrix product (200 × 384) is tiny: OpenBLAS's own thread pool only adds
# waiting for its threads — ~9 ms a request on a busy 2-core machine, measured. Set before
# numpy is first imported (the apps load after settings); onnxruntime has its own threads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# The encoder's directory: model.onnx + tokenizer.json (+ encoder.json). `make` installs the
# demo model here; production puts bge-small-en-v1.5 in its own directory (docs/guide-team-lead.md).
ROUTER_MODEL_DIR = Path(env_str("PORTAL_ROUTER_MODEL_DIR", str(BASE_DIR / "var" / "models" / "all-minilm-l6-v2-int8")))
# Conversation affinity: a conversation is known by its first N messages (0 = off) and keeps its
# lane (and the lane's prefix cache) for portal.tuning.ROUTER_AFFINITY_TTL_S.
ROUTER_AFFINITY_MESSAGES = env_int("PORTAL_ROUTER_AFFINITY_MESSAGES", 2, minimum=0, maximum=20)
# --- metrics --- (scrapes, samples, charts, alerts, the portal's own /metrics)
# Scrape interval of every serving lane's /metrics and every node (s).
METRICS_SCRAPE_INTERVAL_S = env_float("PORTAL_METRICS_SCRAPE_INTERVAL_S", 5.0, minimum=0.5, maximum=3600)
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
# Retention: raw samples (days), 1-minute (days) and 1-hour (days) downsamples.
METRICS_RAW_RETENTION_DAYS = env_int("PORTAL_METRICS_RAW_RETENTION_DAYS", 2, minimum=1, maximum=366)
METRICS_MINUTE_RETENTION_DAYS = env_int("PORTAL_METRICS_MINUTE_RETENTION_DAYS", 30, minimum=1, maximum=3660)
METRICS_HOUR_RETENTION_DAYS = env_int("PORTAL_METRICS_HOUR_RETENTION_DAYS", 400, minimum=1, maximum=36600)
# Bearer token of GET /metrics (Prometheus format); empty = the endpoint answers 404.
METRICS_TOKEN = env_str("PORTAL_METRICS_TOKEN", "")
# Alert rules (a rule with an empty threshold is off).
METRICS_ALERT_KV_PCT = env_float("PORTAL_METRICS_ALERT_KV_PCT", 95.0, minimum=0, maximum=100)
METRICS_ALERT_KV_FOR_S = env_float("PORTAL_METRICS_ALERT_KV_FOR_S", 300.0, minimum=0)
METRICS_ALERT_TTFT_P95_MS = env_float("PORTAL_METRICS_ALERT_TTFT_P95_MS", 5000.0, minimum=0)
METRICS_ALERT_NODE_MEM_GIB = env_float("PORTAL_METRICS_ALERT_NODE_MEM_GIB", 4.0, minimum=0)
METRICS_ALERT_SWAP_GIB = env_float("PORTAL_METRICS_ALERT_SWAP_GIB", 0.0, minimum=0)
METRICS_ALERT_SCRAPE_FAILURES = env_int("PORTAL_METRICS_ALERT_SCRAPE_FAILURES", 3, minimum=1)
# Optional webhook: alert changes POSTed as JSON, retried with exponential backoff (portal.tuning).
METRICS_ALERT_WEBHOOK_URL = env_str("PORTAL_METRICS_ALERT_WEBHOOK_URL", "")
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

# --- the environment check --- (after every read above; core.checks reports it as portal.W001)
# Variables that were settings until they became constants (docs/configuration.md, "Not settings any
# more"): set in the environment, each is reported as no longer a setting, naming its constant.
_RETIRED = [
    "HEALTHZ_TIMEOUT_S", "PERIODIC_WORKER_CONCURRENCY", "SIM_ROOT", "LANES_WATCH_CONNECT_TIMEOUT_S",
    "LANES_WATCH_TIMEOUT_S", "GATEWAY_CONNECT_TIMEOUT_S", "GATEWAY_MAX_CONNECTIONS", "GATEWAY_LARGE_BODY_BYTES",
    "GATEWAY_LARGE_BODY_WORKERS", "GATEWAY_LARGE_BODY_QUEUE", "GATEWAY_LARGE_BODY_NICENESS",
    "GATEWAY_REDIS_TIMEOUT_S", "GATEWAY_KEY_CACHE_TTL_S", "GATEWAY_LANE_CACHE_TTL_S", "GATEWAY_BREAKER_FAILURES",
    "GATEWAY_BREAKER_COOLDOWN_S", "GATEWAY_REPLICA_LOAD_FACTOR", "GATEWAY_REPLICA_LOAD_SLACK",
    "GATEWAY_HEALTH_SYNC_S", "GATEWAY_IDEMPOTENCY_TTL_S", "GATEWAY_IDEMPOTENCY_MAX_BYTES",
    "GATEWAY_TOKENIZE_THRESHOLD", "GATEWAY_LOG_BATCH", "GATEWAY_LOG_FLUSH_S", "GATEWAY_PURGE_BATCH",
    "GATEWAY_PURGE_MAX_SECONDS", "GATEWAY_MIRROR_TIMEOUT_S", "JOBS_HEARTBEAT_S", "JOBS_CANCEL_POLL_S",
    "JOBS_LOST_AFTER_S", "JOBS_REAPER_INTERVAL_S", "JOBS_CANCEL_CLEANUP_S", "JOBS_LAUNCH_WAIT_DEFAULT_S",
    "JOBS_LOG_MAX_LINE_CHARS", "JOBS_LOG_FLUSH_S", "JOBS_LOG_BATCH_LINES", "JOBS_SSH_CONNECT_TIMEOUT_S",
    "JOBS_SSH_KEEPALIVE_S", "ROUTER_THREADS", "ROUTER_MAX_BATCH", "ROUTER_CACHE_SIZE", "ROUTER_VERSION_CHECK_S",
    "ROUTER_AFFINITY_TTL_S", "ROUTER_SHADOW_SHARE", "METRICS_SCRAPE_TIMEOUT_S", "METRICS_SCRAPE_CONCURRENCY",
    "METRICS_PARTITIONS_AHEAD_DAYS", "METRICS_WEBHOOK_TIMEOUT_S", "METRICS_WEBHOOK_MAX_ATTEMPTS",
    "METRICS_WEBHOOK_BACKOFF_S"
]
RETIRED_VARIABLES = {f"PORTAL_{name}": f"no longer a setting: now a constant (portal.tuning.{name} = {globals()[name]!r})"
                     for name in _RETIRED}
RETIRED_VARIABLES["PORTAL_SIM_ROOT"] = "no longer a setting: now PORTAL_VAR_DIR/sparksim (portal.settings.SIM_ROOT)"
# The external replay is called mirroring now (the draft router's decisions keep "shadow").
RETIRED_VARIABLES |= {f"PORTAL_GATEWAY_SHADOW_{name}": f"renamed: set PORTAL_GATEWAY_MIRROR_{name} instead"
                      for name in ("BASE_URL", "API_KEY", "MODEL", "SHARE")}
RETIRED_VARIABLES["PORTAL_GATEWAY_SHADOW_TIMEOUT_S"] = RETIRED_VARIABLES["PORTAL_GATEWAY_MIRROR_TIMEOUT_S"]
ENV_WARNINGS = unknown_variables(os.environ, names_read(), RETIRED_VARIABLES)
# Logged once per process that loads settings (web, workers, beat, launcher, manage.py): uvicorn
# and Celery run no system checks.
for _message in ENV_WARNINGS:
    logging.getLogger("portal.settings").warning("%s", _message)
