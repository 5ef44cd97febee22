"""Target-neutral lowering shared by two or more targets: kernel parameters, strides, status codes, GPU tiling."""
