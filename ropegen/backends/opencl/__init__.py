"""The OpenCL target: OpenCL C 1.2 kernels built and run through pyopencl (any OpenCL device; PoCL
runs them on the CPU in CI).

facts.py (how OpenCL C spells types, arithmetic and parameters), backend.py (the Backend class, the
program cache, the launch call, the device choice), memory.py (NumPy and pyopencl arrays as
buffers), bench.py (its timings). The kernel bodies are the shared SIMT templates (templates/gpu);
templates/opencl holds the prelude and the spellings.
"""
