"""The tagged JSON codec that carries values between the sandboxes (`graft.sandbox.values`): every
built-in value a test compares comes back with its type (tuples stay tuples, lists lists, ints
exact, nan and inf floats, sets, dicts with any keys, bytes, complex), anything else is refused
by name, and decoding builds nothing but built-in values."""

import collections
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from graft.sandbox.values import Unencodable, decode, encode

SAME = [
    None, True, False, 0, -7, 2**63, -(2**63), 3**400, 10**5000, 1.5, -0.0, 1e308, "", "é\n",
    [], (), [1, (2, [3, (4,)])], ((1, 2), [3, 4]), {1: "a", (1, 2): [3], None: {4}, "k": ()},
    {2, 3}, frozenset({(1, 2)}), set(), b"\x00\xff", bytearray(b"ab"), 3 + 4j, range(1, 9, 2),
    {frozenset({1}): 2.5, 1.5: -1, True: None},
]  # fmt: skip


@pytest.mark.parametrize("value", SAME, ids=[f"{type(v).__name__}-{i}" for i, v in enumerate(SAME)])
def test_a_value_comes_back_with_its_type_at_every_depth(value):
    back = decode(encode(value))
    assert back == value and type(back) is type(value)
    if isinstance(value, list | tuple):
        assert [type(x) for x in back] == [type(x) for x in value]
    if isinstance(value, dict):
        assert [(type(k), type(v)) for k, v in back.items()] == [
            (type(k), type(v)) for k, v in value.items()
        ]
    assert "\n" not in encode(value)


def test_floats_that_json_cannot_write_and_subclasses_as_their_base_type():
    nan, inf, ninf = (decode(encode(x)) for x in (math.nan, math.inf, -math.inf))
    assert math.isnan(nan) and inf == math.inf and ninf == -math.inf
    assert json.loads(encode([math.nan])) is not None  # strict JSON: no NaN literal
    assert math.isnan(decode(encode(complex(math.nan, 1))).real)
    point = collections.namedtuple("Point", "x y")(1, 2)
    assert type(decode(encode(point))) is tuple and decode(encode(point)) == (1, 2)
    counts = collections.Counter("aab")
    assert type(decode(encode(counts))) is dict and decode(encode(counts)) == {"a": 2, "b": 1}
    assert list(decode(encode(x * 2 for x in range(3)))) == [0, 2, 4]  # an iterator, read out


@pytest.mark.parametrize(
    ("value", "name"),
    [(object(), "object"), (lambda: 0, "function"), ([1, print], "builtin_function_or_method")],
)
def test_a_value_with_no_tagged_form_is_refused_by_its_type(value, name):
    with pytest.raises(Unencodable, match=name):
        encode(value)


def test_a_cycle_or_deep_nesting_is_refused_not_a_crash():
    cycle: list = []
    cycle.append(cycle)
    with pytest.raises(Unencodable, match="nested too deep"):
        encode(cycle)


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1}',  # a bare object: dicts are always tagged
        '{"~": "module", "v": "os"}',
        '{"~": "set", "v": [[1]]}',  # an unhashable member
        '{"~": "int", "v": 5}',
        '{"~": "bytes", "v": "not base64!"}',
        '{"~": "dict", "v": [[1]]}',
        "[" * 100_000 + "]" * 100_000,
        "NaN",
    ],
)
def test_decoding_refuses_anything_encode_would_not_write(text):
    with pytest.raises(ValueError):
        decode(text)


def test_the_codec_runs_alone_as_the_sandboxed_scripts_load_it(tmp_path):
    """The scripts `exec` the file with `python -I -S`: standard library only, graft absent."""
    source = Path(__file__).parents[1] / "src" / "graft" / "sandbox" / "values.py"
    probe = (
        "space = {'__name__': 'values'}\n"
        f"exec(compile(open({str(source)!r}).read(), 'values.py', 'exec'), space)\n"
        "import sys\nassert 'graft' not in sys.modules\n"
        "print(space['encode']({(1, 2): [3, (4,)]}))\n"
    )
    out = subprocess.run([sys.executable, "-I", "-S", "-B", "-c", probe], capture_output=True,
                         text=True, cwd=tmp_path, check=True).stdout  # fmt: skip
    assert decode(out) == {(1, 2): [3, (4,)]}
