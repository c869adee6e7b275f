"""The installed engine decides what is valid: a stand-in "newer SGLang" that the configured
interpreter imports adds a flag and an algorithm; the dry run accepts both (the simulator reads
the installed flags), still refuses a typo with a did-you-mean, and says where flags came from."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from pytest_specperf.engines.suite import load_suite

SERVER_ARGS = """
import argparse


class ServerArgs:
    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--model-path", "--model")
        parser.add_argument("--host")
        parser.add_argument("--port", type=int)
        parser.add_argument("--tp-size", "--tensor-parallel-size", type=int)
        parser.add_argument("--speculative-algorithm")
        parser.add_argument("--speculative-draft-model-path", "--speculative-draft-model")
        parser.add_argument("--speculative-num-steps", type=int)
        parser.add_argument("--speculative-eagle-topk", type=int)
        parser.add_argument("--speculative-num-draft-tokens", type=int)
        parser.add_argument("--max-running-requests", type=int)
        parser.add_argument("--api-key")
        parser.add_argument("--admin-api-key")
        parser.add_argument("--enable-metrics", action="store_true")
        parser.add_argument("--attention-backend", choices=["fa3", "flashinfer", "triton"])
        # new in this release: a flag whose name is a prefix of an old one's would be misread by an old list
        parser.add_argument("--stream-output", action="store_true")
        parser.add_argument("--stream-output-interval", type=int)
        # back in this release: the right flag here, refused by SGLang 0.5.23's list
        parser.add_argument("--cuda-graph-max-bs", type=int)
        parser.add_argument("--overlap-verify", action=argparse.BooleanOptionalAction)
"""

SPEC_INFO = """
from enum import Enum, auto


class SpeculativeAlgorithm(Enum):
    EAGLE = auto()
    EAGLE3 = auto()
    STANDALONE = auto()
    NGRAM = auto()
    SUPERDRAFT = auto()
    NONE = auto()
"""


def newer_sglang(root: Path) -> str:
    """A package `sglang` 0.6.0 with a parser of its own; the `python` setting that imports it."""
    files = {
        "sglang/__init__.py": '__version__ = "0.6.0"\n',
        "sglang/srt/__init__.py": "",
        "sglang/srt/server_args.py": SERVER_ARGS,
        "sglang/srt/speculative/__init__.py": "",
        "sglang/srt/speculative/spec_info.py": SPEC_INFO,
        "sglang/srt/speculative/spec_registry.py": '_RESERVED_ALIASES = frozenset({"NEXTN"})\n_REGISTRY = {}\n',
        "sglang-0.6.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: sglang\nVersion: 0.6.0\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))
    return f"env PYTHONPATH={root} {sys.executable}"


SERVERS = """
[specperf.servers.plain]
args = ["--stream-output", "--no-overlap-verify", "--cuda-graph-max-bs", "16"]

[specperf.servers.super]
algorithm = "SUPERDRAFT"
draft_model = "sim/small-draft"
num_draft_tokens = 4
args = ["--stream-output-interval", "2"]
"""

TESTS = """
import pytest

@pytest.mark.specperf(server="super")
def test_super(specperf):
    assert specperf.result.samples("accept_length")[0] > 1
"""


@pytest.fixture
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("SPECPERF_CACHE_DIR", str(cache))
    return cache


def test_a_newer_sglang_decides_the_dry_run(make_suite, tmp_path: Path, private_cache: Path) -> None:
    python = newer_sglang(tmp_path / "site")
    suite = make_suite(TESTS, extra=f'python = "{python}"\n', servers=SERVERS)
    result = suite.run()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*specperf: sglang flags and algorithms checked against the installed sglang 0.6.0*"])
    logs = {p.name.split(".")[0]: p.read_text() for p in suite.log_files()}
    assert "--sim-sglang-flags" in logs["super"] and "SUPERDRAFT is not modelled by the simulator" in logs["super"]
    assert "--no-overlap-verify" in logs["plain"]
    assert list(private_cache.glob("engine-flags/sglang-0.6.0-*.json")), "the parser dump is cached per version"


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (
            '["--stream-outptu"]',
            "unrecognized argument --stream-outptu: the installed SGLang 0.6.0 does not have it "
            "(did you mean '--stream-output'?)",
        ),
        (
            '["--attention-backend", "fa4"]',
            "--attention-backend 'fa4': the installed SGLang 0.6.0 allows fa3, "
            "flashinfer, triton (did you mean 'fa3'?)",
        ),
    ],
)
def test_a_newer_sglang_still_refuses_a_typo(make_suite, tmp_path: Path, private_cache: Path, args: str, error: str):
    python = newer_sglang(tmp_path / "site")
    suite = make_suite(
        TESTS, extra=f'python = "{python}"\n', servers=SERVERS + f"\n[specperf.servers.x]\nargs = {args}\n"
    )
    result = suite.run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"[specperf.servers.x] args: {error}" in result.stderr.str()
    assert not suite.log_files()  # refused at collection, before any server starts


def test_an_algorithm_the_installed_sglang_lacks_is_refused(tmp_path: Path, private_cache: Path) -> None:
    python = newer_sglang(tmp_path / "site")
    toml = tmp_path / "specperf.toml"
    toml.write_text(f'[specperf]\npython = "{python}"\n[specperf.servers.x]\nalgorithm = "DFLASH"\ndraft_model = "d"\n')
    with pytest.raises(
        Exception,
        match=r"unknown speculative algorithm 'DFLASH'; the installed SGLang 0.6.0 knows "
        r"EAGLE, EAGLE3, STANDALONE, NGRAM, SUPERDRAFT, NEXTN",
    ):
        load_suite(toml, "specperf")


def dev_sglang(root: Path) -> str:
    """A source snapshot of SGLang on PYTHONPATH: no package metadata, a `version.py`, an algorithm enum
    that cannot be imported, and a parser whose `--speculative-algorithm` lists its choices."""
    newer_sglang(root)
    (root / "sglang-0.6.0.dist-info" / "METADATA").unlink()
    (root / "sglang-0.6.0.dist-info").rmdir()
    (root / "sglang" / "__init__.py").write_text("")
    (root / "sglang" / "version.py").write_text('__version__ = "0.6.1.dev42"\n')
    (root / "sglang" / "srt" / "speculative" / "spec_info.py").write_text("import not_installed_kernel\n")
    server_args = root / "sglang" / "srt" / "server_args.py"
    server_args.write_text(
        server_args.read_text().replace(
            'parser.add_argument("--speculative-algorithm")',
            'parser.add_argument("--speculative-algorithm", choices=["EAGLE", "EAGLE3", "NGRAM", "DFLASH"])',
        )
    )
    return f"env PYTHONPATH={root} {sys.executable}"


def test_a_dev_build_without_an_importable_enum_is_judged_by_its_parsers_choices(
    tmp_path: Path, private_cache: Path
) -> None:
    python = dev_sglang(tmp_path / "site")
    toml = tmp_path / "specperf.toml"
    servers = '[specperf.servers.plain]\n[specperf.servers.x]\nalgorithm = "DFLASH"\ndraft_model = "d"\n'
    toml.write_text(f'[specperf]\npython = "{python}"\n{servers}')
    load_suite(toml, "specperf")  # an algorithm newer than the shipped list, which this build's parser lists
    assert [p.name.split("-")[1] for p in (private_cache / "engine-flags").glob("sglang-*.json")] == ["0.6.1.dev42"]
    toml.write_text(toml.read_text().replace("DFLASH", "SUPERDRAFT"))
    with pytest.raises(
        Exception,
        match=r"unknown speculative algorithm 'SUPERDRAFT'; .* knows EAGLE, EAGLE3, NGRAM, "
        r"DFLASH",
    ):
        load_suite(toml, "specperf")


def test_without_an_importable_sglang_the_shipped_list_stands_in_and_says_so(
    make_suite, tmp_path: Path, private_cache: Path
) -> None:
    suite = make_suite(
        TESTS.replace('"super"', '"plain"').replace('assert specperf.result.samples("accept_length")[0] > 1', "pass"),
        extra=f'python = "{sys.executable} -S"\n',  # no site-packages: nothing called sglang to import
        servers='[specperf.servers.plain]\nargs = ["--no-enable-tf32-matmul"]\n',
    )
    result = suite.run()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(  # in plain words: what was checked, why, and that it is fine for a dry run
        [
            f"*specperf: sglang flags and algorithms checked against the list shipped for sglang 0.5.23, "
            f"as `{sys.executable} -S` has no sglang installed (enough for the simulator; where the servers "
            "run, the installed sglang is asked)"
        ]
    )
    assert "No module named" not in result.stdout.str()
    speculative = "[specperf.servers.super]" + SERVERS.split("[specperf.servers.super]")[1]
    refused = make_suite(TESTS, extra=f'python = "{sys.executable} -S"\n', servers=speculative)
    result = refused.run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "unknown speculative algorithm 'SUPERDRAFT'; SGLang 0.5.23 (the shipped list" in result.stderr.str()


def test_the_installed_cuda_graph_flag_is_not_called_removed(tmp_path: Path, private_cache: Path) -> None:
    """SGLang 0.5.23 removed --cuda-graph-max-bs; a release that has it again is not refused on 0.5.23's word."""
    toml = tmp_path / "specperf.toml"
    server = '[specperf.servers.plain]\nargs = ["--cuda-graph-max-bs", "8"]\n'
    toml.write_text(f'[specperf]\npython = "{newer_sglang(tmp_path / "site")}"\n' + server)
    assert load_suite(toml, "specperf").servers["plain"].args == ("--cuda-graph-max-bs", "8")
    toml.write_text(f'[specperf]\npython = "{sys.executable} -S"\n' + server)
    with pytest.raises(
        Exception, match=r"--cuda-graph-max-bs is not a flag of SGLang 0\.5\.23 .* use --cuda-graph-max-bs-decode"
    ):
        load_suite(toml, "specperf")
