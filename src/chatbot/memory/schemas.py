"""Path types of the memory endpoints (`FactId`); they take no request body.

Their response bodies are in `chatbot/responses.py`: the typed client (`chatbot.client`), a
feature that may import no other, parses answers into the same models.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Path

FactId = Annotated[str, Path(min_length=1, max_length=512, description="A fact's `id`, as `GET …/memory` shows it.")]
