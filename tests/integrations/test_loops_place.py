"""Under the loop mode np.place runs by blocks on the runtime's pool (scipy.stats fills
its outputs with it): NumPy's result element for element, NumPy's own call (and errors)
for what it does not take, and NumPy's C function back when the mode ends."""
import numpy as np
import pytest
from numpy.lib import _function_base_impl as module

import fastmath
from fastmath.integrations import _loopmode

pytestmark = pytest.mark.skipif(not _loopmode.available(), reason="loop mode not built")
_runtime = pytest.importorskip("fastmath.dispatch._runtime")

N = 200_003  # past the size from which blocks are used, and not a whole number of them


def both(arr, mask, vals):
    """(NumPy's result, the loop mode's) of np.place on copies of arr; the two raise the
    same warnings, and the same error if any."""
    import warnings

    want, got = arr.copy(), arr.copy()
    outcomes = []
    for out, mode in ((want, None), (got, "loops")):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            try:
                if mode is None:
                    np.place(out, mask, vals)
                else:
                    with fastmath.patch(mode=mode):
                        np.place(out, mask, vals)
                raised = None
            except (TypeError, ValueError) as e:
                raised = (type(e), str(e))
        outcomes.append((raised, [str(w.message) for w in seen]))
    assert outcomes[0] == outcomes[1]
    return want, got


@pytest.mark.parametrize("dtype", ["float64", "float32", "int8", "int16", "int64", "complex64"])
@pytest.mark.parametrize("mask_dtype", ["bool", "int64", "uint8"])
@pytest.mark.parametrize("kind", ["all", "none", "random", "cycled"])
def test_numpys_result_element_for_element(dtype, mask_dtype, kind):
    rng = np.random.default_rng(1)
    arr = rng.integers(-100, 100, N).astype(dtype)
    if kind == "all":
        mask = np.ones(N, mask_dtype)
    elif kind == "none":
        mask = np.zeros(N, mask_dtype)
    else:
        mask = (rng.random(N) < 0.3).astype(mask_dtype) * (3 if mask_dtype != "bool" else 1)
    count = int(np.count_nonzero(mask))
    size = 7 if kind == "cycled" else max(count, 1)  # fewer values than places: cycled
    vals = rng.integers(-100, 100, size).astype(dtype)
    want, got = both(arr, mask, vals)
    assert want.tobytes() == got.tobytes()


def test_a_python_float_and_the_calls_numpy_keeps():
    rng = np.random.default_rng(2)
    arr = rng.standard_normal(N).astype(np.float32)
    mask = rng.random(N) < 0.5
    for vals in (np.nan, 1e300, 0.1):  # one value, converted (and warned) as NumPy does
        want, got = both(arr, mask, vals)
        assert want.tobytes() == got.tobytes()
    # left to NumPy: strided, values of another dtype (its TypeError), values inside the
    # array, a list
    for a, m, v in ((arr[::2], mask[::2], np.ones(3, np.float32)),
                    (arr, mask, np.arange(5.0)),
                    (arr, mask, arr[::-1]),
                    (arr, mask, [1.0, 2.0])):
        want, got = both(a, m, v)
        assert want.tobytes() == got.tobytes()


def test_numpys_errors():
    arr = np.zeros(N)
    with fastmath.patch(mode="loops"):
        with pytest.raises(ValueError, match="Cannot insert from an empty array"):
            np.place(arr, np.ones(N, bool), np.array([]))
        np.place(arr, np.zeros(N, bool), np.array([]))  # nothing to insert: no error
        with pytest.raises(ValueError, match="same size"):
            np.place(arr, np.ones(N - 1, bool), np.ones(1))
        frozen = np.zeros(N)
        frozen.flags.writeable = False
        with pytest.raises(ValueError, match="read-only"):
            np.place(frozen, np.ones(N, bool), np.ones(1))
        with pytest.raises(TypeError, match="numpy.ndarray"):
            np.place([0.0] * N, np.ones(N, bool), np.ones(1))


def test_the_pool_shares_it_and_numpys_function_comes_back():
    if _runtime.threads() < 2:
        pytest.skip("one thread: nothing splits")
    from fastmath.integrations import _loops

    numpys = module._place
    arr, mask, vals = np.zeros(10**6), np.ones(10**6, bool), np.arange(10**6, dtype=float)
    before = _runtime.set_pacing(False)  # every call split, whatever the machine's load
    try:
        assert _loops.place(arr[:1 << 17], mask[:1 << 17], vals[:1 << 17]) == 2
        with fastmath.patch(mode="loops"):
            assert module._place is not numpys
            joins = _runtime.stats()["joins"]
            for _ in range(20):
                np.place(arr, mask, vals)
            assert _runtime.stats()["joins"] > joins
    finally:
        _runtime.set_pacing(before)
    assert module._place is numpys
    assert np.array_equal(arr, vals)


def test_a_call_that_found_the_modes_place_just_before_a_stop_still_runs():
    """Another thread may have looked up the mode's function just before this one stopped
    the mode: its call still reaches NumPy's (small arrays go there at once)."""
    with fastmath.patch(mode="loops"):
        found = module._place
    arr = np.zeros(10)
    found(arr, np.arange(10) % 2, np.array([7.0, 8.0]))
    assert arr.tolist() == [0, 7, 0, 8, 0, 7, 0, 8, 0, 7]
