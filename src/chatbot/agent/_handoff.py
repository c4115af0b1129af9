"""What an escalation hands the human assistant: why, a summary, the profile and the recent turns."""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage

from chatbot.agent._summary import offline_summary
from chatbot.agent.state import ConversationState
from chatbot.models.reply import Reply
from chatbot.responses import HandoffContext, RoleMessage

RECENT_IN_HANDOFF = 10


def handoff_context(
    reply: Reply, state: ConversationState, question: HumanMessage, summary: str, language: str
) -> HandoffContext:
    """Return the contract's hand-off payload for a run that escalates."""
    transcript = [*state["messages"][:-1], question]
    recent = [m for m in transcript if isinstance(m, HumanMessage | AIMessage)][-RECENT_IN_HANDOFF:]
    return HandoffContext(
        reason=reply.escalation_reason or "escalated",
        conversation_summary=summary or offline_summary("", transcript, language),
        user_profile=state.get("profile") or {},
        recent_messages=[
            RoleMessage(role="user" if isinstance(m, HumanMessage) else "assistant", content=str(m.text))
            for m in recent
        ],
    )
