"""The restorer's dataset (``restorer/dataset.py``): pairs are cut from the packet-mode
series exactly where the docstring says, splits are by scenario, and a rerun reuses the
families already cut."""

import numpy as np
import pytest

from multiverse_jax.batch import needed_static
from multiverse_jax.restorer import dataset
from multiverse_jax.restorer.features import N_HISTORY
from multiverse_jax.restorer.train import load_dataset
from multiverse_jax.simulate import simulate

MB = 10**6


def tiny(variant: int, cc: str):
    """Two flows into host 0 (one PFC-queued downlink under cc=none), the second starting
    0.1 ms later: a lone flow, a steady pair, then a lone flow again."""
    return dataset._flows_experiment(variant, cc, [4, 8], 0, [6 * MB, 4 * MB], [0, 100_000_000])


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The dataset of five tiny variants, built twice (the second time from the saved cuts)."""
    out = tmp_path_factory.mktemp("ds") / "restorer_dataset.npz"
    lines = []
    families = dict(dataset.FAMILIES, tiny=tiny)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dataset, "FAMILIES", families)
        first = dataset.build_dataset(out, families=("tiny",), ccs=("none",), log=lines.append)
        second = dataset.build_dataset(out, families=("tiny",), ccs=("none",), log=lines.append)
    return out, first, second, lines


def test_splits_are_by_scenario_and_reruns_reuse_the_cuts(built):
    out, first, second, lines = built
    loaded = load_dataset(out)
    assert set(np.unique(loaded["split"])) == {dataset.SPLIT_TRAIN, dataset.SPLIT_VALIDATION, dataset.SPLIT_TEST}
    for scenario in np.unique(loaded["scenario"]):
        splits = np.unique(loaded["split"][loaded["scenario"] == scenario])
        assert splits.tolist() == [dataset.split_of(int(scenario))]
    assert any("reusing" in line for line in lines)
    for key in ("history", "context", "target", "split", "scenario"):
        np.testing.assert_array_equal(first[key], second[key])


def test_pairs_are_the_series_at_the_phase_ends():
    """Every pair's target is a switch port's sampled depth over its buffer, and its
    history that port's N_HISTORY samples before the phase (newest first)."""
    family = [dataset.sampled_like_hybrid(tiny(v, "none")) for v in range(dataset.N_VARIANTS)]
    experiment = family[0]
    # At the shapes of the family's batch (``built``'s program), padded to its size with done copies.
    static = needed_static(family, slots_per_host=512, n_samples=256)
    result = simulate([experiment], slots_per_host=512, steps_per_call=256, static=static, batch_size=len(family))[0]
    pairs = dataset.cut_pairs(experiment, result)
    n_ports = len(experiment.topology.link_src)
    queue = np.asarray(result.port_series["queue_bytes"]).reshape(-1, n_ports) / experiment.switch.buffer_bytes
    assert len(pairs["target"]) > 0 and pairs["history"].shape[1] == N_HISTORY
    assert np.any(pairs["target"] > 0), "the shared downlink queues under PFC"
    windows = np.lib.stride_tricks.sliding_window_view(queue, N_HISTORY, axis=0)[..., ::-1]  # (T - 7, P, 8) newest first
    for history, target in zip(pairs["history"], pairs["target"]):
        match = np.all(np.isclose(windows, history, atol=1e-7), axis=2)  # (T - 7, P)
        starts, ports = np.nonzero(match)
        assert len(starts), "each history is a port's run of samples"
        ends = np.isclose(queue[:, ports], target, atol=1e-7)
        assert np.any(ends & (np.arange(len(queue))[:, None] > starts + N_HISTORY - 1)), "its target comes later, at that port"
