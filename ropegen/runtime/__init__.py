"""The host side shared by every backend: the calling convention (host; numpy_host, its cached fast
path for NumPy arrays; gpu_call, the GPU runners), device-array adapters (arrays), the cache-key
recipe of builds (cache), aliasing, memory limits."""
