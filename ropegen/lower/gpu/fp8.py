"""The constants of the GPU targets' float -> fp8 conversion (templates/gpu/_fp8.inc.j2), one set per
(source float type, fp8 type): the conversion works on the source's bits, so it rounds once, to
nearest even, subnormals included, with no fp8 intrinsic (ops/quant.py's contract: NaN stays NaN
with its sign, |p| >= max finite (infinities too) saturates, anything else rounds to the nearest fp8
value). Templates print these numbers; they never compute them.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from ropegen.ir.dtypes import DTYPES, DType

# (width in bits, fraction bits, exponent bias) of each source float type
_SOURCES = {"f32": (32, 23, 127), "f64": (64, 52, 1023)}

@dataclass(frozen=True)
class Fp8Cvt:
    """cvt_<src>_<dst>: every number its body prints (hex literals, except the shifts)."""

    src: str               # dtype names
    dst: str
    bits: int              # width of the source's bit pattern (the unsigned type holding it)
    frac: int              # source fraction bits
    sign_shift: int        # moves the source's sign bit to bit 7
    abs_mask: str
    inf_bits: str          # |p| above this: NaN
    max_bits: str          # |p| at or above this (the fp8 max finite value): saturated
    max_code: str
    nan_code: str
    normal_bits: str       # |p| at or above this (the fp8 min normal value): an fp8 normal
    shift: int             # source fraction bits dropped by a normal result
    half: str              # (1 << shift - 1) - 1: rounds to nearest, ties to even with the kept lsb
    rebias: str            # (source bias - fp8 bias) << fp8 mantissa bits
    sub_base: int          # subnormal shift = sub_base - source exponent field
    sub_limit: int         # a larger shift rounds to zero
    implicit: str          # the source's implicit leading bit
    frac_mask: str


def _bits(x: float, src: str) -> int:
    if src == "f32":
        return struct.unpack("<I", struct.pack("<f", x))[0]
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def conversion(src: str, dst: DType) -> Fp8Cvt:
    width, frac, bias = _SOURCES[src]
    m = dst.mantissa_bits
    fp8_bias = 1 - dst.min_exponent
    shift = frac - m
    max_code = (_bits(dst.max_finite, "f64") >> 52) - 1023 + fp8_bias << m | (1 << m) - 1
    if dst.name == "f8e4m3":   # fn: the all-ones mantissa of the top exponent is NaN, not a value
        max_code = 0x7E
    return Fp8Cvt(
        src=src, dst=dst.name, bits=width, frac=frac, sign_shift=width - 8,
        abs_mask=hex((1 << (width - 1)) - 1), inf_bits=hex(((1 << (width - 1 - frac)) - 1) << frac),
        max_bits=hex(_bits(dst.max_finite, src)), max_code=hex(max_code), nan_code=hex(dst.nan_code),
        normal_bits=hex((dst.min_exponent + bias) << frac), shift=shift, half=hex((1 << (shift - 1)) - 1),
        rebias=hex((bias - fp8_bias) << m), sub_base=frac - m + 1 - fp8_bias + bias, sub_limit=frac + 1,
        implicit=hex(1 << frac), frac_mask=hex((1 << frac) - 1))


def conversions(src: str, dst: DType | None) -> tuple[Fp8Cvt, ...]:
    """The conversion a kernel needs: from its product's type `src` to `dst` (none when dst is None)."""
    if dst is None or not dst.quantized:
        return ()
    return (conversion(src, dst),)


if conversion("f32", DTYPES["f8e5m2"]).max_code != "0x7b":
    raise AssertionError("e5m2's max finite code is 0x7b")
