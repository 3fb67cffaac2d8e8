"""Records each engine program traced: test id, Static, E, batching (into $PROGRAM_LOG_DIR)."""
import json, os, dataclasses
_current = {"test": None}
def pytest_configure(config):
    import jax
    from multiverse_jax import engine
    original = engine._advance
    def traced(params, state, n_steps, batching):
        static = params.static
        n_exp = jax.tree_util.tree_leaves(state)[0].shape[0] if jax.tree_util.tree_leaves(state)[0].ndim else 0
        row = {"test": _current["test"], "static": repr(static), "E": int(n_exp), "batching": batching}
        d = os.environ.get("PROGRAM_LOG_DIR", "/tmp/prof/out")
        os.makedirs(d, exist_ok=True)
        with open(f"{d}/{os.environ.get('PYTEST_XDIST_WORKER','main')}.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
        return original(params, state, n_steps, batching=batching)
    traced.__name__ = "_advance"; traced.__qualname__ = "_advance"
    engine._advance_compiled["cpu"] = jax.jit(traced, static_argnames=("batching",), compiler_options=engine.CPU_COMPILER_OPTIONS)
    engine._advance_compiled["accelerator"] = jax.jit(traced, static_argnames=("batching",))
import pytest
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _current["test"] = item.nodeid
    yield
