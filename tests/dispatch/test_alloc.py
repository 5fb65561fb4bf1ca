"""fastmath.dispatch._alloc: large outputs recycle freed memory (no page faults the second time)
and are ordinary NumPy arrays that own their memory."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from fastmath.dispatch import _alloc

FAULTS = textwrap.dedent("""
    import resource, numpy as np
    from fastmath.dispatch import _alloc
    x = np.ones(10**7)  # 80 MB, past glibc's own recycling
    def faults():
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    np.log(x, out={alloc}(x))  # the first output maps its pages
    before = faults()
    for _ in range(3):
        np.log(x, out={alloc}(x))
    print(_alloc._tuned, (faults() - before) // 3)
""")


def _faults(alloc):
    r = subprocess.run([sys.executable, "-c", FAULTS.format(alloc=alloc)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    tuned, faults = r.stdout.split()
    return tuned, int(faults)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc only")
def test_large_outputs_reuse_mapped_memory():
    tuned, faults = _faults("_alloc.empty_like")
    if tuned != "True":
        pytest.skip("this C library has no mallopt")
    # 80 MB freshly mapped is 19532 faults in 4 KiB pages, 40 or more in huge pages
    assert faults < 20


def test_plain_numpy_allocation_is_left_alone_until_a_large_output():
    out = subprocess.run([sys.executable, "-c", "import numpy as np; from fastmath.dispatch import _alloc; "
                          "_alloc.empty_like(np.ones(1000)); print(_alloc._tuned)"],
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "None"


@pytest.mark.parametrize("order", ["K", "C", "F", "A"])
@pytest.mark.parametrize("dtype", [None, np.float32, np.int16])
def test_same_array_as_numpy_empty_like(order, dtype):
    a = np.ones((30, 40), order="F")[:, ::2]
    got, want = _alloc.empty_like(a, dtype, order), np.empty_like(a, dtype, order)
    assert type(got) is np.ndarray and got.flags.owndata and got.base is None
    assert (got.shape, got.dtype, got.strides) == (want.shape, want.dtype, want.strides)
