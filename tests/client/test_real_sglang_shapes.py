"""The simulator's streams have real SGLang's shape, and the client reads real SGLang's streams.

`data/sglang-0.5.23/chat-eagle3.sse` was rendered by SGLang 0.5.23's own serializers
(`sse_utils.build_sse_content`, `protocol.ChatCompletionStreamResponse`), in the order
`serving_chat.py` emits them: a role chunk, content chunks (finish_reason null), the finish reason in
a chunk of its own, then the `sglext` block and the usage, each with `choices: []`.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests
from simharness import Sim

from pytest_specperf.config.workloads import Prompt, SamplingParams
from pytest_specperf.engines import engine_for
from pytest_specperf.measure.http import ServerClient

CAPTURED = Path(__file__).parent / "data" / "sglang-0.5.23" / "chat-eagle3.sse"
CHAT = Prompt("c", None, ({"role": "user", "content": "What is the capital of France?"},), "x")


def events(text: str) -> list[Any]:
    found = re.findall(r"^data: (.*)$", text, flags=re.M)
    return [p if p == "[DONE]" else json.loads(p) for p in found]


def kind(event: Any) -> str:
    """What an event is for: role, content, finish, extension block, usage, end."""
    if event == "[DONE]":
        return "done"
    if not event["choices"]:
        return "sglext" if event.get("sglext") else "usage"
    choice = event["choices"][0]
    if choice["finish_reason"] is not None:
        return "finish"
    return "role" if "role" in choice["delta"] else "content"


def shape(value: Any) -> Any:
    """Keys and types, recursively: what a client parses, not what the text says."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items() if k not in ("id", "created", "model")}
    if isinstance(value, list):
        return [shape(value[0])] if value and isinstance(value[0], dict) else "list"
    return type(value).__name__


def collapse(kinds: list[str]) -> list[str]:
    return [k for i, k in enumerate(kinds) if i == 0 or k != kinds[i - 1] or k != "content"]


def test_the_simulators_chat_stream_has_the_shape_of_sglangs(spec_sim: Sim) -> None:
    captured = events(CAPTURED.read_text())
    body = {
        "messages": [dict(m) for m in CHAT.messages or ()],
        "max_tokens": 24,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "return_spec_tokens_details": True,
    }
    reply = requests.post(f"{spec_sim.url}/v1/chat/completions", json=body, timeout=30)
    simulated = events(reply.text)
    assert (
        collapse([kind(e) for e in simulated])
        == collapse([kind(e) for e in captured])
        == [
            "role",
            "content",
            "finish",
            "sglext",
            "usage",
            "done",
        ]
    )
    by_kind = {kind(e): shape(e) for e in captured if e != "[DONE]"}
    for event in simulated[:-1]:
        assert shape(event) == by_kind[kind(event)], kind(event)


@pytest.fixture
def replay(canned_server: Callable[[list[bytes]], str]) -> Callable[[str], str]:
    """`replay(stream)` → the URL of a stand-in server sending a captured stream's events, one chunk each."""
    return lambda stream: canned_server([p.encode() for p in re.findall(r"data: .*?\n\n", stream, flags=re.S)])


def test_the_client_reads_sglangs_chat_stream(replay: Callable[[str], str]) -> None:
    client = ServerClient(replay(CAPTURED.read_text()), engine=engine_for("sglang"))
    record = client.generate(CHAT, SamplingParams(max_new_tokens=14), 0, time.perf_counter())
    assert record.ok, record.error
    assert (record.completion_tokens, record.verify_ct, record.finish_reason) == (14, 5, "length")
    assert (record.accepted_drafts, record.proposed_drafts) == (9, 20)
    assert record.output == "The capital of France is Paris, which lies on the Seine river."
    assert record.num_chunks == 5  # content chunks only: the role, finish, sglext and usage events carry no tokens


MERGED_GENERATE = (
    "".join(
        "data: " + json.dumps(e) + "\n\n"
        for e in (
            {
                "text": "The",
                "meta_info": {"id": "r", "finish_reason": None, "prompt_tokens": 7, "completion_tokens": 1},
            },
            # a busy server: three decode steps in one event (the tokenizer manager keeps only its newest output)
            {
                "text": "The capital of France is Paris",
                "meta_info": {"id": "r", "finish_reason": None, "prompt_tokens": 7, "completion_tokens": 9},
            },
            {
                "text": "The capital of France is Paris, on the Seine.",
                "meta_info": {
                    "id": "r",
                    "finish_reason": {"type": "length", "length": 14},
                    "prompt_tokens": 7,
                    "completion_tokens": 14,
                    "cached_tokens": 0,
                    "spec_verify_ct": 5,
                    "spec_num_correct_drafts": 9,
                    "spec_num_proposed_drafts": 20,
                },
            },
        )
    )
    + "data: [DONE]\n\n"
)


def test_the_client_reads_merged_generate_events(replay: Callable[[str], str]) -> None:
    client = ServerClient(replay(MERGED_GENERATE), engine=engine_for("sglang"))
    record = client.generate(Prompt("t", "hi", None, "x"), SamplingParams(max_new_tokens=14), 0, time.perf_counter())
    assert record.ok, record.error
    assert (record.completion_tokens, record.verify_ct, record.num_chunks) == (14, 5, 3)
    assert record.accept_length == pytest.approx(14 / 5)


#: A real SGLang server's `/generate` stream begins with an event of empty text (seen on a CPU build).
EMPTY_FIRST = MERGED_GENERATE.replace(
    "data: ",
    "data: "
    + json.dumps(
        {"text": "", "meta_info": {"id": "r", "finish_reason": None, "prompt_tokens": 7, "completion_tokens": 0}}
    )
    + "\n\ndata: ",
    1,
)


def test_an_empty_first_event_is_not_the_first_token(replay: Callable[[str], str]) -> None:
    client = ServerClient(replay(EMPTY_FIRST), engine=engine_for("sglang"))
    record = client.generate(Prompt("t", "hi", None, "x"), SamplingParams(max_new_tokens=14), 0, time.perf_counter())
    assert record.ok, record.error
    assert (record.completion_tokens, record.verify_ct, record.num_chunks) == (14, 5, 3)
    assert record.output == "The capital of France is Paris, on the Seine."
    assert record.chunk_gaps and len(record.chunk_gaps) == 2  # gaps between the three chunks with text
