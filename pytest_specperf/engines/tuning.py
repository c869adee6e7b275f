"""What an engine hands `specperf tune`: the candidate configs of a search space, each with the draft
shape the cost and acceptance models see.

Why in engines/: which keys a search may vary, which combinations an engine really runs (SGLang's
draft-token rule, vLLM's `speculative_config`), how a candidate is labelled and how its settings read
are engine knowledge. `tune/` asks the engine (`Engine.tune_candidates`) and never names one, so a
third engine brings its own search space in its own module.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_specperf.config.settings import ServerConfig

#: `num_draft_tokens = "valid"`: every value the engine runs for the other sizes
VALID = "valid"


@dataclass(frozen=True)
class Shape:
    """The draft a config verifies: what the cost and acceptance models see of it.

    One verify step accepts at most one path of the tree: no deeper than the draft steps and no longer
    than the draft tokens minus the root (`depth`); each depth holds at most topk candidates, and on
    average (draft tokens - 1) / steps of them (`width`).
    """

    steps: int
    topk: int
    draft_tokens: int

    @property
    def depth(self) -> int:
        return max(0, min(self.steps, self.draft_tokens - 1))

    @property
    def width(self) -> float:
        return max(1.0, min(float(self.topk), (self.draft_tokens - 1) / self.steps))

    @property
    def text(self) -> str:
        return f"{self.steps} steps, topk {self.topk}, {self.draft_tokens} draft tokens"


@dataclass(frozen=True)
class Candidate:
    """One server config the search may start: the reference, or the base with one combination."""

    label: str
    server: ServerConfig
    shape: Shape | None  # None for the reference
    #: the tuned keys and their values (what the ready-to-paste block and the JSON report say)
    settings: Mapping[str, Any]
    #: configs with the same group share their acceptance (same draft model and drafting settings)
    group: str = ""

    @property
    def is_reference(self) -> bool:
        return self.shape is None

    @property
    def draft(self) -> Shape:
        """The shape of a speculative candidate (the reference has none)."""
        if self.shape is None:
            raise ValueError(f"{self.label} is the reference: it drafts nothing")
        return self.shape
