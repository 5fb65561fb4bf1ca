"""The machine as ``fastmath info`` describes it: CPU model, SIMD level, cores, GPUs.

The SIMD level is the best of the targets NumPy's own loops dispatch to here (what
decides how fast the numpy backend is), read from NumPy; /proc/cpuinfo flags are the
fallback. GPUs are looked up through torch, and only if torch is loaded already (the
backend probe loads it): finding them must not be what imports torch.
"""
from __future__ import annotations

import os
import platform
import sys

from ._config import default_threads

# best first; the names NumPy and /proc/cpuinfo use
_FLAGS = (("avx512f", "AVX512F"), ("avx2", "AVX2"), ("avx", "AVX"), ("sse4_2", "SSE42"),
          ("sve", "SVE"), ("asimd", "ASIMD"), ("neon", "NEON"))


def _cpuinfo() -> dict:
    fields: dict = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def _numpy_simd():
    """(best dispatched target, targets found) from NumPy, or None."""
    try:
        from numpy._core import _multiarray_umath as umath
    except ImportError:  # numpy < 2
        try:
            from numpy.core import _multiarray_umath as umath
        except ImportError:
            return None
    features = getattr(umath, "__cpu_features__", None)
    if not features:
        return None
    found = [t for t in getattr(umath, "__cpu_dispatch__", ()) if features.get(t)]
    baseline = list(getattr(umath, "__cpu_baseline__", ()))
    targets = baseline + found
    return (targets[-1] if targets else "none"), targets


def cpu() -> dict:
    fields = _cpuinfo()
    model = (fields.get("model name") or fields.get("Model") or fields.get("cpu model")
             or platform.processor() or platform.machine())
    simd = _numpy_simd()
    if simd is None:
        flags = set((fields.get("flags") or fields.get("Features") or "").split())
        best = next((name for flag, name in _FLAGS if flag in flags), "unknown")
        simd = (best, [name for flag, name in _FLAGS if flag in flags])
    return {"model": model, "arch": platform.machine(), "simd": simd[0],
            "simd_targets": simd[1], "logical_cores": os.cpu_count() or 1,
            "usable_cores": default_threads()}


def gpus() -> dict:
    """CUDA devices torch sees, or why none are listed."""
    torch = sys.modules.get("torch")
    if torch is None:
        return {"devices": [], "note": "none (torch is not installed, nothing to ask)"}
    try:
        if not torch.cuda.is_available():
            return {"devices": [], "note": f"none (torch {torch.__version__} sees no CUDA device)"}
        devices = []
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            devices.append({"index": i, "name": p.name,
                            "memory_gib": round(p.total_memory / 2**30, 1),
                            "capability": f"{p.major}.{p.minor}"})
    except Exception as e:  # a broken driver must not break ``fastmath info``
        return {"devices": [], "note": f"none (CUDA query failed: {e})"}
    return {"devices": devices, "note": f"{len(devices)} CUDA device(s)"}


def thread_pools() -> dict:
    """Threads each library will use, for the libraries already loaded."""
    from . import _config

    pools = {"fastmath numpy backend": _config.get().num_threads}
    torch = sys.modules.get("torch")
    if torch is not None:
        pools["torch intra-op"] = torch.get_num_threads()
    return pools
