"""The CUDA target: CUDA C++ kernels compiled with NVRTC and launched through CuPy."""
