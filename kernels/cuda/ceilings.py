"""ceilings.py OUT.json: the GPU's measured ceilings through PyTorch, the yardsticks of kernels/cuda/BENCH.md.

Timed as the Go benchmarks time the kernels: CUDA events around one call, the L2 cache flushed before each (a
256 MB write), median of 20 runs after 5 warm-ups. Measures:
  - matmul_tflops: torch.matmul (cuBLAS) in bf16 and f16 at 4096^3 and 8192^3; the larger bf16 rate is the
    matrix-rate ceiling ("bf16_peak_tflops");
  - gemm_tflops: torch.matmul at the shapes of BenchmarkGEMM (m x 4096 by 4096 x 4096, m = 1, 16, 128, 4096)
    in bf16 and f16, so each of our rates can be read against cuBLAS at the same shape;
  - int8_tops: torch._int_mm at 8192^3 where the build has it;
  - copy_gbps: a device-to-device copy of 1 GiB (read plus write bytes), the bandwidth ceiling.
Writes OUT.json and prints one line a figure.
"""
import json
import sys

import torch


def median_seconds(f, runs=20, warmup=5):
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for _ in range(warmup):
        f()
    times = []
    for _ in range(runs):
        flush.zero_()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        f()
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop) / 1e3)
    times.sort()
    return times[len(times) // 2]


def main():
    if len(sys.argv) != 2:
        print("usage: ceilings.py OUT.json", file=sys.stderr)
        sys.exit(2)
    torch.backends.cuda.matmul.allow_tf32 = False
    res = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(0),
        "matmul_tflops": {},
        "gemm_tflops": {},
    }
    for dt, name in ((torch.bfloat16, "bf16"), (torch.float16, "f16")):
        for n in (4096, 8192):
            a = torch.randn(n, n, device="cuda", dtype=dt)
            b = torch.randn(n, n, device="cuda", dtype=dt)
            r = 2 * n**3 / median_seconds(lambda: torch.matmul(a, b)) / 1e12
            res["matmul_tflops"][f"{name}/n={n}"] = r
            print(f"matmul {name} n={n}: {r:.1f} TFLOP/s", flush=True)
            del a, b
        w = torch.randn(4096, 4096, device="cuda", dtype=dt)
        for m in (1, 16, 128, 4096):
            x = torch.randn(m, 4096, device="cuda", dtype=dt)
            r = 2 * m * 4096 * 4096 / median_seconds(lambda: torch.matmul(x, w.t())) / 1e12
            res["gemm_tflops"][f"{name}/m={m}"] = r
            print(f"gemm {name} m={m} n=k=4096: {r:.2f} TFLOP/s", flush=True)
    res["bf16_peak_tflops"] = max(v for k, v in res["matmul_tflops"].items() if k.startswith("bf16/"))
    try:
        n = 8192
        a = torch.randint(-128, 127, (n, n), device="cuda", dtype=torch.int8)
        b = torch.randint(-128, 127, (n, n), device="cuda", dtype=torch.int8)
        res["int8_tops"] = 2 * n**3 / median_seconds(lambda: torch._int_mm(a, b)) / 1e12
        print(f"int_mm int8 n={n}: {res['int8_tops']:.1f} TOP/s", flush=True)
        del a, b
    except Exception as ex:  # builds without _int_mm, or without it for this GPU
        print(f"int_mm int8: unavailable: {ex}")
    x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    res["copy_gbps"] = 2 * x.numel() / median_seconds(lambda: y.copy_(x)) / 1e9
    print(f"copy 1 GiB: {res['copy_gbps']:.0f} GB/s")
    with open(sys.argv[1], "w") as f:
        json.dump(res, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
