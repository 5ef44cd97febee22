"""The C backend: one C11 header + source per operator, built on demand and called through ctypes."""
from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING

from ropegen.backends.base import Backend, Kernel
from ropegen.backends.c import build as cbuild
from ropegen.backends.c.abi import C_KEYWORDS, abi, function_name
from ropegen.backends.c.call import CKernel
from ropegen.backends.c.context import rms_context, rope_context
from ropegen.lower.status import STATUSES
from ropegen.render import render

if TYPE_CHECKING:   # annotations only: the plans belong to the ops slices
    from ropegen.ops.plan import Plan

# The render context of each operator kind (the plan's `.kind` word).
CONTEXTS = {"rope": rope_context, "rmsnorm": rms_context}


class CBackend(Backend):
    name = "c"
    folder = "c"
    comment = "//"
    reserved = C_KEYWORDS
    run_options = frozenset({"threads", "out", "inplace"})

    def context(self, plan: Plan) -> dict:
        """What templates/c print: the plan's render context and the status table of the header."""
        return {"statuses": STATUSES, **CONTEXTS[plan.kind](plan)}

    def sources(self, plan: Plan, spec_file: str) -> dict[str, str]:
        ctx = self.context(plan)
        return {f"{plan.name}.h": self.render_file(plan, "h", spec_file, **ctx),
                f"{plan.name}.c": self.render_file(plan, "c", spec_file, **ctx)}

    def driver_source(self, plan: Plan, spec_file: str) -> dict[str, str]:
        """A standalone test / timing driver (driver.c) for the operator's sources: see templates/c/driver.c.j2."""
        ctx = self.context(plan)
        return {"driver.c": render("c/driver.c.j2", p=plan, header=self.header(plan, spec_file), **ctx)}

    def unavailable(self) -> str | None:
        try:
            cbuild.check_usable()
        except cbuild.CompilerError as exc:
            return str(exc)
        return None

    def load(self, plan: Plan, sources: dict[str, str]) -> Kernel:
        lib = cbuild.load_library(cbuild.build(sources, plan.name))
        params = abi(plan)
        func = getattr(lib, function_name(plan))
        func.restype = ctypes.c_int
        func.argtypes = [q.ctype for q in params]
        return CKernel(plan, func, params)
