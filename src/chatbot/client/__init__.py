"""A typed client of the conversational agent service, sync and asyncio.

from chatbot.client import ChatbotClient

with ChatbotClient("http://127.0.0.1:8000", secret=..., tenant_id="acme", user_id="u1") as client:
    end = client.run("session-42", "What does travel insurance cover?")
    print(end.status, end.message.content, end.citations)
"""

from chatbot.client.aio import AsyncChatbotClient
from chatbot.client.api import NO_RETRIES, Retries
from chatbot.client.errors import ChatbotError, ConflictError, InvalidId, RateLimitedError, StreamInterrupted
from chatbot.client.events import Event
from chatbot.client.sync import ChatbotClient
from chatbot.client.tokens import MintedTokens
from chatbot.responses import (
    ErasureReport,
    HandoffContext,
    MessagesPage,
    ProblemDetails,
    RunEnd,
    RunRecord,
    TranscriptMessage,
    UserMemory,
)

__all__ = [
    "NO_RETRIES",
    "AsyncChatbotClient",
    "ChatbotClient",
    "ChatbotError",
    "ConflictError",
    "ErasureReport",
    "Event",
    "HandoffContext",
    "InvalidId",
    "MessagesPage",
    "MintedTokens",
    "ProblemDetails",
    "RateLimitedError",
    "Retries",
    "RunEnd",
    "RunRecord",
    "StreamInterrupted",
    "TranscriptMessage",
    "UserMemory",
]
