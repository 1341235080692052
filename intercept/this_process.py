"""This process's one recorder and one publisher, wired together: the first recorded event starts
publishing, a fork child starts over, and a clean exit publishes once more and removes the segment."""

from __future__ import annotations

import atexit
import os

from .publisher import Publisher
from .recorder import Recorder

RECORDER = Recorder()
PUBLISHER = Publisher(RECORDER)
RECORDER.start_publishing = PUBLISHER.start
os.register_at_fork(after_in_child=PUBLISHER.after_fork_in_child)
atexit.register(PUBLISHER.stop)
