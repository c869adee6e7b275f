"""Secrets are recognised by name and by the shape of their value (pytest_specperf/common/redact.py)."""

from __future__ import annotations

import pytest

from pytest_specperf.common.redact import REDACTED, looks_random, redact_args, redact_env, redact_text, redact_url

HF = "hf_" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bD1fH3j"
SK = "sk-proj-" + "Zq8Xw2Lm4Nb6Vc8Rt0Yu"
AWS_ID = "AKIA" + "IOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
RANDOM = "Xk9pQ2vL7mR4tW8zB3nC6fH1jD5gS0aE"


@pytest.mark.parametrize(
    "text",
    [
        f"SGLANG_HF_AUTH={HF}",
        f"using {SK} for the judge",
        f"aws {AWS_ID} in a log line",
        f"Authorization: Bearer {RANDOM}",
        "Authorization: Basic dXNlcjpwYXNzd29yZA==",
        "hf_topsecretvalue123 and sk-serverkey456",
    ],
)
def test_known_shapes_are_redacted_in_free_text(text: str) -> None:
    out = redact_text(text)
    assert REDACTED in out
    for secret in (HF, SK, AWS_ID, RANDOM, "dXNlcjpwYXNzd29yZA==", "topsecretvalue123", "serverkey456"):
        assert secret not in out


@pytest.mark.parametrize(
    "name", ["SGLANG_HF_AUTH", "HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "MY_CREDENTIALS", "DB_PASSWORD", "SESSION_ID"]
)
def test_secret_names_hide_any_value(name: str) -> None:
    assert redact_env({name: "short"}) == {name: REDACTED}


def test_a_random_looking_value_is_hidden_whatever_its_name() -> None:
    assert redact_env({"SGLANG_THING": RANDOM, "SGLANG_OTHER": AWS_SECRET.replace("/", "")}) == {
        "SGLANG_THING": REDACTED,
        "SGLANG_OTHER": REDACTED,
    }


@pytest.mark.parametrize(
    "value",
    [
        "Ring",
        "LL128",
        "16",
        "/models/kimi-k2.5/tokenizer.json",
        "0123456789abcdef0123456789abcdef01234567",  # a git commit: hex is a hash, not a secret
        "max_new_tokens_and_some_words_here",
        "NVIDIA H200, 550.54.15",
    ],
)
def test_ordinary_values_stay(value: str) -> None:
    assert not looks_random(value)
    assert redact_env({"NCCL_ALGO": value, "SGLANG_TOKENIZER_PATH": value, "AUTHOR": value}) == {
        "NCCL_ALGO": value,
        "SGLANG_TOKENIZER_PATH": value,
        "AUTHOR": value,
    }


def test_args_and_urls() -> None:
    args = redact_args(["--api-key", "k1", f"--api-key={SK}", "--hf-token", HF, "--tp-size", "8"])
    assert args == ["--api-key", REDACTED, f"--api-key={REDACTED}", "--hf-token", REDACTED, "--tp-size", "8"]
    url = redact_url(f"https://user:pw@example.com/v1?token=abc&x=1#{HF}")
    assert "pw" not in url and "abc" not in url and HF not in url and "x=1" in url


HF_TOKEN = "hf_abcdefghijklmnopqrstuvwxyz0123456789"


def test_redact_env_by_name() -> None:
    env = {
        "HF_TOKEN": HF_TOKEN,
        "OPENAI_API_KEY": "sk-abc",
        "AWS_SECRET_ACCESS_KEY": "aws-xyz",
        "db_password": "pw",
        "SGLANG_MAX_TOKENS": "4096",
        "TOKENIZERS_PARALLELISM": "false",
        "NCCL_ALGO": "Ring",
    }
    assert redact_env(env) == {
        "HF_TOKEN": REDACTED,
        "OPENAI_API_KEY": REDACTED,
        "AWS_SECRET_ACCESS_KEY": REDACTED,
        "db_password": REDACTED,
        "SGLANG_MAX_TOKENS": "4096",
        "TOKENIZERS_PARALLELISM": "false",
        "NCCL_ALGO": "Ring",
    }


def test_redact_env_scrubs_secret_values_under_innocent_names() -> None:
    env = {"SGLANG_REMOTE": "https://bob:hunter2@store.example/x", "SGLANG_X": HF_TOKEN}
    redacted = redact_env(env)
    assert redacted["SGLANG_REMOTE"] == "https://store.example/x"
    assert redacted["SGLANG_X"] == REDACTED


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://10.0.0.7:30000", "http://10.0.0.7:30000"),
        ("https://alice:s3cret@host:8443/v1?x=1", "https://host:8443/v1?x=1"),
        ("https://tok@host/", "https://host/"),
        ("http://host/p?token=abc&x=1", "http://host/p?token=<redacted>&x=1"),
        ("http://host/p?api_key=abc&sig=zz", "http://host/p?api_key=<redacted>&sig=<redacted>"),
        # a store setting: the URL inside `git:` loses its credentials and nothing else
        ("git:https://bob:hunter2@example.com/org/perf.git#nightly", "git:https://example.com/org/perf.git#nightly"),
        ("git:https://x-access-token:ghs1@github.com/o/r.git#b", "git:https://github.com/o/r.git#b"),
        # an SSH user is an account, not a secret: kept, so the URL still says where it goes
        ("ssh://git@github.com/org/perf.git", "ssh://git@github.com/org/perf.git"),
        ("git:ssh://git@github.com/org/perf.git#b", "git:ssh://git@github.com/org/perf.git#b"),
        ("ssh://git:pw@host/r.git", "ssh://git@host/r.git"),
        ("git:/srv/git/perf.git#b", "git:/srv/git/perf.git#b"),
    ],
)
def test_redact_url(url: str, expected: str) -> None:
    assert redact_url(url) == expected


def test_redact_args_both_forms() -> None:
    args = ["--api-key", "sk-123", "--admin-api-key=adm", "--tp-size", "8", "--api-key=k2"]
    assert redact_args(args) == [
        "--api-key",
        REDACTED,
        f"--admin-api-key={REDACTED}",
        "--tp-size",
        "8",
        f"--api-key={REDACTED}",
    ]


def test_redact_text_catches_free_text_secrets() -> None:
    text = f"launched with --api-key sk-123 at https://u:p@h:1/x?token=t; token {HF_TOKEN}"
    clean = redact_text(text)
    for secret in ("sk-123", "u:p@", "token=t", HF_TOKEN):
        assert secret not in clean


def test_a_path_that_starts_with_hf_is_not_a_token() -> None:
    """SGLang's tracebacks run through sglang/srt/utils/hf_transformers/config.py."""
    line = '  File "/opt/sglang/srt/utils/hf_transformers/config.py", line 382, in get_config'
    assert redact_text(line) == line
    assert redact_text("hf_transformers_utils and hf_modules") == "hf_transformers_utils and hf_modules"
    assert redact_text(f"token {HF} in a log") == f"token {REDACTED} in a log"


@pytest.mark.parametrize(
    "echo",
    [
        "server_args={'model_path': '/m', 'api_key': 'Run-Key-4d9f2c7e81b3', 'tokenizer_path': '/t'}",
        "server_args=ServerArgs(model_path='/m', api_key='Run-Key-4d9f2c7e81b3', tokenizer_path='/t')",
        '{"model_path": "/m", "api_key": "Run-Key-4d9f2c7e81b3", "tokenizer_path": "/t"}',
    ],
)
def test_a_quoted_value_under_a_secret_key_is_hidden(echo: str) -> None:
    """How SGLang logs its arguments at every start (engine.py), the key in clear text."""
    out = redact_text(echo)
    assert "Run-Key-4d9f2c7e81b3" not in out and REDACTED in out and "/t" in out and "/m" in out


def test_the_log_relay_hides_literal_secrets_and_shapes(tmp_path) -> None:
    from pytest_specperf.servers.logrelay import relay

    log = tmp_path / "server.log"
    log.write_text("# specperf: header\n")
    relay([b"key PlainWordKey42 here\n", f"{HF}\n".encode(), b"no newline at the end"], log, ["PlainWordKey42"])
    assert log.read_text() == f"# specperf: header\nkey {REDACTED} here\n{REDACTED}\nno newline at the end"
