"""Settings: every knob of the service, read from `CHATBOT_*` environment variables."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# Secrets that appear in tutorials and .env.example files; a token signed with one of them
# proves nothing, so outside `dev` they are refused at start-up.
_KNOWN_WEAK_SECRETS = frozenset(
    {
        "secret",
        "changeme",
        "change-me",
        "password",
        "dev",
        "development",
        "test",
        "jwt-secret",
        "your-secret-key",
        "supersecret",
        "chatbot",
        "default",
        "example",
    }
)
MIN_SECRET_LENGTH = 32
# Request bodies larger than this are refused with 413 before anything parses them.
MAX_BODY_BYTES = 64 * 1024


class Settings(BaseSettings):
    """Configuration of one replica; unsafe combinations fail at construction."""

    model_config = SettingsConfigDict(env_prefix="CHATBOT_", extra="ignore", frozen=True)

    environment: Literal["dev", "test", "production"] = "production"
    database_url: str | None = Field(
        default=None, description="libpq URI; unset = embedded Postgres under `.chatbot/`."
    )
    data_dir: Path = Path(".chatbot")

    service_secret: SecretStr | None = None
    jwt_public_key: str | None = None
    jwt_issuer: str = "main-backend"
    jwt_audience: str = "chatbot-agent"

    pool_min_size: int = Field(default=2, ge=1)
    pool_max_size: int = Field(default=16, ge=2)
    # Session features (advisory locks) need a direct or session-pooled URI; the main URI may
    # be PgBouncer in transaction mode (with prepare_threshold None). Unset: the main URI.
    lock_database_url: str | None = None
    # Dedicated sessions that hold every thread and user lock of the replica (db/locks.py).
    # A replica opens at most pool_max_size + lock_connections (<= 3) + 1 (the cancel
    # listener, threads/cancel.py) connections: pool_max_size + 4.
    lock_connections: int = Field(default=2, ge=1, le=3)
    # Past this many runs in flight on one replica, new runs get 503 with Retry-After at once.
    max_runs_in_flight: int = Field(default=1000, ge=1)
    # A `: keep-alive` comment goes out when no event was due for this long.
    sse_keepalive_seconds: float = Field(default=10.0, gt=0)
    # After the first token, tokens are sent at most this often (0 = each as it comes): each
    # event sent costs middleware and a socket write, most of a replica's CPU at hundreds of
    # streams (docs/measurements/performance.md); 50 ms is below what a reader notices.
    sse_flush_ms: int = Field(default=50, ge=0, le=1000)
    # 0 prepares every statement; None disables prepared statements (PgBouncer transaction mode).
    prepare_threshold: int | None = 0
    pool_max_idle_seconds: float = Field(default=240.0, gt=0)

    # "offline", or a fallback chain "provider:model,provider:model" (models/chain.py).
    model: str = "offline"
    model_base_url: str | None = None
    # Comma-separated, the chain's order, empty for the provider's default.
    model_base_urls: str | None = None
    # The three bounds of an answer (docs/operations.md, "Real models"): the wait for the first answer
    # token, the gap between two pieces, the whole answer. A healthy long stream is never cut
    # by the first two.
    model_first_token_timeout_seconds: float = Field(default=20.0, gt=0)
    model_idle_timeout_seconds: float = Field(default=20.0, gt=0)
    model_timeout_seconds: float = Field(default=300.0, gt=0)
    # A summary fold never delays a run's first token by more than this.
    summary_timeout_seconds: float = Field(default=5.0, gt=0)
    # Cheaper models for memory extraction and summaries; unset: the chain's first entry.
    memory_model: str | None = None
    summary_model: str | None = None
    # JSON {"provider:model": {"input": USD per million tokens, "output": ..., "cached_input": ...}}.
    model_prices: str | None = None
    # The most output tokens any model call may produce: sent to the provider as its cap, and
    # the output part of a call's worst case that budgets reserve (budgets/service.py).
    model_max_output_tokens: int = Field(default=4096, ge=16)
    # A model call's budget hold stops counting this long after its process last renewed it
    # (a live one renews every third of it: budgets/_keeper.py), so a killed replica's or
    # command's holds are released within it; the replicas' sweep deletes them every
    # CHATBOT_BUDGET_SWEEP_SECONDS (ops/sweeper.py).
    budget_reservation_seconds: float = Field(default=20.0, gt=0)
    budget_sweep_seconds: float = Field(default=10.0, gt=0)
    offline_token_delay_ms: int = Field(default=0, ge=0)
    embeddings: str | None = None
    # What one file may cost `chatbot ingest` (docs/operations.md, "Knowledge"): its size on
    # disk, a PDF's pages, what a DOCX's parts unpack to, how deep tables or elements nest,
    # its text, the wall-clock time to read it and the address space of the process reading
    # it. A file over any of them is skipped and named, never half-read.
    ingest_max_bytes: int = Field(default=100 * 1024**2, ge=1)
    ingest_max_pages: int = Field(default=5_000, ge=1)
    ingest_max_unpacked_bytes: int = Field(default=200 * 1024**2, ge=1)
    ingest_max_nesting: int = Field(default=32, ge=1)
    ingest_max_text_chars: int = Field(default=50_000_000, ge=1)
    ingest_max_blocks: int = Field(default=500_000, ge=1)
    ingest_max_elements: int = Field(default=2_000_000, ge=1)
    ingest_timeout_seconds: float = Field(default=120.0, gt=0)
    ingest_max_memory_mb: int = Field(default=1024, ge=128)

    context_tokens: int = Field(default=6000, ge=256)
    # Thread recall (docs/api.md, "Recall of earlier turns"): recalled turns take at most this
    # share of CHATBOT_CONTEXT_TOKENS, out of the same budget; the search returns this many
    # turns (each may bring the turn that answers it); 0 turns recall off.
    recall_share: float = Field(default=0.2, ge=0, le=0.5)
    recall_hits: int = Field(default=8, ge=0, le=50)
    # Kept for the run record's settings and older deployments' environments: the fold no
    # longer waits for this many turns (turns that leave the window are folded in batches
    # whatever the count: docs/api.md, "Summaries keep the beginning").
    summary_after_turns: int = Field(default=20, ge=1, le=30)
    memory_max_facts: int = Field(default=50, ge=1)
    rate_limit_per_minute: int = Field(default=0, ge=0)
    shutdown_grace_seconds: float = Field(default=30.0, ge=0)
    log_level: str = "INFO"
    # Lifecycle (docs/api.md, "Lifecycle"); 0 days = keep forever.
    retention_days: float = Field(default=0.0, ge=0)
    retention_sweep_minutes: float = Field(default=60.0, gt=0)
    memory_ttl_days: float = Field(default=0.0, ge=0)
    # How often the store's TTL sweeper runs; at most a minute, so an expired item goes
    # within the contract's two minutes.
    memory_ttl_sweep_minutes: float = Field(default=1.0, gt=0, le=1)
    # Durable memory work (memory/jobs.py): a replica claims a turn's memory job for this
    # long, and looks for jobs whose claim ran out this often; a killed replica's jobs land
    # within about their sum (the contract's minute).
    memory_job_lease_seconds: float = Field(default=30.0, gt=0, le=40)
    memory_job_poll_seconds: float = Field(default=10.0, gt=0, le=15)
    # Keys the pseudonymous user key of `chatbot feedback export` (HMAC-SHA256).
    export_key: SecretStr | None = None
    # Hardening. A token may live at most this long from `iat` to `exp`: a leaked
    # long-lived token would otherwise stay valid for as long as its signer wished.
    jwt_max_lifetime_seconds: int = Field(default=3600, ge=1)
    # How long a request waits for a pooled connection before asking whether Postgres answers
    # at all: with Postgres down, callers get a 503 within about this bound; with Postgres up
    # they keep their place in the queue (db/patient_pool.py).
    pool_timeout_seconds: float = Field(default=2.0, gt=0)
    # A request's head, then its body, must each arrive within this many seconds (slow or
    # half-sent requests would otherwise hold a connection and a task forever).
    request_read_timeout_seconds: float = Field(default=10.0, gt=0)
    # Idle keep-alive connections are closed after this; keep it above the load balancer's
    # upstream idle timeout (docs/measurements/reliability.md).
    keep_alive_seconds: int = Field(default=5, ge=1)
    # Connections plus in-flight requests a replica accepts before answering 503; 0 = no limit.
    max_concurrency: int = Field(default=0, ge=0)
    # OpenTelemetry traces of runs (docs/operations.md "Tracing"): off, otlp (the exporter
    # reads the standard OTEL_EXPORTER_OTLP_* variables; needs the `tracing` extra) or console.
    tracing: Literal["off", "otlp", "console"] = "off"

    @field_validator("prepare_threshold", mode="before")
    @classmethod
    def _none_words(cls, value: object) -> object:
        if isinstance(value, str) and value.strip().lower() in {"none", "null", "off", ""}:
            return None
        return value

    @field_validator(
        "database_url",
        "lock_database_url",
        "jwt_public_key",
        "embeddings",
        "model_base_url",
        "model_base_urls",
        "memory_model",
        "summary_model",
        "model_prices",
        mode="before",
    )
    @classmethod
    def _blank_is_unset(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @model_validator(mode="after")
    def _refuse_unsafe_token_keys(self) -> Settings:
        if self.environment == "dev":
            return self
        if self.jwt_public_key:
            if "BEGIN PUBLIC KEY" not in self.jwt_public_key and "BEGIN RSA PUBLIC KEY" not in self.jwt_public_key:
                raise ValueError("CHATBOT_JWT_PUBLIC_KEY must be a PEM public key (-----BEGIN PUBLIC KEY-----)")
            return self
        if self.service_secret is None:
            raise ValueError(
                "no service-token key: set CHATBOT_SERVICE_SECRET (at least 32 random characters) "
                "or CHATBOT_JWT_PUBLIC_KEY (PEM, for RS256); or CHATBOT_ENVIRONMENT=dev to try it locally"
            )
        secret = self.service_secret.get_secret_value()
        if len(secret) < MIN_SECRET_LENGTH or secret.lower() in _KNOWN_WEAK_SECRETS or len(set(secret)) == 1:
            raise ValueError(
                f"CHATBOT_SERVICE_SECRET is too weak: use at least {MIN_SECRET_LENGTH} random characters "
                "(e.g. `python -c 'import secrets; print(secrets.token_urlsafe(48))'`)"
            )
        return self

    @cached_property
    def embedded_pg_dir(self) -> Path:
        """Return where the embedded Postgres keeps its data when no database URL is set."""
        return (self.data_dir / "pg").resolve()
