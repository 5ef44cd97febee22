"""Correctly rounded planning constants: formulas evaluated at 256 bits with mpmath, rounded once.

Why this module exists: numpy's `power`/`log` and the C library's `pow`/`logf` may differ in the last
bit between hosts (numpy picks AVX2 or AVX-512 code at run time; glibc versions differ), so constants
computed with them made generated sources depend on the machine that ran `ropegen compile`. The
planner computes every transcendental constant here instead, from the exact binary values of its
inputs, and rounds it once to the nearest float32 or float64 (ties to even). Only IEEE basic
operations (+ - * /, exactly rounded on every host) are left to numpy.
"""
from __future__ import annotations

import mpmath
import numpy as np

_CTX = mpmath.MPContext()
_CTX.prec = 256            # ~77 decimal digits: far beyond any double-rounding hazard of a 53-bit result

Real = mpmath.mpf


def real(x) -> Real:
    """The exact value of a Python/NumPy float or int (or a decimal string such as "0.1", rounded at 256 bits)."""
    if isinstance(x, (np.floating, np.integer)):
        x = x.item()
    return _CTX.mpf(x)


def pi() -> Real:
    return +_CTX.pi


def power(base, numerator: int, denominator: int) -> Real:
    """base ** (numerator / denominator) with the exponent an exact rational."""
    return _CTX.power(real(base), _CTX.mpf(numerator) / denominator)


def power_real(base, exponent) -> Real:
    return _CTX.power(real(base), real(exponent))


def log(x) -> Real:
    return _CTX.log(real(x))


def sqrt(x) -> Real:
    return _CTX.sqrt(real(x))


def _nearest(x: Real, np_type) -> float:
    """x rounded to the nearest value of np_type (float32 or float64), ties to an even significand.

    A conversion through float64 can round twice (x -> float64 -> float32), so the neighbours of the
    first guess are compared with x exactly.
    """
    if not _CTX.isfinite(x):
        return float(x)
    with np.errstate(over="ignore"):
        guess = np_type(float(x))
    if not np.isfinite(guess):
        return float(guess)      # overflow: reported by the planner as C029
    lo = np.nextafter(guess, np_type(-np.inf))
    hi = np.nextafter(guess, np_type(np.inf))
    bits = np.uint32 if np_type is np.float32 else np.uint64

    def key(c):
        if not np.isfinite(c):
            return (_CTX.inf, 1)
        return (abs(_CTX.mpf(float(c)) - x), int(np.array(c, dtype=np_type).view(bits)) & 1)

    return float(min((guess, lo, hi), key=key))


def f64(x: Real) -> float:
    """x correctly rounded to float64."""
    return _nearest(x, np.float64)


def f32(x: Real) -> float:
    """x correctly rounded to float32 (returned as the Python float of the same value)."""
    return _nearest(x, np.float32)


def logf(x) -> np.float32:
    """C's logf(x) correctly rounded: float32 in, float32 out."""
    return np.float32(f32(log(np.float32(x))))


def powf(base, exponent) -> np.float32:
    """C's powf(base, exponent) correctly rounded, for float32 base and exponent."""
    return np.float32(f32(power_real(np.float32(base), np.float32(exponent))))
