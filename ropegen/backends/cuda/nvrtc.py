"""Compile CUDA C++ with NVRTC through ctypes: no GPU, no CUDA toolkit, only pip packages.

NVRTC comes from the `nvidia-cuda-nvrtc-cu12` wheel (libnvrtc.so.12 / nvrtc64_*.dll) and the
cuda_fp16.h / cuda_bf16.h headers from `nvidia-cuda-runtime-cu12`; a system CUDA toolkit
(CUDA_HOME / CUDA_PATH, /usr/local/cuda) is used when the wheels are missing. The C API used here
(nvrtcCreateProgram, nvrtcCompileProgram, nvrtcGetCUBIN, ...) has been stable since CUDA 11.1.
"""
from __future__ import annotations

import ctypes
import glob
import os
import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

# Front-end options: C++17, and ptxas warnings for register spills and local memory (a RoPE or
# RMSNorm kernel that needs either has a bug in its tiling).
# --fmad=false: the kernels spell their rounding with __f*_rn intrinsics, and the few plain double
# operations left (angle reduction) must not be contracted either: numerics stay as written.
BASE_OPTIONS = ("--std=c++17", "--fmad=false", "-Xptxas=--warn-on-spills",
                "-Xptxas=--warn-on-local-memory-usage")


class NvrtcUnavailable(RuntimeError):
    """NVRTC or the CUDA headers cannot be found on this machine."""


class NvrtcError(RuntimeError):
    """A compilation failed (or, with strict=True, printed a warning)."""

    def __init__(self, message: str, log: str):
        super().__init__(f"{message}\n{log}")
        self.log = log


@dataclass(frozen=True)
class Compiled:
    arch: str            # e.g. "sm_90" (cubin) or "compute_90" (PTX)
    binary: bytes        # cubin or PTX text (NUL-terminated as NVRTC returns it, stripped)
    log: str
    version: tuple[int, int]

    @property
    def is_cubin(self) -> bool:
        return self.arch.startswith("sm_")


def _site_dirs() -> list[Path]:
    out = []
    for p in sys.path:
        if p and os.path.isdir(p):
            out.append(Path(p))
    return out


def _toolkit_roots() -> list[Path]:
    roots = [os.environ.get(v) for v in ("CUDA_HOME", "CUDA_PATH")]
    out = [Path(r) for r in roots if r]
    out += [Path(p) for p in sorted(glob.glob("/usr/local/cuda*"), reverse=True)]
    return out


@lru_cache(maxsize=1)
def library_path() -> Path:
    """libnvrtc: the pip wheel first, then a CUDA toolkit."""
    names = ("libnvrtc.so.12", "libnvrtc.so.13", "libnvrtc.so") if os.name != "nt" else ()
    for site in _site_dirs():
        d = site / "nvidia" / "cuda_nvrtc"
        for sub in ("lib", "bin"):
            for name in names:
                if (d / sub / name).is_file():
                    return d / sub / name
            if os.name == "nt":
                hits = sorted((d / sub).glob("nvrtc64_*.dll"))
                if hits:
                    return hits[-1]
    for root in _toolkit_roots():
        for sub in ("lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"):
            for name in names:
                if (root / sub / name).is_file():
                    return root / sub / name
    raise NvrtcUnavailable("NVRTC not found: pip install nvidia-cuda-nvrtc-cu12 (or set CUDA_HOME)")


@lru_cache(maxsize=1)
def include_dir() -> Path:
    """The folder holding cuda_fp16.h and cuda_bf16.h."""
    for site in _site_dirs():
        d = site / "nvidia" / "cuda_runtime" / "include"
        if (d / "cuda_fp16.h").is_file() and (d / "cuda_bf16.h").is_file():
            return d
    for root in _toolkit_roots():
        for sub in ("include", "targets/x86_64-linux/include", "targets/sbsa-linux/include"):
            d = root / sub
            if (d / "cuda_fp16.h").is_file() and (d / "cuda_bf16.h").is_file():
                return d
    raise NvrtcUnavailable("cuda_fp16.h not found: pip install nvidia-cuda-runtime-cu12 (or set CUDA_HOME)")


@lru_cache(maxsize=1)
def _lib() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(library_path()))
    lib.nvrtcGetErrorString.restype = ctypes.c_char_p
    lib.nvrtcGetErrorString.argtypes = [ctypes.c_int]
    lib.nvrtcCreateProgram.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p, ctypes.c_char_p,
                                       ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    lib.nvrtcCompileProgram.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    lib.nvrtcDestroyProgram.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    for name in ("nvrtcGetProgramLogSize", "nvrtcGetPTXSize", "nvrtcGetCUBINSize"):
        getattr(lib, name).argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
    for name in ("nvrtcGetProgramLog", "nvrtcGetPTX", "nvrtcGetCUBIN"):
        getattr(lib, name).argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    return lib


def available() -> str | None:
    """None when NVRTC and the headers are present, else why not."""
    try:
        _lib()
        include_dir()
    except (NvrtcUnavailable, OSError) as e:
        return str(e)
    return None


def version() -> tuple[int, int]:
    lib = _lib()
    major, minor = ctypes.c_int(), ctypes.c_int()
    _check(lib, lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    return major.value, minor.value


def _check(lib, code: int, what: str, log: str = "") -> None:
    if code != 0:
        raise NvrtcError(f"{what}: {lib.nvrtcGetErrorString(code).decode()}", log)


def compile_source(source: str, arch: str = "sm_80", *, name: str = "kernel.cu",
                   options: tuple[str, ...] = (), strict: bool = True) -> Compiled:
    """Compile `source` for `arch` (sm_XX gives a cubin, compute_XX gives PTX).

    strict: a log that mentions a warning is an error (NVRTC has no -Werror of its own).
    """
    if not re.fullmatch(r"(sm|compute)_\d+[a-z]?", arch):
        raise ValueError(f"arch must look like sm_90 or compute_90, not {arch!r}")
    lib = _lib()
    opts = [f"--gpu-architecture={arch}", *BASE_OPTIONS, f"-I{include_dir()}", *options]
    prog = ctypes.c_void_p()
    _check(lib, lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None),
           "nvrtcCreateProgram")
    try:
        arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
        rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, buf)
        log = buf.value.decode(errors="replace").strip()
        _check(lib, rc, f"NVRTC could not compile {name} for {arch}", log)
        if strict and re.search(r"\bwarning\b", log, re.IGNORECASE):
            raise NvrtcError(f"NVRTC warned while compiling {name} for {arch}", log)
        getsize, get = (lib.nvrtcGetCUBINSize, lib.nvrtcGetCUBIN) if arch.startswith("sm_") else \
            (lib.nvrtcGetPTXSize, lib.nvrtcGetPTX)
        _check(lib, getsize(prog, ctypes.byref(size)), "reading the compiled size", log)
        out = ctypes.create_string_buffer(size.value)
        _check(lib, get(prog, out), "reading the compiled code", log)
        binary = out.raw[:size.value]
        if not arch.startswith("sm_"):
            binary = binary.rstrip(b"\0")
        return Compiled(arch, binary, log, version())
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
