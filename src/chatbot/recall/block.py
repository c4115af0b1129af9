"""How recalled turns are written into the model's input, and read back by the run record.

They close the system message, after the knowledge chunks, as one section: earlier turns
of this conversation, oldest first, each marked with its place in the thread and its
time, so the model can tell them from the recent turns and answer "when did I...". The
section is joined to the message by agent/system_message.py `compose_system_text`, for the
window and for the run record's rebuilt message alike.
"""

from __future__ import annotations

from collections.abc import Sequence

from chatbot.recall.service import RecalledTurn

_HEADINGS = {
    "en": "Earlier turns of this conversation, recalled for this question (#n: the message's place in the thread):",
    "fa": "پیام‌های پیشین همین گفتگو که برای این پرسش یادآوری شده‌اند (#n: جای پیام در گفتگو):",
}
_ROLES = {
    "en": {"user": "user", "assistant": "assistant"},
    "fa": {"user": "کاربر", "assistant": "دستیار"},
}


def recalled_line(turn: RecalledTurn, language: str) -> str:
    """Return one recalled turn as the model reads it: `[#12, user, 2026-11-30 14:05] text`."""
    roles = _ROLES.get(language, _ROLES["en"])
    when = f", {turn.created_at:%Y-%m-%d %H:%M}" if turn.created_at is not None else ""
    return f"[#{turn.position + 1}, {roles.get(turn.role, turn.role)}{when}] {turn.content}"


def recalled_heading(language: str) -> str:
    """Return the section's heading line."""
    return _HEADINGS.get(language, _HEADINGS["en"])


def recalled_section(turns: Sequence[RecalledTurn], language: str) -> str:
    """Return the section recalled turns add to the system message ("" for none), oldest first.

    The section alone: agent/system_message.py joins it to the rest of the message.
    """
    if not turns:
        return ""
    ordered = sorted(turns, key=lambda t: t.position)
    lines = [recalled_heading(language), *(recalled_line(t, language) for t in ordered)]
    return "\n".join(lines)
