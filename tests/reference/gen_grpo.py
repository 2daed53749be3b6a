#!/usr/bin/python3
"""GRPO reference values for tests/grpo/test_grpo_loss.c, computed with torch
autograd in float64 the way TRL's GRPOTrainer computes them (advantages,
clipped surrogate, k3 KL, the loss types, GSPO's sequence ratio), from
seeded random inputs that are exactly representable in float32.

Run with Debian's PyTorch:  /usr/bin/python3 tests/reference/gen_grpo.py
Writes tests/reference/grpo/grpo_golden.json.
"""
import json, math, os
import numpy as np
import torch

torch.set_default_dtype(torch.float64)
rng = np.random.default_rng(20261130)

# groups of different sizes; group 7 has equal rewards (zero std), group 9 one member
GROUPS = [3] * 4 + [5] * 3 + [7] * 4 + [2] * 5 + [9]
N = len(GROUPS)
K = 2
WEIGHTS = [1.0, 0.5]
f32 = lambda x: float(np.float32(x))

samples = []
for i, g in enumerate(GROUPS):
    n = int(rng.integers(2, 11))  # completion tokens 2 .. 10 (L_max 8 below: some over-long)
    logp = [f32(-abs(rng.normal(1.0, 0.8)) - 0.01) for _ in range(n)]
    old = [f32(min(-1e-3, lp + rng.normal(0.0, 0.2))) for lp in logp]
    ref = [f32(min(-1e-3, lp + rng.normal(0.0, 0.3))) for lp in logp]
    mask = [1] * n
    if n > 4 and rng.random() < 0.5:  # tool output inside the completion
        a = int(rng.integers(1, n - 2))
        for t in range(a, a + 2):
            mask[t] = 0
    r0 = f32(rng.normal(0.5, 1.0))
    r1 = f32(rng.normal(0.0, 1.0))
    if g == 7:
        r0, r1 = 1.0, 0.0
    if i == 1:
        r1 = None  # declined by the second function
    if i == 12:
        r0 = None
    samples.append(dict(group=g, logp=logp, old=old, ref=ref, mask=mask,
                        rewards=[r0, r1], truncated=bool(n >= 9 or i == 5)))

SCALES = ["group", "batch", "none", "rloo"]
LOSSES = ["grpo", "bnpo", "dapo", "dr_grpo"]
base = dict(scale="group", loss_type="grpo", level="token", eps_low=0.2, eps_high=0.2, beta=0.0,
            max_completion_length=8, overlong_buffer=0, mask_truncated=False, drop_zero_std=False,
            global_tokens=0.0)
CASES = []
for s in SCALES:
    CASES.append(dict(base, name="scale_" + s, scale=s))
for l in LOSSES:
    CASES.append(dict(base, name="loss_" + l, loss_type=l))
CASES += [
    dict(base, name="dapo_global_tokens", loss_type="dapo", global_tokens=250.0),
    dict(base, name="eps_asym_beta", eps_low=0.1, eps_high=0.28, beta=0.04),
    dict(base, name="beta_bnpo_rloo", beta=0.1, loss_type="bnpo", scale="rloo"),
    dict(base, name="gspo", level="sequence", eps_low=3e-4, eps_high=4e-4),
    dict(base, name="gspo_wide_beta", level="sequence", eps_low=0.05, eps_high=0.08, beta=0.02, loss_type="dapo"),
    dict(base, name="mask_truncated", mask_truncated=True, loss_type="dapo"),
    dict(base, name="overlong_soft", overlong_buffer=3, scale="none", loss_type="dr_grpo"),
    dict(base, name="drop_zero_std_overlong", drop_zero_std=True, overlong_buffer=4, mask_truncated=True),
]

L = max(len(s["logp"]) for s in samples)
def pad(key, fill=0.0):
    return torch.tensor([s[key] + [fill] * (L - len(s[key])) for s in samples])
LOGP, OLD, REF = pad("logp"), pad("old"), pad("ref")
MASK = pad("mask", 0).to(torch.float64)
REW = torch.tensor([[math.nan if r is None else r for r in s["rewards"]] for s in samples])
TRUNC = torch.tensor([s["truncated"] for s in samples])
LEN = torch.tensor([float(len(s["logp"])) for s in samples])
GID = [s["group"] for s in samples]

def run(c):
    R = torch.nansum(REW * torch.tensor(WEIGHTS), dim=1)
    if c["overlong_buffer"] > 0:
        lmax, lc = c["max_completion_length"], c["overlong_buffer"]
        pen = torch.where(LEN <= lmax - lc, torch.zeros(N),
                          torch.where(LEN <= lmax, ((lmax - lc) - LEN) / lc, -torch.ones(N)))
        R = R + pen
    uniq = list(dict.fromkeys(GID))
    mean = torch.zeros(N); std = torch.zeros(N); loo = torch.zeros(N)
    for g in uniq:
        idx = [i for i in range(N) if GID[i] == g]
        rg = R[idx]
        mean[idx] = rg.mean()
        std[idx] = rg.std() if len(idx) > 1 else 0.0
        if len(idx) > 1:
            loo[idx] = (rg.sum() - rg) / (len(idx) - 1)
    zero = std <= 1e-8
    if c["scale"] == "group":
        A = (R - mean) / (std + 1e-4)
    elif c["scale"] == "batch":
        A = (R - mean) / (R.std() + 1e-4)
    elif c["scale"] == "none":
        A = R - mean
    else:
        A = torch.where(torch.tensor([GID.count(g) > 1 for g in GID]), R - loo, torch.zeros(N))
    A = torch.where(zero, torch.zeros(N), A)
    active = ~zero if c["drop_zero_std"] else torch.ones(N, dtype=torch.bool)
    m = MASK * active[:, None]
    if c["mask_truncated"]:
        m = m * (~TRUNC)[:, None]
    logp = LOGP.clone().requires_grad_(True)
    log_ratio = logp - OLD
    if c["level"] == "token":
        liw = log_ratio
    else:
        liw = ((log_ratio * m).sum(-1) / m.sum(-1).clamp(min=1.0))[:, None]
    c1 = torch.exp(liw)
    c2 = torch.clamp(c1, 1 - c["eps_low"], 1 + c["eps_high"])
    ptl = -torch.min(c1 * A[:, None], c2 * A[:, None])
    kl = torch.exp(REF - logp) - (REF - logp) - 1
    if c["beta"] != 0.0:
        ptl = ptl + c["beta"] * kl
    n_act = active.sum().to(torch.float64)
    lt = c["loss_type"]
    if lt == "grpo":
        loss = (((ptl * m).sum(-1) / m.sum(-1).clamp(min=1.0)) * active).sum() / n_act
    elif lt == "bnpo":
        loss = (ptl * m).sum() / m.sum().clamp(min=1.0)
    elif lt == "dapo":
        denom = c["global_tokens"] if c["global_tokens"] > 0 else m.sum()
        loss = (ptl * m).sum() / denom
    else:
        loss = (ptl * m).sum() / (n_act * c["max_completion_length"])
    loss.backward()
    c1b = c1.detach().expand(N, L)
    tok = m.sum()
    low = ((c1b < 1 - c["eps_low"]) & (A[:, None] < 0)).to(torch.float64)
    high = ((c1b > 1 + c["eps_high"]) & (A[:, None] > 0)).to(torch.float64)
    region = ((low + high) > 0).to(torch.float64)
    mean_ = lambda x: float((x * m).sum() / tok)
    grad = logp.grad
    return dict(R=R.tolist(), adv=A.tolist(), loss=float(loss),
                dlogp=[grad[i, :len(samples[i]["logp"])].tolist() for i in range(N)],
                kl=mean_(kl.detach()), clip_low=mean_(low), clip_high=mean_(high), clip_region=mean_(region),
                tokens=float(tok), frac_zero_std=sum(1 for g in uniq if bool(zero[GID.index(g)])) / len(uniq))

out = dict(reward_weights=WEIGHTS, samples=samples, cases=[])
for c in CASES:
    r = run(c)
    out["cases"].append(dict(c, **r))
here = os.path.dirname(os.path.abspath(__file__))
os.makedirs(os.path.join(here, "grpo"), exist_ok=True)
with open(os.path.join(here, "grpo", "grpo_golden.json"), "w") as f:
    json.dump(out, f, indent=1)
print("wrote", len(out["cases"]), "cases")
