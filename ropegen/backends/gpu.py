"""What every GPU target's Backend class shares: its render config comes from lower/gpu (the
target's facts spell it), its templates get the facts as `lang`, and a loaded operator is a
runtime/gpu_call runner over the target's memory and launch call. A GPU target subclasses this
with its facts module, its Memory class, its file suffix and a `launcher`."""
from __future__ import annotations

from typing import Any, Callable

from ropegen.backends.base import Backend, Kernel
from ropegen.lower.gpu import CONFIGS
from ropegen.runtime import gpu_call


class GpuBackend(Backend):
    facts: Any            # the target's language facts module (spellings, Param class, SIMT macros)
    memory: type          # its runtime/gpu_call.GpuMemory implementation
    suffix: str           # the source file suffix ("cu"); templates are <kind>.<suffix>.j2
    kernel_word: str      # how status messages name its kernels ("the CUDA kernel")
    run_options = gpu_call.OPTIONS     # what runtime/gpu_call.py's runners take

    def config(self, plan) -> Any:
        return CONFIGS[plan.kind](plan, self.facts.Param)

    def render_extras(self) -> dict[str, Any]:
        """Extra template globals a target's own templates use (the shared ones see only `lang`)."""
        return {}

    def sources(self, plan, spec_file: str) -> dict[str, str]:
        text = self.render_file(plan, self.suffix, spec_file, c=self.config(plan), lang=self.facts,
                                **self.render_extras())
        return {f"{plan.name}.{self.suffix}": text}

    def launcher(self, source: str, name: str) -> Callable[..., None]:
        """launch(memory, kernel shape record, Launch, parameter values) for one compiled source."""
        raise NotImplementedError

    def load(self, plan, sources: dict[str, str]) -> Kernel:
        name = f"{plan.name}.{self.suffix}"
        return gpu_call.runner(plan, self.config(plan), self.memory, self.launcher(sources[name], name),
                               self.kernel_word)
