"""The app factory `chatbot serve` hands uvicorn: logging first, then the app.

With `--workers` above 1, uvicorn starts each worker as a fresh interpreter that has
none of the parent's logging set-up; without this the per-run JSON lines of every worker
would be lost.
"""

from __future__ import annotations

from fastapi import FastAPI

from chatbot.app import create_app
from chatbot.config import Settings
from chatbot.logs import configure_logging


def create_worker_app() -> FastAPI:
    """Configure JSON logging in this process and build the app."""
    settings = Settings()
    configure_logging(settings.log_level)
    return create_app(settings)
