"""The look schedule and the restart rule the session follows and benchmarks/verdict_nights.py replays
(`nightly.looked`, `nightly.Restarts`): one code path. Pure: no process, no socket."""

from __future__ import annotations

from pytest_specperf.verdict.nightly import Restarts, looked


def schedule(decisions: list[str], *, extend: bool = True, restart: bool = True) -> tuple[str, list[str]]:
    """Run `looked` over scripted looks; returns the last decision and what was done."""
    done: list[str] = []
    looks = iter(decisions)

    def look() -> str:
        done.append("look")
        return next(looks)

    def extended() -> bool:
        done.append("extend")
        return extend

    def second(_: str) -> bool:
        done.append("second start")
        return restart

    last = looked(
        look,
        settled=lambda d: d in ("met", "missed-settled"),
        extend=extended,
        confirmable=lambda d: d in ("suspect", "missed"),
        second_start=second,
    )
    return last, done


def test_a_met_night_is_looked_at_once() -> None:
    assert schedule(["met"]) == ("met", ["look"])


def test_a_night_met_after_more_rounds_needs_no_second_start() -> None:
    assert schedule(["suspect", "met"]) == ("met", ["look", "extend", "look"])


def test_a_night_still_beyond_after_more_rounds_is_decided_on_a_second_start() -> None:
    assert schedule(["suspect", "missed", "missed"]) == ("missed", ["look", "extend", "look", "second start", "look"])


def test_no_second_look_when_none_can_be_had() -> None:
    assert schedule(["suspect", "suspect"], restart=False) == ("suspect", ["look", "extend", "look", "second start"])
    assert schedule(["suspect", "suspect"], extend=False) == ("suspect", ["look", "extend", "second start", "look"])


def test_one_restart_confirms_every_key_measured_before_it_within_the_cap() -> None:
    restarts = Restarts(limit=1)
    assert restarts.ask(on_current_start=True, server="a") == (True, None)  # the first failing key restarts it
    assert restarts.ask(on_current_start=False, server="a") == (False, None)  # the next is measured on the new start
    restart, why = restarts.ask(on_current_start=True, server="b")  # another server: the cap is reached
    assert not restart and why == "the session already restarted 1 server(s) (max_restarts = 1)"
    assert Restarts(limit=4).ask(on_current_start=True, cannot="an attached server") == (False, "an attached server")


def test_a_server_is_restarted_once_a_night() -> None:
    """A key measured on the start a restart made is decided on it: a server whose every key fell is
    restarted once a night, not once per key up to the cap."""
    restarts = Restarts(limit=4)
    assert restarts.ask(on_current_start=True, server="eagle3") == (True, None)
    restart, why = restarts.ask(on_current_start=True, server="eagle3")  # a key measured on the new start
    assert not restart and why == "eagle3 was restarted once tonight already (one second start per server)"
    assert restarts.ask(on_current_start=True, server="plain") == (True, None) and restarts.used == 2
