"""SGLang 0.5.23 request bodies and response shapes (contract §2.3-2.5), without any HTTP.

Parsing turns a JSON body into a ``Job`` (prompt + sampling params + how to answer) or raises
``BadRequest`` with the message SGLang would give; rendering turns an engine ``Request`` into
``meta_info`` and OpenAI objects. Keeping this apart from the server makes both easy to read and test.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from .engine import Request, SimSamplingParams
from .profile import SpecConfig
from .text import SimPrompt, chat_prompt

#: ``api/v1/api_types.py:177-207``: any other key inside sampling_params is a 400.
ALLOWED_SAMPLING_KEYS = (
    "max_new_tokens",
    "stop",
    "stop_token_ids",
    "stop_regex",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "frequency_penalty",
    "presence_penalty",
    "repetition_penalty",
    "min_new_tokens",
    "n",
    "json_schema",
    "regex",
    "ebnf",
    "structural_tag",
    "ignore_eos",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "no_stop_trim",
    "stream_interval",
    "logit_bias",
    "sampling_seed",
    "custom_params",
    "beam_width",
    "watermark",
    "choice",
)
_INT_KEYS = ("max_new_tokens", "top_k", "min_new_tokens", "n", "stream_interval", "sampling_seed", "beam_width")
_FLOAT_KEYS = ("temperature", "top_p", "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty")
_BOOL_KEYS = ("ignore_eos", "skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim")


class BadRequest(Exception):
    """A request body SGLang would reject with HTTP 400."""


@dataclass(frozen=True)
class Job:
    """A parsed generation request: what to generate and how the answer is shaped."""

    prompt: SimPrompt
    params: SimSamplingParams
    stream: bool
    rid: str | None = None
    include_usage: bool = False
    spec_details: bool = False
    model: str | None = None


# ---- parsing --------------------------------------------------------------------------------------
def parse_generate(body: object) -> Job:
    """``POST /generate``: text or input_ids, sampling_params, stream (batches are not simulated)."""
    if not isinstance(body, dict):
        raise BadRequest("invalid type: expected a JSON object")
    text, ids = body.get("text"), body.get("input_ids")
    if (text is None) == (ids is None):
        raise BadRequest("Either text or input_ids should be provided.")
    if isinstance(text, list) or (isinstance(ids, list) and ids and isinstance(ids[0], list)):
        raise BadRequest(
            "batched requests (a list of prompts) are not simulated by pytest-specperf's simulator; "
            "send one request per prompt"
        )
    sp = body.get("sampling_params", {})
    if isinstance(sp, list):
        raise BadRequest("a list of sampling_params (a batch) is not simulated; send one dict")
    params = parse_sampling_params(sp if sp is not None else {})
    return Job(_prompt(text, ids, "text", "input_ids"), params, _flag(body, "stream"), rid=_rid(body))


def parse_sampling_params(sp: object) -> SimSamplingParams:
    """Validate sampling_params like SGLang's generated schema does (serde-style messages)."""
    if not isinstance(sp, dict):
        raise BadRequest("invalid type for `sampling_params`: expected a JSON object")
    for key in sp:
        if key not in ALLOWED_SAMPLING_KEYS:
            expected = ", ".join(f"`{k}`" for k in ALLOWED_SAMPLING_KEYS)
            raise BadRequest(f"unknown field `{key}`, expected one of {expected}")
    for key, value in sp.items():
        _check_type(key, value)
    max_new = sp.get("max_new_tokens")
    if max_new is not None and max_new < 0:
        raise BadRequest(f"max_new_tokens must be >= 0 (got {max_new})")
    if sp.get("n") not in (None, 1):
        raise BadRequest("n > 1 (parallel sampling) is not simulated; send n separate requests")
    temperature = sp.get("temperature")
    if temperature is not None and temperature < 0:
        raise BadRequest(f"temperature must be >= 0 (got {temperature})")
    stop_ids = sp.get("stop_token_ids") or []
    if not isinstance(stop_ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in stop_ids):
        raise BadRequest("invalid type for `stop_token_ids`: expected a list of integers")
    return SimSamplingParams(
        max_new_tokens=128 if max_new is None else max_new,
        temperature=1.0 if temperature is None else float(temperature),
        ignore_eos=bool(sp.get("ignore_eos") or False),
        min_new_tokens=int(sp.get("min_new_tokens") or 0),
        stop=_stops(sp.get("stop")),
        stop_token_ids=tuple(stop_ids),
        sampling_seed=sp.get("sampling_seed"),
    )


def parse_completion(body: object, default_model: str) -> Job:
    """``POST /v1/completions`` (OpenAI fields plus SGLang's extras)."""
    body = _openai_body(body)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        if len(prompt) > 1:
            raise BadRequest("a list of several prompts (a batch) is not simulated; send one request per prompt")
        prompt = prompt[0]
    if isinstance(prompt, str):
        return _openai_job(body, SimPrompt.from_text(prompt), 16, default_model)
    if isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return _openai_job(body, _prompt(None, prompt, "prompt", "prompt"), 16, default_model)
    raise BadRequest("`prompt` must be a string, a list with one string, or a list of token ids")


def parse_chat(body: object, default_model: str, max_tokens_default: int) -> Job:
    """``POST /v1/chat/completions``: messages rendered with a trivial template."""
    body = _openai_body(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise BadRequest("`messages` must be a non-empty list of {role, content} objects")
    for m in messages:
        if not isinstance(m.get("role"), str):
            raise BadRequest("every message needs a string `role`")
    return _openai_job(body, SimPrompt.from_text(chat_prompt(messages)), max_tokens_default, default_model)


def _openai_body(body: object) -> dict:
    if not isinstance(body, dict):
        raise BadRequest("invalid type: expected a JSON object")
    return body


def _openai_job(body: dict, prompt: SimPrompt, max_tokens_default: int, default_model: str) -> Job:
    for key in ("max_tokens", "max_completion_tokens", "min_tokens", "n", "seed", "top_k"):
        _check_type(key, body.get(key), int)
    for key in ("temperature", "top_p"):
        _check_type(key, body.get(key), float)
    _check_type("ignore_eos", body.get("ignore_eos"), bool)
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None and max_tokens < 0:
        raise BadRequest(f"max_tokens must be >= 0 (got {max_tokens})")
    if body.get("n") not in (None, 1):
        raise BadRequest("n > 1 is not simulated; send n separate requests")
    temperature = body.get("temperature")
    if temperature is not None and temperature < 0:
        raise BadRequest(f"temperature must be >= 0 (got {temperature})")
    opts = body.get("stream_options") or {}
    if not isinstance(opts, dict):
        raise BadRequest("`stream_options` must be an object")
    params = SimSamplingParams(
        max_new_tokens=max_tokens_default if max_tokens is None else max_tokens,
        temperature=1.0 if temperature is None else float(temperature),
        ignore_eos=bool(body.get("ignore_eos") or False),
        min_new_tokens=int(body.get("min_tokens") or 0),
        stop=_stops(body.get("stop")),
        sampling_seed=body.get("seed"),
    )
    model = body.get("model")
    return Job(
        prompt,
        params,
        _flag(body, "stream"),
        rid=_rid(body),
        include_usage=bool(opts.get("include_usage")),
        spec_details=_flag(body, "return_spec_tokens_details"),
        model=model if isinstance(model, str) else default_model,
    )


def _check_type(key: str, value: object, kind: type | None = None) -> None:
    if value is None:
        return
    kind = kind or (int if key in _INT_KEYS else float if key in _FLOAT_KEYS else bool if key in _BOOL_KEYS else None)
    if kind is None:
        return
    is_bool = isinstance(value, bool)
    ok = (
        is_bool
        if kind is bool
        else not is_bool and (isinstance(value, int) if kind is int else isinstance(value, (int, float)))
    )
    if not ok:
        raise BadRequest(f"invalid type for `{key}`: {value!r}, expected {kind.__name__}")


def _stops(stop: object) -> tuple[str, ...]:
    if stop is None:
        return ()
    if isinstance(stop, str):
        return (stop,)
    if isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        return tuple(stop)
    raise BadRequest("`stop` must be a string or a list of strings")


def _prompt(text: object, ids: object, text_key: str, ids_key: str) -> SimPrompt:
    if text is not None:
        if not isinstance(text, str):
            raise BadRequest(f"invalid type for `{text_key}`: expected a string")
        prompt = SimPrompt.from_text(text)
    else:
        if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids):
            raise BadRequest(f"invalid type for `{ids_key}`: expected a list of non-negative integers")
        prompt = SimPrompt.from_ids(ids)
    if prompt.num_tokens == 0:
        raise BadRequest("The input is empty: the prompt has no tokens.")
    return prompt


def _flag(body: dict, key: str) -> bool:
    value = body.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise BadRequest(f"invalid type for `{key}`: {value!r}, expected a boolean")
    return value


def _rid(body: dict) -> str | None:
    rid = body.get("rid")
    if rid is not None and not isinstance(rid, str):
        raise BadRequest("invalid type for `rid`: expected a string")
    return rid


# ---- rendering ------------------------------------------------------------------------------------
def spec_fields(req: Request, spec: SpecConfig) -> dict:
    """The spec_* keys of a finished request (``_calculate_spec_decoding_metrics``)."""
    proposed = req.verify_ct * (spec.draft_tokens - 1)
    return {
        "spec_verify_ct": req.verify_ct,
        "spec_accept_length": len(req.output_ids) / req.verify_ct,
        "spec_accept_rate": req.correct_drafts / proposed if proposed else 0.0,
        "spec_num_correct_drafts": req.correct_drafts,
        "spec_num_proposed_drafts": proposed,
        "spec_correct_drafts_histogram": grown_histogram(req.histogram),
    }


def grown_histogram(counts: list[int]) -> list[int]:
    """The histogram as SGLang sends it: a list it grows on demand (``update_spec_acceptance_histogram``),
    so it ends at the most drafts any verify step of the request accepted (index = drafts accepted)."""
    end = max((i for i, c in enumerate(counts) if c), default=-1) + 1
    return list(counts[:end])


def meta_info(req: Request, upto: int, final: bool, spec: SpecConfig | None, metrics: bool) -> dict:
    """``meta_info`` of one chunk: counts so far; e2e_latency and spec_* on the final chunk."""
    m: dict = {
        "id": req.rid,
        "finish_reason": req.finish_reason if final else None,
        "prompt_tokens": req.prompt.num_tokens,
        "weight_version": "default",
        "num_retractions": 0,
        "reasoning_tokens": 0,
        "completion_tokens": upto,
        "cached_tokens": req.cached_tokens,
    }
    if metrics:
        m["queue_time"] = _delta(req.arrival, req.admitted_at)
    if not final:
        return m
    m["e2e_latency"] = _delta(req.arrival, req.finished_at)
    if spec is not None and req.verify_ct > 0:
        m.update(spec_fields(req, spec))
    if metrics:
        ttft = _delta(req.arrival, req.first_token_at)
        m["first_token_latency"] = ttft
        decode = _delta(req.first_token_at, req.finished_at)
        m["decode_throughput"] = (upto - 1) / decode if upto > 1 and decode else 0.0
        m["request_received_ts"] = time.time() - _delta(req.arrival, time.perf_counter())
    return m


def _delta(start: float | None, end: float | None) -> float:
    return max(0.0, end - start) if start is not None and end is not None else 0.0


def generate_chunk(req: Request, upto: int, final: bool, spec: SpecConfig | None, metrics: bool) -> dict:
    """One ``/generate`` response object (non-stream answer or stream chunk), cumulative."""
    return {
        "text": req.text(upto),
        "output_ids": req.output_ids[:upto],
        "meta_info": meta_info(req, upto, final, spec, metrics),
    }


def openai_finish_reason(req: Request) -> tuple[str | None, object]:
    """(finish_reason, matched_stop) in OpenAI terms."""
    reason = req.finish_reason or {}
    kind = reason.get("type")
    if kind == "length":
        return "length", None
    if kind == "stop":
        return "stop", reason.get("matched")
    return ("abort" if kind == "abort" else None), None


def usage(req: Request) -> dict:
    n = len(req.output_ids)
    return {  # SGLang's UsageInfo, in its field order
        "prompt_tokens": req.prompt.num_tokens,
        "total_tokens": req.prompt.num_tokens + n,
        "completion_tokens": n,
        "prompt_tokens_details": None,
        "reasoning_tokens": 0,
        "completion_tokens_details": None,  # set only when there are reasoning tokens
    }


class OpenAIRenderer:
    """Builds completion / chat objects for one request (ids and creation time fixed per response).

    Streams have SGLang 0.5.23's shape (`serving_chat.py`, `serving_completions.py`, `sse_utils.py`):
    a chat stream opens with a role chunk, carries text in content chunks whose `finish_reason` is
    null, then sends the finish reason in a chunk of its own; a completions stream puts the finish
    reason on its last text chunk. Both then send the `sglext` block (choices: []) and the usage
    chunk (choices: []) as separate events.
    """

    def __init__(self, req: Request, job: Job, chat: bool, spec: SpecConfig | None) -> None:
        self.req, self.job, self.chat, self.spec = req, job, chat, spec
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self.sent_chars = 0

    def _base(self, obj: str) -> dict:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.job.model}

    def _spec_details(self) -> dict | None:
        if self.job.spec_details and self.spec is not None and self.req.verify_ct > 0:
            return {
                "spec_accept_rate": 0.0,
                "spec_accept_length": 0.0,
                "spec_cap_length": 0.0,
                "spec_block_accept_length": 0.0,
                **spec_fields(self.req, self.spec),
                "spec_cap_lens_histogram": [],
            }
        return None

    def full(self) -> dict:
        """The non-streaming response."""
        reason, matched = openai_finish_reason(self.req)
        text = self.req.text()
        if self.chat:
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text, "reasoning_content": None, "tool_calls": None},
                "logprobs": None,
                "finish_reason": reason,
                "matched_stop": matched,
            }
            out = self._base("chat.completion")
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason, "matched_stop": matched}
            out = self._base("text_completion")
        out["choices"] = [choice]
        out["usage"] = usage(self.req)
        details = self._spec_details()
        if details is not None:
            out["sglext"] = {"spec_tokens_details": details}
        return out

    def _chat_chunk(self, delta: dict, reason: str | None = None, matched: object = None) -> dict:
        out = self._base("chat.completion.chunk")
        choice = {
            "index": 0,
            "delta": {"reasoning_content": None, **delta},
            "logprobs": None,
            "finish_reason": reason,
            "matched_stop": matched,
        }
        out["choices"] = [choice]
        return out

    def first_chat_chunk(self) -> dict:
        """Chat streams open with a role-only delta."""
        return self._chat_chunk({"role": "assistant", "content": ""})

    def chunks(self, upto: int, final: bool) -> list[dict]:
        """The events for the text up to `upto` tokens (OpenAI streams are deltas), and at the end the
        finish chunk (chat) and the extension block."""
        text = self.req.text(upto)
        delta, self.sent_chars = text[self.sent_chars :], len(text)
        reason, matched = openai_finish_reason(self.req) if final else (None, None)
        out: list[dict] = []
        if self.chat:
            if delta:
                out.append(self._chat_chunk({"content": delta}))
            if final:
                out.append(self._chat_chunk({}, reason, matched))
        elif delta or final:
            chunk = self._base("text_completion")
            chunk["choices"] = [
                {"index": 0, "text": delta, "logprobs": None, "finish_reason": reason, "matched_stop": matched}
            ]
            out.append(chunk)
        details = self._spec_details() if final else None
        if details is not None:
            block = self._base("chat.completion.chunk" if self.chat else "text_completion")
            block.update({"choices": [], "usage": None, "sglext": {"spec_tokens_details": details}})
            out.append(block)
        return out

    def usage_chunk(self) -> dict:
        out = self._base("chat.completion.chunk" if self.chat else "text_completion")
        out["choices"] = []
        out["usage"] = usage(self.req)
        return out
