"""The C target: C11 sources built with the host compiler and called through ctypes."""
