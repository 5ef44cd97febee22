"""The host side shared by every backend: calling convention, array adapters, aliasing, memory limits."""
