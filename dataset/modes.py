"""The ways a campaign pair shares its GPU (`--pair-modes`): which of the intercept's variables each side gets and at
what percent, and the kind of sharing each mode is. Every module that knows the modes (the runner, the plan, the
tables' column dictionaries, the superseding rules, the interference analysis) asks here.

- `timeslice`: neither variable; CUDA's default time-slicing.
- `limit-A-B`: ALNAIR_COMPUTE_LIMIT, a cap: never more than A% (side a) and B% (side b) of the GPU's time.
- `share-A-B`: ALNAIR_COMPUTE_SHARE, a share: at least A% and B% while the other side wants the GPU, and whatever it
  leaves idle otherwise (work-conserving; docs/intercept.md, Limits).
"""

from __future__ import annotations

from dataclasses import dataclass

LIMIT = "ALNAIR_COMPUTE_LIMIT"
SHARE = "ALNAIR_COMPUTE_SHARE"
VARIABLES = {LIMIT: "compute_limit", SHARE: "compute_share"}  # variable -> the tables' column stem
KINDS = ("timeslice", "limit", "share")  # the kinds of sharing, in the order a pair's target modes run


@dataclass(frozen=True)
class Mode:
    name: str
    variable: str | None  # LIMIT, SHARE or None (time-slicing)
    percents: tuple[int | None, int | None]  # a's and b's

    @property
    def kind(self) -> str:
        return self.name.split("-")[0]

    def side(self, index: int) -> dict[str, int | None]:
        """The runs.csv settings of side a (0) or b (1): compute_limit_percent and compute_share_percent, the one of
        this mode's variable set and the other empty."""
        return {
            f"{stem}_percent": self.percents[index] if variable == self.variable else None
            for variable, stem in VARIABLES.items()
        }

    def pair_columns(self) -> dict[str, int | None]:
        """The pairs.csv settings: compute_limit_a, _b and compute_share_a, _b."""
        return {
            f"{stem}_{side}": self.percents[index] if variable == self.variable else None
            for variable, stem in VARIABLES.items()
            for index, side in enumerate("ab")
        }


MODES = {
    m.name: m
    for m in (
        Mode("timeslice", None, (None, None)),
        Mode("limit-50-50", LIMIT, (50, 50)),
        Mode("limit-30-70", LIMIT, (30, 70)),
        Mode("share-50-50", SHARE, (50, 50)),
        Mode("share-30-70", SHARE, (30, 70)),
    )
}
# --pair-modes' default: the modes before the share existed, so a block's plan stays what it was; ask for share-* by
# name
DEFAULT = ("timeslice", "limit-50-50", "limit-30-70")


def names() -> str:
    return ", ".join(MODES)


def kind_of(name: str) -> str:
    """timeslice, limit or share (a mode this module does not know: its name up to the first '-')."""
    return MODES[name].kind if name in MODES else name.split("-")[0]


def limited(name: str) -> bool:
    """Whether the mode's jobs run under the intercept's compute limiter (a cap or a share): a fix of the limiter
    changes their rows, never a time-sliced pair's."""
    return kind_of(name) in ("limit", "share")
