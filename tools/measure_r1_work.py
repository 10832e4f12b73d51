"""Issue 25, red team R1: CPU time of a correct per-query loop against the quadratic product in chunks
(sliding-window attention, D = 4, window = 3, one thread). Quoted in grader/REDTEAM.md.

    .venv/bin/python tools/measure_r1_work.py
"""
import math, time, torch
torch.set_num_threads(1)
def loop(q, k, v, window):
    S = q.size(-2); outs = []; sc = 1 / math.sqrt(q.size(-1))
    for i in range(S):
        lo, hi = max(0, i - window), min(S, i + window + 1)
        s = (q[..., i:i+1, :] @ k[..., lo:hi, :].transpose(-2, -1)) * sc
        outs.append(torch.softmax(s, dim=-1) @ v[..., lo:hi, :])
    return torch.cat(outs, dim=-2)
def chunked_product(q, k, v, window):
    # every score computed (quadratic multiply-adds), the band gathered afterwards: no exp over S²
    S = q.size(-2); sc = 1 / math.sqrt(q.size(-1)); bands = []
    kp = torch.nn.functional.pad(k, (0, 0, window, window))
    for i in range(0, S, 1024):
        s = q[..., i:i+1024, :] @ k.transpose(-2, -1)   # (1, c, S): quadratic work
        idx = (torch.arange(i, min(S, i + 1024))[:, None] + torch.arange(-window, window + 1)).clamp(0, S - 1)
        bands.append(s.gather(-1, idx.expand(*s.shape[:-1], idx.size(-1))))
    return torch.cat(bands, dim=-2)
for S in (16384, 65536):
    q, k, v = (torch.randn(1, S, 4) for _ in range(3))
    for name, f in (("loop", loop), ("chunked product", chunked_product)):
        t = time.process_time(); f(q, k, v, 3); print(f"S={S} {name:16s} {time.process_time() - t:.2f} s CPU")
