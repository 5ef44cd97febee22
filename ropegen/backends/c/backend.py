"""The C backend: one C11 header + source per operator, built on demand and called through ctypes."""
from __future__ import annotations

import ctypes


from ropegen.backends.c import build as cbuild
from ropegen.ops.plan import Plan, RopePlan
from ropegen.render import render
from ropegen.backends.base import Backend, Kernel
from ropegen.backends.c.abi import C_KEYWORDS, abi, function_name
from ropegen.backends.c.call import CKernel
from ropegen.backends.c.context import rms_context, rope_context


# ---------------------------------------------------------------------------------------------

class CBackend(Backend):
    name = "c"
    folder = "c"
    comment = "//"
    reserved = C_KEYWORDS

    def sources(self, plan: Plan, spec_file: str) -> dict[str, str]:
        ctx = rope_context(plan) if isinstance(plan, RopePlan) else rms_context(plan)
        return {f"{plan.name}.h": self.render_file(plan, "h", spec_file, **ctx),
                f"{plan.name}.c": self.render_file(plan, "c", spec_file, **ctx)}

    def driver_source(self, plan: Plan, spec_file: str) -> dict[str, str]:
        """A standalone test / timing driver (driver.c) for the operator's sources: see templates/c/driver.c.j2."""
        ctx = rope_context(plan) if isinstance(plan, RopePlan) else rms_context(plan)
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
