"""How two spans lie to each other (contains, crosses) and the nesting depth of each span in a set.

Spans are anything with `start` and `end` (end exclusive): spaCy Spans, decoding
candidates, or (start, end, ...) tuples through `bounds`.
"""

from typing import Iterable, List, Sequence, Tuple

Bounds = Tuple[int, int]


def contains(outer: Bounds, inner: Bounds) -> bool:
    """Whether `outer` strictly contains `inner`: covers it and is not the same span."""
    return outer[0] <= inner[0] and inner[1] <= outer[1] and outer != inner


def crosses(a: Bounds, b: Bounds) -> bool:
    """Whether two spans overlap without one strictly containing the other (same bounds cross)."""
    return a[0] < b[1] and b[0] < a[1] and not contains(a, b) and not contains(b, a)


def nested_flags(bounds: Sequence[Bounds]) -> List[bool]:
    """For each span, whether another span of the set strictly contains it. O(S log S).

    Sorted by start, then longest first, every span that could contain a span comes before
    the group of spans with its exact bounds; so a span is contained exactly when a span
    before its group reaches as far as it does.
    """
    order = sorted(range(len(bounds)), key=lambda i: (bounds[i][0], -bounds[i][1]))
    flags = [False] * len(bounds)
    reach_before_group, reach, previous = -1, -1, None
    for i in order:
        if bounds[i] != previous:
            reach_before_group, previous = reach, bounds[i]
        flags[i] = reach_before_group >= bounds[i][1]
        reach = max(reach, bounds[i][1])
    return flags


def bounds_of(spans: Iterable) -> List[Bounds]:
    """(start, end) of spans given as objects with start/end or as (start, end, ...) tuples."""
    return [(s.start, s.end) if hasattr(s, "start") else (s[0], s[1]) for s in spans]


def depths(bounds: Sequence[Bounds]) -> List[int]:
    """For each span, its nesting depth: 0 when no span contains it, else one more than its
    innermost container's. Exact for properly nested sets (a crossing span is no container).
    O(S log S): sorted by start, longest first, the open containers form a stack."""
    order = sorted(range(len(bounds)), key=lambda i: (bounds[i][0], -bounds[i][1]))
    out = [0] * len(bounds)
    stack: List[Bounds] = []
    for i in order:
        while stack and not contains(stack[-1], bounds[i]):
            stack.pop()
        out[i] = len(stack)
        stack.append(bounds[i])
    return out
