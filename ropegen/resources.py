"""Find the grammar and template folders, in a source checkout or an installed wheel alike."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

_PKG = Path(__file__).resolve().parent


@lru_cache(maxsize=None)
def data_root() -> Path:
    """The folder holding grammar/ and templates/ (never the working directory)."""
    for candidate in (_PKG / "data", _PKG.parent):
        if (candidate / "grammar" / "rope.lark").is_file() and (candidate / "templates").is_dir():
            return candidate
    raise RuntimeError(f"ropegen data files (grammar/, templates/) not found near {_PKG}")


def grammar_path() -> Path:
    return data_root() / "grammar" / "rope.lark"


def templates_dir() -> Path:
    return data_root() / "templates"
