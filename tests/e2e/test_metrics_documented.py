"""Every family the exporter serves (tests/e2e/fixtures/exposition.txt, the golden exposition) is named in full in
docs/metrics.md, as a user would grep for it: `alnair_cache_job_hits_total`, not `alnair_cache_job_*`, a brace
shorthand such as `alnair_host_memory_{total,used}_bytes`, or a suffix such as `_load5`.

The reverse, that the docs name only served families, is test_golden_exposition.py's
test_docs_name_only_metrics_the_exporter_serves; a name is recognised here as it is there (the same pattern), so
a name inside a longer one does not count (`process_start_time_seconds` in
`alnair_cuda_process_start_time_seconds`), nor one followed by `*` (a prefix).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "fixtures" / "exposition.txt"
METRICS_DOC = ROOT / "docs" / "metrics.md"

# As in test_golden_exposition.test_docs_name_only_metrics_the_exporter_serves: keep the two in step.
METRIC_NAME = re.compile(r"\b(?:alnair_|process_(?:cpu|open|max|resident|virtual|start))[a-z0-9_]*[a-z0-9]\b(?!_?\*)")


def golden_families() -> list[str]:
    """The family names of the golden exposition, as it writes them (counters with _total)."""
    return [line.split()[0] for line in GOLDEN.read_text().splitlines() if line.strip() and not line.startswith("#")]


def test_every_served_family_is_named_in_full_in_the_metrics_doc():
    families = golden_families()
    assert len(families) > 100, f"{GOLDEN} lists only {len(families)} families"
    named = set(METRIC_NAME.findall(METRICS_DOC.read_text()))
    missing = [family for family in families if family not in named]
    assert missing == [], (
        f"docs/metrics.md does not name {len(missing)} of the {len(families)} served families in "
        "full (a brace shorthand, a suffix or a prefix with * does not count):\n" + "\n".join(missing)
    )
