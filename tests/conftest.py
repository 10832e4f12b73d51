import matplotlib

matplotlib.use("Agg")  # headless plotting in the test process (notebook kernels keep their inline backend)
