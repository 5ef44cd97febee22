"""The host side shared by every backend: the calling convention (host), device-array adapters
(arrays), the cache-key recipe of builds (cache), aliasing, memory limits."""
