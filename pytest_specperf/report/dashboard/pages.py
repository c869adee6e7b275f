"""The dashboard's pages, as self-contained HTML: the summary (`index.html`: one row per key, found by
name and sorted in the browser), the suite's panels (`suite.html`), and for a store too large for one
page of panels (`Dashboard.paged`) a page per key (`keys/<key>.html`) with `suite.html` their index.

Self-contained: the style, the charts (svg.py) and short scripts are inline, so a page needs no
network and no other file to be read. Every user-supplied name is escaped. One script turns `<title>`
hover texts into a styled tooltip that also opens on keyboard focus; the summary's other filters its
key tables by name and sorts them by a column (plain JavaScript: nothing is loaded).

Why pages per key: a year of nights is about 2 KB a run drawn, so 1,000 keys by 365 nights on one page
is hundreds of megabytes no browser opens; the summary stays one row per key (a trend of the newest
nights at most), about 1 KB a key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from html import escape

import pytest_specperf
from pytest_specperf.measure.fingerprint import UNSET, Fingerprint
from pytest_specperf.report.dashboard.assets import SCRIPT, STYLE, TABLE_SCRIPT
from pytest_specperf.report.dashboard.model import (
    ENGINE,
    LAYER_TITLES,
    SIMULATOR,
    STATUS_TEXT,
    Chart,
    Dashboard,
    KeyView,
    RunMark,
    SiteHeader,
)
from pytest_specperf.report.dashboard.svg import COLOURS, TREND_NIGHTS, chart_svg, marker, sparkline
from pytest_specperf.report.terminal import scale_note
from pytest_specperf.verdict.changes import change_percent
from pytest_specperf.verdict.checks import fmt
from pytest_specperf.verdict.verdicts import SEVERITY, Verdict

SUMMARY, SUITE = "index.html", "suite.html"
#: The folder of the pages per key (a paged dashboard).
KEYS_DIR = "keys"
#: Keys a summary card lists by name; the rest are counted (the table below finds and sorts them all).
CARD_ITEMS = 50
DIGITS = {"output_throughput": 1, "mean_tpot_ms": 2, "accept_length": 2, "speedup": 3}
VERDICT_OF_STATUS = {"accepted": "passed", "suspect": "SUSPECT", "refused": "REGRESSION"}

Link = Callable[[KeyView], str]


def key_page_name(view: KeyView) -> str:
    """A key's own page in a paged dashboard, relative to the site's root."""
    return f"{KEYS_DIR}/{view.anchor}.html"


def links(d: Dashboard) -> Link:
    """Where a key's panel is: its own page (a paged dashboard), else its place on `suite.html`."""
    if d.paged:
        return key_page_name
    return lambda view: f"{SUITE}#{view.anchor}"


def site_pages(d: Dashboard, *, keys: bool = True) -> Iterator[tuple[str, str]]:
    """Every page of the site, (name relative to the root, text), one at a time: a paged dashboard's
    pages per key are made as they are written, never all held at once. Without `keys`, the summary and
    `suite.html` alone (the keys' pages were written where their views were made)."""
    yield SUMMARY, summary_page(d)
    yield SUITE, suite_page(d)
    if d.paged and keys:
        notes = {layer: _layer_note(d, layer) for layer in d.layers}
        for view in d.keys:
            yield key_page_name(view), key_page(d, view, notes[view.layer])


def summary_page(d: Dashboard) -> str:
    """What regressed, what is suspect, what the gate cannot see, and every key in one table (one row a
    key: found by name, sorted by a column)."""
    link = links(d)
    tolerance = f"{d.limits.max_regression:.0%}"

    def regressed(view: KeyView) -> str:
        return _regressed_item(view, link)

    cards = [
        _card("bad", "Regressed", "the newest night was refused: a REGRESSION", d.regressed, regressed),
        _card(
            "warn",
            "Suspect",
            "the newest night was SUSPECT: not credibly beyond the tolerance",
            d.suspect,
            regressed,
        ),
        _card(
            "blind",
            f"Cannot see a {tolerance} change",
            "what the nightly gate cannot tell from its own noise",
            d.blind,
            lambda view: _blind_item(view, link),
        ),
    ]
    body = [f'<section class="cards">{"".join(cards)}</section>', _finder()]
    for layer in d.layers:
        body.append(f"<h2>{escape(LAYER_TITLES[layer])}</h2>{_layer_note(d, layer)}{_key_table(d.layer(layer), link)}")
    return _page(d.header, SUMMARY, f"{d.title}: summary", "".join(body), script=SCRIPT + TABLE_SCRIPT)


def suite_page(d: Dashboard) -> str:
    """A panel per key, by layer; for a paged dashboard, the index of the keys' pages by server."""
    if d.paged:
        return _page(d.header, SUITE, f"{d.title}: every key", _key_index(d))
    body = [_legend()]
    for layer in d.layers:
        views = d.layer(layer)
        toc = "".join(f'<li><a href="#{v.anchor}">{escape(v.key.label)}</a></li>' for v in views)
        panels = "".join(_panel(v) for v in views)
        body.append(
            f'<section class="layer" data-layer="{layer}"><h2>{escape(LAYER_TITLES[layer])} '
            f'<span class="count">{len(views)}</span></h2>{_layer_note(d, layer)}<ul class="toc">{toc}</ul>'
            f'<div class="panels">{panels}</div></section>'
        )
    return _page(d.header, SUITE, f"{d.title}: every key", "".join(body))


def key_page(d: Dashboard | SiteHeader, view: KeyView, note: str) -> str:
    """One key's panel with every run of its history (a paged dashboard); `note` is its layer's. `d` is the
    site, or what its pages say of it (`SiteHeader`) where the other keys' views are not at hand."""
    header = d.header if isinstance(d, Dashboard) else d
    body = (
        f'{_legend()}<section class="layer" data-layer="{view.layer}"><h2>{escape(LAYER_TITLES[view.layer])}</h2>'
        f'{note}<div class="panels">{_panel(view)}</div></section>'
    )
    return _page(header, key_page_name(view), f"{header.title}: {view.key.label}", body, up="../")


def _key_index(d: Dashboard) -> str:
    """Every key's page, by layer and server, with its verdict."""
    body = []
    for layer in d.layers:
        views = d.layer(layer)
        servers: dict[str, list[KeyView]] = {}
        for view in views:
            servers.setdefault(view.key.server, []).append(view)
        lists = "".join(
            f'<h3>{escape(server)} <span class="count">{len(group)}</span></h3><ul>'
            + "".join(
                f'<li><a href="{key_page_name(v)}">{escape(v.key.label)}</a> {_verdict(v.verdict)}</li>' for v in group
            )
            + "</ul>"
            for server, group in servers.items()
        )
        body.append(
            f'<section class="layer key-index" data-layer="{layer}"><h2>{escape(LAYER_TITLES[layer])} '
            f'<span class="count">{len(views)}</span></h2>{_layer_note(d, layer)}{lists}</section>'
        )
    return "".join(body)


def _finder() -> str:
    return (
        '<p class="finder"><input type="search" id="find" placeholder="Find a key by name" '
        'aria-label="Find a key by name" autocomplete="off"> <output id="shown" for="find"></output></p>'
    )


def _verdict(verdict: Verdict) -> str:
    return f'<span class="verdict {verdict.value}">{verdict.value}</span>'


def _page(d: SiteHeader, name: str, heading: str, body: str, *, up: str = "", script: str = SCRIPT) -> str:
    """A page of the site; `up` leads from its folder to the site's root."""
    nav = "".join(
        f'<a href="{up}{page}"{" aria-current=page" if page == name else ""}>{label}</a>'
        for page, label in ((SUMMARY, "Summary"), (SUITE, "Every key"))
    )
    sub = (
        f"store {escape(d.location)} · {d.keys} keys · newest run {escape(_when(d.newest_run))} · "
        f"tolerance {d.limits.max_regression:.0%} throughput, {d.limits.max_regression_accept_length:.0%} accept "
        "length"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(heading)}</title><style>{STYLE}</style></head><body>"
        f'<header class="top"><h1>{escape(heading)}</h1><p class="sub">{sub}</p><nav>{nav}</nav></header>'
        f"<main>{body}</main><footer>Made by <code>specperf dashboard</code> (pytest-specperf "
        f"{escape(pytest_specperf.__version__)}) from the stored histories; every figure is the verdict engine's "
        "own. A static page: it loads nothing from the network.</footer>"
        f"<script>{script}</script></body></html>\n"
    )


def _when(created: str) -> str:
    """'2026-11-18T01:00:00+00:00' as '2026-11-18 01:00 UTC'."""
    if len(created) < 16:
        return created
    zone = " UTC" if created.endswith(("+00:00", "Z")) else ""
    return f"{created[:10]} {created[11:16]}{zone}"


def _label(view: KeyView, link: Link, *, layer: bool = True) -> str:
    badge = ' <span class="badge sim">simulator</span>' if layer and view.layer == SIMULATOR else ""
    return f'<a href="{link(view)}">{escape(view.key.label)}</a>{badge}'


def _card(kind: str, title: str, hint: str, views: Sequence[KeyView], item: Callable[[KeyView], str]) -> str:
    """A summary card: its first `CARD_ITEMS` keys by name, the rest counted."""
    items = "".join(f"<li>{item(v)}</li>" for v in views[:CARD_ITEMS]) or '<li class="none">none</li>'
    if len(views) > CARD_ITEMS:
        items += f'<li class="more">and {len(views) - CARD_ITEMS} more: sort the table below by verdict</li>'
    return (
        f'<div class="card {kind}" data-list="{kind}"><h2>{escape(title)}<span class="count">{len(views)}</span></h2>'
        f'<p class="hint">{escape(hint)}</p><ul>{items}</ul></div>'
    )


def _regressed_item(view: KeyView, link: Link) -> str:
    newest = view.runs[-1].provenance
    parts = [f"{_label(view, link)} · {escape(newest.created[:10])}"]
    night = view.gate.night
    if night is not None and night.comparison is not None:
        parts.append(f"tok/s vs level {escape(change_percent(night.comparison.ratio))}")
    change = view.change_in_force
    if change is not None:
        parts.append(escape(change.sentence))
    return " · ".join(parts)


def _blind_item(view: KeyView, link: Link) -> str:
    return _label(view, link) + "<ul>" + "".join(f"<li>{escape(b)}</li>" for b in view.gate.blind) + "</ul>"


#: The summary table's columns: (heading, how its button sorts it: "text", "number", or not at all).
COLUMNS = (
    ("key", "text"),
    ("verdict", "number"),
    ("runs", "number"),
    ("newest night", "text"),
    ("tok/s", "number"),
    ("vs level", "number"),
    (f"newest {TREND_NIGHTS} runs", ""),
    ("run-to-run CV", "number"),
    ("one night flags (80%)", "number"),
    ("change in force", ""),
)


def _key_table(views: Sequence[KeyView], link: Link) -> str:
    rows = "".join(_key_row(view, link) for view in views)
    header = "".join(
        f'<th data-sort="{sort}"><button type="button">{escape(h)}</button></th>' if sort else f"<th>{escape(h)}</th>"
        for h, sort in COLUMNS
    )
    return f'<table class="keys"><thead><tr>{header}</tr></thead><tbody>{rows}</tbody></table>'


def _key_row(view: KeyView, link: Link) -> str:
    """One key's row: each sortable cell carries the value it sorts by (`data-v`)."""
    newest = view.runs[-1]
    chart = view.chart("output_throughput")
    value = chart.points[-1].value if chart and chart.points else None
    night = view.gate.night
    c = night.comparison if night is not None else None
    change = view.change_in_force
    flags = night.detectable - 1 if night is not None and night.detectable else None
    cells: list[tuple[str, str | float | None]] = [
        (_label(view, link, layer=False), view.key.label),
        (_verdict(view.verdict), SEVERITY.index(view.verdict)),
        (str(view.run_count), view.run_count),
        (f'{escape(newest.provenance.created[:10])} <span class="badge {newest.status}">{newest.status}</span>', None),
        (escape(fmt(value, 1)) if value is not None else "-", value.value if value is not None else None),
        (
            escape(change_percent(c.ratio)) if c is not None else escape(view.gate.why or "-"),
            c.ratio.value if c is not None else None,
        ),
        (sparkline(chart) if chart else "", None),
        ("-" if c is None else f"{c.run_cv:.1%}" + (" (prior)" if c.prior else ""), c.run_cv if c else None),
        (f"{flags:+.1%}" if flags is not None else "-", flags),
        (escape(change.sentence) if change is not None else "-", None),
    ]
    tds = "".join(
        f"<td>{text}</td>" if sort is None else f'<td data-v="{escape(_sort_value(sort))}">{text}</td>'
        for text, sort in cells
    )
    return f'<tr data-key="{escape(view.key.label.lower())}">{tds}</tr>'


def _sort_value(value: str | float) -> str:
    return value if isinstance(value, str) else f"{value:.6g}"


def _layer_note(d: Dashboard, layer: str) -> str:
    return layer_note(layer, [k.runs[-1].measurement.fingerprint for k in d.layer(layer)])


def layer_note(layer: str, prints: Sequence[Fingerprint | None]) -> str:
    """What a layer's runs are, from the newest runs' fingerprints of its keys (the simulator's profiles)."""
    if layer == ENGINE:
        return '<p class="layer-note">Runs measured on the real engine (SGLang, vLLM).</p>'
    found = [fp for fp in prints if isinstance(fp, Fingerprint)]
    profiles = sorted({fp.identity.get("sim_profile", UNSET) for fp in found} - {UNSET})
    scales = sorted({fp.identity.get("sim_time_scale", UNSET) for fp in found} - {UNSET})
    profile = f" (profile {', '.join(profiles)})" if profiles else ""
    notes = "; ".join(scale_note(s) for s in scales)
    return (
        f'<p class="layer-note">SIMULATED: these runs come from pytest_specperf.sim{escape(profile)}, a model of a '
        f"GPU server, not a GPU{'; ' + escape(notes) if notes else ''}.</p>"
    )


def _legend() -> str:
    def symbol(status: str, rejected: bool = False, ring: bool = False) -> str:
        colour = COLOURS["rejected"] if rejected else COLOURS[status]
        ringed = '<circle cx="9" cy="9" r="7" fill="none" stroke="#1d2330" stroke-width="1.6"/>' if ring else ""
        return f'<svg width="18" height="18" viewBox="0 0 18 18">{ringed}{marker(9, 9, status, colour, rejected)}</svg>'

    items = [
        (symbol("accepted"), "accepted: counts in the level and the spread"),
        (symbol("suspect"), "suspect night"),
        (symbol("refused"), "refused (a REGRESSION night)"),
        (symbol("accepted", rejected=True), "rejected as an outlier"),
        (symbol("accepted", ring=True), "the newest night"),
        (
            '<svg width="18" height="18"><line x1="9" x2="9" y1="1" y2="17" stroke="#9a3fb5" stroke-width="2"/></svg>',
            "change point (dashed: a drift)",
        ),
        (
            '<svg width="22" height="18"><line x1="1" x2="21" y1="9" y2="9" stroke="#2ca02c" stroke-width="1.4" '
            'stroke-dasharray="6 3"/></svg>',
            "level the newest night was judged against",
        ),
        (
            '<svg width="22" height="18"><rect x="1" y="2" width="20" height="14" fill="#eef0f6"/></svg>',
            "segment (since a --specperf-update)",
        ),
    ]
    return (
        '<p class="legend">'
        + "".join(f"<span>{s} {escape(t)}</span>" for s, t in items)
        + " <span>Bars: 90% interval over the run's rounds. Hover or focus a point for its run.</span></p>"
    )


def _panel(view: KeyView) -> str:
    status = view.status
    key = view.key
    badges = f'<span class="badge {status}" title="{escape(STATUS_TEXT[status])}">newest night: {status}</span>'
    if view.layer == SIMULATOR:
        badges += ' <span class="badge sim">simulator</span>'
    charts = list(view.charts)
    main = next((c for c in charts if c.metric == "output_throughput"), charts[0] if charts else None)
    small = [c for c in charts if c is not main]
    texts = _RunTexts.of(view)
    body = _chart_block(view, texts, main, 540, 170, main=True) if main is not None else ""
    if small:
        body += '<div class="small">' + "".join(_chart_block(view, texts, c, 180, 110) for c in small) + "</div>"
    return (
        f'<article class="panel status-{status}" id="{view.anchor}" data-key="{escape(key.label)}" '
        f'data-layer="{view.layer}" data-runs="{len(view.runs)}">'
        f"<header><h3>{escape(key.server)} · {escape(key.workload)} · c{key.concurrency}</h3>{badges}</header>"
        f'<p class="facts">{_facts(view)}</p>{body}{_notes(view)}</article>'
    )


@dataclass(frozen=True)
class _RunTexts:
    """What a run's hover text says on every chart of its key (its place, date, commit, host, status and
    fingerprint), and its date on the axis: made once a panel, not once a chart."""

    dates: list[str]
    heads: list[str]
    rounds: list[int]
    statuses: list[str]
    prints: list[str]

    @classmethod
    def of(cls, view: KeyView) -> _RunTexts:
        heads, statuses, prints = [], [], []
        for index, run in enumerate(view.runs):
            p = run.provenance
            first = f"run {index + 1} of {len(view.runs)} · segment {run.segment}"
            if index in view.newest:
                first += " · the newest night"
            commit = f"commit {p.git_commit[:7]}" if p.git_commit else "no git commit"
            heads.append(f"{first}\n{_when(p.created)} · {commit} · host {p.host}")
            verdict = VERDICT_OF_STATUS.get(run.status, "?")
            statuses.append(f"status: {STATUS_TEXT.get(run.status, run.status)}; verdict {verdict}")
            drift = view.drift[index]
            if index == 0:
                prints.append("fingerprint: the first run of this history")
            elif drift:
                prints.append("fingerprint since the run before: " + "; ".join(drift))
            else:
                prints.append("fingerprint: as the run before")
        dates = [r.provenance.created[5:10] for r in view.runs]
        return cls(dates, heads, [len(r.measurement.rounds) for r in view.runs], statuses, prints)


def _chart_block(view: KeyView, texts: _RunTexts, chart: Chart, width: int, height: int, *, main: bool = False) -> str:
    title = chart.title + (
        f" over {view.reference}, same session" if chart.metric == "speedup" and view.reference else ""
    )
    tips = {m.run: _tip(view, texts, chart, m) for m in chart.points}
    dates = texts.dates
    svg = chart_svg(
        chart,
        runs=len(view.runs),
        segments=view.segments,
        newest=view.newest,
        tips=tips,
        dates=dates,
        width=width,
        height=height,
        caption=f"{title} of {view.key.label}: {len(chart.points)} runs",
        labels=main,
    )
    return f'<div class="chart-block"><p class="chart-title">{escape(title)}</p>{svg}</div>'


def _tip(view: KeyView, texts: _RunTexts, chart: Chart, mark: RunMark) -> str:
    run = mark.run
    digits = DIGITS.get(chart.metric, 2)
    lines = [
        texts.heads[run],
        f"{chart.name} {fmt(mark.value, digits)} {chart.unit} over {texts.rounds[run]} rounds",
        texts.statuses[run],
    ]
    if mark.rejected:
        lines.append(mark.rejected)
    if view.gate.explanation and run in view.newest and chart.metric == "output_throughput":
        lines.append(f"why: {view.gate.explanation}")
    lines.append(texts.prints[run])
    return "\n".join(lines)


def _facts(view: KeyView) -> str:
    segments = len(view.segments)
    newest = view.runs[-1].provenance
    runs = f"{len(view.runs)} run{'s' if len(view.runs) != 1 else ''}"
    parts = [f"{runs} in {segments} segment{'s' if segments != 1 else ''}", f"newest {escape(_when(newest.created))}"]
    if newest.git_commit:
        parts.append(f"commit {escape(newest.git_commit[:7])}")
    night = view.gate.night
    if night is not None and night.comparison is not None:
        c = night.comparison
        parts.append(f"tok/s vs level {escape(change_percent(c.ratio))}")
        parts.append(f"run-to-run CV {c.run_cv:.1%}" + (" (prior)" if c.prior else f" from {c.runs} runs"))
        if night.detectable:
            parts.append(f"one night flags {night.detectable - 1:+.1%} (80%)")
    return " · ".join(parts)


def _notes(view: KeyView) -> str:
    notes = []
    for chart in view.charts:
        for change in chart.changes:
            css = ' class="in-force"' if change.in_force else ""
            notes.append(f"<li{css}>{escape(change.sentence)}{' (in force)' if change.in_force else ''}</li>")
    throughput = view.chart("output_throughput")
    for mark in throughput.points if throughput else ():
        if mark.rejected:
            notes.append(
                f"<li>run of {escape(view.runs[mark.run].provenance.created[:10])} {escape(mark.rejected)}</li>"
            )
    notes += [f"<li>{escape(b)}</li>" for b in view.gate.blind]
    if view.gate.positions:
        notes.append(f"<li>{escape(view.gate.positions)}</li>")
    if view.gate.explanation:
        notes.append(f'<li class="why">why: {escape(view.gate.explanation)}</li>')
    if view.gate.why:
        notes.append(f'<li class="why">gate: {escape(view.gate.why)}</li>')
    return f'<ul class="notes">{"".join(notes)}</ul>' if notes else ""
