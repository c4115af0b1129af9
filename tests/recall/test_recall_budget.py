"""How recalled turns share their budget: every hit before any partner, a stock reply given once."""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.messages import BaseMessage

from chatbot.agent._recall import _within
from chatbot.recall.block import recalled_heading, recalled_line
from chatbot.recall.service import RecalledTurn, RecallHit

STOCK = "I'm sorry, I couldn't find an answer to your question."


class Words:
    """Counts a token per word: enough to size a budget by hand."""

    name = "words"

    def count_text(self, text: str) -> int:
        return len(text.split())

    def count_messages(self, messages: Sequence[BaseMessage]) -> int:
        return sum(self.count_text(str(m.content)) for m in messages)


def _turn(position: int, content: str) -> RecalledTurn:
    role = "user" if position % 2 == 0 else "assistant"
    return RecalledTurn(f"m{position}", position, role, None, content)


def _hits(*statements: tuple[int, str]) -> list[RecallHit]:
    return [RecallHit(_turn(p, text), (_turn(p + 1, STOCK),)) for p, text in statements]


def test_every_hit_fits_before_any_partner_and_a_repeated_reply_counts_once() -> None:
    hits = _hits((10, "The other driver's plate was 52K913."), (40, "The garage is Golzar Auto."))
    lines = [recalled_line(h.turn, "en") for h in hits]
    heading = Words().count_text("\n\n" + recalled_heading("en")) + 1
    # Room for both hits, not for a partner beside them: the second hit wins over the first one's partner.
    room = (
        heading
        + sum(Words().count_text(x) + 1 for x in lines)
        + Words().count_text(recalled_line(hits[0].neighbours[0], "en"))
        + 1
    )
    chosen = _within(hits, room - 1, Words(), "en")
    assert [t.message_id for t in chosen] == ["m10", "m40"]
    # With room for everything, the stock reply after the second hit is not given again.
    chosen = _within(hits, 10_000, Words(), "en")
    assert [t.message_id for t in chosen] == ["m10", "m11", "m40"]
