"""How a model is prepared to run: process settings, packed and int8 weights, fast attention kernels,
worker threads. Each swap is applied from outside the model and tested equal to the plain model."""
