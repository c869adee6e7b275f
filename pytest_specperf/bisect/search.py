"""The order of starts of a bisection, pure: which differences to apply next, given what the starts
said, and what the answer may claim.

**Reproduce first** (as Chromium's Pinpoint does): before any search, the bad setup (every difference
at its bad value) is judged against the good setup. If it is not confidently slower beyond the
tolerance, the answer is "not reproduced" and no cause is named: a night slowed by the node (or by
noise) has no cause among the differences, and a search that assumed one would name whatever it
tried last.

**The search.** One start per level of a binary search: the first half of the candidates is applied
at its bad values; a bad start keeps that half, a good one the other half (the whole is bad, so the
other half holds the cause when this one does not). When the last difference turns out harmless on
its own, some differences only act together: the search starts again, trying both halves at every
level (Zeller's delta debugging), and finds them as a pair.

**Only confident answers.** A start the runner judges uncertain has been measured again before it
counts (`Seen.certain` is False only when it stayed unclear). A single cause is named when its start
alone was bad; a pair only when each member alone was confidently good and the pair confidently bad;
an answer that rests on an uncertain start carries it (`Answer.uncertain`). When no subset explains
a bad setup, the bad setup is measured once more: a start that read slow once on a busy node is
then "not reproduced", not a cause.

**The answer is checked** (`every_cause`): the bad setup with the causes at their good values must
be good. That start is skipped when every other difference was already at its bad value in a
confidently good start (nothing is left that could still cost throughput on its own). When it is
bad, the rest is searched the same way, and a cause the others explain the regression without is
dropped.

Engine builds are a dimension of their own: an ordered list, oldest first, whose first build is
good and last bad; `first_bad` finds the first bad one as `git bisect` finds a commit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

#: Starts a server with the differences of the set at their bad values (the rest at their good
#: values); True when the start is bad.
IsBad = Callable[[frozenset[int]], bool]

FOUND, NOT_REPRODUCED, UNEXPLAINED, TOO_NOISY = "found", "not reproduced", "unexplained", "too noisy"


@dataclass(frozen=True)
class Seen:
    """What a judged start said: bad or good, and whether it was clear (after its repeats)."""

    bad: bool
    certain: bool = True


#: Starts (and, when unclear, repeats) a setup with the set's differences at their bad values.
Judge = Callable[[frozenset[int]], Seen]


@dataclass
class Trail:
    """What one search saw, set by set: a set judged once is not started again, and the answer knows
    which of its starts stayed uncertain."""

    judge: Judge
    seen: dict[frozenset[int], Seen] = field(default_factory=dict)

    def look(self, applied: frozenset[int]) -> Seen:
        if applied not in self.seen:
            self.seen[applied] = self.judge(applied)
        return self.seen[applied]

    def is_bad(self, applied: frozenset[int]) -> bool:
        return self.look(applied).bad

    def again(self, applied: frozenset[int]) -> Seen:
        """A new start of a set judged before (its earlier verdict is replaced)."""
        self.seen[applied] = self.judge(applied)
        return self.seen[applied]

    def surely(self, applied: frozenset[int], *, bad: bool) -> bool:
        seen = self.look(applied)
        return seen.certain and seen.bad == bad

    def covered(self, differences: frozenset[int]) -> bool:
        """Every one of `differences` was at its bad value in a confidently good start."""
        good = [s for s, seen in self.seen.items() if seen.certain and not seen.bad]
        return differences <= frozenset().union(*good)

    def one_way(self) -> bool:
        """Every start came out the same way: what one good-setup start that is off produces."""
        return len({seen.bad for seen in self.seen.values()}) == 1

    @property
    def uncertain(self) -> tuple[frozenset[int], ...]:
        return tuple(s for s, seen in self.seen.items() if not seen.certain)


@dataclass(frozen=True)
class Answer:
    """What a bisection found: `outcome` one of FOUND, NOT_REPRODUCED, UNEXPLAINED, TOO_NOISY; the
    causes as groups (one difference, or a pair that only acts together); the sets whose starts
    stayed uncertain, which the answer rests on; `checked` when a start with the causes restored and
    every other difference at its bad value was made (else every other one was seen in a good start)."""

    outcome: str
    groups: tuple[tuple[int, ...], ...] = ()
    uncertain: tuple[frozenset[int], ...] = ()
    checked: bool = False
    note: str = ""


def bisect(count: int, judge: Judge, good_setup_holds: Callable[[], bool] = lambda: True) -> Answer:
    """Reproduce, search, check: the causes among `count` differences, or why none is named.

    `good_setup_holds` measures the good setup again and is False when it moved: the judge then
    holds starts against the new one. It is asked when every start came out one way or the check is
    bad (before the rest is searched; a move then means searching again, and a second move is
    TOO_NOISY), and when the answer rests on a start that stayed uncertain: every start is judged
    against the good setup's, so one of those that landed off is the likeliest reason, and the
    search is done once more against the good setup measured again."""
    answer = Answer(TOO_NOISY)
    for _ in range(2):
        trail = Trail(judge)
        everything = frozenset(range(count))
        if not trail.surely(everything, bad=True):
            return Answer(NOT_REPRODUCED, uncertain=trail.uncertain)
        first = find_causes(count, trail)
        if not first:
            answer = _nothing_found(trail, everything)
        elif (unexplained(count, [first], trail) or trail.one_way()) and not good_setup_holds():
            answer = Answer(TOO_NOISY)
            continue
        else:
            groups = every_cause(count, first, trail)
            checked = everything.difference(*groups) in trail.seen
            answer = Answer(FOUND, tuple(groups), trail.uncertain, checked)
        if not answer.uncertain:
            return answer
        good_setup_holds()
    return answer


def _nothing_found(trail: Trail, everything: frozenset[int]) -> Answer:
    """No difference, nor pair, is confidently bad: the bad setup once more says whether its first
    start was the node (then not reproduced) or the causes act only in larger groups."""
    if not trail.again(everything).bad:
        note = "the bad setup read slow once, but no subset of its differences is slow, and it measures fast again"
        return Answer(NOT_REPRODUCED, uncertain=trail.uncertain, note=note)
    note = "the bad setup is slow, but no single difference or pair of them confidently is"
    return Answer(UNEXPLAINED, uncertain=trail.uncertain, note=note)


def find_causes(count: int, trail: Trail, candidates: Sequence[int] | None = None) -> tuple[int, ...]:
    """The differences (indices) whose bad values make a start bad, among `candidates` (default: all
    `count`), which together are known bad; the others stay at their good values. Empty when neither
    one difference nor a pair is confidently the cause."""
    everything = list(range(count)) if candidates is None else list(candidates)
    found, confirmed = narrow(everything, frozenset(), trail.is_bad)
    if confirmed or trail.is_bad(frozenset(found)):
        return tuple(found)
    group = tuple(sorted(together(everything, frozenset(), trail.is_bad)))
    return group if acts_only_together(group, trail) else ()


def acts_only_together(group: tuple[int, ...], trail: Trail) -> bool:
    """A pair is named when it is confidently bad and each member alone confidently good; one
    difference alone when its own start is bad; a larger group never (a bad setup that only all of
    many differences make slow is more likely a start that read slow than a cause)."""
    if len(group) == 1:
        return trail.is_bad(frozenset(group))
    if len(group) > 2:
        return False  # three or more that act only all together: not a pair, and not named
    alone_good = all(trail.surely(frozenset({member}), bad=False) for member in group)
    return alone_good and trail.surely(frozenset(group), bad=True)


def unexplained(count: int, causes: Sequence[Sequence[int]], trail: Trail) -> frozenset[int]:
    """The differences a start leaves at their bad values when `causes` are restored, if that start is
    still bad (none when nothing is left, or when every one of them was seen in a confidently good
    start); empty when the causes explain the regression."""
    rest = frozenset(range(count)).difference(*causes)
    if not rest or trail.covered(rest):
        return frozenset()
    return rest if trail.is_bad(rest) else frozenset()


def every_cause(count: int, first: tuple[int, ...], trail: Trail) -> list[tuple[int, ...]]:
    """The causes that explain the regression, as groups, `first` found by `find_causes`: while
    restoring the groups leaves a bad start, the rest is searched for one more; then a group the
    others explain the regression without is dropped."""
    groups = [first]
    while rest := unexplained(count, groups, trail):
        more = find_causes(count, trail, sorted(rest))
        if not more or more in groups:
            break
        groups.append(more)
    for group in list(groups):
        others = [g for g in groups if g != group]
        if others and not unexplained(count, others, trail):
            groups = others
    return groups


def together(candidates: Sequence[int], base: frozenset[int], is_bad: IsBad) -> list[int]:
    """The smallest part of `candidates` that makes `base` bad, both halves tried at every level: when
    neither half does it alone, one part of each acts only with the other (Zeller's delta debugging)."""
    if len(candidates) == 1:
        return list(candidates)
    half, rest = list(candidates[: len(candidates) // 2]), list(candidates[len(candidates) // 2 :])
    if is_bad(base | frozenset(half)):
        return together(half, base, is_bad)
    if is_bad(base | frozenset(rest)):
        return together(rest, base, is_bad)
    first = together(half, base | frozenset(rest), is_bad)
    return first + together(rest, base | frozenset(first), is_bad)


def narrow(candidates: Sequence[int], base: frozenset[int], is_bad: IsBad) -> tuple[list[int], bool]:
    """Halve `candidates` (with `base`, known bad together) to the one that makes `base` bad; and
    whether that one was seen bad by a start of its own (else it was kept because its sibling was good)."""
    left, confirmed = list(candidates), False
    while len(left) > 1:
        half, rest = left[: len(left) // 2], left[len(left) // 2 :]
        if is_bad(base | frozenset(half)):
            left, confirmed = half, True
        else:
            left, confirmed = rest, False
    return left, confirmed


def most_starts(count: int) -> int:
    """The starts `bisect` takes for one cause among `count` when every start is clear, the good
    setup's excluded: the bad setup, ⌈log₂ count⌉ halvings, one when the last half was kept
    untested, one that checks the answer (only the bad setup when the one difference is the answer)."""
    return 1 if count <= 1 else 1 + (count - 1).bit_length() + 2


def first_bad(count: int, is_bad_at: Callable[[int], bool]) -> int:
    """The first bad one of `count` ordered builds whose first is good and last bad (the newest that
    is good is the one before it): ⌈log₂ (count - 1)⌉ starts, none for the two ends."""
    good, bad = 0, count - 1
    while bad - good > 1:
        middle = (good + bad) // 2
        if is_bad_at(middle):
            bad = middle
        else:
            good = middle
    return bad
