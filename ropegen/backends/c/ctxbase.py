"""What every C render context shares: the chunk and streaming sizes, and how a parameter, a size or a
position scalar is named in the printed C (backends/c/context.py and rms_context.py build on it)."""
from __future__ import annotations

from ropegen import ir
from ropegen.ir.dtypes import DType
from ropegen.lower.abi import Param, find


# Tokens (rope) or rows (rmsnorm) are handed to threads in chunks of about this many input bytes:
# small enough to balance two busy cores, large enough that scheduling costs nothing.
CHUNK_BYTES = 256 * 1024

# Out-of-place outputs at least this large are written with non-temporal stores (they would not
# stay in cache anyway): above a typical last-level cache share, where memcpy streams too.
STREAM_BYTES = 32 * 1024 * 1024


def stream_min(out: DType, bytes_per_item: int) -> int:
    """Tokens (rows) from which outputs are streamed; 0: never. Measured: streaming pays for 2-, 4- and
    8-byte elements since 16-bit outputs are stored non-temporally straight from their conversion
    (llama3 f16 q+k T=4096, 2 threads: 0.80 of the copy streamed, 0.69 not; RMSNorm bf16 0.71 and
    0.66); fp8 outputs go through a store buffer and were not measured to gain."""
    if out.itemsize < 2:
        return 0
    return max(1, STREAM_BYTES // max(1, bytes_per_item))


# The vector RoPE variants fetch the heads of the token about this many input bytes on into the L2
# (rope.c.j2's RG_FAR); llama3 q + k f16 from memory ran alike with 3 to 8 tokens (30 to 80 KiB) ahead.
FAR_BYTES = 48 * 1024


def far_tokens(bytes_per_token: int) -> int:
    """Tokens between a token and the one whose heads are fetched into the L2 while it is rotated:
    FAR_BYTES of input, at least 2 (the next token is fetched into the L1) and at most 16."""
    return max(2, min(16, -(-FAR_BYTES // max(1, bytes_per_token))))


def param_name(params: list[Param], *source) -> str:
    """The C identifier of the parameter the host fills from `source` (see lower/abi.py)."""
    return find(params, *source).name


def size_expr(v: ir.Size, params: list[Param]) -> int | str:
    """A size as templates/c prints it: an int literal, or the dim parameter of its symbol."""
    return v if isinstance(v, int) else param_name(params, "dim", v)


def scalar_expr(v: int | str | None, params: list[Param]) -> int | str | None:
    """A position scalar: an int literal, or the parameter carrying a rank-0 input."""
    return param_name(params, "scalar", v) if isinstance(v, str) else v
