"""One settings module; every value comes from the environment (see .env.example).

PANEL_MODE tells how the process was started: "run" (make run, a local demo), "test" (the test suite) or
"production" (anything else). Only run and test modes get development defaults for secrets.
"""

import os
import re
import sys
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import environ

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)


def _read_secret(name, default=None):
    """A secret may come from NAME or from a file named by NAME_FILE (Docker / systemd credentials)."""
    file_path = env.str(f"{name}_FILE", default="")
    if file_path:
        return Path(file_path).read_text().strip()
    return env.str(name, default=default)


PANEL_MODE = env.str("PANEL_MODE", default="production")
if "pytest" in sys.modules or (len(sys.argv) > 1 and sys.argv[1] == "test"):
    PANEL_MODE = "test"
DEVELOPMENT_MODE = PANEL_MODE in ("run", "test")

SECRET_KEY = _read_secret("SECRET_KEY", default="")
if not SECRET_KEY:
    if not DEVELOPMENT_MODE:
        raise SystemExit(
            "SECRET_KEY is not set. Set SECRET_KEY (or SECRET_KEY_FILE) to a long random string, e.g. "
            "`python -c 'import secrets; print(secrets.token_urlsafe(50))'`. Only `make run` and the test "
            "suite may start without one."
        )
    SECRET_KEY = "development-only-secret-key-not-for-production"  # noqa: S105

DEBUG = env.bool("DEBUG", default=PANEL_MODE == "run")
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "testserver"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "channels",
    "axes",
    "panel.core",
    "panel.accounts",
    "panel.nodes",
    "panel.catalog",
    "panel.deployments",
    "panel.operations",
    "panel.realtime",
    "panel.provisioning",
    "panel.monitoring",
    "panel.audit",
    "panel.fabric",
    "panel.forensics",
    "panel.gateway",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "panel.core.web.security_headers.SecurityHeadersMiddleware",  # CSP and the rest, on every answer
    "panel.core.web.middleware.StaticFilesMiddleware",  # WhiteNoise, async-capable
    # Outside everything that could answer an /api/ request with an HTML page or read an oversized body.
    "panel.core.web.middleware.ApiErrorsMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "panel.core.web.middleware.RejectNulInQueryMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "panel.accounts.middleware.TemporaryPasswordMiddleware",
    "panel.core.web.middleware.NotFoundPageMiddleware",
    "panel.core.web.middleware.ConflictPageMiddleware",  # a lost unique insert on a page: 409, not 500
    "panel.audit.middleware.AuditRequestMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last, as django-axes asks: it turns a locked-out sign-in into the lockout page (or JSON for the API).
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "panel.urls"
ASGI_APPLICATION = "panel.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.i18n",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "panel.core.web.context_processors.panel",
            ],
        },
    },
]

DATA_DIR = Path(env.str("PANEL_DATA_DIR", default=str(BASE_DIR / "var")))
DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{DATA_DIR / 'panel.sqlite3'}")}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # Several processes (web, worker, beat) share the file: WAL lets readers run beside a writer, and
    # IMMEDIATE transactions wait for the write lock up front instead of failing on a lock upgrade.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        timeout=20,
        transaction_mode="IMMEDIATE",
        init_command="PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    )
    if PANEL_MODE == "test":
        # A file, not shared-cache memory: the tests' Celery worker threads write beside the test itself.
        DATABASES["default"]["TEST"] = {"NAME": f"/tmp/ascend-panel-test-{os.getpid()}.sqlite3"}  # noqa: S108
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env.str("REDIS_URL", default="redis://127.0.0.1:6379/0")
# Agents run as root and take their work from the broker: production refuses one anybody can talk to.
WEAK_REDIS_PASSWORDS = {"", "change-me", "changeme", "redis", "password", "foobared", "admin", "123456"}
if not DEVELOPMENT_MODE:
    for _name in ("REDIS_URL", "CELERY_BROKER_URL"):
        _url = env.str(_name, default=REDIS_URL)
        _password = urlsplit(_url).password or ""
        if _url.startswith(("redis://", "rediss://")) and _password in WEAK_REDIS_PASSWORDS:
            raise SystemExit(
                f"{_name} has no Redis password, or a well-known one. Agents run as root and take their work "
                "from this broker: set a long random password (requirepass in redis.conf, REDIS_PASSWORD "
                "with docker-compose) and put it in the URL, e.g. redis://:PASSWORD@redis:6379/0."
            )

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# django-axes checks every password sign-in first (the sign-in page, Django's admin, HTTP Basic on the API).
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "panel.accounts.signin_limits.AccountLimitBackend",  # the per-account limit, from every address
    "django.contrib.auth.backends.ModelBackend",
]
# A user name tried from one address is locked after N failures for the cool-off; other addresses (the real
# user elsewhere) can still sign in, so a guesser cannot lock an admin out of the whole panel.
AXES_FAILURE_LIMIT = env.int("PANEL_SIGNIN_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME = timedelta(minutes=env.float("PANEL_SIGNIN_COOLOFF_MINUTES", default=15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
# One user name tried from many addresses: refused everywhere past this many failures within the cool-off
# (panel.accounts.signin_limits); 0 turns it off. Higher than the per-address limit on purpose.
PANEL_SIGNIN_ACCOUNT_FAILURE_LIMIT = env.int("PANEL_SIGNIN_ACCOUNT_FAILURE_LIMIT", default=50)
# Failed sign-ins per minute across the panel that raise the alarm (audit log, /metrics); 0 turns it off.
PANEL_SIGNIN_ALARM_FAILURES_PER_MINUTE = env.int("PANEL_SIGNIN_ALARM_FAILURES_PER_MINUTE", default=60)
AXES_RESET_ON_SUCCESS = True
AXES_DISABLE_ACCESS_LOG = True  # sign-ins go to the panel's audit log (panel/audit)
AXES_LOCKOUT_CALLABLE = "panel.accounts.lockout.lockout_response"
AXES_CLIENT_IP_CALLABLE = "panel.core.web.client_ip.client_ip"
# How many reverse proxies in front of the panel append to X-Forwarded-For; 0 trusts REMOTE_ADDR only.
PANEL_TRUSTED_PROXIES = env.int("PANEL_TRUSTED_PROXIES", default=0)

LOGIN_URL = "accounts:login"
LOGIN_REDIRECT_URL = "core:dashboard"
LOGOUT_REDIRECT_URL = "accounts:login"

LANGUAGE_CODE = "en"
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
LOCALE_PATHS = [BASE_DIR / "locale"]
USE_I18N = True
TIME_ZONE = env.str("TIME_ZONE", default="UTC")
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = DEVELOPMENT_MODE

# Production sits behind a TLS proxy: its cookies never travel over plain HTTP. `make run` and the tests
# serve http://127.0.0.1, so they default to off. A plain-HTTP lab install turns off SESSION_COOKIE_SECURE,
# and the CSRF cookie follows unless set on its own (one cookie without the other breaks every form).
# Sessions live in the database and are JSON: nothing the panel reads back is unpickled
# (panel.core.infra.cache).
SESSION_ENGINE = "django.contrib.sessions.backends.db"
SESSION_SERIALIZER = "django.contrib.sessions.serializers.JSONSerializer"
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=not DEVELOPMENT_MODE)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=SESSION_COOKIE_SECURE)
# A CSRF refusal under /api/ says so in the API's error shape; pages keep Django's own.
CSRF_FAILURE_VIEW = "panel.core.rest.exceptions.csrf_failure"

# HTTP Basic (a password on every API request) is off in production: scripts use API tokens. `make run` and
# the tests keep it for curl and the browser tier's API client.
PANEL_API_BASIC_AUTH = env.bool("PANEL_API_BASIC_AUTH", default=DEVELOPMENT_MODE)
# DRF throttle rates ("120/min", "10/s"); empty means no limit. The test suite's many API calls run unlimited
# unless a test sets a rate.
_UNLIMITED = PANEL_MODE == "test"
PANEL_API_THROTTLE_ANON = env.str("PANEL_API_THROTTLE_ANON", default="" if _UNLIMITED else "60/min")
PANEL_API_THROTTLE_USER = env.str("PANEL_API_THROTTLE_USER", default="" if _UNLIMITED else "1200/min")
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "panel.accounts.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
        "panel.accounts.authentication.OptionalBasicAuthentication",  # only with PANEL_API_BASIC_AUTH
    ],
    "DEFAULT_THROTTLE_CLASSES": [
        "panel.core.rest.throttling.AnonThrottle",
        "panel.core.rest.throttling.UserThrottle",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["panel.accounts.permissions.RolePermission"],
    "DEFAULT_PAGINATION_CLASS": "panel.core.rest.pagination.StandardPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "panel.core.rest.schema.PanelAutoSchema",
    "EXCEPTION_HANDLER": "panel.core.rest.exceptions.exception_handler",
    # JSON only, within bounds (panel/core/rest/safe_input.py); a viewset that documents YAML or an upload
    # adds its parsers. A form-encoded body elsewhere is a 415, not a body read some other way than
    # documented.
    "DEFAULT_PARSER_CLASSES": ["panel.core.rest.safe_input.SafeJSONParser"],
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Ascend Panel API",
    "DESCRIPTION": "Nodes, NPUs, models, deployments and operations of an Ascend Panel.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Request bodies get their own components (no read-only fields), closed by close_request_bodies: the
    # schema then says exactly what panel.core.rest.strict accepts.
    "COMPONENT_SPLIT_REQUEST": True,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "panel.deployments.api.chat.document_chat",  # a plain async view the generator cannot see
        "panel.core.rest.schema.close_request_bodies",
    ],
    "ENUM_NAME_OVERRIDES": {
        "ModelSourceEnum": "panel.core.domain.choices.ModelSource",
        "DeploymentStatusEnum": "panel.core.domain.choices.DeploymentState",
        "OperationStatusEnum": "panel.core.domain.choices.OperationStatus",
        "NodeStatusEnum": "panel.core.domain.choices.NodeStatus",
        "AlertKindEnum": "panel.monitoring.models.AlertKind",
        "AlertSeverityEnum": "panel.monitoring.models.AlertSeverity",
        "ChannelKindEnum": "panel.monitoring.models.ChannelKind",
        "DeliveryStatusEnum": "panel.monitoring.models.DeliveryStatus",
    },
}

# Shared by every process (idempotency keys must be seen by all web workers).
CACHES = {
    "default": {
        # JSON, never pickle: a value planted in Redis must not run code in the panel
        # (panel.core.infra.cache).
        "BACKEND": "panel.core.infra.cache.JsonRedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "panel-cache",
        # A Redis that is down answers within seconds, so a request can say so instead of hanging.
        "OPTIONS": {
            "serializer": "panel.core.infra.cache.JsonSerializer",
            "socket_connect_timeout": 2,
            "socket_timeout": 5,
        },
    }
}
if PANEL_MODE == "test":
    # In-process tests share one memory cache; the browser tier's servers get REDIS_URL and use Redis.
    CACHES["default"] = {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    # Most tests make three users; PBKDF2's cost per password (about a second on CI's cores for the three)
    # buys a test nothing.
    PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
PANEL_IDEMPOTENCY_TTL_S = env.int("PANEL_IDEMPOTENCY_TTL_S", default=86400)
# Largest multipart upload the API takes (the package store holds CANN .run files of a few GB); any other
# request body is limited by DATA_UPLOAD_MAX_MEMORY_SIZE. Larger bodies get 413 before they are read.
PANEL_MAX_UPLOAD_BYTES = env.int("PANEL_MAX_UPLOAD_BYTES", default=16 * 1024**3)
# Largest other request body (bytes): the API's JSON and YAML, and the /v1 gateway's prompts (Django's own
# default, 2.5 MB). Raise it for prompts that carry images as data URLs.
DATA_UPLOAD_MAX_MEMORY_SIZE = env.int("PANEL_MAX_BODY_BYTES", default=2621440)

CHANNEL_LAYERS: dict[str, dict] = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        # redis-py 8 reads with a 5 s socket timeout by default, which is also channels_redis' BZPOPMIN wait:
        # every idle or slow receive raised TimeoutError and closed the socket (django/channels_redis#422).
        "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": 30}], "capacity": 1000, "expiry": 30},
    }
}

# The fleet's broker: RabbitMQ (amqp://panel:PASSWORD@rabbitmq:5672/ascend, amqps:// with TLS) in
# production, docker-compose and CI; each node gets its own user there at join
# (panel.nodes.agents.broker_admin).
# Left unset, the panel's Redis carries Celery too: make run's single-machine setup, not the fleet one.
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default=REDIS_URL)
# RabbitMQ's management API, where the panel creates and deletes node users: http://admin:PASSWORD@host:15672.
PANEL_BROKER_ADMIN_URL = _read_secret("PANEL_BROKER_ADMIN_URL", default="")
# The CA certificate of the broker's TLS listener (amqps://): the panel verifies the broker with it and hands
# it to agents at join, which pin it.
PANEL_BROKER_CA_FILE = env.str("PANEL_BROKER_CA_FILE", default="")
# The central agent's broker user (`manage.py agent_credential --central --broker`): reads ssh-runner only.
# Broker users are broker-wide: two panels on one RabbitMQ need two names (the tests add a suffix).
PANEL_BROKER_CENTRAL_USER = env.str("PANEL_BROKER_CENTRAL_USER", default="central")
# The bound on the ingest queue (a RabbitMQ policy the panel worker sets, panel.nodes.agents.broker_admin):
# past it the broker refuses new messages, which agents keep in their spool, so a flooding node cannot fill
# the broker's memory or disk. Room for ten minutes of a 512-node fleet's heartbeats and events.
PANEL_INGEST_MAX_MESSAGES = env.int("PANEL_INGEST_MAX_MESSAGES", default=200_000)
PANEL_INGEST_MAX_BYTES = env.int("PANEL_INGEST_MAX_BYTES", default=256 * 1024 * 1024)
# What one node may send on the metrics path (panel.monitoring.metrics.rates), per second, with five seconds'
# burst: agents send one heartbeat and one metrics batch a second at most; past it the panel drops the node's
# lines unread, so one node costs the others at most this rate.
PANEL_INGEST_HEARTBEATS_PER_S = env.float("PANEL_INGEST_HEARTBEATS_PER_S", default=4.0)
PANEL_INGEST_METRICS_PER_S = env.float("PANEL_INGEST_METRICS_PER_S", default=10.0)
# Per node broker user (RabbitMQ user limits, set at join): an agent holds one connection for its worker,
# one for its metrics and a few for its pools.
PANEL_BROKER_NODE_MAX_CONNECTIONS = env.int("PANEL_BROKER_NODE_MAX_CONNECTIONS", default=8)
PANEL_BROKER_NODE_MAX_CHANNELS = env.int("PANEL_BROKER_NODE_MAX_CHANNELS", default=64)
if (
    CELERY_BROKER_URL.startswith(("amqp://", "amqps://"))
    and not DEVELOPMENT_MODE
    and not PANEL_BROKER_ADMIN_URL
):
    raise SystemExit(
        "CELERY_BROKER_URL is RabbitMQ but PANEL_BROKER_ADMIN_URL is not set: the panel creates each node's "
        "broker user through RabbitMQ's management API; set it, e.g. http://admin:PASSWORD@rabbitmq:15672."
    )

# Panel behaviour
PANEL_ADMIN_PASSWORD = _read_secret("PANEL_ADMIN_PASSWORD", default="")
PANEL_HEARTBEAT_INTERVAL = env.float("PANEL_HEARTBEAT_INTERVAL", default=5.0)
# How long the panel worker keeps a database connection across tasks (panel/core/infra/worker_db.py); 0 opens
# one per task. The test suite keeps Celery's default: its in-process workers must leave no connection behind.
PANEL_WORKER_DB_CONN_MAX_AGE = env.int(
    "PANEL_WORKER_DB_CONN_MAX_AGE", default=0 if PANEL_MODE == "test" else 300
)
# Inventory a node when its agent first speaks. Off in the test suite: tests start the operations they check.
PANEL_INVENTORY_ON_FIRST_HEARTBEAT = env.bool(
    "PANEL_INVENTORY_ON_FIRST_HEARTBEAT", default=PANEL_MODE != "test"
)
# Operations: how often the reaper sweeps (re-sends what Redis did not take, ends operations whose agent is
# gone), and how long a sent operation may wait for an agent to pick it up before it fails.
PANEL_REAP_S = env.float("PANEL_REAP_S", default=5.0)
# Beat's leader lock (panel/beat.py): a killed leader's lock lapses after this many seconds, then a standby
# beat takes over. Its keys live under PANEL_BEAT_KEY in the panel's Redis.
PANEL_BEAT_LEADER_TTL_S = env.float("PANEL_BEAT_LEADER_TTL_S", default=10.0)
PANEL_BEAT_KEY = env.str("PANEL_BEAT_KEY", default="ascend-panel:beat")
PANEL_OPERATION_PICKUP_S = env.int("PANEL_OPERATION_PICKUP_S", default=900)
PANEL_OPERATION_OFFLINE_GRACE_S = env.int("PANEL_OPERATION_OFFLINE_GRACE_S", default=60)
PANEL_WS_RECHECK_S = env.float("PANEL_WS_RECHECK_S", default=30)
# Waiting and watching (`?wait=`, `?watch=true`; docs/api-streams.md): a wait reads the deployment again at
# least this often besides on each broadcast, a watch sends a keepalive comment and re-reads its objects
# (and re-checks the viewer's credential) this often.
PANEL_WAIT_RECHECK_S = env.float("PANEL_WAIT_RECHECK_S", default=5)
PANEL_STREAM_KEEPALIVE_S = env.float("PANEL_STREAM_KEEPALIVE_S", default=15)
PANEL_WATCH_RESYNC_S = env.float("PANEL_WATCH_RESYNC_S", default=30)
# How long a watch's ledger outlives its last event: a client reconnecting within it with Last-Event-ID gets
# only what changed (panel/core/rest/watch_resume.py).
PANEL_WATCH_RESUME_S = env.float("PANEL_WATCH_RESUME_S", default=600)
PANEL_SECRETS_KEY = _read_secret("PANEL_SECRETS_KEY", default="")
PANEL_METRICS_ALLOW = env.list("PANEL_METRICS_ALLOW", default=["127.0.0.1", "::1"])
PANEL_METRICS_TOKEN = _read_secret("PANEL_METRICS_TOKEN", default="")
# The broker address agents on other hosts use (the join answer, shown on Add node). When empty, the
# broker URL with a loopback host replaced by the panel's host name (a warning says it may not be reachable).
PANEL_AGENT_BROKER_URL = env.str("PANEL_AGENT_BROKER_URL", default="")
if PANEL_AGENT_BROKER_URL and not re.fullmatch(
    r"(rediss?://([^/@]*@)?[^/:@]+(:\d+)?(/\d*)?|amqps?://[^/:@]+(:\d+)?(/[^/@]*)?)", PANEL_AGENT_BROKER_URL
):
    raise SystemExit(
        f"PANEL_AGENT_BROKER_URL={PANEL_AGENT_BROKER_URL!r} is not a broker URL. Give the broker address "
        "agents reach from their hosts, without a user (each node gets its own at join): e.g. "
        "amqps://panel.example.com:5671/ascend, or redis://panel.example.com:6379/0 for a single machine."
    )
# The panel's address as agents reach it (package downloads, diagnostics uploads); the request's address
# when empty. Diagnostics after a failed start (no request) are collected only when it is set.
PANEL_URL = env.str("PANEL_URL", default="")
# Internal pip index (and extra indexes, comma-separated) that nodes install Python stacks from.
PANEL_PIP_INDEX_URL = env.str("PANEL_PIP_INDEX_URL", default="")
PANEL_PIP_EXTRA_INDEX_URLS = env.str("PANEL_PIP_EXTRA_INDEX_URLS", default="")
# A registry mirror nodes pull container images through: "mirror.example.com/quay" makes
# quay.io/ascend/vllm-ascend:v0.11.0 come from mirror.example.com/quay/ascend/vllm-ascend:v0.11.0 (and be
# tagged with its official name on the node). Empty: pull from the image's own registry.
PANEL_IMAGE_MIRROR = env.str("PANEL_IMAGE_MIRROR", default="")
# Models: where model folders live on nodes (downloads, conversions; deletes never leave it) and the hub
# endpoints the agents use (an internal mirror on air-gapped sites).
PANEL_MODELS_ROOT = env.str("PANEL_MODELS_ROOT", default="/data/models")
# The models roots a node gets when it is added (comma-separated); admins change them per node. Model
# folders, copies and deployment paths must lie inside one of the node's (panel.nodes.models_roots).
PANEL_MODELS_ROOTS = env.list("PANEL_MODELS_ROOTS", default=[PANEL_MODELS_ROOT])
PANEL_HF_ENDPOINT = env.str("PANEL_HF_ENDPOINT", default="https://huggingface.co")
PANEL_MODELSCOPE_ENDPOINT = env.str("PANEL_MODELSCOPE_ENDPOINT", default="https://www.modelscope.cn")
PANEL_METRICS_RETENTION_DAYS = env.int("PANEL_METRICS_RETENTION_DAYS", default=30)
# Minute rows older than this are folded into one row per hour (panel.monitoring.metrics.rollup).
PANEL_METRICS_MINUTE_DAYS = env.int("PANEL_METRICS_MINUTE_DAYS", default=2)
PANEL_METRICS_RING_SECONDS = env.int("PANEL_METRICS_RING_SECONDS", default=3600)
PANEL_ALERT_TEMP_C = env.float("PANEL_ALERT_TEMP_C", default=85.0)
PANEL_ALERT_HBM_PCT = env.float("PANEL_ALERT_HBM_PCT", default=95.0)
PANEL_ALERT_WEBHOOK_URL = env.str("PANEL_ALERT_WEBHOOK_URL", default="")
# A deployment with this many failed restarts in a row raises a crash-loop alert (panel.monitoring).
PANEL_ALERT_CRASH_LOOP_RESTARTS = env.int("PANEL_ALERT_CRASH_LOOP_RESTARTS", default=2)
# Notification retries wait this many seconds, doubled each time (panel.monitoring.notifications.notify).
PANEL_NOTIFY_RETRY_BASE_S = env.float("PANEL_NOTIFY_RETRY_BASE_S", default=2.0)
# Audit log entries (sign-ins, tokens, roles, nodes, deployments, installs, packages) older than this go.
PANEL_AUDIT_RETENTION_DAYS = env.int("PANEL_AUDIT_RETENTION_DAYS", default=90)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {"django.channels.server": {"level": "WARNING"}},
}

# Deployments (panel/deployments): the reconcile loop, restarts and the engine start-up.
PANEL_DEPLOY_RECONCILE_S = env.float("PANEL_DEPLOY_RECONCILE_S", default=2.0)
PANEL_DEPLOY_UNHEALTHY_AFTER = env.int("PANEL_DEPLOY_UNHEALTHY_AFTER", default=3)
PANEL_DEPLOY_MAX_RESTARTS = env.int("PANEL_DEPLOY_MAX_RESTARTS", default=5)
PANEL_DEPLOY_BACKOFF_BASE_S = env.float("PANEL_DEPLOY_BACKOFF_BASE_S", default=5.0)
PANEL_DEPLOY_BACKOFF_CAP_S = env.float("PANEL_DEPLOY_BACKOFF_CAP_S", default=300.0)
# An engine that dies sooner than this after starting counts as a failed restart (crash loops back off).
PANEL_DEPLOY_STABLE_S = env.float("PANEL_DEPLOY_STABLE_S", default=300.0)
PANEL_DEPLOY_STOP_GRACE_S = env.float("PANEL_DEPLOY_STOP_GRACE_S", default=10.0)
PANEL_DEPLOY_START_TIMEOUT_S = env.float("PANEL_DEPLOY_START_TIMEOUT_S", default=1200.0)
PANEL_DEPLOY_HEALTH_INTERVAL_S = env.float("PANEL_DEPLOY_HEALTH_INTERVAL_S", default=0.5)
PANEL_DEPLOY_BASE_PORT = env.int("PANEL_DEPLOY_BASE_PORT", default=18000)
PANEL_DEPLOY_CPU_KVCACHE_GIB = env.int("PANEL_DEPLOY_CPU_KVCACHE_GIB", default=1)

# The /v1 gateway (panel/gateway): engine timeouts, in-flight bookkeeping and how long usage is kept.
PANEL_GATEWAY_CONNECT_TIMEOUT_S = env.float("PANEL_GATEWAY_CONNECT_TIMEOUT_S", default=5.0)
# Between two chunks of an answer (a long prompt's prefill comes before the first one).
PANEL_GATEWAY_READ_TIMEOUT_S = env.float("PANEL_GATEWAY_READ_TIMEOUT_S", default=600.0)
# What the gateway reads from an engine (panel/gateway/proxy/transport.py, relay.py): a whole answer
# (embeddings of many inputs are the largest), one SSE event, and the longest wait between two events of a
# stream. Past any of them that request fails alone; a broken or hostile engine cannot grow a web process
# without end.
PANEL_GATEWAY_MAX_ANSWER_BYTES = env.int("PANEL_GATEWAY_MAX_ANSWER_BYTES", default=64 * 1024 * 1024)
PANEL_GATEWAY_MAX_EVENT_BYTES = env.int("PANEL_GATEWAY_MAX_EVENT_BYTES", default=1024 * 1024)
PANEL_GATEWAY_MAX_EVENT_GAP_S = env.float("PANEL_GATEWAY_MAX_EVENT_GAP_S", default=600.0)
# Whether each request waiting on an engine has a watchdog that gives up on an engine gone silent once the
# panel takes its instance out (panel/gateway/instances/silence.py). Off only to measure what it costs
# (bench/gateway.py --watchdog): without it a powered-off host's streams wait for the gap above.
PANEL_GATEWAY_SILENCE_WATCHDOG = env.bool("PANEL_GATEWAY_SILENCE_WATCHDOG", default=True)
# A request a web process counts as outstanding is forgotten after this long without news (a process that
# died mid-stream); streams renew theirs every minute.
PANEL_GATEWAY_INFLIGHT_TTL_S = env.float("PANEL_GATEWAY_INFLIGHT_TTL_S", default=900.0)
PANEL_GATEWAY_USAGE_DRAIN_S = env.float("PANEL_GATEWAY_USAGE_DRAIN_S", default=2.0)
# How long stopping a deployment (stop, restart, delete, a rolling update, scaling down) waits for the
# requests in flight on it through the gateway to finish before its engine is stopped anyway.
PANEL_GATEWAY_DRAIN_GRACE_S = env.float("PANEL_GATEWAY_DRAIN_GRACE_S", default=120.0)
# Unknown API keys one client address may send per minute before the gateway answers it 429 unread.
PANEL_GATEWAY_BAD_KEYS_PER_MINUTE = env.int("PANEL_GATEWAY_BAD_KEYS_PER_MINUTE", default=30)
PANEL_GATEWAY_USAGE_RAW_DAYS = env.int("PANEL_GATEWAY_USAGE_RAW_DAYS", default=30)
PANEL_GATEWAY_USAGE_HOURLY_DAYS = env.int("PANEL_GATEWAY_USAGE_HOURLY_DAYS", default=365)
# Routing by prompt prefix or session (panel/gateway/instances/routing.py): an instance holding a request's
# prefix is preferred while its outstanding requests are at most the least loaded's plus MARGIN (or plus that
# share of the least load, when more); prefixes are hashed in chunks of CHUNK_BYTES, the first CHUNKS of them,
# and per served model at most ENTRIES hashes are remembered, each for TTL_S after it was last used.
PANEL_GATEWAY_ROUTING_MARGIN = env.int("PANEL_GATEWAY_ROUTING_MARGIN", default=2)
PANEL_GATEWAY_ROUTING_MARGIN_RATIO = env.float("PANEL_GATEWAY_ROUTING_MARGIN_RATIO", default=0.25)
PANEL_GATEWAY_PREFIX_CHUNK_BYTES = env.int("PANEL_GATEWAY_PREFIX_CHUNK_BYTES", default=256)
PANEL_GATEWAY_PREFIX_CHUNKS = env.int("PANEL_GATEWAY_PREFIX_CHUNKS", default=128)
PANEL_GATEWAY_PREFIX_ENTRIES = env.int("PANEL_GATEWAY_PREFIX_ENTRIES", default=200_000)
PANEL_GATEWAY_PREFIX_TTL_S = env.float("PANEL_GATEWAY_PREFIX_TTL_S", default=1800.0)
