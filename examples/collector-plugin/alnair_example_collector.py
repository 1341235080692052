"""An Alnair exporter plug-in: the node's open file handles and their limit, from the kernel's
/proc/sys/fs/file-nr. Everything it uses comes from alnair.exporter.plugin."""

from __future__ import annotations

import os

from prometheus_client.core import GaugeMetricFamily

from alnair.exporter.plugin import CollectorUnavailable, add_flag


class OpenFilesCollector:
    """Registered as `files`: --collector.files turns it on, --collector.files.interval paces it."""

    help = "Open file handles on the node and the kernel's limit (fs.file-nr)."
    default_enabled = False  # a plug-in is opt-in until someone asks for it
    default_interval_seconds = 15.0

    @classmethod
    def add_arguments(cls, parser) -> None:
        add_flag(
            parser,
            "--collector.files.source",
            default="sys/fs/file-nr",
            help="The kernel's file-nr, relative to --path.procfs.",
        )

    def __init__(self, options):
        self.path = os.path.join(options.procfs, options.collector_files_source)
        if not os.path.exists(self.path):
            raise CollectorUnavailable(f"no {self.path}")

    def collect(self):
        with open(self.path) as f:
            allocated, _unused, maximum = (int(field) for field in f.read().split())
        yield GaugeMetricFamily("example_files_open", "File handles the kernel has allocated.", value=allocated)
        yield GaugeMetricFamily("example_files_max", "The kernel's limit on file handles (fs.file-max).", value=maximum)
