"""Every example operator on the CUDA device, for compute-sanitizer to watch.

    compute-sanitizer --tool memcheck --error-exitcode 99 python3 bench/cuda_sanitize.py [SPEC ...]

CuPy's memory pool is switched off first, so that each array is its own cudaMalloc: a pool hands out
pieces of one large allocation, and a read or write past an array's end lands in a neighbour where
memcheck cannot see it. Then, for each operator: `ropegen check`'s cases (odd sizes, strided views,
one token, the float64 reference compared), and one more call on device arrays written in place. The
exit status is 1 when an output disagrees with the reference, 0 otherwise; the sanitizer's own status
(--error-exitcode) says whether it saw an error. bench/gpu_session.sh runs it.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv: list[str]) -> int:
    import cupy as cp

    import ropegen
    from ropegen.crosscheck import RAN, _storage_dtype, check_operator, compare, operand_magnitude
    from ropegen.ops import reference
    from ropegen.ops.inputs import CASES, make_inputs

    cp.cuda.set_allocator(None)
    cp.cuda.set_pinned_memory_allocator(None)
    specs = argv or sorted(str(p) for p in (ROOT / "examples").glob("*.rope"))
    bad = runs = 0
    for spec in specs:
        for op in ropegen.compile(spec):
            name = op.name
            for r in check_operator(op, ("cuda",)):
                runs += r.status == RAN
                if not (r.ok and r.status == RAN):
                    bad += 1
                    print(f"{spec} {name} [{r.case}]: {r.status} {r.note} max abs {r.max_abs}")
            arrays = make_inputs(op.ir, CASES[1], seed=3)
            ref = reference.evaluate(op.ir, arrays)
            try:
                dev = {n: cp.asarray(a) for n, a in arrays.items()}
            except (TypeError, ValueError) as e:       # a CuPy without bfloat16 arrays
                print(f"{spec} {name}: in place not run: {type(e).__name__}: {e}")
                continue
            try:
                outs = op.run_all(*[dev[n] for n in op.inputs], backend="cuda", inplace=True)
            except ValueError as e:                     # an operator that cannot write in place says so
                print(f"{spec} {name}: in place refused: {e}")
                continue
            magnitude = operand_magnitude(arrays, ref)
            runs += 1
            for out_name, out in zip(op.outputs, outs):
                if not compare(cp.asnumpy(out), ref[out_name], _storage_dtype(op), magnitude)[2]:
                    bad += 1
                    print(f"{spec} {name} in place: {out_name} disagrees with the reference")
    print(f"cuda_sanitize: {runs} runs over {len(specs)} specs, {bad} disagreeing")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
