"""Verify and time the GPU paths on a CUDA machine, in one run of a few minutes.

Phases, in order of importance (later ones are skipped once ``--budget-s`` is spent):

1. environment: GPU, torch / triton / CUDA versions;
2. the Triton kernel against a float64 reference (float16 / bfloat16 / float32, head dims 64 and
   128, causal and not, ragged n = 1000 and n up to 8192; output and gradients), torch's SDPA
   in the same dtype measured alongside as the yardstick;
3. timing, bfloat16, head dim 128: forward and forward+backward, Triton vs torch SDPA (flash
   backend, and cuDNN where present), n = 1024 .. 16384, causal and not, FlashAttention's
   benchmark shape (batch x n = 16k tokens, 16 heads); TFLOP/s (forward 4·B·H·n²·d, halved
   when causal; backward 2.5x forward) and ratios;
4. ``attention.dispatch`` on CUDA ("auto" picks triton; torch SDPA's fully masked rows);
5. the package's pure-PyTorch variants on CUDA (flash, sliding window, block sparse, linear)
   against the dense reference / their own CPU result;
6. compiled FlexAttention (sliding window, block sparse with an empty row);
7. a sweep of alternative tile configs at bf16, d = 128, n = 4096.

Writes JSON (``--out``, default ``bench/gpu_results.json``) after every phase and exits 1 if any
correctness check failed. Usage, from the repository root::

    python bench/gpu_check.py --out bench/gpu_results.json

``--smoke`` runs every phase on the CPU at toy sizes with Triton's interpreter (no bfloat16,
whose interpreter dot is wrong), to test this script itself where there is no GPU; its numbers
mean nothing::

    TRITON_INTERPRET=1 python bench/gpu_check.py --smoke --out /tmp/smoke.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
import traceback
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout, installed or not

SMOKE = "--smoke" in sys.argv
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
if INTERPRET != SMOKE:
    sys.exit("gpu_check: TRITON_INTERPRET=1 goes with --smoke (CPU), and only with it")

import torch  # noqa: E402

DEVICE = "cpu" if SMOKE else "cuda"

# Relative Frobenius error ‖got - ref‖ / ‖ref‖ allowed against the float64 reference; a check
# also passes within 3x the error of torch's own SDPA in the same dtype.
TOL_OUT = {torch.float32: 1e-4, torch.float16: 3e-3, torch.bfloat16: 1.5e-2}
TOL_GRAD = {torch.float32: 1e-3, torch.float16: 1e-2, torch.bfloat16: 4e-2}
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def size(real: int, smoke: int) -> int:
    return smoke if SMOKE else real


class Report:
    """Collects results, writes them after each phase, remembers failures."""

    def __init__(self, path: Path, budget_s: float):
        self.path, self.budget_s, self.start = path, budget_s, time.time()
        self.data: dict = {"phases": {}, "failures": []}

    def elapsed(self) -> float:
        return time.time() - self.start

    def over_budget(self) -> bool:
        return self.elapsed() > self.budget_s

    def fail(self, what: str) -> None:
        self.data["failures"].append(what)
        print(f"  FAIL {what}", flush=True)

    def save(self) -> None:
        self.data["elapsed_s"] = round(self.elapsed(), 1)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.data, indent=1))


def rel_err(got: torch.Tensor, ref: torch.Tensor) -> float:
    got, ref = got.double(), ref.double()
    if not torch.isfinite(got).all():
        return math.inf
    return ((got - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def cuda_time_ms(fn, *, warmup: int = 3, reps: int = 15) -> float:
    """Median of ``reps`` CUDA-event timings after ``warmup`` untimed calls."""
    if SMOKE:  # host clock, one call
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def poison_allocator(*likes: torch.Tensor) -> None:
    """Fill freed blocks the size of the coming outputs with NaN: the caching allocator hands
    them to the kernel's ``torch.empty``, so an element the kernel forgets to write shows."""
    blocks = [torch.full_like(t, float("nan")) for t in likes]
    del blocks


# --- phase 1 ------------------------------------------------------------------------------------


def environment(report: Report) -> None:
    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "smoke": SMOKE,
    }
    if not SMOKE:
        props = torch.cuda.get_device_properties(0)
        env.update(
            gpu=torch.cuda.get_device_name(),
            capability=list(torch.cuda.get_device_capability()),
            sm_count=props.multi_processor_count,
            memory_gib=round(props.total_memory / 2**30, 1),
        )
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError as err:
        env["triton"] = f"missing ({err})"
    report.data["environment"] = env
    for key, value in env.items():
        print(f"  {key:14s} {value}")


# --- phase 2 ------------------------------------------------------------------------------------


def reference_f64(q, k, v, d_out, causal):
    """Output and gradients of the package's dense attention in float64."""
    from attention.functional import scaled_dot_product_attention

    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    out = scaled_dot_product_attention(*leaves, causal=causal)
    grads = torch.autograd.grad(out, leaves, d_out.double())
    return out.detach(), grads


def sdpa_in_dtype(q, k, v, d_out, causal):
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    out = torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=causal)
    return out.detach(), torch.autograd.grad(out, leaves, d_out)


def check_case(report, b, h, n, d, causal, dtype_name):
    from attention.gpu.triton_flash import triton_flash_attention

    dtype = DTYPES[dtype_name]
    name = f"{dtype_name} B{b} H{h} n{n} d{d} {'causal' if causal else 'full'}"
    q, k, v = (torch.randn(b, h, n, d, device=DEVICE, dtype=dtype) for _ in range(3))
    d_out = torch.randn(b, h, n, d, device=DEVICE, dtype=dtype)
    ref_out, ref_grads = reference_f64(q, k, v, d_out, causal)
    base_out, base_grads = sdpa_in_dtype(q, k, v, d_out, causal)

    poison_allocator(q, q, k, v)
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    out = triton_flash_attention(*leaves, causal=causal)
    grads = torch.autograd.grad(out, leaves, d_out)
    if not SMOKE:
        torch.cuda.synchronize()

    result = {"case": name}
    ok = True
    labels = ("out", "dq", "dk", "dv")
    gots = (out, *grads)
    refs = (ref_out, *ref_grads)
    bases = (base_out, *base_grads)
    for label, got, ref, base in zip(labels, gots, refs, bases, strict=True):
        err, base_err = rel_err(got, ref), rel_err(base, ref)
        tol = TOL_OUT[dtype] if label == "out" else TOL_GRAD[dtype]
        passed = err <= max(tol, 3 * base_err)
        result[label] = {"err": err, "sdpa_err": base_err, "pass": passed}
        ok &= passed
    result["pass"] = ok
    summary = " ".join(f"{lab}={result[lab]['err']:.1e}" for lab in labels)
    print(
        f"  {'ok  ' if ok else 'FAIL'} {name}: {summary} (sdpa out={result['out']['sdpa_err']:.1e})"
    )
    if not ok:
        report.fail(f"triton {name}")
    return result


def triton_correctness(report: Report) -> None:
    results = []
    dtypes = ("float16", "float32") if SMOKE else ("float16", "bfloat16", "float32")
    for dtype_name in dtypes:
        for d in (64, 128):
            for causal in (False, True):
                n = size(1000, 40)
                results.append(check_case(report, 2, 3, n, size(d, d // 4), causal, dtype_name))
    for dtype_name, n, d, causal in (
        ("bfloat16", 8192, 128, False),
        ("bfloat16", 8192, 128, True),
        ("float16", 4096, 64, True),
    ):
        if SMOKE:
            dtype_name, n, d = "float16", 64, 16
        results.append(check_case(report, 1, 2, n, d, causal, dtype_name))
    report.data["phases"]["triton_correctness"] = results


# --- phase 3 ------------------------------------------------------------------------------------


def sdpa_backend(name):
    """A context manager selecting one SDPA backend, or None if torch lacks it."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, name, None)
    return None if backend is None else (lambda: sdpa_kernel(backend))


def time_impl(fn, q, k, v, d_out):
    fwd = cuda_time_ms(lambda: fn(q, k, v))

    def fwd_bwd():
        out = fn(q, k, v)
        torch.autograd.grad(out, (q, k, v), d_out)

    return fwd, cuda_time_ms(fwd_bwd)


def timing(report: Report, tokens: int, num_heads: int, d: int = 128) -> None:
    from attention.gpu.triton_flash import attention_flops, triton_flash_attention

    impls = {"triton": None, "sdpa_flash": "FLASH_ATTENTION", "sdpa_cudnn": "CUDNN_ATTENTION"}
    rows = []
    dtype = torch.float16 if SMOKE else torch.bfloat16
    lengths = (32, 64) if SMOKE else (1024, 2048, 4096, 8192, 16384)
    for causal in (False, True):
        for n in lengths:
            b = max(1, tokens // n)
            shape = (b, num_heads, n, d)
            q, k, v = (
                torch.randn(shape, device=DEVICE, dtype=dtype, requires_grad=True) for _ in range(3)
            )
            d_out = torch.randn(shape, device=DEVICE, dtype=dtype)
            flops = attention_flops(b, num_heads, n, n, d, causal=causal)
            row = {"n": n, "batch_size": b, "num_heads": num_heads, "head_dim": d, "causal": causal}
            for label, backend in impls.items():
                try:
                    if label == "triton":

                        def fn(q, k, v, causal=causal):
                            return triton_flash_attention(q, k, v, causal=causal)

                        fwd, fwd_bwd = time_impl(fn, q, k, v, d_out)
                    else:
                        ctx = sdpa_backend(backend)
                        if ctx is None:
                            continue

                        def fn(q, k, v, causal=causal):
                            return torch.nn.functional.scaled_dot_product_attention(
                                q, k, v, is_causal=causal
                            )

                        with ctx():
                            fwd, fwd_bwd = time_impl(fn, q, k, v, d_out)
                except Exception as err:  # a backend refusing this shape is a result
                    row[label] = {"error": f"{type(err).__name__}: {str(err)[:200]}"}
                    continue
                row[label] = {
                    "fwd_ms": fwd,
                    "fwd_bwd_ms": fwd_bwd,
                    "fwd_tflops": flops / fwd / 1e9,
                    "fwd_bwd_tflops": 3.5 * flops / fwd_bwd / 1e9,
                }
            for base in ("sdpa_flash", "sdpa_cudnn"):
                if "fwd_ms" in row.get("triton", {}) and "fwd_ms" in row.get(base, {}):
                    row[f"ratio_fwd_vs_{base}"] = row[base]["fwd_ms"] / row["triton"]["fwd_ms"]
                    row[f"ratio_fwd_bwd_vs_{base}"] = (
                        row[base]["fwd_bwd_ms"] / row["triton"]["fwd_bwd_ms"]
                    )
            rows.append(row)
            print("  " + timing_line(row), flush=True)
            del q, k, v, d_out
    report.data["phases"]["timing"] = rows


def timing_line(row) -> str:
    def tf(label, key):
        return f"{row[label][key]:6.0f}" if key in row.get(label, {}) else "     -"

    return (
        f"{'causal' if row['causal'] else 'full  '} n={row['n']:5d} B={row['batch_size']:2d} | "
        f"fwd TFLOP/s triton {tf('triton', 'fwd_tflops')} flash {tf('sdpa_flash', 'fwd_tflops')}"
        f" cudnn {tf('sdpa_cudnn', 'fwd_tflops')} | fwd+bwd triton "
        f"{tf('triton', 'fwd_bwd_tflops')} flash {tf('sdpa_flash', 'fwd_bwd_tflops')} cudnn "
        f"{tf('sdpa_cudnn', 'fwd_bwd_tflops')} | ratio vs flash fwd "
        f"{row.get('ratio_fwd_vs_sdpa_flash', float('nan')):.2f} fwd+bwd "
        f"{row.get('ratio_fwd_bwd_vs_sdpa_flash', float('nan')):.2f}"
    )


# --- phase 4 ------------------------------------------------------------------------------------


def dispatch_checks(report: Report) -> None:
    from attention.dispatch import attend, available_backends, pick_backend, torch_sdpa
    from attention.functional import scaled_dot_product_attention

    out = {"available": available_backends(DEVICE)}
    out["auto_bf16_d128"] = pick_backend(DEVICE, torch.bfloat16, 128)
    n = size(300, 40)
    q, k, v = (torch.randn(2, 4, n, 64, device=DEVICE, dtype=torch.float16) for _ in range(3))
    ref = scaled_dot_product_attention(q.double(), k.double(), v.double(), causal=True)
    for backend in ["auto", *out["available"]]:
        err = rel_err(attend(q, k, v, causal=True, backend=backend), ref)
        out[f"err_{backend}"] = err
        if err > 5e-3:
            report.fail(f"dispatch backend {backend}: rel err {err:.1e}")
    # Fully masked rows through torch's fused kernels: zeros, finite gradients.
    mask = torch.rand(2, 1, n, n, device=DEVICE) < 0.5
    mask[:, :, 7] = False
    leaves = [t.detach().float().requires_grad_() for t in (q, k, v)]
    got = torch_sdpa(*leaves, mask)
    got.sum().backward()
    finite = all(bool(torch.isfinite(t.grad).all()) for t in leaves)
    zero_row = bool((got[:, :, 7] == 0).all())
    out["masked_row_zero"], out["masked_grads_finite"] = zero_row, finite
    if not (zero_row and finite):
        report.fail("torch_sdpa fully masked row on CUDA")
    if out["auto_bf16_d128"] != ("torch" if SMOKE else "triton"):
        report.fail(f"auto picked {out['auto_bf16_d128']} for bf16 d128 on CUDA, not triton")
    print(f"  {out}")
    report.data["phases"]["dispatch"] = out


# --- phase 5 ------------------------------------------------------------------------------------


def variants(report: Report) -> None:
    from attention.efficient import (
        bigbird_layout,
        block_sparse_attention,
        flash_attention,
        linear_attention,
        sliding_window_attention,
    )
    from attention.functional import scaled_dot_product_attention
    from attention.masks import block_layout_to_mask, sliding_window_mask

    results = {}
    n = size(1000, 100)
    g = torch.Generator(device=DEVICE).manual_seed(0)
    q, k, v = (torch.randn(2, 4, n, 64, device=DEVICE, generator=g) for _ in range(3))

    def record(name, got, ref, tol=1e-4):
        err = rel_err(got, ref)
        results[name] = {"err": err, "pass": err <= tol}
        print(f"  {'ok  ' if err <= tol else 'FAIL'} {name}: rel err {err:.1e}")
        if err > tol:
            report.fail(f"variant {name}")

    def attempt(name, fn):
        try:
            fn()
        except Exception as err:
            results[name] = {"error": f"{type(err).__name__}: {str(err)[:300]}"}
            report.fail(f"variant {name} raised {type(err).__name__}")

    for causal in (False, True):
        attempt(
            f"flash causal={causal}",
            lambda causal=causal: record(
                f"flash causal={causal}",
                flash_attention(q, k, v, causal=causal),
                scaled_dot_product_attention(q, k, v, causal=causal),
            ),
        )
    mask = sliding_window_mask(n, left=64, right=0, device=DEVICE)
    attempt(
        "sliding_window",
        lambda: record(
            "sliding_window",
            sliding_window_attention(q, k, v, left=64, right=0),
            scaled_dot_product_attention(q, k, v, mask),
        ),
    )
    n_blocks = -(-n // 64)
    layout = bigbird_layout(n_blocks, n_window=1, n_global=1, n_random=2)
    block_mask = block_layout_to_mask(layout, 64, n, n).to(DEVICE)
    attempt(
        "block_sparse",
        lambda: record(
            "block_sparse",
            block_sparse_attention(q, k, v, layout.to(DEVICE), block_size=64),
            scaled_dot_product_attention(q, k, v, block_mask),
        ),
    )
    for causal in (False, True):  # no softmax reference: CUDA must agree with the CPU
        attempt(
            f"linear causal={causal}",
            lambda causal=causal: record(
                f"linear causal={causal} (vs CPU)",
                linear_attention(q, k, v, causal=causal),
                linear_attention(q.cpu(), k.cpu(), v.cpu(), causal=causal),
                tol=1e-4,
            ),
        )
    report.data["phases"]["variants"] = results


# --- phase 6 ------------------------------------------------------------------------------------


def flex_checks(report: Report) -> None:
    from attention.functional import scaled_dot_product_attention
    from attention.gpu import flex
    from attention.masks import block_layout_to_mask, sliding_window_mask

    results = {}
    n, bs = size(1000, 60), size(128, 8)
    path = "flex_eager" if SMOKE else "auto"  # auto must resolve to compiled flex on CUDA
    want_path = "flex_eager" if SMOKE else "flex"
    layout = torch.rand(4, 8, 8, device=DEVICE) < 0.4
    layout[:, 3] = False  # query block 3 sees nothing: zeros
    # Each case compiles a kernel (tens of seconds): one dtype per mask kind.
    cases = [
        (
            "sliding_window float32",
            torch.float32,
            lambda q, k, v: flex.flex_sliding_window(
                q, k, v, left=100, right=0, path=path, return_path=True
            ),
            sliding_window_mask(n, left=100, right=0, device=DEVICE),
        ),
        (
            "block_sparse bfloat16",
            torch.bfloat16,
            lambda q, k, v: flex.flex_block_sparse(
                q, k, v, layout, block_size=bs, path=path, return_path=True
            ),
            block_layout_to_mask(layout, bs, n, n),
        ),
    ]
    for key, dtype, run, mask in cases:
        q, k, v = (torch.randn(2, 4, n, 64, device=DEVICE, dtype=dtype) for _ in range(3))
        tol = 1e-3 if dtype == torch.float32 else 1.5e-2  # 1e-3: flex may use TF32
        try:
            start = time.time()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # flex_eager: "called without torch.compile"
                got, got_path = run(q, k, v)
            first_s = time.time() - start
            ref = scaled_dot_product_attention(q.double(), k.double(), v.double(), mask)
            err = rel_err(got, ref)
            ok = err <= tol and got_path == want_path
            results[key] = {"err": err, "path": got_path, "first_call_s": first_s, "pass": ok}
            print(f"  {'ok  ' if ok else 'FAIL'} flex {key}: path {got_path}, err {err:.1e}, "
                  f"first call {first_s:.1f} s")  # fmt: skip
            if not ok:
                report.fail(f"flex {key}")
        except Exception as err:
            results[key] = {"error": f"{type(err).__name__}: {str(err)[:300]}"}
            report.fail(f"flex {key} raised {type(err).__name__}")
            traceback.print_exc()
    report.data["phases"]["flex"] = results


# --- phase 7 ------------------------------------------------------------------------------------


def sweep(report: Report, num_heads: int) -> None:
    from attention.gpu import triton_flash as tf

    base = tf.choose_configs(128, torch.bfloat16)
    kc = tf.KernelConfig
    forward = [
        kc(128, 64, 8, 3),
        kc(128, 128, 8, 3),
        kc(128, 64, 4, 3),
        kc(128, 128, 8, 2),
        kc(64, 64, 4, 4),
        kc(128, 32, 4, 4),
    ]
    dkdv = [
        kc(32, 128, 8, 3),
        kc(64, 128, 8, 3),
        kc(16, 128, 8, 4),
        kc(32, 64, 4, 4),
        kc(64, 64, 4, 3),
    ]
    dq = [kc(128, 32, 8, 3), kc(128, 64, 8, 3), kc(64, 32, 4, 4), kc(64, 64, 4, 3)]
    n, d = size(4096, 64), size(128, 32)
    b = max(1, size(16384, 64) // n)
    dtype = torch.float16 if SMOKE else torch.bfloat16
    if SMOKE:
        forward, dkdv, dq = forward[:2], dkdv[:2], dq[:2]
    results = []
    for causal in (False, True):
        q, k, v = (
            torch.randn(b, num_heads, n, d, device=DEVICE, dtype=dtype, requires_grad=True)
            for _ in range(3)
        )
        d_out = torch.randn_like(q)
        flops = tf.attention_flops(b, num_heads, n, n, d, causal=causal)
        trials = [("forward", c, tf.FlashConfigs(c, base.dkdv, base.dq)) for c in forward]
        trials += [("dkdv", c, tf.FlashConfigs(base.forward, c, base.dq)) for c in dkdv]
        trials += [("dq", c, tf.FlashConfigs(base.forward, base.dkdv, c)) for c in dq]
        for kernel, cfg, cfgs in trials:
            if report.over_budget():
                print("  sweep stopped: budget spent")
                report.data["phases"]["sweep"] = results
                return

            def fn(q, k, v, cfgs=cfgs, causal=causal):
                return tf.triton_flash_attention(q, k, v, causal=causal, configs=cfgs)

            entry = {"kernel": kernel, "config": cfg.__dict__, "causal": causal}
            try:
                fwd, fwd_bwd = time_impl(fn, q, k, v, d_out)
                entry.update(
                    fwd_tflops=flops / fwd / 1e9,
                    fwd_bwd_tflops=3.5 * flops / fwd_bwd / 1e9,
                )
                print(
                    f"  {kernel:7s} {cfg} causal={causal}: fwd {entry['fwd_tflops']:.0f} "
                    f"fwd+bwd {entry['fwd_bwd_tflops']:.0f} TFLOP/s"
                )
            except Exception as err:
                entry["error"] = f"{type(err).__name__}: {str(err)[:200]}"
                print(f"  {kernel:7s} {cfg} causal={causal}: {entry['error']}")
            results.append(entry)
    report.data["phases"]["sweep"] = results


def summarize(report: Report) -> None:
    """Repeat the numbers that matter at the end of the output (the part that gets read)."""
    phases = report.data["phases"]
    checks = phases.get("triton_correctness", [])
    if isinstance(checks, list) and checks:
        worst = max(checks, key=lambda c: max(c[lab]["err"] for lab in ("out", "dq", "dk", "dv")))
        passed = sum(c["pass"] for c in checks)
        print(
            f"== summary: triton correctness {passed}/{len(checks)} passed; worst {worst['case']}"
        )
    for row in phases.get("timing", []) if isinstance(phases.get("timing"), list) else []:
        print("  " + timing_line(row))
    trials = phases.get("sweep")
    if isinstance(trials, list):
        for kernel in ("forward", "dkdv", "dq"):
            for causal in (False, True):
                metric = "fwd_tflops" if kernel == "forward" else "fwd_bwd_tflops"
                ok = [
                    t
                    for t in trials
                    if t["kernel"] == kernel and t["causal"] == causal and metric in t
                ]
                if ok:
                    best = max(ok, key=lambda t: t[metric])
                    print(
                        f"  best {kernel} causal={causal}: {best['config']} "
                        f"{best[metric]:.0f} TFLOP/s"
                    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(ROOT / "bench" / "gpu_results.json"))
    parser.add_argument("--budget-s", type=float, default=200.0, help="skip later phases after")
    parser.add_argument("--tokens", type=int, default=16384, help="batch x n in the timings")
    parser.add_argument("--num-heads", type=int, default=16)
    parser.add_argument("--no-sweep", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="CPU + interpreter, toy sizes")
    args = parser.parse_args()
    if SMOKE:
        args.tokens, args.num_heads = 64, 2
    elif not torch.cuda.is_available():
        print("gpu_check: no CUDA device")
        return 2
    report = Report(Path(args.out), args.budget_s)
    phases = [
        ("environment", lambda: environment(report), True),
        ("triton correctness", lambda: triton_correctness(report), True),
        ("timing", lambda: timing(report, args.tokens, args.num_heads), True),
        ("dispatch", lambda: dispatch_checks(report), False),
        ("variants", lambda: variants(report), False),
        ("flex", lambda: flex_checks(report), False),
        ("sweep", lambda: sweep(report, args.num_heads), False),
    ]
    for name, run, essential in phases:
        if name == "sweep" and args.no_sweep:
            continue
        if not essential and report.over_budget():
            print(f"== {name}: skipped (budget of {args.budget_s:.0f} s spent)")
            report.data["phases"][name] = "skipped: budget"
            continue
        print(f"== {name} (t = {report.elapsed():.0f} s)", flush=True)
        torch.manual_seed(0)
        try:
            run()
        except Exception as err:
            traceback.print_exc()
            report.fail(f"phase {name} raised {type(err).__name__}: {str(err)[:200]}")
        report.save()
    summarize(report)
    failures = report.data["failures"]
    print(f"== done in {report.elapsed():.0f} s; {len(failures)} failure(s); JSON: {args.out}")
    for failure in failures:
        print(f"   {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
