"""The settings of a fofe_ner component: their types, defaults and checks, in one place.

The component keeps them in its `cfg` (a `Cfg`, so spaCy serializes them as it does
any pipe's cfg); every edit of `cfg` is checked, so an impossible value fails where it is set.
"""

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from .decoding import ALGORITHMS

ENTS_MODES = ("overwrite", "keep", "off")


@dataclass
class Settings:
    """The settings of a fofe_ner component.

    spans_key: where the spans go (doc.spans[spans_key]); gold is read from the same key,
        or from doc.ents when a reference doc has no such group.
    max_length: n, the longest fragment scored. Longer gold spans cannot be found (counted
        and warned at initialize). None: initialize picks the smallest n that covers 99.5%
        of the training spans, at most 16, and prints it (component.COVERAGE, LONGEST).
    threshold: the lowest probability of a fragment's best label that makes it a candidate;
        label_thresholds overrides it per label.
    decoding: "nesting-aware" (all levels in one pass by descending score; a candidate
        is dropped only when it crosses a kept span) or the paper's level-by-level
        "highest-first" / "longest-first" for the outer level. On flat output
        (nested false) "nesting-aware" is "highest-first".
    nested: decode nested spans too; None decides at initialize (True when the
        training data has nested spans).
    nested_decoding, nested_threshold, max_depth: how inner levels are decoded (only
        used after a level-by-level outer level), and how many levels at most.
        nested_threshold applies to every label of the inner levels; None means the
        outer thresholds (threshold and label_thresholds).
    overlap_rate, disjoint_rate: fractions of NONE fragments trained on per batch, among
        those sharing tokens with a gold span and those that do not.
    ents: "overwrite" doc.ents with the outer level, "keep" entities already there and add
        ours only where they do not overlap, or "off".
    learn_rate_scale: this component's weights learn at this multiple of the optimizer's rate
        (a scorer trained from scratch over a fine-tuned transformer needs a larger rate than
        the transformer under it; the transformer keeps the optimizer's).
    consistency: with a weight above 0, each batch runs the model twice (other dropout and
        word dropout draws) and each pass also learns the other's probabilities at this weight
        (R-Drop, Liang et al. 2021), so a fragment scores alike whether or not its words'
        identities were dropped; training costs about twice as much, predictions nothing.
    """

    spans_key: str = "sc"
    max_length: Optional[int] = None
    threshold: float = 0.5
    label_thresholds: Dict[str, float] = field(default_factory=dict)
    decoding: str = "nesting-aware"
    nested: Optional[bool] = None
    nested_decoding: str = "nesting-aware"
    nested_threshold: Optional[float] = None
    max_depth: int = 2
    # Every fragment is scored at inference, so more NONE fragments than the paper's 0.36 / 0.09
    # keep precision up at the default threshold.
    overlap_rate: float = 1.0
    disjoint_rate: float = 0.5
    ents: str = "overwrite"
    learn_rate_scale: float = 1.0
    consistency: float = 0.0

    def check(self, name: str = "fofe_ner") -> None:
        """Raise ValueError, naming the setting, for an impossible value."""
        def fail(setting, why):
            raise ValueError(f"[{name}] invalid setting {setting}={getattr(self, setting)!r}: {why}")

        for setting in ("max_length", "max_depth"):
            value = getattr(self, setting)
            if setting == "max_length" and value is None:
                continue  # chosen from the training spans at initialize
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                fail(setting, "must be an integer >= 1" + (" or null" if setting == "max_length" else ""))
        for setting in ("threshold", "overlap_rate", "disjoint_rate"):
            if not _is_probability(getattr(self, setting)):
                fail(setting, "must be in [0, 1]")
        if self.nested_threshold is not None and not _is_probability(self.nested_threshold):
            fail("nested_threshold", "must be in [0, 1] or null")
        if not isinstance(self.label_thresholds, dict):
            fail("label_thresholds", "must be a dict of label -> threshold")
        for label, value in self.label_thresholds.items():
            if not _is_probability(value):
                fail("label_thresholds", f"threshold of {label!r} must be in [0, 1]")
        for setting in ("decoding", "nested_decoding"):
            if getattr(self, setting) not in ALGORITHMS:
                fail(setting, f"use one of {list(ALGORITHMS)}")
        if self.nested not in (None, True, False):
            fail("nested", "must be true, false or null")
        if self.ents not in ENTS_MODES:
            fail("ents", f"use one of {list(ENTS_MODES)}")
        scale = self.learn_rate_scale
        if not isinstance(scale, (int, float)) or isinstance(scale, bool) or not 0.0 < scale < float("inf"):
            fail("learn_rate_scale", "must be a number > 0")
        weight = self.consistency
        if not isinstance(weight, (int, float)) or isinstance(weight, bool) or not 0.0 <= weight < float("inf"):
            fail("consistency", "must be a number >= 0")
        if not isinstance(self.spans_key, str) or not self.spans_key:
            fail("spans_key", "must be a non-empty string")


NAMES = tuple(f.name for f in dataclasses.fields(Settings))


def _is_probability(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value <= 1.0


# What a component learns besides its Settings: its labels, and `start`, the fingerprint of the
# trained weights its training started from (spacy_fofe/training/averaging.py), None for random ones.
STATE = ("labels", "start")


class Cfg(dict):
    """A component's cfg: its STATE and Settings; every edit is checked before it is kept."""

    def __init__(self, name: str, labels=(), start: Optional[str] = None, **settings: Any):
        super().__init__(labels=list(labels), start=start, **dataclasses.asdict(Settings(**settings)))
        self.name = name
        self._check(self)

    def _check(self, values: Dict[str, Any]) -> None:
        unknown = set(values) - set(NAMES) - set(STATE)
        if unknown:
            raise ValueError(f"[{self.name}] unknown settings {sorted(unknown)}; the settings are {list(NAMES)}")
        Settings(**{key: values[key] for key in NAMES}).check(self.name)

    def __setitem__(self, key: str, value: Any) -> None:
        self._check({**self, key: value})
        super().__setitem__(key, value)

    def update(self, *args: Any, **kwargs: Any) -> None:
        new = {**self, **dict(*args, **kwargs)}
        self._check(new)
        super().update(new)

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def __reduce__(self):  # pickling (nlp.pipe with n_process > 1) rebuilds through __init__
        return (_rebuild_cfg, (self.name, dict(self)))


def _rebuild_cfg(name: str, values: Dict[str, Any]) -> "Cfg":
    return Cfg(name, **values)
