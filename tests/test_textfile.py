"""One reader and one integer parser for every importer (``multiverse_jax/textfile.py``).

Each text importer gets the same file errors (named with the path; invalid UTF-8 with the
line), the same decoding (UTF-8, a byte-order mark dropped, CRLF lines) and the same
integer syntax (digits with a sign, or an integral number such as ``1e3``).
"""

import pytest

from multiverse_jax.errors import InputError
from multiverse_jax.textfile import parse_int, read_lines
from multiverse_jax.topology.custom import load_custom
from multiverse_jax.topology.graph import from_cables
from multiverse_jax.workload import astra
from multiverse_jax.workload.flows import make_flows
from multiverse_jax.workload.goal import load_goal
from multiverse_jax.workload.htsim_cm import load_cm
from multiverse_jax.workload.intra_server import load_model
from multiverse_jax.workload.routes import load_routes

TOPO = from_cables("pair", ["h0", "h1", "s0"], 2, [(0, 2, 100.0, 1.0), (1, 2, 100.0, 1.0)])
FLOWS = make_flows([0], [1], 1000, flow_id=[5])

# importer, a valid file's text, what the importer read from it
IMPORTERS = {
    "cm": (load_cm, "Nodes 2\nConnections 1\n0->1 id 1 start 0 size 1e3\n", lambda f: int(f.size_bytes[0])),
    "astra": (
        astra.load_layers,
        "DATA\n1\nconv -1 5 NONE 0 5 NONE 0 5 ALLREDUCE 1e3 5\n",
        lambda w: w.layers[0].wg.size_bytes,
    ),
    "goal": (load_goal, "num_ranks 2\nrank 0 {\nl1: send 1000b to 1\n}\nrank 1 {\nl1: recv 1000b from 0\n}\n", lambda g: int(g.size_bytes[0])),
    "routes": (
        lambda p: load_routes(p, TOPO, FLOWS),
        "id,kind,path\n5.0,data,h0 s0 h1\n",
        lambda r: r.data_ports[0].tolist(),
    ),
    "custom": (lambda p: load_custom(p, 100.0, 1.0), "host a\nhost b\nswitch s\nlink a s\nlink b s\n", lambda t: t.n_hosts),
    "intra": (
        load_model,
        "gpu,n_gpus,collective,alpha_us,beta_gbytes_per_s\nH100,8,all_reduce,1.5,100\n",
        lambda m: len(m.rows),
    ),
}
READ = {"cm": 1000, "astra": 1000, "goal": 1000, "routes": [0, 3], "custom": 2, "intra": 1}


@pytest.mark.parametrize("kind", sorted(IMPORTERS))
def test_every_importer_reads_bom_and_crlf_files_alike(tmp_path, kind):
    load, text, read = IMPORTERS[kind]
    plain, odd = tmp_path / "plain.txt", tmp_path / "odd.txt"
    plain.write_bytes(text.encode())
    odd.write_bytes(b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode())
    assert read(load(plain)) == read(load(odd)) == READ[kind]


@pytest.mark.parametrize("kind", sorted(IMPORTERS))
def test_every_importer_names_a_missing_or_undecodable_file(tmp_path, kind):
    load, text, _ = IMPORTERS[kind]
    missing = tmp_path / "missing.txt"
    with pytest.raises(InputError, match="not found") as info:
        load(missing)
    assert str(info.value).startswith(f"{missing}: ")
    binary = tmp_path / "binary.txt"
    binary.write_bytes(text.encode() + b"\xff\xfe\n")
    with pytest.raises(InputError, match="not a text file") as info:
        load(binary)
    assert info.value.line == text.count("\n") + 1 and str(info.value).startswith(f"{binary}:")


@pytest.mark.parametrize(
    "text, value",
    [("42", 42), ("-1", -1), ("+7", 7), ("1e6", 1_000_000), ("2.5e3", 2500), ("100.0", 100), ("9223372036854775807", 2**63 - 1)],
)
def test_parse_int_accepts(text, value):
    assert parse_int(text, "size", "f.txt", 3) == value


@pytest.mark.parametrize(
    "text, minimum, message",
    [
        ("ten", None, "f.txt:3: size: expected an integer, got 'ten'"),
        ("1.5", None, "f.txt:3: size: expected an integer, got '1.5'"),
        ("1e-3", None, "f.txt:3: size: expected an integer, got '1e-3'"),
        ("nan", None, "f.txt:3: size: expected an integer, got 'nan'"),
        ("inf", None, "f.txt:3: size: expected an integer, got 'inf'"),
        ("0x10", None, "f.txt:3: size: expected an integer, got '0x10'"),
        ("0", 1, "f.txt:3: size must be > 0, got 0"),
        ("-3", 0, "f.txt:3: size must be >= 0, got -3"),
        ("9223372036854775808", None, "f.txt:3: size: 9223372036854775808 does not fit in 64 bits"),
        ("1e30", None, "f.txt:3: size: 1e30 does not fit in 64 bits"),
    ],
)
def test_parse_int_rejects_naming_file_line_and_field(text, minimum, message):
    with pytest.raises(InputError) as info:
        parse_int(text, "size", "f.txt", 3, minimum=minimum)
    assert str(info.value).startswith(message)


def test_read_lines_numbers_lines_as_editors_do(tmp_path):
    path = tmp_path / "f.txt"
    path.write_bytes(b"a\r\nb\n\nc")
    assert read_lines(path, "f") == ["a", "b", "", "c"]


def test_huge_numbers_are_rejected_without_building_them(tmp_path):
    path = tmp_path / "huge.cm"
    path.write_text("Nodes 2\nConnections 1\n0->1 id 1 start 1e999999999 size 10\n")
    with pytest.raises(InputError, match=r"huge.cm:3: start: 1e999999999 ps does not fit in 64 bits"):
        load_cm(path)
    with pytest.raises(InputError, match=r"f.txt:3: size: 1e999999999 does not fit in 64 bits"):
        parse_int("1e999999999", "size", "f.txt", 3)
