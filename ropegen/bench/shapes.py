"""The --shape strings of `ropegen bench`: NAME=VALUE items checked once, for every bench that reads them."""
from __future__ import annotations

from typing import Any

from ropegen.ir.dtypes import DTYPES

DEFAULT_SHAPES = ("positions=prefill", "positions=random")


def shape_items(text: str) -> list[tuple[str, str]]:
    """The NAME=VALUE items of a --shape string ('T=4096,positions=prefill'; commas or spaces), each
    checked: sizes are integers >= 0, positions is prefill or random, dtype a float type. A malformed
    item is a ValueError; which names apply is decided by the bench that reads them."""
    items = [part.strip() for part in str(text).replace(" ", ",").split(",") if part.strip()]
    if not items:
        raise ValueError(f"empty shape '{text}': expected NAME=SIZE items, e.g. T=4096")
    out = []
    for part in items:
        name, eq, value = (x.strip() for x in part.partition("="))
        if not eq or not name or not value:
            raise ValueError(f"bad shape item '{part}': expected NAME=SIZE, e.g. T=4096")
        if name == "positions":
            if value not in ("prefill", "random"):
                raise ValueError(f"positions={value}: expected prefill or random")
        elif name == "dtype":
            floats = sorted(n for n, d in DTYPES.items() if d.is_float)
            if value not in floats:
                raise ValueError(f"dtype={value}: expected one of {', '.join(floats)}")
        else:
            try:
                size = int(value, 10)
            except ValueError:
                raise ValueError(f"bad size '{part}': expected NAME=INTEGER") from None
            if size < 0:
                raise ValueError(f"bad size '{part}': sizes are >= 0")
        out.append((name, value))
    return out


def parse_shape(shape: str | dict | None) -> dict[str, Any]:
    """'T=4096,P=8192,positions=prefill' -> {'label', 'sizes', 'positions'} (positions: prefill | random)."""
    if shape is None:
        return {"label": "default", "sizes": {}, "positions": "random"}
    if isinstance(shape, dict):
        d = dict(shape)
        d.setdefault("sizes", {})
        d.setdefault("positions", "random")
        d.setdefault("label", ",".join(f"{k}={v}" for k, v in d["sizes"].items()) or "default")
        return d
    sizes: dict[str, int] = {}
    positions = "random"
    for k, v in shape_items(shape):
        if k == "positions":
            positions = v
        elif k == "dtype":
            from ropegen.bench.targets import device_targets
            raise ValueError(f"shape '{shape}': dtype= is for --backend {' or '.join(device_targets())}; the CPU "
                             "bench takes the dtypes of the spec")
        else:
            sizes[k] = int(v)
    label = str(shape).strip()
    return {"label": label, "sizes": sizes, "positions": positions}
