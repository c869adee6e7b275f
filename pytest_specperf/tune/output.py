"""What `specperf tune` prints: the plan, the ranking per objective, the winners, the fitted models and
a ready-to-paste server block.

Every speedup is over the reference measured by the same run. A measured speedup carries the plugin's
90% interval (round noise and the start-to-start spread of both servers); a predicted one is where the
config's measurement in this run would land with 90% probability (tune/model.py). Configs that were
never started say why: the model gives them under 1% chance to beat the leader, the leaders were already
known, or the budget ran out first (with the chance they had).
"""

from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Iterable, Sequence

from pytest_specperf.common.redact import redact_args, redact_env, redact_text
from pytest_specperf.config.settings import ServerConfig, SpecperfConfig
from pytest_specperf.measure.records import POSITIONS_LABEL, POSITIONS_MEANING
from pytest_specperf.report.terminal import pm, text_table
from pytest_specperf.tune.cost import terms_for
from pytest_specperf.tune.model import Forecast, Outlook
from pytest_specperf.tune.search import RULED_OUT, TuneResult, initial_design
from pytest_specperf.tune.space import Candidate, Objective, TuneSpace, describe_axes, settings_text
from pytest_specperf.verdict.stats import Estimate

DEFAULT_TOP = 10
WIDTH = 120
RANK_HEADERS = ("#", "config", "status", "tok/s", "measured speedup", "predicted speedup", "chance")


def plan_lines(space: TuneSpace, config: SpecperfConfig) -> list[str]:
    """The plan: the space, the first starts and why, the model's inputs (printed first, and by --dry-run)."""
    base = space.base
    out = [f"specperf tune: {space.where}"]
    out.append(f"  base: {base.name} ({_base_text(base)}); every candidate keeps its other settings")
    out.append(f"  reference: {space.reference.label} (every speedup is over it, measured in this run)")
    out.append(f"  space: {len(space.candidates)} configs from " + "; ".join(describe_axes(space)))
    out.append(f"  a full grid: {full_grid(space)}")
    out.append(f"  objectives: {', '.join(o.label for o in space.objectives)} (a winner for each)")
    out.append(
        f"  budget: {space.budget} server starts, the reference included; {space.rounds} rounds per start, "
        f"doubling up to {space.max_rounds} while the config is in contention; stop once every leader is "
        f"ahead of every other config with {space.confidence:.0%} confidence"
    )
    out.append(f"  launcher: {config.launcher}{_sim_text(config)}")
    out.append("  first starts:")
    design = [(space.reference, "the reference: every speedup is over it")]
    design += initial_design(space)[: max(1, space.budget - 2)]
    for number, (cand, why) in enumerate(design, 1):
        out.append(f"    {number}. {cand.label} ({settings_text(cand)}): {why}")
    rest = space.budget - len(design)
    if rest > 0:
        out.append(f"    then up to {rest} more: each time the config with the largest expected improvement")
    out.append("  model inputs:")
    out.append(
        f"    cycle (ms) = decode time per verify step, per start and objective; fitted as {' + '.join(_terms(space))}"
    )
    source = space.plan.engine.acceptance_source
    out.append(
        f"    {POSITIONS_LABEL} from the servers' {source} (else their accept lengths), "
        "per draft model and workload; topk > 1 through a fitted tree gain"
    )
    out.append(
        "    tok/s = efficiency x tokens / (TTFT + (tokens - 1) / tokens per verify step x cycle), with TTFT "
        "and efficiency from the measured servers (their median rounds)"
    )
    return [wrapped for line in out for wrapped in wrap(line)]


def full_grid(space: TuneSpace) -> str:
    """What starting every config would take: the reference is a start of its own, besides the configs."""
    return f"{len(space.candidates) + 1} starts, the reference and {len(space.candidates)} configs"


def result_lines(result: TuneResult, config: SpecperfConfig, *, top: int = DEFAULT_TOP) -> list[str]:
    """The summary after the search: rankings, winners, models, ready-to-paste blocks."""
    space, fc = result.space, result.forecast
    out = [
        "",
        f"tune: {len(result.starts)} server starts of {space.budget} (a full grid: {full_grid(space)}); "
        f"stopped: {result.stopped}",
        "speedup over " + space.reference.label + ", same run; measured: 90% interval of the measurement; "
        "predicted: where its measurement in this run would land (90%)",
    ]
    for objective in space.objectives:
        out += ["", *ranking_lines(result, objective, top)]
    out += ["", "winners:"]
    for objective in space.objectives:
        out += wrap("  " + winner_line(result, objective))
    out += ["", *model_lines(result)]
    for line in fc.notes:
        out += wrap(f"note: {line}")
    for name, error in result.failed.items():
        out += wrap(f"failed to start: {name}: {error}")
    for block in paste_blocks(result, config):
        out += ["", *block]
    return out


def ranking_lines(result: TuneResult, objective: Objective, top: int = DEFAULT_TOP) -> list[str]:
    """One objective's ranking: the best `top` estimates plus every measured config, then who was skipped."""
    space, fc = result.space, result.forecast
    ranked = sorted(_labels(space), key=lambda label: -fc.outlooks[(label, objective)].estimate)
    shown = [label for i, label in enumerate(ranked) if top <= 0 or i < top or label in result.observed]
    rows = []
    for label in shown:
        o = fc.outlooks[(label, objective)]
        rank = str(ranked.index(label) + 1)
        predicted = _ratio(o.predicted_speedup)
        if o.measured is not None and not informative(o.predicted_speedup):
            predicted = "-"  # the other configs alone cannot predict it (e.g. the only deep chain)
        rows.append(
            [
                rank,
                _name(space, label),
                _status(result, o),
                pm(o.throughput, 1),
                _ratio(o.speedup),
                predicted,
                _chance(fc, o),
            ]
        )
    out = [f"{objective.label}: ranking by best estimate"]
    out += ["  " + line for line in text_table(RANK_HEADERS, rows)]
    skipped = [label for label in ranked if label not in result.observed and label not in shown]
    if skipped:
        out += wrap(f"  + {len(skipped)} more never started: {never_started_summary(result, skipped, objective)}")
    return out


def wrap(line: str, width: int = WIDTH) -> list[str]:
    """A long line of prose as lines of at most `width`, continued two spaces deeper than it starts."""
    if len(line) <= width:
        return [line]
    indent = " " * (len(line) - len(line.lstrip()) + 2)
    return textwrap.wrap(line, width, subsequent_indent=indent, break_on_hyphens=False, break_long_words=False)


def never_started(result: TuneResult, label: str) -> str:
    """Why a config was never started (the largest chance it had at any objective)."""
    if label in result.failed:
        return f"failed to start: {result.failed[label]}"
    return _why_not(result, result.forecast.best_chance(label))


def never_started_summary(result: TuneResult, labels: Sequence[str], objective: Objective) -> str:
    """Why the configs not shown in an objective's ranking were never started, by reason."""
    chance = {label: result.forecast.chance(label, objective) for label in labels}
    ruled = [label for label in labels if chance[label] < RULED_OUT]
    left = [label for label in labels if label not in ruled]
    parts = []
    if ruled:
        parts.append(f"{len(ruled)} ruled out by the model (chance to beat the leader < 1%)")
    if left:
        best = max(left, key=chance.__getitem__)
        why = _why_stopped(result)
        parts.append(f"{len(left)} with a chance, but {why} (best: {best}, {chance[best]:.0%})")
    return "; ".join(parts)


def _why_not(result: TuneResult, chance: float) -> str:
    if chance < RULED_OUT:
        return "ruled out by the model (chance to beat a leader < 1%)"
    return f"{_why_stopped(result)} (chance to beat a leader {chance:.0%})"


def _why_stopped(result: TuneResult) -> str:
    """Why the search ended before a config with some chance was started, as its `stopped` line says."""
    if result.settled:
        return "the leaders were known first"
    if len(result.starts) >= result.space.budget:
        return "the budget ran out first"
    return "its expected improvement was below 0.01%"


def winner(result: TuneResult, objective: Objective) -> tuple[Candidate, Outlook]:
    """The recommended config of an objective (tune/model.py `_recommend`) and its outlook."""
    label, _ = result.forecast.recommended[objective]
    return result.space.candidate(label), result.forecast.outlooks[(label, objective)]


def winner_speedup(result: TuneResult, objective: Objective) -> Estimate | None:
    """The winner's speedup: measured if it was started (the plugin's interval), else predicted."""
    cand, o = winner(result, objective)
    if cand.is_reference:
        return Estimate.exact(1.0)
    return o.speedup if o.speedup is not None else o.predicted_speedup


def winner_line(result: TuneResult, objective: Objective) -> str:
    cand, o = winner(result, objective)
    _, chance = result.forecast.recommended[objective]
    leader = result.forecast.leaders[objective]
    confidence = result.space.confidence
    if cand.is_reference:
        best = _best_speculative(result, objective)
        if best is None:
            return f"{objective.label}: {cand.label} (no speculation)"
        b = result.forecast.outlooks[(best, objective)]
        if leader == cand.label:
            why = f"speculation does not pay here (ahead of every other config with {chance:.0%} confidence)"
        else:
            why = f"no speculative config is faster with {confidence:.0%} confidence"
        return f"{objective.label}: {cand.label} (no speculation): {why}; the best speculative config, {best}, " + (
            _estimate_speedup(b)
        )
    if leader == cand.label:
        sure = f"ahead of every other config with {chance:.0%} confidence"
    else:
        started = "measured" if leader in result.observed else "never started"
        sure = f"the model's estimate favours {leader} ({started}) by less than the intervals can tell"
    measured = "measured" if o.speedup is not None else "predicted, never started: start it to confirm"
    tp = pm(o.throughput, 1) if o.throughput is not None else f"~{o.estimated_throughput:.1f}"
    return (
        f"{objective.label}: {cand.label} ({settings_text(cand)}): {tp} tok/s, "
        f"{_ratio(winner_speedup(result, objective))} over {result.space.reference.label} ({measured}; {sure})"
    )


def model_lines(result: TuneResult) -> list[str]:
    """The fitted cost model per objective and the acceptance per position per group."""
    fc = result.forecast
    out = ["fitted models:"]
    for objective, fit in fc.cost.items():
        parts = []
        for term in fit.terms:
            coef = fit.coefficient(term)
            assert coef is not None
            unit = "ms" if term == "fixed" else f"ms x {term.removeprefix('per ')}"
            parts.append(f"{coef[0]:.3g} ±{1.645 * coef[1]:.2g} {unit}")
        out.append(f"  cycle, {objective.label}: " + " + ".join(parts) + f" ({len(fit.points)} configs)")
    for (group, workload), acc in fc.acceptance.items():
        if not acc.observations:
            continue
        shares = " ".join(f"{a:.2f}" for a in acc.by_position)
        where = f"{group}, {workload}" if len({g for g, _ in fc.acceptance}) > 1 else workload
        out.append(
            f"  {POSITIONS_LABEL}, {where} (a chain's, fitted: {POSITIONS_MEANING}): {shares}; "
            f"tree gain {acc.gain:.2f} ({acc.observations} configs)"
        )
    return out


def paste_blocks(result: TuneResult, config: SpecperfConfig) -> list[list[str]]:
    """One `[specperf.servers.<name>]` block per distinct speculative winner, with the objectives it won."""
    won: dict[str, list[str]] = {}
    for objective in result.space.objectives:
        cand, _ = winner(result, objective)
        if not cand.is_reference:
            won.setdefault(cand.label, []).append(objective.label)
    prefix = "tool.specperf" if config.source is not None and config.source.name == "pyproject.toml" else "specperf"
    blocks = []
    for label, objectives in won.items():
        cand = result.space.candidate(label)
        lines = [f"ready to paste (wins {', '.join(objectives)}):", f"[{prefix}.servers.tuned-{label}]"]
        lines += server_toml(cand.server)
        blocks.append(lines)
    return blocks


def server_toml(server: ServerConfig) -> list[str]:
    """A server config as the TOML lines of its table (secrets left out or redacted)."""
    out = []
    for key in (
        "engine",
        "model",
        "algorithm",
        "draft_model",
        "num_steps",
        "eagle_topk",
        "num_draft_tokens",
        "host",
        "startup_timeout",
        "command",
    ):
        value = getattr(server, key)
        if value is not None and not (key == "host" and value == "127.0.0.1"):
            out.append(f"{key} = {_toml(redact_text(value) if isinstance(value, str) else value)}")
    if server.speculative_config is not None:
        items = ", ".join(f"{k} = {_toml(v)}" for k, v in server.speculative_config.items())
        out.append(f"speculative_config = {{ {items} }}")
    if server.args:
        out.append(f"args = {_toml(redact_args(server.args))}")
    if server.sim_args:
        out.append(f"sim_args = {_toml(list(server.sim_args))}")
    if server.env:
        items = ", ".join(f"{k} = {_toml(v)}" for k, v in redact_env(server.env).items())
        out.append(f"env = {{ {items} }}")
    return out


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(str(value))


def _labels(space: TuneSpace) -> list[str]:
    return [space.reference.label, *(c.label for c in space.candidates)]


def _name(space: TuneSpace, label: str) -> str:
    return f"{label} (ref)" if label == space.reference.label else label


def _status(result: TuneResult, o: Outlook) -> str:
    if o.measured is not None:
        return f"measured, {o.measured.rounds} rounds" + (" (model misfit)" if o.misfit else "")
    if o.label in result.failed:
        return "failed to start"
    return "predicted"


def _chance(fc: Forecast, o: Outlook) -> str:
    """The leader's smallest chance to beat another config; any other config's chance to beat the leader."""
    if fc.leaders[o.objective] == o.label:
        return f"leader {o.chance:.0%}"
    return f"{o.chance:.0%}" if o.chance >= 0.005 else "<1%"


def informative(e: Estimate | None) -> bool:
    """An interval that says something: bounded, and its ends within a factor of 3 of each other."""
    return e is not None and e.bounded and e.low > 0 and e.high <= 3.0 * e.low


def _ratio(e: Estimate | None) -> str:
    if e is None or not math.isfinite(e.value):
        return "-"
    if e.low == e.high == e.value:
        return f"{e.value:.2f}x"
    if not informative(e):
        return f"{e.value:.2f}x [no bound yet]"
    return f"{e.value:.2f}x [{e.low:.2f},{e.high:.2f}]"


def _estimate_speedup(o: Outlook) -> str:
    if o.speedup is not None:
        return f"measured {_ratio(o.speedup)}"
    return f"predicted {_ratio(o.predicted_speedup)}"


def _best_speculative(result: TuneResult, objective: Objective) -> str | None:
    labels = [c.label for c in result.space.candidates]
    return max(labels, key=lambda label: result.forecast.outlooks[(label, objective)].estimate, default=None)


def _base_text(server: ServerConfig) -> str:
    if server.speculative_config is not None:
        return ", ".join(f"{k} {v}" for k, v in server.speculative_config.items())
    parts = [server.algorithm or ""]
    if server.draft_model:
        parts.append(f"draft {server.draft_model}")
    return ", ".join(p for p in parts if p)


def _sim_text(config: SpecperfConfig) -> str:
    if config.launcher != "sim":
        return ""
    profile = config.sim_profile or "kimi-k2.5-tp8"
    return f" (the built-in simulator, profile {profile}, time scale {config.sim_time_scale:g})"


def _terms(space: TuneSpace) -> Iterable[str]:
    terms = terms_for([c.shape for c in space.candidates if c.shape is not None])
    return [t if t == "fixed" else f"{t} x {t.removeprefix('per ')}s" for t in terms]
