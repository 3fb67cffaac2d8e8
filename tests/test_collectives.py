"""Collectives -> tasks (NCCL's algorithms) and the intra-server alpha-beta model (no simulation)."""

import re

import numpy as np
import pytest

from multiverse_jax.errors import InputError
from multiverse_jax.workload import intra_server
from multiverse_jax.workload.collectives import COLLECTIVES, MAX_FANIN, CommConfig, collective
from multiverse_jax.workload.intra_server import fit_alpha_beta, load_model
from multiverse_jax.workload.tasks import NO_STREAM, STREAM_COMM, TASK_DELAY, TASK_FLOW, TaskGraphBuilder

HOP = re.compile(r"/c(\d+)/s(\d+)/(\d+)->(\d+)$")


def expand(kind, gpus, size, cfg=CommConfig(), n_gpus=None, deps=None, **kw):
    b = TaskGraphBuilder(n_gpus or max(gpus) + 1)
    if deps is None:
        deps = {g: [b.delay(g, 1000, name=f"compute@{g}")] for g in gpus}
    ends = collective(b, kind, gpus, size, deps, cfg, **kw)
    return b.build(), ends


def flows(graph):
    t = graph.flow_tasks
    return t, graph.gpu[t], graph.peer[t], graph.size_bytes[t]


def ancestors(graph, task):
    seen, todo = set(), [task]
    while todo:
        for d in graph.deps[todo.pop()]:
            if d >= 0 and d not in seen:
                seen.add(int(d))
                todo.append(int(d))
    return seen


# ----------------------------------------------------------------------------- NCCL formulas


@pytest.mark.parametrize("n,channels", [(2, 1), (4, 1), (5, 3), (8, 2)])
def test_ring_all_reduce_counts_and_bytes(n, channels):
    size = 1_000_003  # not divisible: remainders must be exact
    g, ends = expand("all_reduce", list(range(n)), size, CommConfig(channels=channels))
    t, src, dst, nbytes = flows(g)
    assert len(t) == 2 * (n - 1) * n * channels
    assert nbytes.sum() == 2 * (n - 1) * size
    assert nbytes.min() > 0
    per_rank = np.bincount(src, weights=nbytes, minlength=n)
    np.testing.assert_allclose(per_rank, 2 * (n - 1) / n * size, atol=2 * (n - 1) * channels)
    assert np.all(dst == (src + 1) % n)  # the ring in the given order
    assert sorted(ends) == list(range(n))


@pytest.mark.parametrize("kind", ["all_gather", "reduce_scatter"])
@pytest.mark.parametrize("n,channels", [(3, 1), (4, 2), (8, 4)])
def test_all_gather_reduce_scatter_counts_and_bytes(kind, n, channels):
    size = 777_777
    g, _ = expand(kind, list(range(n)), size, CommConfig(channels=channels))
    _, src, dst, nbytes = flows(g)
    assert len(src) == (n - 1) * n * channels
    assert nbytes.sum() == (n - 1) * size
    assert np.all(dst == (src + 1) % n)


def test_all_gather_sends_each_contribution_around_the_ring():
    # Each rank's contribution (size/n) is forwarded n-1 times; rank r starts with its own chunk.
    n, size = 4, 4000
    g, _ = expand("all_gather", list(range(n)), size)
    for t in g.flow_tasks:
        assert g.size_bytes[t] == size // n


def test_all_to_all_counts_and_bytes():
    n, size = 6, 6_000_005
    g, ends = expand("all_to_all", list(range(n)), size, CommConfig(channels=4))
    t, src, dst, nbytes = flows(g)
    assert len(t) == n * (n - 1)  # one flow per ordered pair, channels do not apply
    assert len({(a, b) for a, b in zip(src, dst)}) == n * (n - 1)
    assert nbytes.sum() == (n - 1) * size
    assert set(nbytes) <= {size // n, size // n + 1}
    # every send depends only on its sender's start, so all start at once
    for task in t:
        assert all(g.kind[d] == TASK_DELAY and g.duration_ps[d] == 0 for d in g.deps[task] if d >= 0)
    # each GPU's end waits for every send from and to it
    for gpu, end in ends.items():
        anc = ancestors(g, end)
        mine = {int(x) for x, a, b in zip(t, src, dst) if gpu in (a, b)}
        assert mine <= anc


def test_broadcast_pipeline_delivers_the_buffer_to_every_rank():
    n, size = 5, 3 * 2**20 + 11
    gpus = [3, 1, 4, 0, 2]  # root 3, ring order as given
    g, ends = expand("broadcast", gpus, size, CommConfig(channels=2))
    _, src, dst, nbytes = flows(g)
    for h in range(n - 1):
        hop = (src == gpus[h]) & (dst == gpus[h + 1])
        assert nbytes[hop].sum() == size
    assert len(src) % (n - 1) == 0 and len(src) > n - 1  # chunked, pipelined
    assert nbytes.sum() == (n - 1) * size
    # the last rank's end comes after everything it receives
    last = ends[gpus[-1]]
    assert {int(t) for t in g.flow_tasks if g.peer[t] == gpus[-1]} <= ancestors(g, last)


# ----------------------------------------------------------------------------- dependencies


@pytest.mark.parametrize("kind", ["all_reduce", "all_gather", "reduce_scatter"])
def test_ring_step_dependencies(kind):
    n, channels = 4, 2
    g, ends = expand(kind, list(range(n)), 80_000, CommConfig(channels=channels), name="x")
    step = {}
    for t in g.flow_tasks:
        c, k, s, d = map(int, HOP.search(g.name[t]).groups())
        step[(c, k, s)] = int(t)
        assert d == (s + 1) % n
        assert g.stream[t] == NO_STREAM
    steps = 2 * (n - 1) if kind == "all_reduce" else n - 1
    assert len(step) == channels * steps * n
    for (c, k, r), t in step.items():
        deps = set(g.deps[t][g.deps[t] >= 0].tolist())
        if k == 0:
            (d,) = deps  # the GPU's start task
            assert g.kind[d] == TASK_DELAY and g.gpu[d] == r and g.stream[d] == STREAM_COMM
        else:
            # rank r-1's step k-1 (what r received) and r's own step k-1 (one chunk in flight), same channel
            assert deps == {step[(c, k - 1, (r - 1) % n)], step[(c, k - 1, r)]}
    for gpu, end in ends.items():
        assert g.stream[end] == STREAM_COMM and g.duration_ps[end] == 0 and g.gpu[end] == gpu
        anc = ancestors(g, end)
        for c in range(channels):
            assert step[(c, steps - 1, gpu)] in anc  # last sent
            assert step[(c, steps - 1, (gpu - 1) % n)] in anc  # last received


def test_channels_are_independent():
    g, _ = expand("all_reduce", [0, 1, 2], 30_000, CommConfig(channels=3), name="x")
    chan = {int(t): int(HOP.search(g.name[t]).group(1)) for t in g.flow_tasks}
    for t, c in chan.items():
        for d in g.deps[t]:
            if d in chan:
                assert chan[d] == c


def test_input_deps_per_gpu_and_stream_order():
    b = TaskGraphBuilder(3)
    a = b.delay(0, 10)
    c = b.delay(2, 10)
    before = b.delay(1, 5, stream=STREAM_COMM, name="earlier comm on gpu 1")
    ends = collective(b, "all_reduce", [0, 1, 2], 3000, {0: [a], 2: [c], 99: [a]})
    after = b.delay(1, 5, stream=STREAM_COMM, name="later comm on gpu 1")
    g = b.build()
    starts = {int(g.gpu[t]): int(t) for t in range(len(g)) if g.name[t].startswith("all_reduce/start")}
    assert a in g.deps[starts[0]] and c in g.deps[starts[2]]
    assert before in g.deps[starts[1]]  # the collective waits for its stream
    assert ends[1] in g.deps[after]  # and the stream waits for the collective


def test_one_gpu_and_size_zero_are_joins():
    for gpus, size in [([3], 10**6), ([0, 1, 2], 0)]:
        for kind in COLLECTIVES:
            b = TaskGraphBuilder(4)
            dep = b.delay(0, 7)
            ends = collective(b, kind, gpus, size, [dep])
            g = b.build()
            assert len(g.flow_tasks) == 0
            assert sorted(ends) == sorted(gpus)
            for e in ends.values():
                assert g.kind[e] == TASK_DELAY and g.duration_ps[e] == 0 and dep in g.deps[e]


def test_tiny_sizes_never_send_zero_bytes():
    for kind in COLLECTIVES:
        for size in (1, 3, 7):
            g, _ = expand(kind, list(range(8)), size, CommConfig(channels=4))
            nbytes = g.size_bytes[g.flow_tasks]
            assert np.all(nbytes > 0)
    g, _ = expand("all_reduce", list(range(8)), 5)
    assert g.size_bytes[g.flow_tasks].sum() == 2 * 7 * 5


def test_wide_joins_are_trees():
    g, _ = expand("all_to_all", list(range(40)), 40 * 1000, CommConfig(channels=1))
    assert g.deps.shape[1] <= MAX_FANIN + 1
    g, _ = expand("all_reduce", list(range(4)), 10**7, CommConfig(channels=32))
    assert g.deps.shape[1] <= MAX_FANIN + 1


@pytest.mark.parametrize("kind", COLLECTIVES)
@pytest.mark.parametrize(
    "cfg",
    [CommConfig(), CommConfig(channels=3), CommConfig(gpus_per_server=4, channels=2), CommConfig(gpus_per_server=4, hierarchical=False)],
)
def test_every_expansion_builds_acyclic(kind, cfg):
    for gpus in ([0, 1], [5, 2, 7, 0, 9, 11], list(range(12))):
        g, ends = expand(kind, gpus, 123_457, cfg, n_gpus=12)  # build() checks deps exist and no cycle
        assert sorted(ends) == sorted(gpus)


# ----------------------------------------------------------------------------- servers


def test_intra_server_pairs_are_delays_never_flows():
    cfg = CommConfig(gpus_per_server=2, hierarchical=False, intra="A100")
    gpus = [0, 1, 2, 3, 4, 5]  # ring 0-1 (same server), 1-2 (network), 2-3 (same), ...
    model = load_model(gpu_type="A100")
    for kind in COLLECTIVES:
        g, _ = expand(kind, gpus, 600_000, cfg)
        _, src, dst, _ = flows(g)
        assert np.all(src // 2 != dst // 2), kind
        hops = [t for t in range(len(g)) if g.kind[t] == TASK_DELAY and "->" in g.name[t]]
        assert hops, kind
        for t in hops:
            s, d = map(int, g.name[t].rsplit("/", 1)[1].split("->"))
            assert s // 2 == d // 2 and g.gpu[t] == s
    # the p2p delay is priced by the model and the receiver's next step depends on it
    g, _ = expand("all_gather", gpus, 600_000, cfg)
    hop = next(t for t in range(len(g)) if g.name[t].endswith("/c0/s0/0->1"))
    assert g.duration_ps[hop] == model.time_ps("p2p", "A100", 2, 100_000)
    nxt = next(t for t in range(len(g)) if g.name[t].endswith("/c0/s1/1->2"))
    assert hop in g.deps[nxt] and g.kind[nxt] == TASK_FLOW


@pytest.mark.parametrize("kind", COLLECTIVES)
def test_single_server_collective_is_analytical(kind):
    model = load_model(gpu_type="H100")
    cfg = CommConfig(gpus_per_server=8, channels=4)
    gpus = [8, 9, 10, 11, 12, 13]
    g, ends = expand(kind, gpus, 50_000_000, cfg)
    assert len(g.flow_tasks) == 0
    expected = model.time_ps(kind, "H100", 6, 50_000_000)  # nearest n: 6 -> 8 (tie with 4 takes the larger)
    assert expected == model.row(kind, "H100", 8).time_ps(50_000_000)
    starts = {int(t) for t in range(len(g)) if "/start@" in g.name[t]}
    for gpu, e in ends.items():
        assert g.duration_ps[e] == expected and g.gpu[e] == gpu and g.stream[e] == STREAM_COMM
        assert starts <= ancestors(g, e)  # synchronous: after every GPU started


def test_hierarchical_all_reduce_rails():
    s, servers, size, channels = 4, 3, 12_000_010, 2
    model = load_model(gpu_type="H100")
    cfg = CommConfig(gpus_per_server=s, channels=channels, intra=model)
    gpus = list(range(s * servers))
    g, ends = expand("all_reduce", gpus, size, cfg)
    t, src, dst, nbytes = flows(g)
    assert np.all(src % s == dst % s) and np.all(src // s != dst // s)  # rails only, between servers
    for i in range(s):
        rail = src % s == i
        assert rail.sum() == 2 * (servers - 1) * servers * channels  # a ring all-reduce among `servers` GPUs
        share = size // s + (1 if i < size % s else 0)
        assert nbytes[rail].sum() == 2 * (servers - 1) * share
        assert np.all(dst[rail] == (src[rail] + s) % (s * servers))
    rs = model.time_ps("reduce_scatter", "H100", s, size)
    ag = model.time_ps("all_gather", "H100", s, size)
    is_rs = np.array(["/intra_rs/" in x for x in g.name])
    is_ag = np.array(["/intra_ag/" in x for x in g.name])
    for gpu in gpus:
        (k_rs,) = np.flatnonzero(is_rs & (g.gpu == gpu) & (g.duration_ps > 0))
        (k_ag,) = np.flatnonzero(is_ag & (g.gpu == gpu) & (g.duration_ps > 0))
        assert g.duration_ps[k_rs] == rs and g.duration_ps[k_ag] == ag
        assert k_ag in ancestors(g, ends[gpu])
    # rail flows come after the intra-server reduce-scatter of their sender and before any all-gather
    for task in t:
        anc = ancestors(g, task)
        assert any(is_rs[a] and g.gpu[a] == g.gpu[task] for a in anc)
        assert not any(is_ag[a] for a in anc)


def test_hierarchical_falls_back_to_flat_ring():
    cfg = CommConfig(gpus_per_server=4, channels=1)
    # uneven: 3 GPUs in server 0, 1 in server 1 -> flat ring (some hops are intra-server delays)
    g, _ = expand("all_reduce", [0, 1, 2, 4], 40_000, cfg)
    assert len(g.flow_tasks) == 2 * 3 * 2  # steps 2(n-1), two of the four ring hops cross servers
    # switched off
    g, _ = expand("all_reduce", list(range(8)), 40_000, CommConfig(gpus_per_server=4, hierarchical=False))
    _, src, dst, _ = flows(g)
    assert set(zip(src.tolist(), dst.tolist())) == {(3, 4), (7, 0)}
    # one GPU per server: a flat ring of flows
    g, _ = expand("all_reduce", [0, 4, 8], 30_000, CommConfig(gpus_per_server=4))
    assert len(g.flow_tasks) == 2 * 2 * 3


# ----------------------------------------------------------------------------- errors


def test_errors():
    b = TaskGraphBuilder(4, source="job.txt")
    with pytest.raises(InputError, match=r"job.txt:12: .*unknown kind 'allreduce'.*all_reduce, all_gather"):
        collective(b, "allreduce", [0, 1], 10, [], line=12)
    with pytest.raises(InputError, match=r"job.txt: .*GPU\(s\) \[1\] appear more than once"):
        collective(b, "all_reduce", [0, 1, 1], 10, [])
    with pytest.raises(InputError, match=r"size must be >= 0"):
        collective(b, "all_gather", [0, 1], -5, [], line=3)
    with pytest.raises(InputError, match=r"do not exist"):
        collective(b, "all_gather", [0, 9], 5, [])
    with pytest.raises(InputError, match=r"CommConfig.intra"):
        collective(b, "all_gather", [0, 1], 5, [], CommConfig(gpus_per_server=2, intra=3.0))


# ----------------------------------------------------------------------------- the model


def test_model_time_and_nearest_n():
    m = load_model()
    assert m.gpu_type == "H100" and set(m.gpu_types) == {"A100", "H100"}
    for gpu in ("A100", "H100"):
        for kind in intra_server.KINDS:
            for n in (2, 4, 8):
                r = m.row(kind, gpu, n)
                assert r.n_gpus == n and r.source
                size = 123_456_789
                assert m.time_ps(kind, gpu, n, size) == round(r.alpha_us * 1e6) + round(size / (r.beta_gbytes_per_s * 1e9) * 1e12)
    assert m.row("all_reduce", "a100", 3).n_gpus == 4  # tie -> larger
    assert m.row("all_reduce", "A100", 5).n_gpus == 4
    assert m.row("all_reduce", "A100", 16).n_gpus == 8
    assert m.row("all_reduce", "A100", 1).n_gpus == 2
    # NCCL's bus-bandwidth factors: all_reduce busbw = algbw * 2(n-1)/n is the same for every n
    busbw = {n: m.row("all_reduce", "A100", n).beta_gbytes_per_s * 2 * (n - 1) / n for n in (2, 4, 8)}
    assert max(busbw.values()) - min(busbw.values()) < 0.1
    with pytest.raises(InputError, match="unknown GPU type"):
        m.time_ps("all_reduce", "V100", 8, 1)
    with pytest.raises(InputError, match="unknown collective"):
        m.time_ps("gather", "H100", 8, 1)
    assert 1.0 <= intra_server.compute_slowdown("A100") <= 1.1 and 1.0 <= intra_server.compute_slowdown("h100") <= 1.1
    assert intra_server.compute_slowdown("X", {"X": 1.3}) == 1.3


def test_fit_alpha_beta():
    sizes = np.array([1e6, 4e6, 16e6, 64e6, 256e6])
    alpha, beta = 35.0, 180.0  # us, GB/s
    times = alpha + sizes / (beta * 1e3)  # bytes / (GB/s) = 1e-9 s = 1e-3 us
    fit = fit_alpha_beta(sizes, times)
    assert fit.alpha_us == pytest.approx(alpha, rel=1e-9) and fit.beta_gbytes_per_s == pytest.approx(beta, rel=1e-9)
    assert fit.rms_residual_us == pytest.approx(0, abs=1e-6)
    rng = np.random.default_rng(0)
    sizes = np.geomspace(1e6, 1e9, 40)
    noisy = (alpha + sizes / (beta * 1e3)) * (1 + 0.01 * rng.standard_normal(sizes.size))
    fit = fit_alpha_beta(sizes, noisy)
    assert fit.beta_gbytes_per_s == pytest.approx(beta, rel=0.02)
    assert fit.alpha_us == pytest.approx(alpha, abs=10)
    with pytest.raises(InputError, match="2 distinct sizes"):
        fit_alpha_beta([1e6, 1e6], [10, 11])
    with pytest.raises(InputError, match="beta would be <= 0"):
        fit_alpha_beta([1e6, 2e6, 3e6], [30, 20, 10])


def test_calibrate_command(tmp_path, capsys):
    pts = tmp_path / "points.csv"
    sizes = [2**20, 2**24, 2**28]
    pts.write_text("size_bytes,time_us\n# nccl-tests, 8 GPUs\n" + "".join(f"{s},{40 + s / 200e3}\n" for s in sizes))
    out = tmp_path / "model.csv"
    argv = [str(pts), "--gpu", "H100", "--n-gpus", "8", "--collective", "all_reduce", "--out", str(out)]
    assert intra_server.main(argv) == 0
    text = capsys.readouterr().out
    assert "alpha = 40 us" in text and "beta = 200 GB/s" in text and "residual" in text
    m = load_model(out)
    r = m.row("all_reduce", "H100", 8)
    assert r.alpha_us == pytest.approx(40) and r.beta_gbytes_per_s == pytest.approx(200) and "calibrated" in r.source
    assert len(m.rows) == len(load_model().rows)  # replaced, not appended
    # a new row is appended (to --out itself, which now exists)
    assert intra_server.main([str(pts), "--gpu", "B200", "--n-gpus", "8", "--collective", "all_reduce", "--out", str(out)]) == 0
    m = load_model(out, gpu_type="B200")
    assert len(m.rows) == len(load_model().rows) + 1
    assert m.time_ps("all_reduce", None, 8, 0) == 40 * 10**6
    # a malformed line names file:line
    pts.write_text("size_bytes,time_us\n1000,5\n2000,oops\n")
    assert intra_server.main([str(pts), "--gpu", "H100", "--n-gpus", "8", "--collective", "all_reduce"]) == 2
    assert f"{pts}:3:" in capsys.readouterr().err
    bad = tmp_path / "bad_model.csv"
    bad.write_text("gpu,n_gpus,collective,alpha_us,beta_gbytes_per_s,source\nH100,8,all_reduce,10,-1,x\n")
    with pytest.raises(InputError, match=rf"{re.escape(str(bad))}:2: beta_gbytes_per_s must be > 0"):
        load_model(bad)
