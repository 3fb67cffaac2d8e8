"""Congestion-control config: conf/config.yaml <-> the schema's cc groups <-> Experiment, and errors."""

import dataclasses
import enum

import numpy as np
import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from conftest import run_cli
from multiverse_jax.cli import run
from multiverse_jax.conf.schema import CcKind, Config, DcqcnConfig, DctcpConfig, HpccConfig, SwitchConfig, TimelyConfig
from multiverse_jax.config import CONFIG_PATH, experiment_from_config, load_config, resolve_config
from multiverse_jax.errors import InputError
from multiverse_jax.experiment import Experiment

# (config group, dataclass, Experiment field)
GROUPS = [
    ("dcqcn", DcqcnConfig, "dcqcn"),
    ("dctcp", DctcpConfig, "dctcp"),
    ("hpcc", HpccConfig, "hpcc"),
    ("timely", TimelyConfig, "timely"),
    ("switch", SwitchConfig, "switch"),
]
IDS = [g[0] for g in GROUPS]
CC_KINDS = [kind.value for kind in CcKind]


def shipped() -> dict:
    """The default config as Hydra composes it from the shipped tree."""
    cfg = OmegaConf.to_container(config(), resolve=False, enum_to_str=True)
    assert cfg == OmegaConf.to_container(OmegaConf.structured(Config), enum_to_str=True)
    return cfg


def config(*overrides):
    with initialize_config_module("multiverse_jax.conf", version_base=None):
        return compose("config", overrides=list(overrides))


@pytest.mark.parametrize("group, cls, _", GROUPS, ids=IDS)
def test_yaml_keys_map_one_to_one_to_dataclass_fields(group, cls, _):
    keys = set(shipped()[group])
    fields = {f.name for f in dataclasses.fields(cls)}
    assert keys - fields == set(), f"{group}: keys with no dataclass field"
    assert fields - keys == set(), f"{group}: dataclass fields missing from config.yaml"


@pytest.mark.parametrize("group, cls, _", GROUPS, ids=IDS)
def test_yaml_defaults_equal_dataclass_defaults(group, cls, _):
    section = shipped()[group]
    for field in dataclasses.fields(cls):
        value = section[field.name]
        default = field.default.value if isinstance(field.default, enum.Enum) else field.default  # a choice by name
        assert value == default, f"{group}.{field.name}"
        assert type(value) is type(default), f"{group}.{field.name}: {value!r} vs {default!r}"


def test_cc_default_and_group_options():
    assert shipped()["cc"] == Experiment.__dataclass_fields__["cc"].default == "none"
    options = {p.stem for p in (CONFIG_PATH.parent / "cc").glob("*.yaml")}
    assert options == set(CC_KINDS)
    for kind in CC_KINDS:
        assert config(f"cc={kind}").cc == kind


def test_default_experiment_has_default_cc_params():
    exp = experiment_from_config({})
    assert exp.cc == "none"
    for _, cls, attr in GROUPS:
        assert getattr(exp, attr) == cls()


def test_overrides_reach_the_experiment():
    exp = experiment_from_config(
        {
            "cc": "hpcc",
            "hpcc": {"eta": 0.9, "base_rtt_us": 12.5},
            "dcqcn": {"g": 0.5, "byte_counter_bytes": 2_000_000},
            "dctcp": {"init_window_packets": 20},
            "timely": {"t_low_us": 10, "t_high_us": 100, "hai_after": 3},
            "switch": {"ecn_kmin_bytes": 1000, "ecn_kmax_bytes": 1000, "ecn_pmax": 1},
        }
    )
    assert exp.cc == "hpcc"
    assert exp.hpcc == HpccConfig(eta=0.9, base_rtt_us=12.5)
    assert exp.dcqcn == DcqcnConfig(g=0.5, byte_counter_bytes=2_000_000)
    assert type(exp.dcqcn.byte_counter_bytes) is int
    assert exp.dctcp == DctcpConfig(init_window_packets=20.0)
    assert exp.timely == TimelyConfig(t_low_us=10.0, t_high_us=100.0, hai_after=3)
    assert exp.switch == SwitchConfig(ecn_kmin_bytes=1000, ecn_kmax_bytes=1000, ecn_pmax=1.0)
    assert type(exp.switch.ecn_pmax) is float and type(exp.timely.t_low_us) is float


def test_numpy_scalars_accepted():
    exp = experiment_from_config({"hpcc": {"eta": np.float32(0.5), "max_stage": np.int64(2)}})
    assert exp.hpcc.eta == 0.5 and type(exp.hpcc.eta) is float
    assert exp.hpcc.max_stage == 2 and type(exp.hpcc.max_stage) is int


@pytest.mark.parametrize("cc", list(CC_KINDS))
def test_every_cc_kind_accepted(cc):
    assert experiment_from_config({"cc": cc}).cc == cc


def test_hydra_overrides_reach_the_experiment():
    cfg = config("cc=dcqcn", "dcqcn.g=0.125", "hpcc.base_rtt_us=8", "switch.ecn_kmax_bytes=100000", "timely.beta=0.5")
    exp = experiment_from_config(cfg)
    assert exp.cc == "dcqcn" and exp.dcqcn.g == 0.125 and exp.hpcc.base_rtt_us == 8.0
    assert exp.switch.ecn_kmax_bytes == 100_000 and exp.timely.beta == 0.5


BAD = [
    ({"switch": {"ecn_kmin_bytes": 500_000}}, r"switch\.ecn_kmin_bytes \(500000\) must not exceed switch\.ecn_kmax_b"),
    ({"switch": {"ecn_kmin_bytes": 10, "ecn_kmax_bytes": 5}}, r"ecn_kmin_bytes \(10\).*switch\.ecn_kmax_bytes \(5\)"),
    ({"switch": {"ecn_pmax": 1.5}}, r"switch\.ecn_pmax must be .*<= 1, got 1\.5"),
    ({"switch": {"ecn_kmin_bytes": -1}}, r"switch\.ecn_kmin_bytes must be an integer >= 0, got -1"),
    ({"hpcc": {"eta": 0}}, r"hpcc\.eta must be a finite number > 0 and <= 1, got 0"),
    ({"hpcc": {"eta": 1.5}}, r"hpcc\.eta must be a finite number > 0 and <= 1, got 1\.5"),
    ({"hpcc": {"base_rtt_us": 0}}, r"hpcc\.base_rtt_us must be a finite number > 0, got 0"),
    ({"hpcc": {"max_stage": 2.5}}, r"hpcc\.max_stage must be an integer, got 2\.5"),
    ({"dcqcn": {"g": -0.1}}, r"dcqcn\.g must be a finite number > 0 and <= 1, got -0\.1"),
    ({"dcqcn": {"g": -1}}, r"dcqcn\.g must be a finite number > 0 and <= 1, got -1\.0$"),
    ({"dctcp": {"g": -1}}, r"dctcp\.g must be a finite number > 0 and <= 1, got -1"),
    ({"dctcp": {"min_window_packets": 20}}, r"dctcp\.min_window_packets \(20\.0\) must not exceed dctcp\.init_window"),
    ({"timely": {"t_low_us": 500}}, r"timely\.t_low_us \(500\.0\) must be below timely\.t_high_us \(500\.0\)"),
    ({"timely": {"t_low_us": 600, "t_high_us": 100}}, r"t_low_us \(600\.0\) must be below timely\.t_high_us \(100\.0\)"),
    ({"timely": {"min_rtt_us": float("inf")}}, r"timely\.min_rtt_us must be a finite number > 0, got inf"),
    # wrong types (the schema's, as on the command line): key-naming InputError, never a TypeError
    ({"dcqcn": {"g": "fast"}}, r"dcqcn\.g must be a number, got 'fast'"),
    ({"dcqcn": {"g": True}}, r"dcqcn\.g must be a number, got True"),
    ({"dcqcn": {"byte_counter_bytes": 2.5e6}}, r"dcqcn\.byte_counter_bytes must be an integer, got 2500000\.0"),
    ({"dctcp": {"init_window_packets": "ten"}}, r"dctcp\.init_window_packets must be a number, got 'ten'"),
    ({"dctcp": {"min_window_packets": None}}, r"dctcp\.min_window_packets must be a number, got None"),
    ({"hpcc": {"max_stage": False}}, r"hpcc\.max_stage must be an integer, got False"),
    ({"hpcc": {"base_rtt_us": "auto"}}, r"hpcc\.base_rtt_us must be a number or null, got 'auto'"),
    ({"timely": {"t_low_us": "fifty", "t_high_us": 10}}, r"timely\.t_low_us must be a number, got 'fifty'"),
    ({"timely": {"alpha": [0.5]}}, r"timely\.alpha must be a number, got \[0\.5\]"),
    ({"switch": {"ecn_kmax_bytes": "200KB"}}, r"switch\.ecn_kmax_bytes must be an integer, got '200KB"),
    ({"hpcc": 0.9}, r"hpcc must be a group of keys \(eta, max_stage"),
]


@pytest.mark.parametrize("cfg, match", BAD)
def test_bad_values_name_their_key(cfg, match):
    with pytest.raises(InputError, match=match):
        experiment_from_config(cfg)


def test_groups_are_checked_whatever_cc_is():
    with pytest.raises(InputError, match=r"dcqcn\.g"):
        experiment_from_config({"cc": "none", "dcqcn": {"g": -0.1}})


@pytest.mark.parametrize("cc", ["reno", "DCQCN", "", None, 1, ["hpcc"], {"kind": "hpcc"}])
def test_unknown_cc_lists_valid_values(cc):
    with pytest.raises(InputError) as info:
        experiment_from_config({"cc": cc})
    message = str(info.value)
    assert message.startswith("cc must be one of ")
    assert "none, dcqcn, dctcp, hpcc, timely" in message and repr(cc) in message


@pytest.mark.parametrize(
    "cfg, bad, valid",
    [
        ({"dcqcn": {"gain": 0.1}}, "dcqcn.gain", "dcqcn.g, dcqcn.alpha_timer_us"),
        ({"hpcc": {"target": 0.9}}, "hpcc.target", "hpcc.eta, hpcc.max_stage"),
        ({"timely": {"t_low": 10}}, "timely.t_low", "timely.t_low_us, timely.t_high_us"),
        ({"dctcp": {"K": 10}}, "dctcp.K", "dctcp.g, dctcp.init_window_packets, dctcp.min_window_packets"),
        ({"switch": {"ecn_kmin": 10}}, "switch.ecn_kmin", "switch.ecn_kmin_bytes, switch.ecn_kmax_bytes"),
        ({"ecn": {"kmin_bytes": 10}}, "ecn", "dcqcn, dctcp, hpcc, timely"),
    ],
)
def test_unknown_key_in_a_group_names_it_and_lists_valid_keys(cfg, bad, valid):
    with pytest.raises(InputError) as info:
        experiment_from_config(cfg)
    message = str(info.value)
    assert f"unknown config key {bad!r}" in message and valid in message


@pytest.mark.parametrize(
    "overrides, needle",
    [
        (["switch.ecn_kmin_bytes=500000"], "switch.ecn_kmin_bytes (500000) must not exceed switch.ecn_kmax_bytes"),
        (["hpcc.eta=1.5"], "hpcc.eta must be a finite number > 0 and <= 1, got 1.5"),
        (["dcqcn.g=-0.1"], "dcqcn.g must be a finite number > 0 and <= 1, got -0.1"),
        (["timely.t_low_us=600"], "timely.t_low_us (600.0) must be below timely.t_high_us (500.0)"),
        (["+dcqcn.gain=0.1"], "unknown config key 'dcqcn.gain' (valid keys: dcqcn.g,"),
    ],
)
def test_cli_bad_values_exit_2(tmp_path, capsys, overrides, needle):
    assert run(config(*overrides), tmp_path) == 2
    err = capsys.readouterr().err
    assert needle in " ".join(err.split()) and "Traceback" not in err
    assert not (tmp_path / "fct.csv").exists()


@pytest.mark.parametrize(
    "override, needles",
    [
        ("dctcp.g=fast", ["could not be converted to Float", "full_key: dctcp.g"]),
        ("cc=reno", ["Could not find 'cc/reno'", "dcqcn", "timely"]),
        ("switch.bufer_bytes=1", ["Key 'bufer_bytes' not in 'SwitchConfig'"]),
        ("topology.k=four", ["could not be converted to Integer", "full_key: topology.k"]),
    ],
)
def test_schema_rejects_wrong_types_keys_and_options_when_composing(override, needles):
    """The structured schema (conf/schema.py) catches these before any of our code runs."""
    with pytest.raises(Exception) as info:
        config(override)
    message = f"{info.value} {info.value.__cause__}"
    for needle in needles:
        assert needle in message


def test_cli_bad_cc_param_exits_2(tmp_path, capsys):
    assert run_cli("cc=hpcc", "hpcc.eta=0", f"hydra.run.dir={tmp_path / 'run'}") == 2
    err = capsys.readouterr().err
    assert "hpcc.eta must be a finite number > 0 and <= 1, got 0" in err and "Traceback" not in err


def test_hpcc_constants_as_htsim_sets_them():
    """htsim's HPCC (base RTT 12 us, W_AI one 9000 B MTU, initial window B x T = 150 KB) is
    expressible: hpcc.base_rtt_us, hpcc.w_ai_bytes, hpcc.init_window_bytes reach the engine."""
    from multiverse_jax.batch import build_batch

    htsim = {"cc": "hpcc", "hpcc": {"base_rtt_us": 12.0, "w_ai_bytes": 9000, "init_window_bytes": 150_000}}
    batch = build_batch([experiment_from_config(htsim), experiment_from_config({"cc": "hpcc", "hpcc": {"base_rtt_us": 12.0}})])
    cc, state = batch.params.cc, batch.state.cc
    assert int(cc.hpcc_base_rtt_ps[0]) == 12_000_000
    assert float(cc.hpcc_w_ai_bytes[0]) == 9000.0
    assert float(cc.hpcc_w_ai_bytes[1]) == 40e6 * 12e-6 / 8  # default: rate_ai_mbps x T
    assert float(state.flow_window_bytes[0, 0]) == 150_000.0 == float(state.hpcc.flow_ref_window_bytes[0, 0])
    assert float(state.flow_window_bytes[1, 0]) == 100e9 * 12e-6 / 8  # default: line rate x T, also 150 KB
    with pytest.raises(InputError, match=r"hpcc\.w_ai_bytes must be a finite number > 0, got 0"):
        experiment_from_config({"hpcc": {"w_ai_bytes": 0}})


@pytest.mark.parametrize(
    "overrides",
    [
        (),
        ("cc=hpcc", "switch.pipeline=serial", "topology.links_down=[agg0-core0,agg1-core1]", "sim.mode=hybrid"),
        ("cc=dcqcn", "packet.ack_class=data", "sim.batching=vmap", "workload.kind=incast"),
    ],
)
def test_resolved_config_is_omegaconfs_container(overrides):
    """``resolve_config`` walks the loaded dataclasses; it gives what OmegaConf's container of
    the structured config gives (choices as names, lists, field order, value types)."""
    cfg = config(*overrides)
    expected = OmegaConf.to_container(OmegaConf.structured(load_config(cfg)), enum_to_str=True)
    resolved = resolve_config(cfg)
    assert resolved == expected and repr(resolved) == repr(expected)
    assert list(resolved) == list(expected)
