"""Numba kernels: scalar math written once, loops generated from it. Arrays in, arrays out;
nothing here knows tensors or graphs."""
