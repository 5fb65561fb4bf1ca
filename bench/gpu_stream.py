"""GPU benchmark: python bench/gpu_stream.py [--sizes 1e6,1e7,1e8] [--repeat 5] [--json FILE]

For float32 and float64 arrays of each size: host-to-device copy throughput from pageable
and from pinned memory, the torch-cuda pipeline's throughput (input bytes per second) for
exp and erf with its share of the pinned copy rate, the pipeline against numpy and the
CPU backends, and device-resident calls against the same raw torch call. Ends with the
calibration rows ``auto`` would need for host data (see fastmath/dispatch/_calibration.py).
Exits with status 2 and a message when torch sees no CUDA device.
"""
import argparse
import json
import sys
import time

import numpy as np

p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
p.add_argument("--sizes", default="1e6,1e7,1e8")
p.add_argument("--repeat", type=int, default=5)
p.add_argument("--json", help="also write the figures to this file")
args = p.parse_args()

try:
    import torch
except ImportError:
    sys.exit("bench/gpu_stream.py: torch is not installed; nothing to measure")
if not torch.cuda.is_available():
    print("bench/gpu_stream.py: torch sees no CUDA device, so there is no GPU to measure. "
          "Run this on a machine with one (fastmath.info() shows what fastmath sees).",
          file=sys.stderr)
    sys.exit(2)

import fastmath  # noqa: E402

FUNCS = ("exp", "erf")


def best(fn, repeat=args.repeat):
    fn()
    times = []
    for _ in range(repeat):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return min(times)


def gbs(nbytes, seconds):
    return nbytes / seconds / 1e9


rows, crossovers = [], {}
cpu = [b for b in ("numpy", "numexpr", "torch-cpu") if b in fastmath.available_backends()]
print(f"device: {torch.cuda.get_device_name()}  cpu backends: {', '.join(cpu)}")
for dtype in ("float32", "float64"):
    for n in (int(float(s)) for s in args.sizes.split(",")):
        x = np.random.default_rng(0).uniform(-3, 3, n).astype(dtype)
        out = np.empty_like(x)
        d = torch.empty(n, dtype=getattr(torch, dtype), device="cuda")
        pinned = torch.empty(n, dtype=d.dtype, pin_memory=True)
        pageable = torch.from_numpy(x)
        row = {"dtype": dtype, "n": n, "bytes": x.nbytes,
               "pageable_h2d": gbs(x.nbytes, best(lambda: d.copy_(pageable))),
               "pinned_h2d": gbs(x.nbytes, best(lambda: d.copy_(pinned, non_blocking=True))),
               "pinned_d2h": gbs(x.nbytes, best(lambda: pinned.copy_(d, non_blocking=True)))}
        for name in FUNCS:
            f = getattr(fastmath, name)
            with fastmath.backend("torch-cuda"):
                t_gpu = best(lambda: f(x, out=out))
            row[f"{name}_pipeline"] = gbs(x.nbytes, t_gpu)
            row[f"{name}_pipeline_share"] = row[f"{name}_pipeline"] / row["pinned_h2d"]
            t_cpu = {}
            for b in cpu:
                with fastmath.backend(b):
                    t_cpu[b] = best(lambda: f(x, out=out))
                row[f"{name}_{b}"] = gbs(x.nbytes, t_cpu[b])
            ref = getattr(torch, name, None) or getattr(torch.special, name)
            dev_in, dev_out = d.uniform_(-3, 3), torch.empty_like(d)
            t_raw = best(lambda: ref(dev_in, out=dev_out))
            t_res = best(lambda: f(dev_in))
            t_raw_alloc = best(lambda: ref(dev_in))
            row[f"{name}_resident"] = gbs(x.nbytes, t_res)
            row[f"{name}_raw_torch"] = gbs(x.nbytes, t_raw_alloc)
            row[f"{name}_raw_torch_out"] = gbs(x.nbytes, t_raw)
            row[f"{name}_resident_share"] = t_raw_alloc / t_res
            fastest = min(t_cpu.values())
            if t_gpu < fastest:
                crossovers.setdefault(name, {}).setdefault(dtype, n)
        rows.append(row)
        del d, pinned
        torch.cuda.empty_cache()
        print(f"{dtype} n={n:.0e}: copy pageable {row['pageable_h2d']:.1f} / pinned "
              f"{row['pinned_h2d']:.1f} GB/s (d2h {row['pinned_d2h']:.1f})")
        for name in FUNCS:
            cpus = ", ".join(f"{b} {row[f'{name}_{b}']:.1f}" for b in cpu)
            print(f"  {name}: pipeline {row[f'{name}_pipeline']:.1f} GB/s "
                  f"({row[f'{name}_pipeline_share']:.0%} of pinned h2d; cpu: {cpus}); "
                  f"resident {row[f'{name}_resident']:.1f} vs raw torch "
                  f"{row[f'{name}_raw_torch']:.1f} GB/s "
                  f"({row[f'{name}_resident_share']:.0%})")

# Rows in fastmath/dispatch/_calibration.py's format: from the smallest measured size where the
# pipeline beat every CPU backend, torch-cuda first (sizes between grid points unmeasured).
table = {name: {dt: [[n, ["torch-cuda", "numpy"]]] for dt, n in by.items()}
         for name, by in crossovers.items()}
print("calibration rows for host data:", json.dumps(table) if table else "none (the CPU won)")
if args.json:
    with open(args.json, "w") as fh:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows,
                   "calibration": table}, fh, indent=1)
