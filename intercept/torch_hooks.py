"""PyTorch hooks: batches from DataLoaders become steps, samples, epochs and data wait; optimizer steps are counted.

A DataLoader pass is a training loop when its first batch is asked for with autograd
enabled; passes started under torch.no_grad() or torch.inference_mode()
(evaluation) are not counted. Hooks are installed once `import torch` finishes, so
activating the intercept never imports PyTorch itself.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import operator
import sys
import time
from collections.abc import Mapping

from alnair.abi import layout

from .recorder import Recorder
from .this_process import PUBLISHER, RECORDER


def batch_size(batch) -> int:
    """The leading dimension of the batch, or of the first tensor directly inside a
    tuple, list or dict batch; a container holding no tensor counts its items."""
    kind = type(batch)
    if kind is tuple or kind is list:  # the common cases first: an ABC isinstance costs ~0.3 µs
        if batch:
            shape = getattr(batch[0], "shape", None)  # (inputs, targets): the usual batch
            if shape:
                return shape[0]
        items = batch
    elif kind is dict or isinstance(batch, Mapping):
        items = batch.values()
    else:
        shape = getattr(batch, "shape", None)
        return (shape[0] if shape else 1) if shape is not None else 1
    for item in items:
        shape = getattr(item, "shape", None)
        if shape:
            return shape[0]
    return len(batch)


def sampler_batches(iterator) -> tuple[int, int, int]:
    """(items per batch, how many batches hold that many, items in the last batch after them) when a
    map-style dataset is batched by a BatchSampler: no batch then needs sizing. Else (0, 0, 0)."""
    from torch.utils.data import BatchSampler
    from torch.utils.data.dataloader import _DatasetKind

    sampler = iterator._index_sampler
    if (
        iterator._dataset_kind != _DatasetKind.Map
        or not iterator._auto_collation
        or not isinstance(sampler, BatchSampler)
    ):
        return 0, 0, 0
    try:
        full, rest = divmod(len(sampler.sampler), sampler.batch_size)
    except TypeError:  # a sampler without a length
        return 0, 0, 0
    return sampler.batch_size, full, 0 if sampler.drop_last else rest


def timed_next(original, recorder: Recorder, grad_enabled):
    """Wraps _BaseDataLoaderIter.__next__. A training pass logs into a LoaderPass
    (recorder.py); the iterator holds it and the bound appends the loop calls per batch:
    `_alnair_times` (None: not logging) and `_alnair_sizes` (None: the sampler gives the sizes)."""
    clock = time.monotonic_ns

    def __next__(self):
        asked_at = clock()
        if self._num_yielded == 0:  # a new pass over the loader (a new or reset iterator)
            start_pass(self, recorder, grad_enabled())
        times = self._alnair_times
        if times is None:
            return original(self)
        times(asked_at)
        try:
            batch = original(self)
        except StopIteration:
            self._alnair_pass.ended_at = clock()  # after its last ask: the log is complete
            self._alnair_times = None  # asking an exhausted iterator again is not another epoch
            raise
        except BaseException:
            self._alnair_pass.times.pop()  # that ask brought no batch
            raise
        arrived_at = clock()
        if self._alnair_sizes is not None:
            self._alnair_sizes(samples_in(batch))
        times(arrived_at)
        return batch

    __next__.alnair_original = original
    return __next__


def start_pass(iterator, recorder: Recorder, training: bool) -> None:
    """Log the pass if it trains, with the items its sampler puts in each batch (`sampler_batches`)."""
    loader_pass = recorder.pass_started(iterator, *sampler_batches(iterator)) if training else None
    iterator._alnair_pass = loader_pass
    iterator._alnair_times = loader_pass.times.append if loader_pass else None
    iterator._alnair_sizes = loader_pass.sizes.append if loader_pass and loader_pass.sizes is not None else None


def samples_in(batch) -> int:
    try:
        return operator.index(batch_size(batch))
    except Exception:  # a batch we cannot size (a shape of None...) must not stop the training
        return 0


def _dataloader_worker_flag() -> int:
    from torch.utils.data import get_worker_info

    return layout.PYTHON_DATALOADER_WORKER if get_worker_info() is not None else 0


def install(recorder: Recorder = RECORDER) -> None:
    """Hook the DataLoader iterator and optimizers of the imported torch; idempotent."""
    import torch
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    if hasattr(_BaseDataLoaderIter.__next__, "alnair_original"):
        return
    # iterators already running when we arrive are left alone
    _BaseDataLoaderIter._alnair_pass = _BaseDataLoaderIter._alnair_times = _BaseDataLoaderIter._alnair_sizes = None
    _BaseDataLoaderIter.__next__ = timed_next(_BaseDataLoaderIter.__next__, recorder, torch.is_grad_enabled)
    try:
        from torch.optim.optimizer import register_optimizer_step_post_hook
    except ImportError:
        recorder.warn_once(
            "optimizer", f"torch {torch.__version__} has no optimizer step hooks; optimizer steps not counted"
        )
    else:
        register_optimizer_step_post_hook(recorder.optimizer_stepped)  # a bound method: one frame per step
    PUBLISHER.flag_sources += [lambda: layout.PYTHON_TORCH, _dataloader_worker_flag]


def install_safely() -> None:
    try:
        install()
    except Exception as e:  # a torch we do not understand: run unmeasured rather than not at all
        RECORDER.warn_once("torch", f"PyTorch hooks not installed: {e!r}")


class _CallAfterExec(importlib.abc.Loader):
    """Delegates to torch's own loader, then hooks the fully imported module."""

    def __init__(self, loader, after):
        self._loader, self._after = loader, after

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._after()

    def __getattr__(self, name):
        return getattr(self._loader, name)


class HookTorchOnImport(importlib.abc.MetaPathFinder):
    """A one-shot meta path finder: when `import torch` starts, wrap its loader."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch" or self not in sys.meta_path:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _CallAfterExec(spec.loader, install_safely)
        return spec


def install_when_imported() -> None:
    if sys.modules.get("torch") is not None:
        install_safely()
    elif not any(isinstance(f, HookTorchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, HookTorchOnImport())
