"""Changing the kernels' tuning overrides (the FP8DK_* environment variables, README) inside a running process.

The kernels read each override once per process, on first use, and keep it (common/tuning.h). Setting the
variable is therefore not enough once a kernel has run: :func:`tuning_overrides` also makes this variant
forget what it read, on entry and on exit.
"""

import contextlib
import os
from typing import Dict, Iterator, Optional

from ._ops import ops


@contextlib.contextmanager
def tuning_overrides(values: Dict[str, Optional[str]]) -> Iterator[None]:
    """The environment variables ``values`` set (None: unset) for the duration of the block, then restored;
    kernels launched inside the block (or captured into a CUDA graph there) run with them.

    Reloads this loaded variant only: a process that also runs another variant (e.g. CPU and CUDA) calls
    that variant's ``tuning_overrides`` too."""
    saved = {key: os.environ.get(key) for key in values}
    try:
        _apply(values)
        yield
    finally:
        _apply(saved)


def _apply(values: Dict[str, Optional[str]]) -> None:
    for key, value in values.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    ops._reload_tuning()
