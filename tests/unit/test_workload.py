"""Workload parsing, prompt loading and hashing: every error must say where the problem is."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pytest_specperf.config.workloads import (
    BUILTIN_CATEGORIES,
    BUILTIN_CHAT_CATEGORIES,
    BUILTIN_SETS,
    DEFAULT_WORKLOAD,
    Prompt,
    WorkloadConfig,
    load_prompts,
    parse_workload,
    request_plan,
    warmup_plan,
    workload_hash,
)
from pytest_specperf.errors import ConfigError

CONFIG = "/repo/specperf.toml"


def parse(table: dict[str, Any], base_dir: Path = Path("/nonexistent"), name: str = "chat") -> WorkloadConfig:
    return parse_workload(name, table, f"{CONFIG} [specperf.workloads.{name}]", base_dir)


def config_error(table: dict[str, Any], base_dir: Path = Path("/nonexistent")) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse(table, base_dir)
    return info.value


# ---------------------------------------------------------------------------------------------
# parse_workload


def test_defaults_when_table_is_empty() -> None:
    cfg = parse({})
    assert cfg == WorkloadConfig(name="chat")
    assert (cfg.prompts, cfg.num_requests, cfg.max_new_tokens) == ("builtin:mixed", 32, 256)
    assert (cfg.concurrency, cfg.request_rate, cfg.warmup, cfg.max_error_rate) == ((1,), None, 4, 0.0)
    assert not cfg.is_open_loop


def test_default_workload_is_small_and_builtin() -> None:
    assert DEFAULT_WORKLOAD.name == "default"
    assert DEFAULT_WORKLOAD.prompts == "builtin:mixed"
    assert DEFAULT_WORKLOAD.num_requests <= 32
    assert load_prompts(DEFAULT_WORKLOAD.prompts, Path("."))


def test_full_table_is_parsed() -> None:
    cfg = parse(
        {
            "prompts": "builtin:code",
            "num_requests": 8,
            "max_new_tokens": 64,
            "concurrency": [16, 1, 4],
            "request_rate": 2,
            "temperature": 0,
            "top_p": 0.9,
            "ignore_eos": True,
            "warmup": 0,
            "seed": 7,
            "max_error_rate": 0.1,
        }
    )
    assert cfg.concurrency == (1, 4, 16)
    assert cfg.request_rate == 2.0 and isinstance(cfg.request_rate, float)
    assert cfg.temperature == 0.0 and isinstance(cfg.temperature, float)
    assert cfg.ignore_eos is True and cfg.is_open_loop
    assert (cfg.num_requests, cfg.max_new_tokens, cfg.warmup, cfg.seed) == (8, 64, 0, 7)


def test_single_concurrency_int_becomes_tuple() -> None:
    assert parse({"concurrency": 64}).concurrency == (64,)


def test_unknown_key_names_file_table_key_and_suggests() -> None:
    err = config_error({"num_request": 3})
    assert err.where == f"{CONFIG} [specperf.workloads.chat] num_request"
    assert "unknown key" in err.message and "did you mean 'num_requests'" in err.message


def test_unknown_key_without_close_match_has_no_hint() -> None:
    err = config_error({"colour": "blue"})
    assert "did you mean" not in err.message


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("num_requests", True, "must be an integer, got boolean"),
        ("num_requests", 2.5, "must be an integer"),
        ("num_requests", "10", "must be an integer, got string"),
        ("num_requests", 0, "must be >= 1"),
        ("max_new_tokens", -1, "must be >= 1"),
        ("warmup", False, "must be an integer, got boolean"),
        ("warmup", -1, "must be >= 0"),
        ("seed", -3, "must be >= 0"),
        ("temperature", -0.1, "must be >= 0"),
        ("temperature", "hot", "must be a number"),
        ("temperature", float("nan"), "finite"),
        ("top_p", 0, "must be > 0 and <= 1"),
        ("top_p", 1.5, "must be > 0 and <= 1"),
        ("request_rate", 0, "must be > 0"),
        ("request_rate", float("inf"), "finite"),
        ("request_rate", True, "must be a number, got boolean"),
        ("ignore_eos", 1, "must be true or false"),
        ("max_error_rate", 1.5, "<= 1"),
        ("prompts", "", "non-empty string"),
        ("prompts", 3, "non-empty string"),
    ],
)
def test_bad_values_name_the_key(key: str, value: Any, expected: str) -> None:
    err = config_error({key: value})
    assert err.where == f"{CONFIG} [specperf.workloads.chat] {key}"
    assert expected in err.message


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ([], "at least one"),
        ([1, 0], "must be >= 1"),
        ([4, 4], "listed twice"),
        ([1, True], "got boolean"),
        ("4", "got string"),
        ([1, 2.0], "got number"),
    ],
)
def test_bad_concurrency(value: Any, expected: str) -> None:
    err = config_error({"concurrency": value})
    assert err.where.endswith("[specperf.workloads.chat] concurrency")
    assert expected in err.message


def test_table_must_be_a_mapping() -> None:
    with pytest.raises(ConfigError) as info:
        parse_workload("w", ["not", "a", "table"], f"{CONFIG} [specperf.workloads.w]", Path("."))  # type: ignore[arg-type]
    assert info.value.where == f"{CONFIG} [specperf.workloads.w]"


def test_unknown_builtin_set_lists_the_sets() -> None:
    err = config_error({"prompts": "builtin:maths"})
    assert err.where.endswith("prompts")
    assert "did you mean 'math'" in err.message
    for name in BUILTIN_SETS:
        assert name in err.message


def test_missing_prompt_file_is_an_error(tmp_path: Path) -> None:
    err = config_error({"prompts": "data/missing.jsonl"}, base_dir=tmp_path)
    assert err.where == f"{CONFIG} [specperf.workloads.chat] prompts"
    assert "missing.jsonl" in err.message and "does not exist" in err.message


def test_relative_prompt_path_resolves_against_config_dir(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "p.jsonl").write_text('{"prompt": "hi"}\n')
    cfg = parse({"prompts": "data/p.jsonl"}, base_dir=tmp_path)
    assert Path(cfg.prompts) == (tmp_path / "data" / "p.jsonl").resolve()
    assert [p.text for p in load_prompts(cfg.prompts, Path("/elsewhere"))] == ["hi"]


# ---------------------------------------------------------------------------------------------
# built-in sets


def test_builtin_categories_have_enough_prompts() -> None:
    total = 0
    for category in BUILTIN_CATEGORIES:
        prompts = load_prompts(f"builtin:{category}", Path("."))
        assert len(prompts) >= 20, category
        assert {p.category for p in prompts} == {category}
        if category in BUILTIN_CHAT_CATEGORIES:
            assert all(p.messages and p.text is None for p in prompts)
        else:
            assert all(p.text and p.messages is None for p in prompts)
        total += len(prompts)
    assert total >= 100
    assert len(BUILTIN_CATEGORIES) >= 5


def test_builtin_chat_is_chat_and_a_round_never_repeats_a_conversation() -> None:
    """Distinct conversations for the default round and the example suite's largest one (x2 for
    headroom); system prompts on some, earlier assistant turns on some, user turns short and long."""
    chat = load_prompts("builtin:chat", Path("."))
    assert BUILTIN_CHAT_CATEGORIES == ("chat",)
    assert len({json.dumps(p.content()) for p in chat}) == len(chat) >= 2 * WorkloadConfig("x").num_requests
    for prompt in chat:
        assert prompt.messages is not None
        roles = [m["role"] for m in prompt.messages]
        assert roles[-1] == "user" and set(roles) <= {"system", "user", "assistant"}, prompt.id
        assert "system" not in roles[1:], prompt.id
        conversation = [r for r in roles if r != "system"]
        assert conversation[::2] == ["user"] * len(conversation[::2]), prompt.id  # turns alternate
        assert conversation[1::2] == ["assistant"] * len(conversation[1::2]), prompt.id
    assert sum(p.messages[0]["role"] == "system" for p in chat if p.messages) >= 5
    assert sum(len(p.messages or ()) >= 3 for p in chat) >= 5  # multi-turn conversations
    user_words = sorted(len(p.messages[-1]["content"].split()) for p in chat if p.messages)
    assert user_words[0] <= 10 and user_words[len(user_words) // 2] <= 30 and user_words[-1] >= 150


def test_builtin_ids_and_contents_are_unique() -> None:
    mixed = load_prompts("builtin:mixed", Path("."))
    assert len({p.id for p in mixed}) == len(mixed)
    assert len({json.dumps(p.content()) for p in mixed}) == len(mixed)


def test_mixed_interleaves_categories() -> None:
    mixed = load_prompts("builtin:mixed", Path("."))
    total = sum(len(load_prompts(f"builtin:{c}", Path("."))) for c in BUILTIN_CATEGORIES)
    assert len(mixed) == total
    assert [p.category for p in mixed[: len(BUILTIN_CATEGORIES)]] == list(BUILTIN_CATEGORIES)


def test_builtin_lengths_vary() -> None:
    lengths = [len(json.dumps(p.content())) for p in load_prompts("builtin:mixed", Path("."))]
    assert min(lengths) < 60 and max(lengths) > 600


def test_summarization_prompts_carry_a_passage() -> None:
    for prompt in load_prompts("builtin:summarization", Path(".")):
        instruction, _, passage = (prompt.text or "").partition("\n\n")
        assert "summar" in instruction.lower() or "condense" in instruction.lower()
        assert len(passage.split()) >= 30, prompt.id


def test_load_prompts_unknown_builtin() -> None:
    with pytest.raises(ConfigError) as info:
        load_prompts("builtin:nope", Path("."))
    assert "mixed" in info.value.message


# ---------------------------------------------------------------------------------------------
# JSONL files


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_jsonl_prompts_and_messages(tmp_path: Path) -> None:
    rows = [
        {"prompt": "Tell me a joke."},
        {"id": "m1", "category": "chat", "messages": [{"role": "user", "content": "Hi"}], "note": "x"},
        {"id": 7, "prompt": "Seven"},
    ]
    path = write(tmp_path, "mine.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n\n")
    prompts = load_prompts(str(path), tmp_path)
    assert prompts[0] == Prompt("mine-1", "Tell me a joke.", None, "mine")
    assert prompts[1] == Prompt("m1", None, ({"role": "user", "content": "Hi"},), "chat")
    assert prompts[2].id == "7"


def test_jsonl_relative_path(tmp_path: Path) -> None:
    write(tmp_path, "rel.jsonl", '{"prompt": "x"}\n')
    assert load_prompts("rel.jsonl", tmp_path)[0].text == "x"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('{"prompt": "ok"', "invalid JSON"),
        ('["prompt"]', "must be a JSON object"),
        ('{"text": "hi"}', "exactly one of 'prompt' or 'messages'"),
        ('{"prompt": "a", "messages": []}', "it has both"),
        ('{"prompt": 5}', "'prompt' must be a non-empty string"),
        ('{"prompt": "  "}', "'prompt' must be a non-empty string"),
        ('{"messages": []}', "non-empty array"),
        ('{"messages": "hi"}', "non-empty array"),
        ('{"messages": [{"role": "user"}]}', "messages[0].content must be a string"),
        ('{"messages": [{"role": "", "content": "x"}]}', "messages[0].role"),
        ('{"messages": [{"role": "user", "content": "x", "extra": 1}]}', "messages[0] must be an object"),
        ('{"prompt": "x", "id": true}', "'id' must be"),
        ('{"prompt": "x", "category": 3}', "'category' must be"),
    ],
)
def test_jsonl_errors_name_file_and_line(tmp_path: Path, line: str, expected: str) -> None:
    path = write(tmp_path, "bad.jsonl", '{"prompt": "first"}\n\n' + line + "\n")
    with pytest.raises(ConfigError) as info:
        load_prompts(str(path), tmp_path)
    assert info.value.where == f"{path}:3"
    assert expected in info.value.message


def test_jsonl_suffix_is_never_read_as_sharegpt(tmp_path: Path) -> None:
    path = write(tmp_path, "rows.jsonl", '["not", "an", "object"]\n')
    with pytest.raises(ConfigError) as info:
        load_prompts(str(path), tmp_path)
    assert info.value.where == f"{path}:1" and "must be a JSON object" in info.value.message


def test_jsonl_duplicate_id(tmp_path: Path) -> None:
    path = write(tmp_path, "dup.jsonl", '{"id": "a", "prompt": "x"}\n{"id": "a", "prompt": "y"}\n')
    with pytest.raises(ConfigError) as info:
        load_prompts(str(path), tmp_path)
    assert info.value.where == f"{path}:2" and "first on line 1" in info.value.message


def test_empty_jsonl_file(tmp_path: Path) -> None:
    path = write(tmp_path, "empty.jsonl", "\n  \n")
    with pytest.raises(ConfigError) as info:
        load_prompts(str(path), tmp_path)
    assert info.value.where == str(path) and "no prompts" in info.value.message


def test_missing_file_in_load_prompts(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_prompts(str(tmp_path / "gone.jsonl"), tmp_path)
    assert "gone.jsonl" in info.value.where


# ---------------------------------------------------------------------------------------------
# ShareGPT files


def test_sharegpt_takes_conversation_up_to_first_human_turn(tmp_path: Path) -> None:
    data = [
        {
            "id": "conv-a",
            "conversations": [
                {"from": "system", "value": "Be brief."},
                {"from": "human", "value": "What is 2+2?"},
                {"from": "gpt", "value": "4"},
                {"from": "human", "value": "And 3+3?"},
            ],
        },
        {"conversations": [{"from": "gpt", "value": "orphan answer"}]},  # no human turn: skipped
        {"conversations": []},  # skipped
        {"conversations": [{"from": "human", "value": "Hello"}]},
    ]
    path = write(tmp_path, "share.json", json.dumps(data))
    prompts = load_prompts(str(path), tmp_path)
    assert [p.id for p in prompts] == ["conv-a", "share-3"]
    assert prompts[0].messages == (
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2+2?"},
    )
    assert prompts[0].text is None and prompts[0].category == "share"
    assert prompts[1].messages == ({"role": "user", "content": "Hello"},)


def test_sharegpt_detected_by_content(tmp_path: Path) -> None:
    path = write(tmp_path, "share.data", json.dumps([{"conversations": [{"from": "human", "value": "x"}]}]))
    assert load_prompts(str(path), tmp_path)[0].messages == ({"role": "user", "content": "x"},)


@pytest.mark.parametrize(
    ("data", "where_suffix", "expected"),
    [
        ({"conversations": []}, "", "JSON array"),
        ([{"turns": []}], " entry [0]", "'conversations' array"),
        ([{"conversations": [{"value": "x"}]}], " entry [0] conversations[0]", "'from'"),
        ([{"conversations": [{"from": "human", "value": 3}]}], " entry [0] conversations[0]", "'value'"),
        ([{"conversations": [{"from": "gpt", "value": "x"}]}], "", "no conversation with a non-empty human"),
    ],
)
def test_sharegpt_errors(tmp_path: Path, data: Any, where_suffix: str, expected: str) -> None:
    path = write(tmp_path, "s.json", json.dumps(data))
    with pytest.raises(ConfigError) as info:
        load_prompts(str(path), tmp_path)
    assert info.value.where == f"{path}{where_suffix}"
    assert expected in info.value.message


def test_sharegpt_invalid_json_names_line(tmp_path: Path) -> None:
    path = write(tmp_path, "s.json", '[\n{"conversations": [}\n]')
    with pytest.raises(ConfigError) as info:
        load_prompts(str(path), tmp_path)
    assert info.value.where == f"{path}:2" and "invalid JSON" in info.value.message


# ---------------------------------------------------------------------------------------------
# plans


def prompts_n(n: int) -> list[Prompt]:
    return [Prompt(f"p{i}", f"text {i}", None, "t") for i in range(n)]


def test_request_plan_cycles_in_order() -> None:
    cfg = WorkloadConfig(name="w", num_requests=7)
    assert [p.id for p in request_plan(cfg, prompts_n(3))] == ["p0", "p1", "p2", "p0", "p1", "p2", "p0"]
    assert request_plan(cfg, prompts_n(3)) == request_plan(cfg, prompts_n(3))


def test_warmup_avoids_round_start() -> None:
    cfg = WorkloadConfig(name="w", num_requests=4, warmup=4)
    prompts = prompts_n(10)
    warm, first = warmup_plan(cfg, prompts), request_plan(cfg, prompts)
    assert [p.id for p in warm] == ["p9", "p8", "p7", "p6"]
    assert not {p.id for p in warm} & {p.id for p in first}


def test_warmup_zero_and_empty_set() -> None:
    assert warmup_plan(WorkloadConfig(name="w", warmup=0), prompts_n(3)) == []
    with pytest.raises(ValueError):
        request_plan(WorkloadConfig(name="w"), [])


# ---------------------------------------------------------------------------------------------
# hashing


def test_hash_is_stable_and_known() -> None:
    cfg = WorkloadConfig(name="w")
    prompts = prompts_n(3)
    digest = workload_hash(cfg, prompts)
    assert digest == workload_hash(WorkloadConfig(name="w"), prompts_n(3))
    assert len(digest) == 64 and int(digest, 16) >= 0
    # A literal value guards against accidental changes of the canonical form across versions:
    # stored baselines would silently stop matching.
    assert digest == KNOWN_HASH


KNOWN_HASH = "7810a1bb526de2318d97c11e99f947c1f69e84047e83869772b775982613120e"


def test_hash_ignores_name_source_labels_concurrency_and_error_budget() -> None:
    prompts = prompts_n(3)
    base = workload_hash(WorkloadConfig(name="a"), prompts)
    relabelled = [replace(p, id=f"x{i}", category="other") for i, p in enumerate(prompts)]
    assert workload_hash(WorkloadConfig(name="b"), prompts) == base
    assert workload_hash(WorkloadConfig(name="a", prompts="/some/file.jsonl"), prompts) == base
    assert workload_hash(WorkloadConfig(name="a"), relabelled) == base
    assert workload_hash(WorkloadConfig(name="a", concurrency=(1, 4)), prompts) == base
    assert workload_hash(WorkloadConfig(name="a", max_error_rate=0.5), prompts) == base


@pytest.mark.parametrize(
    "change",
    [
        {"num_requests": 33},
        {"max_new_tokens": 128},
        {"request_rate": 4.0},
        {"temperature": 0.7},
        {"top_p": 0.95},
        {"ignore_eos": True},
        {"warmup": 5},
        {"seed": 1},
    ],
)
def test_hash_changes_with_each_parameter(change: dict[str, Any]) -> None:
    prompts = prompts_n(3)
    assert workload_hash(replace(WorkloadConfig(name="a"), **change), prompts) != workload_hash(
        WorkloadConfig(name="a"), prompts
    )


def test_hash_changes_with_prompt_contents_and_order() -> None:
    cfg = WorkloadConfig(name="a")
    prompts = prompts_n(3)
    base = workload_hash(cfg, prompts)
    edited = [*prompts[:2], replace(prompts[2], text="text 2!")]
    as_chat = [*prompts[:2], Prompt("p2", None, ({"role": "user", "content": "text 2"},), "t")]
    assert workload_hash(cfg, edited) != base
    assert workload_hash(cfg, list(reversed(prompts))) != base
    assert workload_hash(cfg, prompts[:2]) != base
    assert workload_hash(cfg, as_chat) != base


def test_hash_of_builtin_set_is_deterministic() -> None:
    cfg = parse({"prompts": "builtin:mixed"})
    assert workload_hash(cfg, load_prompts(cfg.prompts, Path("."))) == workload_hash(
        cfg, load_prompts("builtin:mixed", Path("/tmp"))
    )
