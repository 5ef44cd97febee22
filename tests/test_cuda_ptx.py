"""The CUDA kernels' memory accesses proven in the compiled code, and their launch shapes chosen from
the work, all without a GPU.

* every example compiles with NVRTC to PTX for sm_90; in every kernel lower/gpu vectorises, each
  global load and store of the rotated / normalized data is one vector access of the planned bytes
  (`ld/st.global.v4.b32`: 128 bits, or `.v2.b32`: 64 bits where the tiling needs 8-byte vectors: ATB,
  compute f64; an RMSNorm scale indexed by the element too; an fp8 RoPE output: vectors of its own
  bytes), no such kernel stores anything element by element, and the scalar kernels use no vector
  access at all;
* the same in the machine code (SASS: LDG.E.128 / STG.E.128) when cuobjdump and nvdisasm are found
  (PATH, CUDA_HOME, or the nvidia-cuda-cuobjdump / nvidia-cuda-nvdisasm wheels); else that test skips;
* rows of 65536 f32 (and bf16 with a residual) compile without a spill: such a row is read twice,
  not cached in registers.
The launch shapes themselves are tests/test_gpu_shapes.py's.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path

import pytest

import ropegen
from ropegen.backends import cuda as cuda_backend
from ropegen.backends.cuda import nvrtc

ROOT = Path(__file__).resolve().parent.parent
OPS = [op for path in sorted((ROOT / "examples").glob("*.rope")) for op in ropegen.compile(path)]
IDS = [op.name for op in OPS]

# a vector global access in PTX: ld/st, .v2 or .v4, element type and width
_VEC = re.compile(r"\b(ld|st)\.global(?:\.nc)?\.v([24])\.[bufs](\d+)\b")
_SCALAR = re.compile(r"\b(ld|st)\.global(?:\.nc)?\.([bufs])(\d+)\b")


def _why_no_nvrtc() -> str | None:
    why = nvrtc.available()
    if why and os.environ.get("CI"):
        pytest.fail(f"NVRTC must be available in CI (pip install -e '.[test]'): {why}")
    return why


def _cfg(op):
    return cuda_backend.CudaBackend().config(op.plan)


def _source(op) -> str:
    return op.sources["cuda"][f"{op.name}.cu"]


@lru_cache(maxsize=1)
def _ptx() -> dict:
    """op name -> {kernel name: its PTX body} (or the exception), compiled in parallel."""
    def one(op):
        try:
            text = nvrtc.compile_source(_source(op), "compute_90", name=f"{op.name}.cu").binary.decode()
        except Exception as e:  # noqa: BLE001 - reported by the test
            return e
        return _split(text, r"^\.(?:visible )?\.entry (\w+)\(")

    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        return dict(zip(IDS, pool.map(one, OPS)))


def _split(text: str, header: str) -> dict[str, str]:
    """Function name -> its text, cutting `text` at each line matching `header` (group 1: the name)."""
    marks = [(m.start(), m.group(1)) for m in re.finditer(header, text, re.M)]
    return {name: text[a:b] for (a, name), (b, _) in zip(marks, marks[1:] + [(len(text), "")])}


def _vector_bytes(body: str, op: str) -> list[int]:
    return [int(n) * int(bits) // 8 for o, n, bits in _VEC.findall(body) if o == op]


def _store_bytes(body: str) -> list[int]:
    """Bytes of every global store, vector or not."""
    return _vector_bytes(body, "st") + [int(bits) // 8 for o, _, bits in _SCALAR.findall(body) if o == "st"]


def _planned(op, k) -> tuple[set[int], set[int], int]:
    """(bytes of each vector load of the data, of each store, the fewest stores the kernel's text
    must hold) for kernel k of op; empty sets: element accesses."""
    p = op.plan
    if k.vector == 1:
        return set(), set(), 0
    if op.kind == "rope":
        # an fp8 y: vectors of its own bytes (8 from bf16 x, 4 from f32 x: one 32-bit store)
        return {k.access_bytes}, {k.store_bytes}, len(p.streams) * sum(g.n_vec for g in k.groups)
    stores = {k.vector * p.y.itemsize} | ({k.vector * p.x.itemsize} if p.residual else set())
    # the scale too, where it is indexed by the element (a broadcast scale is read per element)
    loads = {k.vector * p.x.itemsize} | ({k.vector * p.scale.itemsize} if _cfg(op).scale_direct else set())
    return loads, stores, len(stores)


@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_vector_kernels_access_their_data_in_whole_vectors_in_ptx(op):
    why = _why_no_nvrtc()
    if why:
        pytest.skip(f"NVRTC unavailable: {why}")
    kernels = _ptx()[op.name]
    if isinstance(kernels, Exception):
        pytest.fail(str(kernels))
    for k in _cfg(op).kernels:
        body = kernels[k.name]
        loads, stores, fewest = _planned(op, k)
        got_loads, got_stores = _vector_bytes(body, "ld"), _store_bytes(body)
        assert set(got_loads) == loads, (k.name, "vector loads", got_loads, loads)
        if not stores:      # the scalar kernel: no vector access at all
            assert not _vector_bytes(body, "st"), (k.name, got_stores)
            continue
        # every store of a vector kernel is one whole vector (the error word is an atomic)
        assert set(got_stores) == stores and len(got_stores) >= fewest, (k.name, "stores", got_stores, stores)
    assert any(k.vector > 1 for k in _cfg(op).kernels) or op.name == "qwen3_vl", "nothing vectorised"


def test_ptx_check_sees_a_split_store():
    """The check above fails on what the struct assignment compiled to before (four 32-bit stores
    of 16-bit pairs where one 128-bit store was planned)."""
    body = "\tst.global.v2.u16 \t[%rd1+-8], {%rs3, %rs6};\n\tst.global.v4.b32 \t[%rd1], {%r1, %r2, %r3, %r4};\n"
    assert _vector_bytes(body, "st") == [4, 16]
    assert set(_vector_bytes(body, "st")) != {16}
    assert _vector_bytes("\tld.global.nc.v2.f64 \t{%fd1, %fd2}, [%rd3];\n", "ld") == [16]


# ---------------------------------------------------------------------------------------------
# the machine code, where the CUDA binary utilities are installed

def _tool(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    roots = [Path(os.environ[v]) / "bin" for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    roots += [Path(p) / "nvidia" / sub / "bin" for p in sys.path if p and os.path.isdir(p)
              for sub in ("cu13", "cu12", "cuda_cuobjdump", "cuda_nvdisasm")]
    for r in roots:
        if (r / name).is_file() and os.access(r / name, os.X_OK):
            return str(r / name)
    return None


def _sass_tools() -> tuple[str, str] | str:
    cuobjdump, nvdisasm = _tool("cuobjdump"), _tool("nvdisasm")
    if not cuobjdump or not nvdisasm:
        return ("cuobjdump and nvdisasm not found (PATH, CUDA_HOME, or pip install nvidia-cuda-cuobjdump "
                "nvidia-cuda-nvdisasm): the PTX test above covers the accesses")
    return cuobjdump, nvdisasm


_SASS_VEC = {16: "128", 8: "64", 4: ""}   # STG.E: 32 bits


@pytest.mark.slow
def test_vector_kernels_access_their_data_in_whole_vectors_in_sass(tmp_path):
    tools = _sass_tools()
    if isinstance(tools, str):
        pytest.skip(tools)
    why = _why_no_nvrtc()
    if why:
        pytest.skip(f"NVRTC unavailable: {why}")
    cuobjdump, nvdisasm = tools
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(nvdisasm).parent), os.environ.get("PATH", "")]))
    for op in OPS:
        cubin = tmp_path / f"{op.name}.cubin"
        cubin.write_bytes(nvrtc.compile_source(_source(op), "sm_90", name=f"{op.name}.cu").binary)
        r = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True, env=env, timeout=120)
        assert r.returncode == 0, r.stderr
        functions = _split(r.stdout, r"Function : (\w+)")
        for k in _cfg(op).kernels:
            sass = functions[k.name]
            loads, stores, _ = _planned(op, k)
            ldg = set(re.findall(r"\bLDG\.E\.(64|128)\b", sass))
            stg = re.findall(r"\bSTG\.E(?:\.(\w+))?\b", sass)
            assert {_SASS_VEC[b] for b in loads} <= ldg, (op.name, k.name, ldg)
            if stores:
                assert set(stg) == {_SASS_VEC[b] for b in stores}, (op.name, k.name, stg)


WIDE_ROWS = """
rmsnorm wide_row {
    in x:      f32[T, 65536]
    in weight: f32[65536]
    out y
    epsilon = 1e-6
}
rmsnorm wide_residual {
    in x:        bf16[T, 65536]
    in residual: bf16[T, 65536]
    in weight:   bf16[65536]
    out y
    out h
    residual     = residual
    residual_add = stash
    epsilon      = 1e-6
}
"""


@pytest.mark.parametrize("name", ["wide_row", "wide_residual"])
def test_wide_rows_compile_without_spills(name):
    """NVRTC's strict mode fails on ptxas's spill and local-memory warnings (nvrtc.BASE_OPTIONS)."""
    why = _why_no_nvrtc()
    if why:
        pytest.skip(f"NVRTC unavailable: {why}")
    op = ropegen.compile(WIDE_ROWS)[name]
    vec = _cfg(op).vec
    assert vec.vector * op.plan.x.itemsize == 16 and not vec.cache     # streamed twice
    nvrtc.compile_source(_source(op), "sm_90", name=f"{name}.cu", strict=True)
