"""Command line of the simulator: SGLang 0.5.23's launch flags plus ``--sim-*`` ones, and their validation.

Where SGLang would crash on an assert or silently correct a value, the simulator refuses with exit code 2
and a one-line message naming the flags and the rule, so a suite that would misbehave on a GPU fails on
the simulator first, in seconds.
"""

from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass, field

from .nights import NightNoise
from .nodes import SINGLE_NODE, Nodes
from .noise_flags import add_night_flags, session_noise_problems
from .profile import DEFAULT_PROFILE, Profile, ProfileError, SpecConfig
from .profile_files import load_profile
from .sglang_flags import FlagTable, ambiguous_message, load_flag_file, parse_flag_lines, sglang_flags

PROG = "pytest_specperf.sim"

#: SGLang 0.5.23's speculative algorithms (``spec_info.py``: the enum and the NEXTN alias).
KNOWN_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO", "FROZEN_KV_MTP")
MODELLED_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
#: Algorithms whose draft model must be named. EAGLE and NEXTN may run without one: SGLang then drafts with
#: the target's own MTP layers (the draft path defaults to the target path, docs/engines/sglang.md).
NEEDS_DRAFT_MODEL = ("EAGLE3", "STANDALONE")
SPEC_DEFAULT_MAX_RUNNING = 48
NGRAM_BFS_BREADTH = 10
NGRAM_DEFAULT_DRAFT_TOKENS = 12

#: ``_auto_choose_speculative_params`` by target architecture (steps, topk, draft tokens).
_AUTO_SPEC_PARAMS = {"LlamaForCausalLM": (5, 4, 8), "Grok1ForCausalLM": (5, 4, 8)}
_AUTO_SPEC_DEFAULT = (3, 1, 4)

_SIZE_FLAGS = {
    "speculative_num_steps": "--speculative-num-steps",
    "speculative_eagle_topk": "--speculative-eagle-topk",
    "speculative_num_draft_tokens": "--speculative-num-draft-tokens",
}


class SimConfigError(Exception):
    """A launch the simulator refuses; the message is printed as one line and the process exits 2."""


@dataclass(frozen=True)
class SimOptions:
    """The ``--sim-*`` flags: which profile, how fast, and which faults to inject."""

    profile: str = DEFAULT_PROFILE
    time_scale: float = 1.0
    seed: int = 0
    startup_seconds: float = 0.0
    fail_at_startup: bool = False
    never_ready: bool = False
    exit_after_requests: int | None = None
    stop_after_requests: int | None = None
    error_rate: float = 0.0
    lossy_rate: float = 0.0
    run_jitter: float = 0.0
    round_jitter: float = 0.0
    batch_acceptance: float = 0.0
    start_seed: int | None = None
    """--sim-start-seed: which start this is, for the run and round factors (None: the port)."""
    #: --sim-night and the night-shape flags: the start's speed from sim/nights.py (None: the plain draw)
    night: int | None = None
    night_noise: NightNoise = field(default_factory=NightNoise)
    #: the node's speed shared by a session's servers, eager-mode round spread, a warm-up ramp (sim/nights.py)
    node_swing: float = 0.0
    node_seed: int = 0
    eager: bool = False
    warmup_ramp: float = 0.0
    #: the SGLang release the simulator reports (its contract stays 0.5.23's): to test version warnings
    sglang_version: str = "0.5.23"

    @property
    def version(self) -> str:
        """The `version` of /server_info: the SGLang release with a `+specperf-sim` suffix."""
        return f"{self.sglang_version}+specperf-sim"


@dataclass(frozen=True)
class SimServerConfig:
    """Resolved server arguments (what ``/server_info`` reports) plus simulator options."""

    model_path: str
    served_model_name: str
    host: str
    port: int
    tp_size: int
    api_key: str | None
    speculative_algorithm: str | None
    speculative_draft_model_path: str | None
    spec: SpecConfig | None
    max_running_requests: int
    cuda_graph_max_bs_decode: int  # the decode CUDA-graph batch limit in force (the flag, else the profile's)
    cuda_graph_max_bs_prefill: int | None
    mem_fraction_static: float
    enable_metrics: bool
    log_level: str
    random_seed: int | None
    launch_command: str
    sim: SimOptions
    profile: Profile = field(repr=False)
    deterministic: bool = False
    cuda_graph_max_bs_given: int | None = None  # --cuda-graph-max-bs-decode as given (None: SGLang's default)
    unmodelled_args: dict[str, object] = field(default_factory=dict)
    notices: tuple[tuple[str, str], ...] = ()
    """(level, message) pairs to log once logging is set up: auto defaults, the 48 cap, ignored flags."""
    nodes: Nodes = SINGLE_NODE  # --nnodes, --node-rank, --dist-init-addr (sim/nodes.py)


def build_parser() -> argparse.ArgumentParser:
    """The known flags. Defining both ``--cuda-graph-max-bs-*`` makes the removed ``--cuda-graph-max-bs``
    an ambiguous abbreviation, so argparse exits 2 exactly as SGLang 0.5.23 does."""
    p = argparse.ArgumentParser(
        prog=PROG, description="SGLang-compatible simulator of pytest-specperf", allow_abbrev=False
    )  # abbreviations are resolved first, against all of SGLang's flags (`resolve_flags`)
    p.add_argument("--model-path", "--model", dest="model_path", required=True)
    p.add_argument("--served-model-name")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
    p.add_argument("--api-key")
    p.add_argument("--speculative-algorithm")
    p.add_argument("--speculative-draft-model-path", "--speculative-draft-model", dest="speculative_draft_model_path")
    p.add_argument("--speculative-num-steps", type=int)
    p.add_argument("--speculative-eagle-topk", type=int)
    p.add_argument("--speculative-num-draft-tokens", type=int)
    p.add_argument("--max-running-requests", type=int)
    p.add_argument("--cuda-graph-max-bs-decode", type=int)
    p.add_argument("--cuda-graph-max-bs-prefill", type=int)
    p.add_argument("--mem-fraction-static", type=float)
    p.add_argument("--enable-metrics", action="store_true")
    p.add_argument("--enable-deterministic-inference", action="store_true")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.add_argument("--random-seed", type=int)
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--node-rank", type=int, default=0)
    p.add_argument("--dist-init-addr", "--nccl-init-addr", dest="dist_init_addr")
    p.add_argument("--dist-timeout", type=int)
    sim = p.add_argument_group("simulator")
    sim.add_argument("--sim-profile", default=DEFAULT_PROFILE, help="profile name or .toml path")
    sim.add_argument("--sim-time-scale", type=float, default=1.0, help="multiplies every modelled delay")
    sim.add_argument("--sim-seed", type=int, help="default: --random-seed, else 0")
    sim.add_argument("--sim-startup-seconds", type=float, default=0.0, help="wall seconds before ready")
    sim.add_argument("--sim-fail-at-startup", action="store_true")
    sim.add_argument("--sim-never-ready", action="store_true")
    sim.add_argument("--sim-exit-after-requests", type=int)
    sim.add_argument(
        "--sim-stop-after-requests", type=int, help="SIGSTOP itself after N requests: a hung server (kill -STOP)"
    )
    sim.add_argument("--sim-error-rate", type=float, default=0.0)
    sim.add_argument("--sim-lossy-rate", type=float, default=0.0)
    sim.add_argument(
        "--sim-draft-slowdown", type=float, default=1.0, help="multiplies drafting cost (a slower draft model)"
    )
    sim.add_argument(
        "--sim-draft-acceptance",
        type=float,
        default=1.0,
        metavar="F",
        help="multiplies each draft position's acceptance (< 1: a draft model that agrees less with the target)",
    )
    sim.add_argument(
        "--sim-run-jitter",
        type=float,
        default=0.0,
        metavar="CV",
        help="one speed factor per server start with this CV (a GPU node's start-to-start spread); seeded "
        "by --sim-seed and --sim-start-seed (default: the port, so every start differs)",
    )
    sim.add_argument(
        "--sim-round-jitter", type=float, default=0.0, metavar="CV", help="a speed factor per round with this CV"
    )
    sim.add_argument(
        "--sim-start-seed",
        type=int,
        metavar="N",
        help="which server start this is, for --sim-run-jitter and --sim-round-jitter only (acceptance keeps "
        "following --sim-seed): a night given its own N is reproducible; default: the port",
    )
    add_night_flags(sim)
    sim.add_argument(
        "--sim-batch-acceptance",
        type=float,
        default=0.0,
        metavar="CV",
        help="acceptance that depends on which prompts share a decode step: a factor with this CV per set of "
        "prompts (concurrency > 1 only); seeded by --sim-seed",
    )
    sim.add_argument(
        "--sim-sglang-flags",
        metavar="FILE",
        help="the SGLang flag list to read flags and algorithms against (one action per line, `# algorithms:` "
        "line), instead of SGLang 0.5.23's shipped one: a dry run on a node with a newer SGLang",
    )
    sim.add_argument(
        "--sim-sglang-version",
        default="0.5.23",
        metavar="V",
        help="the SGLang version to report (behaviour stays 0.5.23's): a server of a version the plugin does not know",
    )
    return p


def _draft(profile: Profile, args: argparse.Namespace) -> Profile:
    """The profile with the draft model the `--sim-draft-*` flags describe."""
    for flag, change, factor in (
        ("--sim-draft-slowdown", Profile.slower_draft, args.sim_draft_slowdown),
        ("--sim-draft-acceptance", Profile.scaled_acceptance, args.sim_draft_acceptance),
    ):
        try:
            profile = change(profile, factor)
        except ValueError as exc:
            raise SimConfigError(f"{flag} {exc}") from None
    return profile


def flag_table(argv: list[str]) -> tuple[FlagTable, tuple[str, ...]]:
    """The SGLang flags and algorithms to read `argv` against: `--sim-sglang-flags FILE` (the
    installed SGLang's, written by the plugin), else SGLang 0.5.23's shipped list."""
    for i, token in enumerate(argv):
        flag, eq, value = token.partition("=")
        if flag == "--sim-sglang-flags":
            path = value if eq else (argv[i + 1] if i + 1 < len(argv) else "")
            try:
                table, algorithms = load_flag_file(path)
            except OSError as exc:
                raise SimConfigError(f"--sim-sglang-flags {path}: {exc.strerror or exc}") from None
            return table, algorithms or KNOWN_ALGORITHMS
    return sglang_flags(), KNOWN_ALGORITHMS


def resolve_flags(parser: argparse.ArgumentParser, argv: list[str], table: FlagTable | None = None) -> list[str]:
    """`argv` with every flag spelled out in full, as SGLang 0.5.23's argparse reads it.

    An abbreviation is resolved against all of SGLang's flags, not only the modelled ones (`--mo`
    is ambiguous in SGLang although the simulator models just `--model`), and `--sim-*` ones
    against the simulator's own. A flag neither knows exits 2 with argparse's "unrecognized
    arguments", as SGLang does: a typo must fail the dry run, not the first night on a GPU.
    """
    sim_flags = parse_flag_lines(
        [" ".join(a.option_strings) for a in parser._actions if a.option_strings[0].startswith("--sim-")]
    )
    out: list[str] = []
    for i, token in enumerate(argv):
        if token == "--":
            return out + argv[i:]
        if not token.startswith("--"):
            out.append(token)
            continue
        flag, eq, value = token.partition("=")
        resolved = (sim_flags if flag.startswith("--sim-") else (table or sglang_flags())).resolve(flag)
        if resolved is None:
            parser.error(f"unrecognized arguments: {token}")
        if isinstance(resolved, list):
            parser.error(ambiguous_message(flag, resolved))
        out.append(resolved + eq + value)
    return out


def parse_config(argv: list[str]) -> SimServerConfig:
    """Parse and validate a launch; raises SimConfigError (argparse itself exits 2 on syntax errors)."""
    parser = build_parser()
    table, algorithms = flag_table(argv)
    args, extra = parser.parse_known_args(resolve_flags(parser, argv, table))
    profile = _draft(_profile(args.sim_profile), args)
    notices: list[tuple[str, str]] = []
    sim = _sim_options(args)
    spec, algorithm, draft = _resolve_spec(args, profile, notices, algorithms)
    if sim.lossy_rate > 0 and spec is None:
        raise SimConfigError(
            "--sim-lossy-rate needs a speculative server (--speculative-algorithm): plain decoding "
            "is the lossless reference"
        )
    max_running = _max_running(args, profile, spec is not None, notices)
    _check_server(args, max_running)
    notices += _launch_notices(args, profile, extra)
    return SimServerConfig(
        model_path=args.model_path,
        served_model_name=args.served_model_name or args.model_path,
        host=args.host,
        port=args.port,
        tp_size=args.tp_size,
        api_key=args.api_key,
        speculative_algorithm=algorithm,
        speculative_draft_model_path=draft,
        spec=spec,
        max_running_requests=max_running,
        cuda_graph_max_bs_decode=args.cuda_graph_max_bs_decode or profile.server.cuda_graph_max_bs_decode,
        cuda_graph_max_bs_prefill=args.cuda_graph_max_bs_prefill,
        mem_fraction_static=(
            args.mem_fraction_static if args.mem_fraction_static is not None else profile.server.mem_fraction_static
        ),
        enable_metrics=args.enable_metrics,
        log_level=args.log_level,
        random_seed=args.random_seed,
        launch_command=" ".join(argv),  # SGLang keeps the raw arguments, joined (server_args.py)
        nodes=_nodes(args),
        sim=sim,
        deterministic=args.enable_deterministic_inference,
        cuda_graph_max_bs_given=args.cuda_graph_max_bs_decode,
        profile=profile,
        unmodelled_args=_unmodelled(extra),
        notices=tuple(notices),
    )


def _profile(name: str) -> Profile:
    """The cost and acceptance profile named by --sim-profile, its error in the flag's words."""
    try:
        return load_profile(name)
    except ProfileError as exc:
        raise SimConfigError(f"--sim-profile: {exc}") from None


def _max_running(args: argparse.Namespace, profile: Profile, speculative: bool, notices: list[tuple[str, str]]) -> int:
    """--max-running-requests, else SGLang's default: 48 with speculation (and its warning), else the profile's."""
    if args.max_running_requests is not None:
        return int(args.max_running_requests)
    if not speculative:
        return profile.server.max_running_requests
    notices.append(
        (
            "warning",
            f"max_running_requests is set to {SPEC_DEFAULT_MAX_RUNNING} for speculative "
            "decoding. You can override it with --max-running-requests.",
        )
    )
    return SPEC_DEFAULT_MAX_RUNNING


def _check_server(args: argparse.Namespace, max_running: int) -> None:
    """The sizes and the port a real server would refuse."""
    _check_positive(
        {
            "--max-running-requests": max_running,
            "--tp-size": args.tp_size,
            "--cuda-graph-max-bs-decode": args.cuda_graph_max_bs_decode,
            "--cuda-graph-max-bs-prefill": args.cuda_graph_max_bs_prefill,
        }
    )
    if not 0 <= args.port <= 65535:
        raise SimConfigError(f"--port {args.port} is not a TCP port (0-65535)")


def _launch_notices(args: argparse.Namespace, profile: Profile, extra: list[str]) -> list[tuple[str, str]]:
    """Warnings for what the simulator reports but does not model: another --tp-size than the profile's,
    and flags it accepts and ignores."""
    notices: list[tuple[str, str]] = []
    if args.tp_size != profile.server.tp_size:
        notices.append(
            (
                "warning",
                f"profile {profile.name} is calibrated for --tp-size {profile.server.tp_size}; "
                f"--tp-size {args.tp_size} is reported but timings are not rescaled",
            )
        )
    if extra:
        notices.append(("warning", f"not modelled by the simulator (accepted and ignored): {shlex.join(extra)}"))
    return notices


def _nodes(args: argparse.Namespace) -> Nodes:
    try:
        return Nodes.of(args.nnodes, args.node_rank, args.dist_init_addr, args.dist_timeout)
    except ValueError as exc:
        raise SimConfigError(str(exc)) from None


def _sim_options(args: argparse.Namespace) -> SimOptions:
    if args.sim_time_scale < 0:
        raise SimConfigError(f"--sim-time-scale must be >= 0 (got {args.sim_time_scale})")
    if args.sim_startup_seconds < 0:
        raise SimConfigError(f"--sim-startup-seconds must be >= 0 (got {args.sim_startup_seconds})")
    for flag, value in (("--sim-error-rate", args.sim_error_rate), ("--sim-lossy-rate", args.sim_lossy_rate)):
        if not 0.0 <= value <= 1.0:
            raise SimConfigError(f"{flag} must be a share in [0, 1] (got {value})")
    for flag, value in (
        ("--sim-run-jitter", args.sim_run_jitter),
        ("--sim-round-jitter", args.sim_round_jitter),
        ("--sim-batch-acceptance", args.sim_batch_acceptance),
    ):
        if not 0.0 <= value <= 0.5:
            raise SimConfigError(f"{flag} must be a CV in [0, 0.5] (0.02 = 2%; got {value})")
    if problems := session_noise_problems(args):
        raise SimConfigError("; ".join(problems))
    for flag, count in (
        ("--sim-exit-after-requests", args.sim_exit_after_requests),
        ("--sim-stop-after-requests", args.sim_stop_after_requests),
    ):
        if count is not None and count < 1:
            raise SimConfigError(f"{flag} must be >= 1 (got {count})")
    seed = args.sim_seed if args.sim_seed is not None else (args.random_seed or 0)
    try:
        noise = NightNoise(
            cv=args.sim_run_jitter,
            df=args.sim_run_jitter_df,
            rho=args.sim_night_rho,
            pool_share=args.sim_pool_share,
            pool_slowdown=args.sim_pool_slowdown,
            drift=args.sim_drift_per_night,
            step_at=args.sim_step_at_night,
            step=args.sim_step,
        )
    except ValueError as exc:
        raise SimConfigError(
            f"night shapes (--sim-run-jitter, --sim-run-jitter-df, --sim-night-rho, --sim-pool-*, "
            f"--sim-drift-per-night, --sim-step): {exc}"
        ) from None
    shaped = noise != NightNoise(cv=args.sim_run_jitter)
    if shaped and args.sim_night is None:
        raise SimConfigError("the night-shape flags need --sim-night N (which night this start belongs to)")
    return SimOptions(
        profile=args.sim_profile,
        time_scale=args.sim_time_scale,
        seed=seed,
        startup_seconds=args.sim_startup_seconds,
        fail_at_startup=args.sim_fail_at_startup,
        never_ready=args.sim_never_ready,
        exit_after_requests=args.sim_exit_after_requests,
        stop_after_requests=args.sim_stop_after_requests,
        error_rate=args.sim_error_rate,
        lossy_rate=args.sim_lossy_rate,
        run_jitter=args.sim_run_jitter,
        round_jitter=args.sim_round_jitter,
        batch_acceptance=args.sim_batch_acceptance,
        start_seed=args.sim_start_seed,
        sglang_version=args.sim_sglang_version,
        night=args.sim_night,
        night_noise=noise,
        node_swing=args.sim_node_swing,
        node_seed=args.sim_node_seed,
        eager=args.sim_eager,
        warmup_ramp=args.sim_warmup_ramp,
    )


def _resolve_spec(
    args: argparse.Namespace,
    profile: Profile,
    notices: list[tuple[str, str]],
    known: tuple[str, ...] = KNOWN_ALGORITHMS,
) -> tuple[SpecConfig | None, str | None, str | None]:
    """Apply SGLang's speculative rules (speculative_hook.py), refusing where SGLang asserts or corrects."""
    given = {name: getattr(args, name) for name in _SIZE_FLAGS if getattr(args, name) is not None}
    raw = args.speculative_algorithm
    if raw is None:
        stray = [flag for name, flag in _SIZE_FLAGS.items() if name in given]
        if args.speculative_draft_model_path is not None:
            stray.append("--speculative-draft-model-path")
        if stray:
            raise SimConfigError(
                f"{', '.join(stray)} given without --speculative-algorithm: speculative flags need an "
                "algorithm (SGLang would silently run without speculation)"
            )
        return None, None, None
    algorithm = raw.upper()
    if algorithm not in known:
        raise SimConfigError(
            f"--speculative-algorithm {raw!r} is unknown (SGLang raises 'Unknown speculative "
            f"algorithm name'; known: {', '.join(known)})"
        )
    if algorithm not in MODELLED_ALGORITHMS and algorithm in KNOWN_ALGORITHMS:
        raise SimConfigError(
            f"--speculative-algorithm {algorithm} is known to SGLang but not modelled by the simulator "
            f"(modelled: {', '.join(MODELLED_ALGORITHMS)})"
        )
    if algorithm not in MODELLED_ALGORITHMS:
        return _unmodelled_chain(algorithm, args, notices)
    resolved = "EAGLE" if algorithm == "NEXTN" else algorithm
    draft = args.speculative_draft_model_path
    if algorithm in NEEDS_DRAFT_MODEL and draft is None:
        raise SimConfigError(
            f"--speculative-algorithm {algorithm} needs --speculative-draft-model-path (the draft model)"
        )
    if draft is None:
        draft = args.model_path  # EAGLE/NEXTN (MTP) draft with the target's own layers; NGRAM has no draft model
    if algorithm == "NGRAM":
        return _resolve_ngram(given, notices), resolved, None
    steps, topk, tokens = _eagle_sizes(given, algorithm, profile, notices)
    _check_eagle_sizes(steps, topk, tokens)
    return SpecConfig(resolved, steps, topk, tokens), resolved, draft


def _unmodelled_chain(
    algorithm: str, args: argparse.Namespace, notices: list[tuple[str, str]]
) -> tuple[SpecConfig, str, str | None]:
    """An algorithm the installed SGLang knows (a newer release, a plugin) and the simulator does not:
    it is run as a draft chain of its draft tokens, so a dry run gets through, and says so."""
    tokens = args.speculative_num_draft_tokens or 4
    steps = args.speculative_num_steps or tokens - 1
    notices.append(
        (
            "warning",
            f"--speculative-algorithm {algorithm} is not modelled by the simulator: it is simulated as "
            f"a draft chain of {steps} steps and {tokens} draft tokens",
        ),
    )
    return SpecConfig("STANDALONE", steps, 1, steps + 1), algorithm, args.speculative_draft_model_path


def _eagle_sizes(
    given: dict[str, int], algorithm: str, profile: Profile, notices: list[tuple[str, str]]
) -> tuple[int, int, int]:
    if not given:
        arch = profile.server.architecture
        sizes = _AUTO_SPEC_DEFAULT if algorithm == "STANDALONE" else _AUTO_SPEC_PARAMS.get(arch, _AUTO_SPEC_DEFAULT)
        notices.append(
            (
                "info",
                f"speculative_num_steps/eagle_topk/num_draft_tokens not given: using SGLang's auto "
                f"defaults for {algorithm} on {arch}: {sizes[0]}/{sizes[1]}/{sizes[2]}",
            )
        )
        return sizes
    if len(given) < 3:
        have = [flag for name, flag in _SIZE_FLAGS.items() if name in given]
        missing = [flag for name, flag in _SIZE_FLAGS.items() if name not in given]
        raise SimConfigError(
            f"{', '.join(_SIZE_FLAGS.values())} must be given all three or none: got {', '.join(have)} "
            f"without {', '.join(missing)} (SGLang 0.5.23 fails with an AssertionError or TypeError)"
        )
    return (given["speculative_num_steps"], given["speculative_eagle_topk"], given["speculative_num_draft_tokens"])


def _check_eagle_sizes(steps: int, topk: int, tokens: int) -> None:
    if steps < 1 or topk < 1 or tokens < 2:
        raise SimConfigError(
            f"--speculative-num-steps {steps} / --speculative-eagle-topk {topk} / "
            f"--speculative-num-draft-tokens {tokens}: need steps >= 1, topk >= 1, draft tokens >= 2"
        )
    if tokens > steps * topk + 1:
        raise SimConfigError(
            f"--speculative-num-draft-tokens {tokens} exceeds --speculative-num-steps x "
            f"--speculative-eagle-topk + 1 = {steps * topk + 1}: the draft tree has no room for them"
        )
    if topk == 1 and tokens != steps + 1:
        raise SimConfigError(
            f"--speculative-eagle-topk 1 requires --speculative-num-draft-tokens = "
            f"--speculative-num-steps + 1 = {steps + 1} (got {tokens}; SGLang silently corrects it)"
        )


def _resolve_ngram(given: dict[str, int], notices: list[tuple[str, str]]) -> SpecConfig:
    """NGRAM: topk is always the BFS breadth (10), draft tokens default to 12, steps to tokens // topk."""
    topk = given.get("speculative_eagle_topk")
    if topk is not None and topk != NGRAM_BFS_BREADTH:
        raise SimConfigError(
            f"--speculative-eagle-topk {topk} with NGRAM: SGLang silently overwrites it with "
            f"--speculative-ngram-max-bfs-breadth ({NGRAM_BFS_BREADTH}); drop the flag"
        )
    tokens = given.get("speculative_num_draft_tokens")
    if tokens is None:
        tokens = NGRAM_DEFAULT_DRAFT_TOKENS
        notices.append(("warning", f"speculative_num_draft_tokens is set to {tokens} for NGRAM"))
    if tokens < 2:
        raise SimConfigError(f"--speculative-num-draft-tokens {tokens}: NGRAM needs at least 2")
    steps = given.get("speculative_num_steps", max(1, tokens // NGRAM_BFS_BREADTH))
    return SpecConfig("NGRAM", steps, NGRAM_BFS_BREADTH, tokens)


def _check_positive(values: dict[str, int | None]) -> None:
    for flag, value in values.items():
        if value is not None and value < 1:
            raise SimConfigError(f"{flag} must be >= 1 (got {value})")


def _unmodelled(extra: list[str]) -> dict[str, object]:
    """Best-effort ``{field: value}`` of flags the simulator ignores, so /server_info still shows them."""
    out: dict[str, object] = {}
    i = 0
    while i < len(extra):
        tok = extra[i]
        if tok.startswith("--"):
            key, _, inline = tok[2:].partition("=")
            values = [inline] if inline else []
            while not inline and i + 1 < len(extra) and not extra[i + 1].startswith("--"):
                i += 1
                values.append(extra[i])
            out[key.replace("-", "_")] = True if not values else values[0] if len(values) == 1 else values
        i += 1
    return out
