"""alnair.profiler: `alnair profile`, one row per job (process) from a Prometheus that scrapes Alnair exporters.

Its public API, for tools built on it (the dataset lab's campaign profiles each job with it), is the names below;
the modules behind them may change."""

from .columns import columns as row_columns  # the module's own name stays the module's
from .jobs import EXITS, STARTS
from .profile import job_rows
from .prometheus import ProfileError, Prometheus
from .selection import Selection

__all__ = ["EXITS", "STARTS", "ProfileError", "Prometheus", "Selection", "job_rows", "row_columns"]
