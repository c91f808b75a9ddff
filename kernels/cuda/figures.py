"""figures.py BENCH.json CEILINGS.json OUT.json: the table of kernels/cuda/BENCH.md from one device run.

BENCH.json is what the cuda test binary writes with -figures (each benchmark's median time and rate),
CEILINGS.json what ceilings.py writes (PyTorch's matmul rates and copy bandwidth); either may be missing, and
the figures that need it are then null. Writes OUT.json (machine-readable: every row of the table, each ratio
and whether each goal of the issue is met) and prints the table as markdown.

figures.py --self-test runs the computation on synthetic input and checks the result (the dry run does).
"""
import json
import math
import os
import sys

GEMM_MS = (1, 16, 128, 4096)
GOALS = (
    ("flash prefill bf16 (hd 128, 4k tokens) >= 30% of the bf16 matmul rate", "flash_share", 0.30),
    ("paged decode bf16 (batch 64, 4k contexts) >= 60% of copy bandwidth", "paged_share", 0.60),
    ("W4A16 at m = 1 >= 2.5x the f16 GEMV", "w4a16_m1_speedup", 2.5),
)


def load(path):
    if path and os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    return None


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def compute(bench, ceil):
    by = {b["name"]: b for b in (bench or {}).get("benchmarks", [])}
    ceil = ceil or {}

    def get(name, key):
        b = by.get(name)
        return None if b is None else b.get(key)

    copy_go = get("BenchmarkCopy/bytes=1GiB", "gbps")
    copy = copy_go if copy_go is not None else ceil.get("copy_gbps")
    peak = ceil.get("bf16_peak_tflops")
    out = {
        "device": (bench or {}).get("device") or ceil.get("device"),
        "ceilings": {
            "bf16_peak_tflops": peak,
            "copy_gbps": copy,
            "copy_gbps_cuda_memcpy": copy_go,
            "copy_gbps_torch": ceil.get("copy_gbps"),
            "matmul_tflops": ceil.get("matmul_tflops"),
            "int8_tops": ceil.get("int8_tops"),
        },
        "gemm": [],
        "quant": [],
        "flash_prefill": [],
        "paged_decode": [],
        "fused": [],
    }
    gemm = lambda m, dt: f"BenchmarkGEMM/m={m}/n=4096/k=4096/dtype={dt}"
    for dt in ("f16", "bf16"):
        for m in GEMM_MS:
            t = get(gemm(m, dt), "tflops")
            cublas = (ceil.get("gemm_tflops") or {}).get(f"{dt}/m={m}")
            out["gemm"].append({"dtype": dt, "m": m, "n": 4096, "k": 4096, "tflops": t,
                                "weight_gbps": get(gemm(m, dt), "gbps"), "share_of_bf16_peak": ratio(t, peak),
                                "cublas_tflops": cublas, "vs_cublas": ratio(t, cublas)})
    for fmt in ("w8a8", "w8a16", "w4a16"):
        for m in GEMM_MS:
            us, f16 = get(gemm(m, fmt), "median_us"), get(gemm(m, "f16"), "median_us")
            out["quant"].append({"format": fmt, "m": m, "tflops": get(gemm(m, fmt), "tflops"),
                                 "weight_gbps": get(gemm(m, fmt), "gbps"), "speedup_vs_f16": ratio(f16, us)})
    for dt in ("bf16", "f16"):
        for nq, hd, kv in ((4096, 128, 8), (2048, 128, 8), (4096, 64, 32)):
            t = get(f"BenchmarkFlashPrefill/nq={nq}/heads=32/kvheads={kv}/hd={hd}/dtype={dt}", "tflops")
            out["flash_prefill"].append({"dtype": dt, "nq": nq, "hd": hd, "kvheads": kv, "tflops": t,
                                         "share_of_bf16_peak": ratio(t, peak)})
    for dt in ("bf16", "f16"):
        for batch, ctx in ((64, 4096), (32, 1024), (4, 32768), (128, 2048)):
            g = get(f"BenchmarkPagedDecode/batch={batch}/ctx={ctx}/heads=32/kvheads=8/hd=128/dtype={dt}", "gbps")
            out["paged_decode"].append({"dtype": dt, "batch": batch, "ctx": ctx, "gbps": g,
                                        "share_of_copy": ratio(g, copy)})
    for op in ("rmsnorm", "add_rmsnorm", "swiglu", "softmax", "rope", "kv_append"):
        g = get(f"BenchmarkFused/rows=8192/dim=4096/op={op}/dtype=bf16", "gbps")
        out["fused"].append({"op": op, "dtype": "bf16", "gbps": g, "share_of_copy": ratio(g, copy)})
    values = {
        "flash_share": out["flash_prefill"][0]["share_of_bf16_peak"],
        "paged_share": out["paged_decode"][0]["share_of_copy"],
        "w4a16_m1_speedup": next(q["speedup_vs_f16"] for q in out["quant"] if q["format"] == "w4a16" and q["m"] == 1),
    }
    out["goals"] = [{"goal": g, "value": values[k], "target": t,
                     "met": None if values[k] is None else values[k] >= t} for g, k, t in GOALS]
    return out


def fmt(x, spec=".1f"):
    return "n/a" if x is None else format(x, spec)


def markdown(f):
    c = f["ceilings"]
    lines = [f"Device: {f['device'] or 'n/a'}; bf16 matmul ceiling {fmt(c['bf16_peak_tflops'])} TFLOP/s; "
             f"copy bandwidth {fmt(c['copy_gbps'], '.0f')} GB/s.", "",
             "| GEMM n = k = 4096 | m | TFLOP/s | share of bf16 matmul | cuBLAS TFLOP/s |", "|---|---|---|---|---|"]
    for g in f["gemm"]:
        lines.append(f"| {g['dtype']} | {g['m']} | {fmt(g['tflops'], '.2f')} | {fmt(g['share_of_bf16_peak'], '.1%')} "
                     f"| {fmt(g['cublas_tflops'], '.2f')} |")
    lines += ["", "| format | m | TFLOP/s | speed-up over f16 |", "|---|---|---|---|"]
    for q in f["quant"]:
        x = q["speedup_vs_f16"]
        lines.append(f"| {q['format']} | {q['m']} | {fmt(q['tflops'], '.2f')} | {'n/a' if x is None else f'{x:.2f}x'} |")
    lines += ["", "| flash prefill | tokens | hd | TFLOP/s | share of bf16 matmul |", "|---|---|---|---|---|"]
    for p in f["flash_prefill"]:
        lines.append(f"| {p['dtype']} | {p['nq']} | {p['hd']} | {fmt(p['tflops'])} | {fmt(p['share_of_bf16_peak'], '.1%')} |")
    lines += ["", "| paged decode | batch | context | GB/s | share of copy |", "|---|---|---|---|---|"]
    for p in f["paged_decode"]:
        lines.append(f"| {p['dtype']} | {p['batch']} | {p['ctx']} | {fmt(p['gbps'], '.0f')} | {fmt(p['share_of_copy'], '.1%')} |")
    lines += ["", "| fused op (bf16, 8192 x 4096) | GB/s | share of copy |", "|---|---|---|"]
    for p in f["fused"]:
        lines.append(f"| {p['op']} | {fmt(p['gbps'], '.0f')} | {fmt(p['share_of_copy'], '.1%')} |")
    lines += ["", "| goal | value | met |", "|---|---|---|"]
    for g in f["goals"]:
        met = "n/a" if g["met"] is None else ("yes" if g["met"] else "no")
        lines.append(f"| {g['goal']} | {fmt(g['value'], '.2f')} | {met} |")
    return "\n".join(lines)


def self_test():
    """Synthetic input with known answers: every ratio and goal must come out as constructed."""
    bench = {"device": "synthetic", "benchmarks": [
        {"name": "BenchmarkCopy/bytes=1GiB", "n": 20, "median_us": 500.0, "gbps": 4000.0},
        {"name": "BenchmarkGEMM/m=1/n=4096/k=4096/dtype=f16", "n": 20, "median_us": 10.0, "tflops": 0.003, "gbps": 3000.0},
        {"name": "BenchmarkGEMM/m=1/n=4096/k=4096/dtype=w4a16", "n": 20, "median_us": 4.0, "tflops": 0.008, "gbps": 2000.0},
        {"name": "BenchmarkGEMM/m=4096/n=4096/k=4096/dtype=bf16", "n": 20, "median_us": 250.0, "tflops": 550.0},
        {"name": "BenchmarkFlashPrefill/nq=4096/heads=32/kvheads=8/hd=128/dtype=bf16", "n": 20, "median_us": 1.0, "tflops": 220.0},
        {"name": "BenchmarkPagedDecode/batch=64/ctx=4096/heads=32/kvheads=8/hd=128/dtype=bf16", "n": 20, "median_us": 1.0, "gbps": 2000.0},
        {"name": "BenchmarkFused/rows=8192/dim=4096/op=swiglu/dtype=bf16", "n": 20, "median_us": 1.0, "gbps": 3000.0},
    ]}
    ceil = {"bf16_peak_tflops": 800.0, "copy_gbps": 3900.0, "gemm_tflops": {"bf16/m=4096": 700.0}}
    f = compute(bench, ceil)
    g = next(x for x in f["gemm"] if x["dtype"] == "bf16" and x["m"] == 4096)
    w4 = next(x for x in f["quant"] if x["format"] == "w4a16" and x["m"] == 1)
    checks = [
        (f["ceilings"]["copy_gbps"], 4000.0),  # the CUDA memcpy of the Go benchmarks is preferred
        (g["share_of_bf16_peak"], 550 / 800), (g["vs_cublas"], 550 / 700),
        (w4["speedup_vs_f16"], 2.5),
        (f["flash_prefill"][0]["share_of_bf16_peak"], 220 / 800),
        (f["paged_decode"][0]["share_of_copy"], 0.5),
        (next(x for x in f["fused"] if x["op"] == "swiglu")["share_of_copy"], 0.75),
        ([x["met"] for x in f["goals"]], [False, False, True]),
        (next(x for x in f["gemm"] if x["dtype"] == "f16" and x["m"] == 16)["tflops"], None),
    ]
    bad = [(i, got, want) for i, (got, want) in enumerate(checks)
           if not (got == want or (isinstance(got, float) and isinstance(want, float) and math.isclose(got, want)))]
    for i, got, want in bad:
        print(f"figures.py self-test: check {i}: got {got}, want {want}")
    md = markdown(f)
    if "| bf16 | 4096 | 550.00 | 68.8% | 700.00 |" not in md:
        print("figures.py self-test: markdown row of the bf16 m=4096 GEMM missing")
        bad.append(("markdown", None, None))
    json.dumps(f)
    print("figures.py self-test: " + ("FAIL" if bad else "ok"))
    return 1 if bad else 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    if len(sys.argv) != 4:
        print("usage: figures.py BENCH.json CEILINGS.json OUT.json | figures.py --self-test", file=sys.stderr)
        sys.exit(2)
    f = compute(load(sys.argv[1]), load(sys.argv[2]))
    with open(sys.argv[3], "w") as out:
        json.dump(f, out, indent=2)
        out.write("\n")
    print(markdown(f))


if __name__ == "__main__":
    main()
