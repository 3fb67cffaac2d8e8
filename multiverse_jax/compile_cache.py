"""Compiled programs kept on disk between runs: JAX's persistent compilation cache.

A design point's program takes 10-80 s to compile on a CPU (one per set of shapes,
``batch._static_of``), often longer than the simulation itself; running the same shapes
again (another seed, another buffer size, a resumed sweep, the quick start a second
time) compiles the same program. With the cache on, the second process reads it back
instead (the quick start: 12 s -> 4.5 s). JAX keys an entry by the program, its compile
options, the backend and the JAX version, so it never returns another program; results
are the same bits either way.

``sim.compile_cache`` chooses the folder: ``auto`` (``$XDG_CACHE_HOME/multiverse-jax/xla``,
or ``~/.cache/multiverse-jax/xla``), ``none`` (off), or a folder. JAX's own setting
(``JAX_COMPILATION_CACHE_DIR``, or ``jax_compilation_cache_dir`` set before) stands. Only
programs that took at least a second to compile are kept (JAX's
``jax_persistent_cache_min_compile_time_secs``): the folder grows by one program per new
set of shapes (a k=8 sweep point's is 4.3 MB, the quick start's 0.7 MB); delete it to
clear it. It is not capped here: JAX's cap (``jax_compilation_cache_max_size``) keeps an
access time beside each program, and a folder holding a program written without one (by a
process with no cap) then fails every write, silently. A user who sets the cap (its
environment variable) caps it in every process alike. The cache is trusted: a folder others can write to lets them run code in your process (JAX's
warning), so keep it in your own home.

The commands (``multiverse-jax`` and its sweeps) turn it on; the Python API calls
``use_compile_cache`` itself.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from multiverse_jax.errors import InputError

KEY = "sim.compile_cache"


def default_folder() -> Path:
    """``$XDG_CACHE_HOME/multiverse-jax/xla``, or ``~/.cache/multiverse-jax/xla``."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "multiverse-jax" / "xla"


def use_compile_cache(setting: str = "auto", key: str = KEY) -> str | None:
    """Turn JAX's persistent compilation cache on in ``setting``'s folder (``auto``:
    ``default_folder()``; ``none``: leave it off; else a folder, created if missing).
    A folder JAX was already given stands. Returns the folder in use, or None.

    Call it before the first program compiles or after: JAX's cache is reset to read the
    new folder. A folder that cannot be made is an ``InputError`` naming ``key`` (the setting's name);
    where ``auto``'s cannot (a read-only home), a warning, and the run goes on without it.
    """
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    given = jax.config.values.get("jax_compilation_cache_dir")
    if given:  # the user's own (JAX_COMPILATION_CACHE_DIR), or one set earlier in this process
        return given
    if setting == "none":
        return None
    folder = default_folder() if setting == "auto" else Path(setting).expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        if setting != "auto":
            raise InputError(f"{key}: cannot use {str(folder)!r} as a folder ({exc.strerror}); give a folder you can write, auto or none") from None
        warnings.warn(f"{key}=auto: cannot create {folder} ({exc.strerror}); compiling without a cache (set {key} to a folder)", stacklevel=2)
        return None
    compilation_cache.set_cache_dir(str(folder))
    compilation_cache.reset_cache()  # a program compiled before this found no folder: read it again
    os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(folder))  # processes started from here (Ray's workers)
    return str(folder)
