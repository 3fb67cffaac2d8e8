"""The compilation cache kept between runs (``compile_cache.py``, ``sim.compile_cache``):
programs written to the folder and read back, JAX's own folder standing, bad folders.
The command's own use of it is ``test_cli.test_cli_subprocess_default_job``, a sweep's
``test_sweep.test_a_sweep_with_invalid_points_finishes_the_others``."""

import jax
import jax.numpy as jnp
import pytest
from jax.experimental.compilation_cache import compilation_cache

from multiverse_jax.compile_cache import KEY, default_folder, use_compile_cache
from multiverse_jax.errors import InputError

SETTINGS = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs", "jax_compilation_cache_max_size")


@pytest.fixture
def no_cache_yet(monkeypatch):
    """This process as a fresh command finds it: no folder given to JAX (the tests share
    one, conftest); JAX's settings and cache restored after."""
    saved = {name: jax.config.values[name] for name in SETTINGS}
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    jax.config.update("jax_compilation_cache_dir", None)
    yield
    for name, value in saved.items():
        jax.config.update(name, value)
    compilation_cache.reset_cache()


def test_a_program_is_written_and_read_back(tmp_path, no_cache_yet):
    events = []
    listen = lambda name, **_: events.append(name)  # noqa: E731
    jax.monitoring.register_event_listener(listen)
    assert use_compile_cache(str(tmp_path / "xla")) == str(tmp_path / "xla")
    assert jax.config.values["jax_compilation_cache_max_size"] == -1  # no cap: see compile_cache.py
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)  # keep this small one too
    program = jax.jit(lambda x: jnp.cumsum(x * 3 + 1) - 11)  # no other test compiles it
    first = program(jnp.arange(37))
    assert any(p.name.endswith("-cache") for p in (tmp_path / "xla").iterdir())
    assert "/jax/compilation_cache/cache_hits" not in events
    jax.clear_caches()  # as a new process: nothing compiled in memory
    assert (program(jnp.arange(37)) == first).all()
    jax.monitoring.unregister_event_listener(listen)
    assert "/jax/compilation_cache/cache_hits" in events


def test_auto_is_the_users_cache_folder_and_none_is_off(tmp_path, monkeypatch, no_cache_yet):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_folder() == tmp_path / "multiverse-jax" / "xla"
    assert use_compile_cache("none") is None and jax.config.values["jax_compilation_cache_dir"] is None
    assert use_compile_cache("auto") == str(tmp_path / "multiverse-jax" / "xla")
    assert (tmp_path / "multiverse-jax" / "xla").is_dir()


def test_a_folder_given_to_jax_stands(tmp_path, monkeypatch):
    given = jax.config.values["jax_compilation_cache_dir"]  # the tests' (conftest)
    assert given
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert use_compile_cache("auto") == given and use_compile_cache("none") == given
    assert not (tmp_path / "multiverse-jax").exists()


def test_a_folder_that_cannot_be_made_names_the_key(tmp_path, monkeypatch, no_cache_yet):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(InputError, match=f"{KEY}: cannot use .*file.*auto or none"):
        use_compile_cache(str(blocker / "xla"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # auto's own folder: a warning, no cache
    with pytest.warns(UserWarning, match=f"{KEY}=auto: cannot create"):
        assert use_compile_cache("auto") is None
    assert jax.config.values["jax_compilation_cache_dir"] is None


def test_a_sweep_with_a_bad_folder_warns_and_runs_without_a_cache(tmp_path, no_cache_yet, capsys):
    from rich.console import Console

    from multiverse_jax.sweep.launcher import Point, _use_compile_cache_for

    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    _use_compile_cache_for([Point(0, [], compile_cache=str(blocker / "xla"))], Console(stderr=True))
    assert f"{KEY}: cannot use" in capsys.readouterr().err
    assert jax.config.values["jax_compilation_cache_dir"] is None
