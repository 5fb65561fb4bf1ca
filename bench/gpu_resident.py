"""Device-resident calls: python bench/gpu_resident.py [--device cuda] [--rounds 15]

fastmath's exp, log1p and erf of a torch tensor that lives on the device against torch's
own call on it, float32 and float64, 10^4 to 10^7 elements: medians of interleaved rounds
of 20 calls each, synchronised around each round. Below about 10^6 elements both are
bound by the launch, so the difference is what fastmath's front end adds to a call.
``--device cpu`` measures the same on CPU tensors (no GPU needed).
"""
import argparse
import statistics
import sys
import time

p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
p.add_argument("--device", default="cuda")
p.add_argument("--rounds", type=int, default=15)
args = p.parse_args()

try:
    import torch
except ImportError:
    sys.exit("bench/gpu_resident.py: torch is not installed; nothing to measure")
if args.device == "cuda" and not torch.cuda.is_available():
    sys.exit("bench/gpu_resident.py: torch sees no CUDA device (--device cpu measures CPU "
             "tensors)")

import fastmath  # noqa: E402

sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
print(f"device: {torch.cuda.get_device_name() if args.device == 'cuda' else 'cpu'}  "
      f"torch {torch.__version__}")
for dt in (torch.float32, torch.float64):
    for n in (10**4, 10**5, 10**6, 10**7):
        x = torch.linspace(-3, 3, n, device=args.device, dtype=dt)
        for name in ("exp", "log1p", "erf"):
            raw = getattr(torch, name, None) or getattr(torch.special, name)
            fm = getattr(fastmath, name)
            for f in (raw, fm):
                for _ in range(20):
                    f(x)
            t = {"raw": [], "fm": []}
            for _ in range(args.rounds):
                for k, f in (("raw", raw), ("fm", fm)):
                    sync()
                    s = time.perf_counter()
                    for _ in range(20):
                        f(x)
                    sync()
                    t[k].append((time.perf_counter() - s) / 20)
            a, b = statistics.median(t["raw"]), statistics.median(t["fm"])
            print(f"{str(dt)[6:]:8s} n=1e{len(str(n)) - 1} {name:6s} torch {a * 1e6:8.1f} us"
                  f"  fastmath {b * 1e6:8.1f} us  ratio {a / b:.2f}", flush=True)
