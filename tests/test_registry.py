"""The registry is the one table: every list of functions or backends derives from it, and
every table keyed by function name anywhere covers every row."""
import ast
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

import fastmath
from fastmath.dispatch import _config
from fastmath import _registry, backends, special
from fastmath import foreach
from fastmath._registry import BY_NAME, ROWS

ROOT = Path(__file__).resolve().parent.parent
NAMES = set(BY_NAME)
KINDS = {row.kind for row in ROWS}  # "logsumexp" and "softmax" are kinds as well as names


def _name_keyed_dicts():
    """(file, line, keys) of every dict literal in fastmath/ and bench/ with two or more
    keys that are registry names: a table keyed by function name (not one keyed by kind)."""
    files = sorted((ROOT / "fastmath").rglob("*.py")) + sorted((ROOT / "bench").glob("*.py"))
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Dict):
                keys = {k.value for k in node.keys
                        if isinstance(k, ast.Constant) and isinstance(k.value, str)}
                if len(keys & NAMES) >= 2 and not keys <= KINDS:
                    yield path.relative_to(ROOT), node.lineno, keys


def test_every_table_keyed_by_function_name_has_every_row():
    found = list(_name_keyed_dicts())
    assert found, "the accuracy report's table of true values is one such table"
    for path, line, keys in found:
        assert not NAMES - keys, f"{path}:{line} misses {sorted(NAMES - keys)}"


def test_the_calibration_defaults_have_every_row():
    table = json.loads((ROOT / "fastmath" / "dispatch" / "calibration-defaults.json").read_text())["table"]
    assert not NAMES - set(table), sorted(NAMES - set(table))


def test_the_accuracy_report_has_a_true_value_for_every_row():
    spec = importlib.util.spec_from_file_location("accuracy", ROOT / "bench" / "accuracy.py")
    accuracy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(accuracy)
    assert set(accuracy.TRUE) == NAMES


def test_aliases_are_the_same_object_everywhere():
    for row in ROWS:
        for alias in row.aliases:
            assert getattr(fastmath, alias) is getattr(fastmath, row.name)
            assert _registry.lookup(alias) is row
            if row.kind in ("unary", "elementwise"):
                assert getattr(foreach, alias) is getattr(foreach, row.name)
            if row.ref.startswith("scipy.special:"):
                assert getattr(special, alias) is getattr(fastmath, row.name)
                import scipy.special

                assert getattr(scipy.special, alias)(0.7) == row.reference()(0.7)
    assert _registry.lookup("psi") is BY_NAME["digamma"]


def test_lookup_of_an_unknown_name_names_the_valid_ones():
    with pytest.raises(KeyError, match="valid choices: exp, log"):
        _registry.lookup("nosuch")


def test_every_backend_name_list_derives_from_one():
    assert _config.BACKEND_NAMES == ("auto",) + backends.NAMES
    assert tuple(fastmath.info()["backends"]) == backends.NAMES
    for name in backends.NAMES:  # every listed backend is a valid name, available or not
        if backends.why_unavailable(name) is None:
            with fastmath.backend(name):
                assert fastmath.get_backend() == name
        else:
            with pytest.raises(ValueError, match="is unavailable"):
                fastmath.set_backend(name)


@pytest.mark.skipif(backends.why_unavailable("numexpr") is not None, reason="no numexpr")
def test_numexpr_kernels_are_the_registry_rows():
    nx = backends.get("numexpr")
    for row in ROWS:
        assert (nx.kernel(row) is not None) == ("numexpr" in row.kernels), row.name
    x = np.linspace(0.1, 3, 101)
    for row in ROWS:
        if "numexpr" in row.kernels:
            with fastmath.backend("numexpr"):
                got = getattr(fastmath, row.name)(x)
            np.testing.assert_allclose(got, row.reference()(x), rtol=4e-16)


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.name)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sample_is_in_the_domain_where_the_reference_is_finite(row, dtype):
    xs = row.sample(300, dtype, np.random.default_rng(0))
    assert len(xs) == row.nin == len(row.operands)
    for x, dom in zip(xs, row.operands):
        assert x.shape == (300,) and x.dtype == dtype
        lo, hi = dom.dense
        assert (x >= np.asarray(lo, dtype)).all() and (x <= np.asarray(hi, dtype)).all()
    if row.kind not in ("logsumexp", "softmax"):
        with np.errstate(all="ignore"):
            assert np.isfinite(row.reference()(*xs)).all()


def test_the_docs_function_table_has_a_column_per_backend_and_every_kernel():
    from fastmath.tools import _docs

    lines = _docs.function_table().splitlines()
    header = next(line for line in lines if line.startswith("| function |"))
    cols = [c.strip() for c in header.strip("|").split("|")]
    assert [c for c in cols if c in backends.NAMES] == list(backends.NAMES)
    for row in ROWS:
        line = next(line for line in lines if line.startswith(f"| `{row.name}` |"))
        cells = dict(zip(cols, (c.strip() for c in line.strip("|").split("|"))))
        for b in backends.NAMES:
            kernel = row.kernels.get(_docs.family(b))
            if b == "numpy":
                assert cells[b] == "reference"
            elif kernel is None:
                assert cells[b] == "-", (row.name, b)
            else:
                assert kernel in cells[b], (row.name, b)
        for alias in row.aliases:
            assert f"`{alias}`" in cells["reference"]
    assert any("exp" in line.split("|")[cols.index("numexpr") + 1] for line in lines
               if line.startswith("| `exp` |"))
