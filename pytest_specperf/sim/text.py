"""Deterministic text for the simulator: a toy tokenizer, prompt identities and generated words.

There is no model, so outputs are word sequences drawn from a fixed vocabulary with an RNG seeded by the
prompt. At temperature 0 the sequence depends only on the prompt, so a plain and a speculative server
produce identical text (speculative decoding is lossless) and a lossless check can be tested for real.
Generated text re-tokenizes to exactly its token count with ``tokenize``.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

_TOKEN_RE = re.compile(r"\w+|[^\w\s]")

#: Token ids below this are "special"; vocabulary ids start here.
VOCAB_BASE = 1000
#: The id the simulated tokenizer uses for end-of-sequence (reported in finish_reason.matched).
EOS_TOKEN_ID = 2

_WORD_TEXT = (
    "the of and to in is that for it as was with be by on not he this are or his from at which but have an "
    "they you were her she there one all we their its been has more if will would about when into who some "
    "them what can only other new time could these two may then first any like now such our over even most "
    "after also did many before must through back where much should well people way between each because "
    "work life state system number world part year model token draft verify cycle batch server request "
    "throughput latency memory kernel graph tensor cache prefix answer question reason result value data "
    "point small large fast slow simple clear early late final local global common special general "
    "given known used made found shown seen taken kept left right high low long short next last same "
    "different important possible available certain likely open close start stop begin end run test check "
    "measure report compare improve change move build write read speak learn teach think know see look "
    "find give tell ask show try call keep turn help play hold bring happen provide include continue set "
    "follow create lead understand watch allow add grow offer remember consider appear buy wait serve die "
    "send expect stay fall cut reach kill remain suggest raise pass sell require decide pull"
)
_WORDS = tuple(_WORD_TEXT.split())
_PUNCT = (",", ".", ";", ":")
VOCAB: tuple[str, ...] = tuple(_WORDS) + _PUNCT
_VOCAB_INDEX = {w: i for i, w in enumerate(VOCAB)}


def tokenize(text: str) -> list[str]:
    """Split text into word and punctuation tokens (the simulator's whole tokenizer)."""
    return _TOKEN_RE.findall(text)


def token_ids(text: str) -> list[int]:
    """Stable ids for prompt tokens (vocabulary words keep their id; others hash into a large range)."""
    out = []
    for tok in tokenize(text):
        idx = _VOCAB_INDEX.get(tok)
        if idx is None:
            idx = len(VOCAB) + int.from_bytes(hashlib.blake2b(tok.encode(), digest_size=4).digest()) % 150_000
        out.append(VOCAB_BASE + idx)
    return out


def render(ids: Sequence[int]) -> str:
    """Text of generated token ids: words separated by spaces, punctuation attached."""
    parts = []
    for i in ids:
        word = VOCAB[(i - VOCAB_BASE) % len(VOCAB)] if i >= VOCAB_BASE else ""
        parts.append(word if word in _PUNCT else " " + word)
    return "".join(parts)


@dataclass(frozen=True)
class SimPrompt:
    """What the engine needs to know about a prompt: its identity and length."""

    digest: bytes
    num_tokens: int

    @classmethod
    def from_text(cls, text: str) -> SimPrompt:
        return cls(_digest(b"text", text.encode("utf-8")), len(tokenize(text)))

    @classmethod
    def from_ids(cls, ids: Sequence[int]) -> SimPrompt:
        return cls(_digest(b"ids", ",".join(map(str, ids)).encode()), len(ids))

    def unit(self, purpose: str) -> float:
        """A number in [0, 1) fixed for this prompt and purpose (difficulty, natural length, ...)."""
        h = hashlib.blake2b(self.digest + purpose.encode(), digest_size=8).digest()
        return int.from_bytes(h) / 2**64

    def seed(self, purpose: str, seed: int = 0) -> int:
        """An RNG seed derived from the prompt, a purpose and the server seed."""
        h = hashlib.blake2b(self.digest + purpose.encode() + seed.to_bytes(8, "big", signed=True), digest_size=8)
        return int.from_bytes(h.digest())


def _digest(kind: bytes, payload: bytes) -> bytes:
    return hashlib.blake2b(kind + b"\0" + payload, digest_size=16).digest()


class WordStream:
    """An endless token-id sequence: words with occasional punctuation, driven by one RNG."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._since_punct = 0

    def next_id(self) -> int:
        self._since_punct += 1
        if self._since_punct > 3 and self._rng.random() < 0.12:
            self._since_punct = 0
            return VOCAB_BASE + len(_WORDS) + self._rng.randrange(len(_PUNCT))
        return VOCAB_BASE + self._rng.randrange(len(_WORDS))


class OutputTokens:
    """The output of one request, produced on demand.

    ``diverge_at`` (lossy speculative servers only) switches to a different stream from that position
    on, and guarantees the token there differs from what a lossless server would produce.
    """

    def __init__(self, rng: random.Random, diverge_at: int | None = None, alt_rng: random.Random | None = None):
        self._main = WordStream(rng)
        self._alt = WordStream(alt_rng) if alt_rng is not None else None
        self._diverge_at = diverge_at
        self._pos = 0

    def next_id(self) -> int:
        tok = self._main.next_id()
        if self._alt is not None and self._diverge_at is not None and self._pos >= self._diverge_at:
            alt = self._alt.next_id()
            if self._pos == self._diverge_at and alt == tok:
                alt = VOCAB_BASE + (alt - VOCAB_BASE + 1) % len(_WORDS)
            tok = alt
        self._pos += 1
        return tok


def chat_prompt(messages: Sequence[dict]) -> str:
    """A trivial chat template: one ``<|role|>`` line per message, then the assistant turn."""
    parts = [f"<|{m.get('role', 'user')}|>\n{_content_text(m.get('content'))}\n" for m in messages]
    return "".join(parts) + "<|assistant|>\n"


def _content_text(content: object) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content)
