"""The generated C as a CMake library (issue 15): `ropegen compile` writes, beside each spec's C sources,
a CMakeLists.txt (library ropegen_<spec>, ALIAS ropegen::<spec>) and a pkg-config template.

The files are byte-deterministic and name no path; a real CMake project links the library through
add_subdirectory with ropegen's numerics-pinned flags on the kernels only, and its programs give the
C backend's bits and NumPy's values; `cmake --install` puts a library, headers and a .pc file that
pkg-config answers for, and a program built from those answers runs. Skips (with the reason) where
cmake, a C compiler or pkg-config is missing.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import ropegen
from ropegen import backends, ops
from ropegen.backends.c import build as cbuild
from ropegen.backends.c.backend import library_name
from ropegen.crosscheck import compare
from ropegen.generate import spec_files, write_program
from ropegen.spec.limits import MAX_NAME

ROOT = Path(__file__).resolve().parents[1]
SPECS = ("llama3", "onnx_rmsnorm")
T, QH, KH, D = 5, 32, 8, 128      # llama3_8b: bf16 q [T, 32, 128], k [T, 8, 128]
N, W = 3, 4096                    # rms_last_axis: f32 x [N, 4096], scale [4096]

C_TARGET = next(b.name for b in backends.BACKENDS if b.folder == "c")

# The test programs read their inputs from the folder argv[1] names, run one kernel and write its
# outputs there. Valid as C and as C++ (the header's extern "C" is what a C++ build needs).
IO = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static void *load(const char *dir, const char *name, size_t bytes)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    void *p = malloc(bytes);
    if (!f || !p || fread(p, 1, bytes, f) != bytes) { fprintf(stderr, "cannot read %s\n", path); exit(2); }
    fclose(f);
    return p;
}

static void save(const char *dir, const char *name, const void *p, size_t bytes)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, bytes, f) != bytes || fclose(f) != 0) { fprintf(stderr, "cannot write %s\n", path); exit(2); }
}
"""

ROPE_CALL = r"""
#include "llama3_8b.h"
enum { T = %d, QH = %d, KH = %d, D = %d };

int main(int argc, char **argv)
{
    if (argc != 2) return 2;
    const uint16_t *q = (const uint16_t *)load(argv[1], "q.bin", sizeof(uint16_t) * T * QH * D);
    const uint16_t *k = (const uint16_t *)load(argv[1], "k.bin", sizeof(uint16_t) * T * KH * D);
    const int64_t *pos = (const int64_t *)load(argv[1], "positions.bin", sizeof(int64_t) * T);
    uint16_t *q_rot = (uint16_t *)malloc(sizeof(uint16_t) * T * QH * D);
    uint16_t *k_rot = (uint16_t *)malloc(sizeof(uint16_t) * T * KH * D);
    int status = ropegen_llama3_8b(q, QH * D, D, k, KH * D, D, pos, q_rot, QH * D, D, k_rot, KH * D, D, T, 2);
    if (status != ROPEGEN_OK) { fprintf(stderr, "status %%d\n", status); return 1; }
    save(argv[1], "q_rot.bin", q_rot, sizeof(uint16_t) * T * QH * D);
    save(argv[1], "k_rot.bin", k_rot, sizeof(uint16_t) * T * KH * D);
    return 0;
}
""" % (T, QH, KH, D)

RMS_CALL = r"""
#include "rms_last_axis.h"
enum { N = %d, W = %d };

int main(int argc, char **argv)
{
    if (argc != 2) return 2;
    const float *x = (const float *)load(argv[1], "x.bin", sizeof(float) * N * W);
    const float *scale = (const float *)load(argv[1], "scale.bin", sizeof(float) * W);
    float *y = (float *)malloc(sizeof(float) * N * W);
    int status = ropegen_rms_last_axis(x, scale, y, N, 2);
    if (status != ROPEGEN_OK) { fprintf(stderr, "status %%d\n", status); return 1; }
    save(argv[1], "y.bin", y, sizeof(float) * N * W);
    return 0;
}
""" % (N, W)


def _tools() -> None:
    if shutil.which("cmake") is None:
        pytest.skip("cmake is not installed (pip install cmake, or the test extra)")
    try:
        cbuild.check_usable()
    except cbuild.CompilerError as exc:
        pytest.skip(f"no usable C compiler: {exc}")


def _run(argv: list, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=600, **kw)
    assert r.returncode == 0, f"{' '.join(map(str, argv))}\n{r.stdout}\n{r.stderr}"
    return r


@pytest.fixture(scope="module")
def programs():
    return {s: ropegen.compile(ROOT / "examples" / f"{s}.rope") for s in SPECS}


@pytest.fixture(scope="module")
def cases(programs):
    """Each program's inputs and the outputs of NumPy and of the C backend (ctypes) for them."""
    rng = np.random.default_rng(15)
    rope, rms = programs["llama3"]["llama3_8b"], programs["onnx_rmsnorm"]["rms_last_axis"]
    rope_in = {"q": rng.standard_normal((T, QH, D)).astype(ml_dtypes.bfloat16),
               "k": rng.standard_normal((T, KH, D)).astype(ml_dtypes.bfloat16),
               "positions": np.array([0, 1, 7, 100, 8191], dtype=np.int64)}
    rms_in = {"x": rng.standard_normal((N, W)).astype(np.float32),
              "scale": rng.standard_normal(W).astype(np.float32)}
    out = {}
    for op, ins in ((rope, rope_in), (rms, rms_in)):
        outs = {b: op.run_all(*ins.values(), backend=b) for b in ("numpy", C_TARGET)}
        out[op.name] = (op, ins, dict(zip(op.outputs, zip(*outs.values()))))
    return out


def _write_inputs(folder: Path, ins: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, a in ins.items():
        (folder / f"{name}.bin").write_bytes(np.ascontiguousarray(a).tobytes())


def _check_outputs(folder: Path, case) -> None:
    """The program's outputs have the C backend's bits and are within the tolerance of NumPy's."""
    op, _, outs = case
    tol = ops.of(op.ir).tolerance_dtype(op.ir)
    for name, (numpy_out, c_out) in outs.items():
        got = np.frombuffer((folder / f"{name}.bin").read_bytes(), dtype=c_out.dtype).reshape(c_out.shape)
        assert got.tobytes() == c_out.tobytes(), f"{op.name}.{name}: other bits than the C backend's"
        ref = np.asarray(numpy_out).astype(np.float64)
        _, _, ok = compare(got, ref, tol, float(np.abs(ref).max()))
        assert ok, f"{op.name}.{name}: outside the tolerance of NumPy's result"


# ---------------------------------------------------------------------------------------------
# the files: written per spec, deterministic, no paths

def test_compile_writes_a_cmake_library_per_spec(programs, tmp_path):
    written = write_program(programs["llama3"], tmp_path, (C_TARGET,))
    names = sorted(p.name for p in written)
    assert names == ["CMakeLists.txt", "llama3_8b.c", "llama3_8b.h", "llama3_8b_cached.c",
                     "llama3_8b_cached.h", "ropegen_llama3.pc.in"], names
    text = (tmp_path / C_TARGET / "CMakeLists.txt").read_text(encoding="utf-8")
    assert text.startswith("# Generated by ropegen ") and "Spec sha256: " in text
    assert "add_library(ropegen_llama3\n    llama3_8b.c\n    llama3_8b_cached.c\n)" in text
    assert "add_library(ropegen::llama3 ALIAS ropegen_llama3)" in text
    pc = (tmp_path / C_TARGET / "ropegen_llama3.pc.in").read_text(encoding="utf-8")
    assert pc.startswith("# Generated by ropegen ") and "Libs: -L${libdir} -lropegen_llama3" in pc
    # the other targets write only their operators' files
    others = [b.name for b in backends.BACKENDS if b.name != C_TARGET]
    assert others and all(spec_files(programs["llama3"], t) == {} for t in others)


def test_cmake_files_are_deterministic_and_name_no_path(tmp_path):
    spec = (ROOT / "examples" / "onnx_rmsnorm.rope").read_text(encoding="utf-8")
    elsewhere = tmp_path / "some where" / "onnx_rmsnorm.rope"
    elsewhere.parent.mkdir()
    elsewhere.write_text(spec, encoding="utf-8")
    a = spec_files(ropegen.compile(ROOT / "examples" / "onnx_rmsnorm.rope"), C_TARGET)
    b = spec_files(ropegen.compile(elsewhere), C_TARGET)
    assert a == b and sorted(a) == ["CMakeLists.txt", "ropegen_onnx_rmsnorm.pc.in"]
    for text in a.values():
        assert str(ROOT) not in text and "some where" not in text and "/tmp" not in text
    # every operator's source is in the library, in one order
    listed = [ln.strip() for ln in a["CMakeLists.txt"].splitlines() if ln.strip().endswith(".c")]
    assert listed == sorted(f"{op.name}.c" for op in ropegen.compile(elsewhere))


@pytest.mark.parametrize("spec_file, word", [
    ("examples/llama3.rope", "llama3"), ("C:\\specs\\my-spec v2.rope", "my_spec_v2"),
    ("a.b.rope", "a_b"), ("-.rope", "first_op"), ("<spec>", "first_op"), ("x" * 250 + ".rope", "x" * MAX_NAME)])
def test_library_name_is_the_spec_stem_as_cmake_spells_it(spec_file, word):
    class Plan:
        name = "first_op"
    assert library_name(spec_file, [Plan()]) == word


# ---------------------------------------------------------------------------------------------
# a real CMake project: add_subdirectory, then cmake --install and pkg-config

@pytest.fixture(scope="module")
def generated(programs, tmp_path_factory):
    gen = tmp_path_factory.mktemp("cmake_gen")
    for stem, program in programs.items():
        write_program(program, gen / stem, (C_TARGET,))
    return gen


def test_add_subdirectory_links_the_kernels_with_pinned_flags(generated, cases, tmp_path):
    _tools()
    project = tmp_path / "user"
    shutil.copytree(generated, project / "gen")
    cxx = shutil.which(os.environ.get("CXX", "") or "c++") is not None
    rms_file = "rms_main.cpp" if cxx else "rms_main.c"       # C++ as well where there is a compiler
    (project / "rope_main.c").write_text(IO + ROPE_CALL, encoding="utf-8")
    (project / rms_file).write_text(IO + RMS_CALL, encoding="utf-8")
    (project / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.14)\n"
        f"project(user LANGUAGES C{' CXX' if cxx else ''})\n"
        f"add_subdirectory(gen/llama3/{C_TARGET})\n"
        f"add_subdirectory(gen/onnx_rmsnorm/{C_TARGET})\n"
        "add_executable(rope_main rope_main.c)\n"
        "target_link_libraries(rope_main PRIVATE ropegen::llama3)\n"
        f"add_executable(rms_main {rms_file})\n"
        "target_link_libraries(rms_main PRIVATE ropegen::onnx_rmsnorm)\n", encoding="utf-8")
    build = tmp_path / "build"
    _run(["cmake", "-S", project, "-B", build, "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON"])
    _run(["cmake", "--build", build, "-j", "2"])

    commands = json.loads((build / "compile_commands.json").read_text(encoding="utf-8"))
    by_file = {Path(c["file"]).name: c["command"].split() for c in commands}
    kernel, user = by_file["llama3_8b.c"], by_file["rope_main.c"]
    # build.py's flags, each one, on the kernels (no build type chosen: ropegen's -O3 too)
    assert all(f in kernel for f in cbuild.PINNED_FLAGS), (cbuild.PINNED_FLAGS, kernel)
    assert "-fopenmp" in kernel or "-fopenmp-simd" in kernel, kernel
    # the branch padding exactly where ropegen's own builds use it (the same compiler)
    assert set(cbuild.layout_flags()) == set(cbuild.BRANCH_ALIGN_FLAGS) & set(kernel), kernel
    # ... and PRIVATE: the user's own code keeps its flags
    assert not {"-ffp-contract=off", "-fno-fast-math", "-O3", *cbuild.BRANCH_ALIGN_FLAGS} & set(user), user

    for exe, case in (("rope_main", "llama3_8b"), ("rms_main", "rms_last_axis")):
        folder = tmp_path / exe
        _write_inputs(folder, cases[case][1])
        _run([build / exe, folder])
        _check_outputs(folder, cases[case])


@pytest.mark.parametrize("shared", [False, True], ids=["static", "shared"])
def test_install_gives_headers_library_and_a_pkg_config_file(generated, cases, tmp_path, shared):
    _tools()
    pkg_config = shutil.which("pkg-config") or shutil.which("pkgconf")
    if pkg_config is None:
        pytest.skip("pkg-config is not installed")
    build, configured, prefix = tmp_path / "build", tmp_path / "configured", tmp_path / "prefix"
    _run(["cmake", "-S", generated / "llama3" / C_TARGET, "-B", build, f"-DBUILD_SHARED_LIBS={'ON' if shared else 'OFF'}",
          "-DCMAKE_BUILD_TYPE=Release", f"-DCMAKE_INSTALL_PREFIX={configured}"])
    _run(["cmake", "--build", build, "-j", "2"])
    # installed elsewhere than configured: the .pc finds its folders from its own place
    _run(["cmake", "--install", build, "--prefix", prefix])
    assert not configured.exists()
    assert sorted(p.name for p in (prefix / "include" / "ropegen_llama3").iterdir()) == \
        ["llama3_8b.h", "llama3_8b_cached.h"]
    pcs = list(prefix.glob("lib*/pkgconfig/ropegen_llama3.pc"))
    assert len(pcs) == 1, list(prefix.rglob("*"))

    env = {**os.environ, "PKG_CONFIG_PATH": str(pcs[0].parent)}
    cflags = _run([pkg_config, "--cflags", "ropegen_llama3"], env=env).stdout.split()
    # a static library needs what it links itself (libm, OpenMP): the .pc's Libs.private
    libs = _run([pkg_config, *([] if shared else ["--static"]), "--libs", "ropegen_llama3"], env=env).stdout.split()
    assert "-lropegen_llama3" in libs and (shared or "-lm" in libs), libs
    includes = [Path(f[2:]) for f in cflags if f.startswith("-I")]
    assert any((i / "llama3_8b.h").is_file() for i in includes), cflags
    libdirs = [Path(f[2:]) for f in libs if f.startswith("-L")]
    built = [p.name for d in libdirs for p in d.glob("libropegen_llama3.*")]
    assert built and all((".a" in n) != shared for n in built), (libs, built)

    src = tmp_path / "rope_main.c"
    src.write_text(IO + ROPE_CALL, encoding="utf-8")
    exe = tmp_path / "rope_main"
    rpath = [f"-Wl,-rpath,{d}" for d in libdirs] if shared else []
    _run([*cbuild.compiler(), "-std=c11", *cflags, src, "-o", exe, *libs, *rpath])
    folder = tmp_path / "io"
    _write_inputs(folder, cases["llama3_8b"][1])
    _run([exe, folder])
    _check_outputs(folder, cases["llama3_8b"])
