"""`import alnair.auto`: the one line that turns on the Python intercept (PyTorch hooks and publishing)."""

from alnair.intercept.activation import activate

activate()
