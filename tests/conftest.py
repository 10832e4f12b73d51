import matplotlib

matplotlib.use("Agg")  # headless plotting in the test process (notebook kernels keep their inline backend)

import torch

# The checks use tiny tensors: one thread avoids parallel-region overhead (and load-dependent timing).
torch.set_num_threads(1)
