"""Path types of the memory endpoints (`FactId`); they take no request body.

Their response bodies are in `chatbot/responses.py`: the typed client (`chatbot.client`), a
feature that may import no other, parses answers into the same models.
"""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import Path
from pydantic import AfterValidator

# The service's fact ids are store keys it generated (32 hex digits today); the id rule of
# every path parameter (tenant and user ids, caller.py) bounds them: plain characters, at most
# 128. Any other text (U+0000, a surrogate, a slash, a dot segment) names no fact.
_FACT_ID = re.compile(r"[A-Za-z0-9_:@-]{1,128}")
NOT_A_FACT = ""
"""What a `FactId` parameter holds for text that cannot be a fact id (the handler answers 404)."""


def canonical_fact_id(value: str) -> str:
    """Return `value` when it can be a fact id, `NOT_A_FACT` otherwise (a 404, like a missing fact)."""
    return value if _FACT_ID.fullmatch(value) else NOT_A_FACT


# Its validation never fails: a malformed fact id answers after the user check, like a missing one.
FactId = Annotated[
    str,
    Path(description="A fact's `id`, as `GET …/memory` shows it; any other text names no fact (404)."),
    AfterValidator(canonical_fact_id),
]
