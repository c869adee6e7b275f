"""What explains the verdict table, for a reader who asks (`-v`, `--specperf-report full`, the Markdown
summary): the cost model, acceptance by draft position, the lossless figures, τ against the requests' own,
the verify-cost fits, the concurrency sweeps and the latency percentiles. None of it needs acting on by
itself, so the default summary leaves it out and stays a screen long (`terminal.summary_blocks`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pytest_specperf.report import speculative, tau
from pytest_specperf.report.analysis import Fit, Report, Row, SweepSummary
from pytest_specperf.report.blocks import NAME_WIDTH, WORKLOAD_WIDTH, Block, level, pm, signed_pm, times
from pytest_specperf.report.costmodel import FitStatus
from pytest_specperf.report.sweep import Certainty, Crossover, CrossoverKind, LevelWinner
from pytest_specperf.verdict.stats import Estimate

#: Speculative configs per sweep table; more are split into several tables so each fits the width.
SWEEP_CONFIGS_PER_TABLE = 5
COST_HEADERS = ("server", "workload", "c", "τ", "TPOT ms", "ref TPOT ms", "cycle ms", "τ*", "τ-τ*", "α")  # noqa: RUF001
PERCENTILE_HEADERS = (
    "server",
    "workload",
    "c",
    "TTFT p50",
    "TTFT p99",
    "TPOT p50",
    "TPOT p99",
    "chunk gap p50",
    "rounds",
)


def detail_blocks(report: Report, *, percentiles: bool = False) -> list[Block]:
    """Every block that explains the table, in reading order; `percentiles` adds the latency table."""
    blocks = [cost] if (cost := cost_block(report)) is not None else []
    blocks += [Block(title=t, bullets=tuple(lines)) for t, lines in speculative.blocks(report.rows) if lines]
    blocks += [Block(title=tau.TITLE, bullets=tuple(lines))] if (lines := tau.per_request_lines(report.rows)) else []
    # a fit that lacks points says nothing: it would only advise adding a config nobody asked for
    blocks += [fit_block(fit) for fit in report.fits if fit.fit.status is not FitStatus.NOT_ENOUGH_POINTS]
    for sweep in report.sweeps:
        blocks += sweep_blocks(sweep, _reference_name(report))
    return [*blocks, percentile_block(report)] if percentiles else blocks


def _reference_name(report: Report) -> str | None:
    return next((r.key.server for r in report.rows if r.measurement.is_reference), None)


def cost_block(report: Report) -> Block | None:
    """The cost model of each speculative row: why it is (or is not) faster than the reference."""
    rows = [r for r in report.rows if r.cost is not None]
    if not rows:
        return None
    return Block(
        title="cost model (per draft-and-verify cycle, against the reference's TPOT):",
        headers=COST_HEADERS,
        cells=tuple(tuple(cost_cells(r)) for r in rows),
        widths=(NAME_WIDTH, WORKLOAD_WIDTH),
        lines=(
            "cycle = τ x TPOT; τ* = cycle / ref TPOT: the break-even accept length, speculation pays while τ > τ*",
            "α: per-draft acceptance implied by τ for a chain of drafts; derived intervals are interval arithmetic "  # noqa: RUF001
            "(conservative)",
        ),
    )


def cost_cells(row: Row) -> list[str]:
    cost = row.cost
    assert cost is not None
    implied = cost.implied_acceptance
    alpha = pm(implied.alpha, 2) if implied is not None and implied.alpha is not None else "-"
    return [
        row.key.server,
        row.key.workload,
        str(row.key.concurrency),
        pm(cost.accept_length, 2),
        pm(cost.tpot_ms, 2),
        pm(cost.reference_tpot_ms, 2),
        pm(cost.cycle_ms, 2),
        pm(cost.break_even_accept_length, 2),
        signed_pm(cost.headroom, 2),
        alpha,
    ]


def fit_block(fit: Fit) -> Block:
    """The verify-cost fit: how much of a cycle is fixed cost that fewer draft tokens cannot remove."""
    title = f"verify-cost fit, {fit.workload} {level(fit.concurrency)}, over {' / '.join(fit.servers)}:"
    if fit.fit.status is FitStatus.NOT_ENOUGH_POINTS:
        return Block(title=title, bullets=(fit.fit.note,))
    a, b = fit.fit.fixed_ms, fit.fit.per_token_ms
    assert a is not None and b is not None
    shares = ", ".join(f"{s:.0%}" for s in fit.fit.point_fixed_shares)
    mostly_fixed = min(fit.fit.point_fixed_shares) > 0.5
    meaning = (
        "mostly fixed cost: fewer draft tokens barely shorten a cycle"
        if mostly_fixed
        else "per-token cost matters: fewer draft tokens shorten a cycle"
    )
    return Block(
        title=title,
        bullets=(
            f"cycle = {_fitted(a, 2)} ms + {_fitted(b, 3)} ms x draft tokens ({fit.fit.note})",
            f"fixed share of the cycle: {shares} — {meaning}",
        ),
    )


def _fitted(estimate: Estimate, digits: int) -> str:
    """A fit coefficient: with its interval when it has one (an exact fit has none, and says so)."""
    return pm(estimate, digits) if estimate.bounded else f"{estimate.value:.{digits}f}"


def sweep_blocks(sweep: SweepSummary, reference: str | None) -> list[Block]:
    """Speedup by concurrency per config, where each crosses 1.0, and the fastest config per level."""
    configs = list(sweep.speedups)
    over = f" over {reference}" if reference else ""
    title = f"concurrency sweep, workload {sweep.workload}: speedup{over} by concurrency level"
    blocks = []
    for start in range(0, max(len(configs), 1), SWEEP_CONFIGS_PER_TABLE):
        chunk = configs[start : start + SWEEP_CONFIGS_PER_TABLE]
        cells = tuple((level(c), *(times(sweep.speedups[name].get(c)) for name in chunk)) for c in sweep.levels)
        blocks.append(
            Block(
                title=title if start == 0 else None,
                headers=("c", *chunk),
                cells=cells if chunk else (),
                widths=(None, *([NAME_WIDTH] * len(chunk))),
            )
        )
    bullets = [crossover_line(name, crossover) for name, crossover in sweep.crossovers.items()]
    if bullets:
        blocks.append(Block(title="where the speedup crosses 1.0:", bullets=tuple(bullets)))
    if sweep.winners:
        blocks.append(
            Block(title="fastest config per level (tok/s):", bullets=tuple(winner_line(w) for w in sweep.winners))
        )
    return blocks


def crossover_line(name: str, crossover: Crossover) -> str:
    text = crossover.describe()
    if crossover.kind is CrossoverKind.ABOVE_ALL:
        return f"{name}: speedup >= 1 at every level measured; crossover {text}"
    if crossover.kind is CrossoverKind.BELOW_ALL:
        return f"{name}: speedup < 1 at every level measured; crossover {text}"
    return f"{name}: speedup {text}"


def winner_line(winner: LevelWinner) -> str:
    head = f"{level(winner.concurrency)}: {winner.best} {pm(winner.throughput)}"
    runner = f"{winner.runner_up} {pm(winner.runner_up_throughput)}"
    if winner.certainty is Certainty.SOLE:
        return f"{head} (the only config measured)"
    if winner.certainty is Certainty.TIED:
        return f"{head}, tied with {', '.join(winner.tied_with)}"
    if winner.certainty is Certainty.CLEAR:
        return f"{head}, clearly ahead of {runner} (intervals do not overlap)"
    return f"{head}, ahead of {runner} but the intervals overlap: this data cannot order them"


def percentile_block(report: Report) -> Block:
    return Block(
        title="latency percentiles, ms (each a mean over rounds of the per-round value):",
        headers=PERCENTILE_HEADERS,
        cells=tuple(tuple(c) for c in percentile_cells(report)),
        widths=(NAME_WIDTH, WORKLOAD_WIDTH),
        folded=True,
    )


def percentile_cells(report: Report) -> list[list[str]]:
    cells = []
    for row in report.rows:
        rounds = row.measurement.rounds

        def mean_of(attr: str, part: str, rounds: Sequence[Any] = rounds) -> str:
            values = [getattr(getattr(r, attr), part) for r in rounds]
            values = [v for v in values if v is not None]
            return f"{sum(values) / len(values):.2f}" if values else "-"

        cells.append(
            [
                row.key.server,
                row.key.workload,
                str(row.key.concurrency),
                mean_of("ttft_ms", "p50"),
                mean_of("ttft_ms", "p99"),
                mean_of("tpot_ms", "p50"),
                mean_of("tpot_ms", "p99"),
                mean_of("chunk_gap_ms", "p50"),
                str(len(rounds)),
            ]
        )
    return cells
