"""The order of starts of a bisection, pure: which differences to apply next, given what the last
start said.

One start per level of a binary search: the first half of the candidates is applied at its bad
values; a bad start keeps that half, a good one the other half (all of them together are bad, so
the other half holds the cause when this one does not). A single cause among N differences takes
⌈log₂ N⌉ starts, one more when the last half was kept untested. When that last check finds the
difference harmless on its own, some differences only act together: the search starts again,
trying both halves at every level, and finds them as a pair.

An answer is checked before it counts (`every_cause`): the bad setup with the causes at their good
values must be good. When it is still bad, the rest holds another cause (the search assumed one), or
one noisy start sent the search into a harmless half: the rest is searched the same way, and a cause
found earlier that the final answer does not need is dropped. The answer is then what a user
restores, not a half a single start pointed at.

Engine builds are a dimension of their own: an ordered list, oldest first, whose first build is
good and last bad; `first_bad` finds the first bad one as `git bisect` finds a commit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

#: Starts a server with the differences of the set at their bad values (the rest at their good
#: values); True when the start is bad.
IsBad = Callable[[frozenset[int]], bool]


def find_causes(count: int, is_bad: IsBad, candidates: Sequence[int] | None = None) -> tuple[int, ...]:
    """The differences (indices) whose bad values make a start bad, among `candidates` (default: all
    `count`), which together are known bad; the others stay at their good values."""
    everything = list(range(count)) if candidates is None else list(candidates)
    found, confirmed = narrow(everything, frozenset(), is_bad)
    if confirmed or is_bad(frozenset(found)):
        return tuple(found)
    return tuple(sorted(together(everything, frozenset(), is_bad)))


def unexplained(count: int, causes: Sequence[Sequence[int]], is_bad: IsBad) -> frozenset[int]:
    """The differences a start leaves at their bad values when `causes` are restored, if that start is
    still bad (one start; none when nothing is left); empty when the causes explain the regression."""
    rest = frozenset(range(count)).difference(*causes)
    return rest if rest and is_bad(rest) else frozenset()


def every_cause(count: int, first: tuple[int, ...], is_bad: IsBad) -> list[tuple[int, ...]]:
    """The causes that explain the regression, as groups (one difference, or a pair that only acts
    together), `first` found by `find_causes`: while restoring the groups leaves a bad start, the rest is
    searched for one more; then a group the others explain the regression without is dropped."""
    groups = [first]
    while rest := unexplained(count, groups, is_bad):
        groups.append(find_causes(count, is_bad, sorted(rest)))
    for group in list(groups):
        others = [g for g in groups if g != group]
        if others and not unexplained(count, others, is_bad):
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
    """The starts `every_cause` takes for one cause among `count`: ⌈log₂ count⌉, one when the last half
    was kept untested, one that checks the answer (none when the one difference is the answer)."""
    return max(0, (count - 1).bit_length()) + 1 + (count > 1)


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
