"""How a model is prepared to run: process settings, packed and int8 weights, decoding
attention kernels, decoding workers (threads or forked processes), the CPU training swaps. Each
swap is applied from outside the model and is tested equal to the plain model."""
