"""Token counting that is honest for Persian, for the context-window budget.

OpenAI-family models get their own tokenizer (tiktoken with the BPE file shipped in this
package: nothing is downloaded at run time). Every other model gets a script-aware
approximation calibrated against `o200k_base`: LangChain's `count_tokens_approximately`
assumes 4 characters per token, which under-counts Persian by ~27% (o200k averages ~2.9
Persian characters per token), and a budget that under-counts sends over-long requests.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
from collections.abc import Sequence
from functools import cache, lru_cache
from importlib import resources
from typing import Any, Protocol

import tiktoken
from langchain_core.messages import AIMessage, BaseMessage
from tiktoken.model import encoding_name_for_model

__all__ = ["ApproximateCounter", "TiktokenCounter", "TokenCounter", "token_counter_for"]

# OpenAI's documented chat accounting: each message costs its content plus ~3 tokens of
# role framing, a `name` costs 1 more, and every reply is primed with 3 tokens.
_TOKENS_PER_MESSAGE = 3
_TOKENS_PER_NAME = 1
_REPLY_PRIMING = 3
# A tool call is sent as JSON (id, type, function name, arguments): the framing around
# name and arguments is a handful of tokens more than their text.
_TOKENS_PER_TOOL_CALL = 8


class TokenCounter(Protocol):
    """Count tokens the way the configured chat model would."""

    name: str

    def count_text(self, text: str) -> int:
        """Return the number of tokens of a plain text."""
        ...

    def count_messages(self, messages: Sequence[BaseMessage]) -> int:
        """Return the tokens of a chat request: contents, per-message overhead and tool calls."""
        ...


def _content_text(content: str | list[str | dict[Any, Any]]) -> str:
    """Flatten message content blocks to the text a provider would tokenise."""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif block.get("type") == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        else:
            # Non-text blocks (images, files) have provider-specific costs; counting their
            # serialised form over-estimates, which is the safe side for a budget.
            parts.append(json.dumps(block, ensure_ascii=False, default=str))
    return "\n".join(parts)


def _message_texts(message: BaseMessage) -> tuple[list[str], int]:
    """Return the texts of one message that are tokenised, and its fixed overhead."""
    texts = [_content_text(message.content)]
    overhead = _TOKENS_PER_MESSAGE
    if message.name:
        texts.append(message.name)
        overhead += _TOKENS_PER_NAME
    if isinstance(message, AIMessage):
        for call in [*message.tool_calls, *message.invalid_tool_calls]:
            texts.append(str(call.get("name") or ""))
            args = call.get("args")
            texts.append(args if isinstance(args, str) else json.dumps(args, ensure_ascii=False))
            overhead += _TOKENS_PER_TOOL_CALL
    return texts, overhead


class _MessageCounting:
    """Shared `count_messages` on top of a subclass's `count_text`."""

    # count_messages(a + b) == count_messages(a) + count_messages(b) - count_messages([]):
    # the window builder may then add per-message costs instead of recounting the window.
    additive = True

    def count_text(self, text: str) -> int:
        """Return the number of tokens of a plain text."""
        raise NotImplementedError

    def count_messages(self, messages: Sequence[BaseMessage]) -> int:
        """Return the tokens of a chat request: contents, per-message overhead and tool calls."""
        total = _REPLY_PRIMING
        for message in messages:
            texts, overhead = _message_texts(message)
            total += overhead + sum(self.count_text(text) for text in texts if text)
        return total


class TiktokenCounter(_MessageCounting):
    """Count with an OpenAI BPE encoding."""

    def __init__(self, encoding: tiktoken.Encoding) -> None:
        self.name = encoding.name
        self._encoding = encoding

    def count_text(self, text: str) -> int:
        """Return the exact number of BPE tokens of `text`."""
        # encode_ordinary: user text that contains "<|endoftext|>" is text, not a special
        # token, and must neither raise nor be counted as one token.
        return len(self._encoding.encode_ordinary(text))


# Arabic-script letters and combining marks (Persian, Arabic, Urdu), without the digits
# and punctuation (، ؛ ؟) that share the Unicode block.
_ARABIC = (
    "\u0621-\u064a\u064b-\u065f\u0670-\u06d3\u06d5-\u06ef\u06fa-\u06ff"
    "\u0750-\u077f\u08a0-\u08ff\ufb50-\ufdff\ufe70-\ufefc"
)
_PIECES = re.compile(
    rf"(?P<arabic>[{_ARABIC}]+)"
    # o200k keeps English contractions ("wasn't", "I'm") inside the word's piece.
    r"|(?P<latin>[A-Za-z\u00c0-\u024f]+(?:['’](?:[sStTmMdD]|re|ve|ll)\b)?)"
    # Digits never take the space before them, so that space is a token of its own.
    r"|(?P<ascii_digits> ?[0-9]+)"
    r"|(?P<digits> ?\d+)"
    r"|(?P<letters>[^\W\d_]+)"
    r"|(?P<newlines>\s*\n\s*)"
    r"|(?P<spaces>\s+)"
    # Zero-width joiners and non-joiners start a new BPE piece inside a Persian word
    # ("بیمه‌نامه" is "بیمه" + "\u200cنامه") and often cost a token of their own.
    r"|(?P<zero_width>[\u200b-\u200f\u2060\ufeff]+)"
    r"|(?P<punct>[^\w\s]+|_+)"
)


ZERO_WIDTH_COST = 0.6


def _arabic_cost(length: int) -> float:
    # Measured on the Persian corpus with o200k: words of 1-3 letters are ~1.0-1.2 tokens,
    # then ~0.4 token per letter (4: 1.6, 6: 2.1, 8: 3.0, 9: 3.7); L/2.5 sits just above.
    return max(1.0, length / 2.5)


_CASE_PIECES = re.compile(r"[A-Z\u00c0-\u00de]*[a-z\u00df-\u024f'’]+|[A-Z\u00c0-\u00de'’]+")


def _latin_cost(word: str) -> float:
    # English words up to 11 letters are ~1.05 tokens in o200k; longer ones split. A
    # case change inside a run ("MyPolicy", "HWnm2ouEtt" in an id) starts a new BPE piece,
    # and such pieces are rarely whole vocabulary entries: ~1 token per 2.5 letters.
    pieces = _CASE_PIECES.findall(word)
    if len(pieces) <= 1:
        return 1.1 if len(word) <= 11 else len(word) / 5
    return sum(max(1.0, len(piece) / 2.5) for piece in pieces)


def _letters_cost(run: str) -> float:
    # Other scripts: CJK is ~1 token per character; Cyrillic, Greek, Hebrew, Devanagari
    # and friends split roughly every 2-3 letters. Erring high keeps the budget safe.
    wide = sum(1 for ch in run if ord(ch) >= 0x2E80)
    narrow = len(run) - wide
    return wide + (max(1.0, narrow / 2.5) if narrow else 0.0)


def _punct_cost(run: str) -> float:
    # Runs of ASCII punctuation merge ("...", "?!", "]."); other symbols (emoji, arrows)
    # are several UTF-8 bytes and often several tokens each.
    ascii_part = sum(1 for ch in run if ord(ch) < 128)
    return math.ceil(ascii_part / 3) + 2 * (len(run) - ascii_part) if ascii_part else 2.0 * len(run)


def approximate_tokens(text: str) -> int:
    """Estimate the `o200k_base` token count of `text` by script, erring slightly high."""
    total = 0.0
    for match in _PIECES.finditer(text):
        kind, piece = match.lastgroup, match.group()
        if kind == "arabic":
            total += _arabic_cost(len(piece))
        elif kind == "latin":
            total += _latin_cost(piece)
        elif kind == "ascii_digits":
            digits = piece.lstrip(" ")
            total += len(piece) - len(digits) + math.ceil(len(digits) / 3)  # grouped by three
        elif kind == "digits":
            digits = piece.lstrip(" ")
            # Persian digits merge less: ~1.4 tokens for two and ~1.6 for three, but ~0.9
            # per digit in long runs (phone and policy numbers).
            n = len(digits)
            total += len(piece) - n + (math.ceil(n * 2 / 3) if n <= 3 else 0.9 * n)
        elif kind == "zero_width":
            total += ZERO_WIDTH_COST
        elif kind == "letters":
            total += _letters_cost(piece)
        elif kind == "newlines":
            total += 1
        elif kind == "spaces":
            # One space glues onto the next word; longer runs become their own token.
            total += 0 if piece == " " else 1
        elif kind == "punct":
            total += _punct_cost(piece)
    return math.ceil(total)


class ApproximateCounter(_MessageCounting):
    """Count with the script-aware approximation (offline, Anthropic, Ollama, unknown models)."""

    name = "approximate"

    def count_text(self, text: str) -> int:
        """Return the estimated number of tokens of `text`."""
        return _cached_approximate_tokens(text)


# The approximation runs in Python (~1 µs per token, 4x tiktoken), and every turn counts
# the same recent history messages again: caching by text makes a repeated count free.
_cached_approximate_tokens = lru_cache(maxsize=4096)(approximate_tokens)


# The BPE files are OpenAI's, copied byte for byte (via the litellm wheel) and checked
# against the sha256 tiktoken itself expects (tiktoken_ext/openai_public.py).
_BPE_SHA256 = {
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
}
# tiktoken_ext builds these inside functions that download the BPE file first, so the
# split patterns and special tokens are restated here; a test compares them with the
# definitions in tiktoken_ext.openai_public.
_PAT_STR = {
    "o200k_base": "|".join(
        [
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""\p{N}{1,3}""",
            r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
            r"""\s*[\r\n]+""",
            r"""\s+(?!\S)""",
            r"""\s+""",
        ]
    ),
    "cl100k_base": (
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
        r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
    ),
}
_SPECIAL_TOKENS = {
    "o200k_base": {"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
    "cl100k_base": {
        "<|endoftext|>": 100257,
        "<|fim_prefix|>": 100258,
        "<|fim_middle|>": 100259,
        "<|fim_suffix|>": 100260,
        "<|endofprompt|>": 100276,
    },
}
# gpt-oss uses o200k_harmony: the o200k_base vocabulary plus chat special tokens, which
# encode_ordinary never produces, so o200k_base counts it exactly.
_SAME_VOCABULARY = {"o200k_harmony": "o200k_base"}


def _parse_bpe(data: bytes) -> dict[bytes, int]:
    """Parse a `.tiktoken` file: one base64 token and its rank per line."""
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


@cache
def load_encoding(name: str) -> tiktoken.Encoding:
    """Build a tiktoken encoding from the BPE file shipped in this package, offline."""
    if name not in _BPE_SHA256:
        raise KeyError(f"no shipped BPE file for encoding {name!r}")
    # Read the file ourselves rather than through tiktoken.load: its reader copies every
    # file it loads into a cache directory (TIKTOKEN_CACHE_DIR or /tmp), a side effect a
    # read-only container does not need. The parsing is the same three lines.
    data = resources.files("chatbot.agent").joinpath("tokenizer_files", f"{name}.tiktoken").read_bytes()
    if hashlib.sha256(data).hexdigest() != _BPE_SHA256[name]:
        raise ValueError(f"shipped BPE file for {name} does not match tiktoken's expected sha256")
    return tiktoken.Encoding(
        name, pat_str=_PAT_STR[name], mergeable_ranks=_parse_bpe(data), special_tokens=_SPECIAL_TOKENS[name]
    )


def _openai_encoding_name(model_name: str) -> str | None:
    """Return the shipped encoding for an OpenAI model name, or None when there is none."""
    try:
        name = encoding_name_for_model(model_name)
    except KeyError:
        return None
    name = _SAME_VOCABULARY.get(name, name)
    return name if name in _BPE_SHA256 else None


_OPENAI_FAMILY = re.compile(r"^(ft:)?(gpt-|chatgpt-|o\d)")


@cache
def token_counter_for(model: str) -> TokenCounter:
    """Return the token counter for `CHATBOT_MODEL` ("offline" or "provider:model").

    OpenAI models (and OpenAI-compatible servers serving them under their own name) get
    their exact encoding; everything else gets the calibrated approximation.
    """
    provider, _, model_name = model.partition(":")
    if not model_name:
        provider, model_name = "", provider
    model_name = model_name.strip().lower()
    if provider in {"openai", "azure_openai", ""} and _OPENAI_FAMILY.match(model_name):
        encoding = _openai_encoding_name(model_name)
        if encoding is not None:
            return TiktokenCounter(load_encoding(encoding))
    return ApproximateCounter()
