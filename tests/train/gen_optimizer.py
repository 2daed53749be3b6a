#!/usr/bin/python3
"""Golden trajectories of torch.optim.AdamW / SGD with Hugging Face's
warmup schedules and clip_grad_norm_, for tests/train/test_optimizer.c.

Run with Debian's PyTorch:  /usr/bin/python3 tests/train/gen_optimizer.py
Writes tests/train/data/optimizer_golden.json.
"""
import json, math, os
import torch

def hf_lambda(kind, warmup, total, min_ratio=0.0):
    def f(step):
        if step < warmup:
            return step / max(1, warmup)
        if kind == "constant":
            return 1.0
        if kind == "linear":
            return max(0.0, (total - step) / max(1, total - warmup))
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return min_ratio + (1 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))
    return f

CASES = [
    dict(name="adamw_cosine_clip", type="adamw", lr=0.05, betas=(0.9, 0.95), eps=1e-8, wd=0.1,
         schedule="cosine", warmup=2, total=7, min_ratio=0.1, max_norm=1.0, steps=7),
    dict(name="adamw_constant_noclip", type="adamw", lr=0.01, betas=(0.9, 0.999), eps=1e-6, wd=0.0,
         schedule="constant", warmup=0, total=0, min_ratio=0.0, max_norm=0.0, steps=5),
    dict(name="sgd_linear_momentum", type="sgd", lr=0.1, momentum=0.9, wd=0.01,
         schedule="linear", warmup=1, total=6, min_ratio=0.0, max_norm=0.5, steps=6),
    dict(name="sgd_plain", type="sgd", lr=1.0, momentum=0.0, wd=0.0,
         schedule="constant", warmup=0, total=0, min_ratio=0.0, max_norm=0.0, steps=3),
]

def run(case, gen):
    w_decay = torch.randn(3, 5, generator=gen, dtype=torch.float32)
    w_nodecay = torch.randn(4, generator=gen, dtype=torch.float32) + 1.0
    init = [w_decay.clone(), w_nodecay.clone()]
    p1 = torch.nn.Parameter(w_decay)
    p2 = torch.nn.Parameter(w_nodecay)
    groups = [dict(params=[p1], weight_decay=case["wd"]), dict(params=[p2], weight_decay=0.0)]
    if case["type"] == "adamw":
        opt = torch.optim.AdamW(groups, lr=case["lr"], betas=case["betas"], eps=case["eps"])
    else:
        opt = torch.optim.SGD(groups, lr=case["lr"], momentum=case["momentum"])
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, hf_lambda(case["schedule"], case["warmup"], case["total"], case["min_ratio"]))
    steps = []
    for _ in range(case["steps"]):
        g1 = torch.randn(3, 5, generator=gen) * 2.0
        g2 = torch.randn(4, generator=gen) * 2.0
        p1.grad = g1.clone()
        p2.grad = g2.clone()
        lr = opt.param_groups[0]["lr"]
        if case["max_norm"] > 0:
            norm = float(torch.nn.utils.clip_grad_norm_([p1, p2], case["max_norm"]))
        else:
            norm = float(torch.sqrt((g1.double() ** 2).sum() + (g2.double() ** 2).sum()))
        opt.step()
        sched.step()
        steps.append(dict(grad=[g1.flatten().tolist(), g2.tolist()], lr=lr, grad_norm=norm,
                          weights=[p1.detach().flatten().tolist(), p2.detach().tolist()]))
    out = dict(case)
    out["init"] = [init[0].flatten().tolist(), init[1].tolist()]
    out["steps"] = steps
    out["n_steps"] = case["steps"]
    return out

def main():
    gen = torch.Generator().manual_seed(1234)
    data = [run(c, gen) for c in CASES]
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "optimizer_golden.json")
    with open(path, "w") as f:
        json.dump(dict(torch_version=torch.__version__, cases=data), f, indent=1)
    print("wrote", path)

if __name__ == "__main__":
    main()
