#!/usr/bin/python3
"""GRPO reference values for tests/grpo/test_grpo_loss.c, computed with torch
autograd in float64 the way TRL's GRPOTrainer (1.9) computes them
(advantages, with completions every reward function declined left out of
their group's mean and std and given advantage 0 (TRL >= 1.6), clipped
surrogate with two-sided clipping, CISPO, VESPO's gamma weights, k3 KL, the
loss types, GSPO's sequence ratio and its per-sequence clip metrics, the vLLM
importance-sampling correction in its four modes, the top-entropy-quantile
mask, frac_reward_zero_std as TRL computes it), from seeded random inputs that
are exactly representable in float32.  Beyond TRL: per-token advantages
given as they are, and per-segment rewards with advantages per segment index
within the group (docs/grpo.md).

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

# Beyond the first draws (a second generator, so the cases above keep their
# values): sampling log-probabilities (None for every fifth sample: no
# correction for it), entropies, per-token advantages and segment rewards
# (one per run of mask-1 tokens, some declined).
rng2 = np.random.default_rng(20270115)
for i, sm in enumerate(samples):
    n = len(sm["logp"])
    sm["samp"] = None if i % 5 == 3 else [f32(min(-1e-3, o + rng2.normal(0.0, 0.15))) for o in sm["old"]]
    sm["ent"] = [f32(abs(rng2.normal(1.5, 1.0)) + 0.01) for _ in range(n)]
    sm["tadv"] = [f32(rng2.normal(0.0, 1.0)) for _ in range(n)]
    runs = sum(1 for t in range(n) if sm["mask"][t] and (t == 0 or not sm["mask"][t - 1]))
    sm["seg_rewards"] = [None if rng2.random() < 0.12 else f32(rng2.normal(0.3, 1.0)) for _ in range(runs)]
    if sm["group"] == 7:  # equal per segment index: nothing to learn
        sm["seg_rewards"] = [1.0] * runs

SCALES = ["group", "batch", "none", "rloo"]
LOSSES = ["grpo", "bnpo", "dapo", "dr_grpo"]
base = dict(scale="group", loss_type="grpo", level="token", eps_low=0.2, eps_high=0.2, beta=0.0,
            max_completion_length=8, overlong_buffer=0, mask_truncated=False, drop_zero_std=False,
            global_tokens=0.0, is_mode="none", is_clip_min=0.0, is_clip_max=3.0, delta=0.0,
            top_entropy_quantile=1.0, advantages="rewards", declined=[],
            vespo=[2.0, 3.0, 3.0, 2.0])
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
    # the sampler correction (TRL's vllm_importance_sampling_mode)
    dict(base, name="is_token_truncate", is_mode="token_truncate", is_clip_max=1.1, is_clip_min=0.9, loss_type="dapo"),
    dict(base, name="is_token_mask", is_mode="token_mask", is_clip_max=1.15, is_clip_min=0.85, loss_type="dapo"),
    dict(base, name="is_sequence_truncate", is_mode="sequence_truncate", is_clip_max=1.5, is_clip_min=0.6),
    dict(base, name="is_sequence_mask", is_mode="sequence_mask", is_clip_max=3.0, beta=0.05),
    dict(base, name="is_sequence_mask_band", is_mode="sequence_mask", is_clip_max=1.3, is_clip_min=0.7,
         mask_truncated=True, loss_type="bnpo"),
    # CISPO, two-sided clipping, the entropy quantile
    dict(base, name="cispo", loss_type="cispo", eps_high=1.1),
    dict(base, name="cispo_global_beta_is", loss_type="cispo", eps_high=1.25, global_tokens=250.0, beta=0.03,
         is_mode="token_truncate", is_clip_max=1.1),
    dict(base, name="cispo_sequence", loss_type="cispo", level="sequence", eps_high=1.05),
    dict(base, name="delta", delta=1.25, eps_high=0.2, loss_type="dapo"),
    dict(base, name="delta_gspo", delta=1.1, level="sequence", eps_low=0.03, eps_high=0.05),
    dict(base, name="top_entropy_0.3", top_entropy_quantile=0.3, loss_type="dapo"),
    dict(base, name="top_entropy_0_drop", top_entropy_quantile=0.0, drop_zero_std=True, beta=0.02),
    dict(base, name="together", top_entropy_quantile=0.6, delta=1.3, is_mode="token_mask", is_clip_max=1.2,
         is_clip_min=0.8, beta=0.04, eps_low=0.1, eps_high=0.25, loss_type="dapo"),
    # advantages per token (given), per segment (from segment rewards)
    dict(base, name="token_advantages", advantages="tokens", loss_type="dapo"),
    dict(base, name="token_advantages_gspo", advantages="tokens", level="sequence", eps_low=0.05, eps_high=0.08),
    dict(base, name="segments_group", advantages="segments"),
    dict(base, name="segments_batch", advantages="segments", scale="batch", loss_type="dapo"),
    dict(base, name="segments_none_overlong", advantages="segments", scale="none", overlong_buffer=3,
         loss_type="dr_grpo"),
    dict(base, name="segments_rloo_drop", advantages="segments", scale="rloo", drop_zero_std=True),
    # completions every reward function declined (TRL's unscorable rows):
    # 0 in a group of 4; 4 and 5 leave one reward in their group of 3; 12
    # (whose first reward is already declined) in a group of 5; 16 alone
    dict(base, name="declined_group", declined=[0, 4, 5, 12, 16]),
    dict(base, name="declined_batch", declined=[0, 4, 5, 12, 16], scale="batch", loss_type="dapo"),
    dict(base, name="declined_none", declined=[0, 4, 5, 12, 16], scale="none", loss_type="bnpo"),
    dict(base, name="declined_rloo", declined=[0, 4, 5, 12, 16], scale="rloo"),
    dict(base, name="declined_overlong", declined=[0, 4, 5, 12, 16], overlong_buffer=3, loss_type="dapo"),
    dict(base, name="declined_drop", declined=[0, 4, 5, 12], drop_zero_std=True, scale="batch"),
    # GSPO's clip metrics per sequence, with masked truncated completions
    dict(base, name="gspo_mask_truncated", level="sequence", eps_low=0.02, eps_high=0.03, mask_truncated=True),
    # VESPO (TRL's get_gamma_weights), with the token corrections
    dict(base, name="vespo", loss_type="vespo"),
    dict(base, name="vespo_params_beta", loss_type="vespo", vespo=[1.5, 0.5, 4.0, 0.0], beta=0.03,
         global_tokens=250.0),
    dict(base, name="vespo_token_truncate", loss_type="vespo", is_mode="token_truncate", is_clip_max=1.1,
         is_clip_min=0.9),
    dict(base, name="vespo_token_mask_entropy", loss_type="vespo", is_mode="token_mask", is_clip_max=1.15,
         is_clip_min=0.85, top_entropy_quantile=0.5, mask_truncated=True),
    dict(base, name="vespo_token_advantages", loss_type="vespo", advantages="tokens"),
]

L = max(len(s["logp"]) for s in samples)
def pad(key, fill=0.0):
    return torch.tensor([s[key] + [fill] * (L - len(s[key])) for s in samples])
LOGP, OLD, REF = pad("logp"), pad("old"), pad("ref")
ENT, TADV = pad("ent"), pad("tadv")
HAS_SAMP = torch.tensor([s["samp"] is not None for s in samples])
SAMP = torch.tensor([(s["samp"] if s["samp"] is not None else s["old"]) + [0.0] * (L - len(s["old"]))
                     for s in samples])


def segments_of(mask):
    """The segment index of each token (-1 off the mask): runs of 1s."""
    out, k = [], -1
    for t, m in enumerate(mask):
        if m and (t == 0 or not mask[t - 1]):
            k += 1
        out.append(k if m else -1)
    return out


def segment_advantages(c, R_seg):
    """Segment k of each member against the group's segment-k rewards
    (declined ones left out and given 0), with the case's scaling; the
    batch std is over every segment-k reward of the batch.  Returns per
    sample the list of segment advantages and whether the group has any
    spread (any segment index with std > 1e-8)."""
    K = max(len(r) for r in R_seg)
    adv = [[0.0] * len(r) for r in R_seg]
    spread = {}
    for k in range(K):
        allk = torch.tensor([r[k] for r in R_seg if k < len(r) and r[k] is not None])
        bstd = allk.std() if allk.numel() > 1 else torch.tensor(0.0)
        for g in dict.fromkeys(GID):
            idx = [i for i in range(N) if GID[i] == g and k < len(R_seg[i]) and R_seg[i][k] is not None]
            spread.setdefault(g, False)
            if len(idx) < 2:
                continue
            rg = torch.tensor([R_seg[i][k] for i in idx])
            sd = rg.std()
            if sd <= 1e-8:
                continue
            spread[g] = True
            for j, i in enumerate(idx):
                r = rg[j]
                if c["scale"] == "group":
                    a = (r - rg.mean()) / (sd + 1e-4)
                elif c["scale"] == "batch":
                    a = (r - rg.mean()) / (bstd + 1e-4)
                elif c["scale"] == "none":
                    a = r - rg.mean()
                else:
                    a = r - (rg.sum() - r) / (len(idx) - 1)
                adv[i][k] = float(a)
    return adv, torch.tensor([not spread[g] for g in GID])
MASK = pad("mask", 0).to(torch.float64)
REW = torch.tensor([[math.nan if r is None else r for r in s["rewards"]] for s in samples])
TRUNC = torch.tensor([s["truncated"] for s in samples])
LEN = torch.tensor([float(len(s["logp"])) for s in samples])
GID = [s["group"] for s in samples]

def nanstd(x):
    """TRL's trl.trainer.utils.nanstd (1.9): Bessel-corrected, NaN below two values."""
    mean = torch.nanmean(x)
    var = torch.nanmean((x - mean) ** 2)
    cnt = (~torch.isnan(x)).sum()
    return torch.sqrt(var * cnt / (cnt - 1)) if cnt > 1 else torch.tensor(math.nan)


def run(c):
    rew = REW.clone()
    rew[c["declined"]] = math.nan
    # TRL: the weighted nansum; the over-long penalty is a reward function
    # (get_soft_overlong_punishment) that never declines
    rpf = rew
    if c["overlong_buffer"] > 0:
        lmax, lc = c["max_completion_length"], c["overlong_buffer"]
        pen = torch.where(LEN <= lmax - lc, torch.zeros(N),
                          torch.where(LEN <= lmax, ((lmax - lc) - LEN) / lc, -torch.ones(N)))
        rpf = torch.cat([rew, pen[:, None]], dim=1)
    wts = torch.tensor(WEIGHTS + ([1.0] if c["overlong_buffer"] > 0 else []))
    unscorable = torch.isnan(rpf).all(dim=1)
    R = (rpf * wts).nansum(dim=1)
    R[unscorable] = math.nan
    uniq = list(dict.fromkeys(GID))
    mean = torch.zeros(N); std = torch.zeros(N); loo = torch.zeros(N)
    trl_zero = torch.zeros(N, dtype=torch.bool)
    for g in uniq:
        idx = [i for i in range(N) if GID[i] == g]
        rg = R[idx]
        mean[idx] = torch.nanmean(rg)
        # TRL: nanstd of the group; a group of one is TRL's num_generations=1 (std 0)
        sd = nanstd(rg) if len(idx) > 1 else torch.tensor(0.0)
        std[idx] = sd
        trl_zero[idx] = bool(torch.isclose(sd, torch.zeros(())))
        ok = ~torch.isnan(rg)
        if ok.sum() > 1:  # leave-one-out over the members with a reward
            loo[idx] = (rg[ok].sum() - rg) / (ok.sum() - 1)
    # ours: nothing to learn in a group with fewer than two rewards or all equal
    zero = torch.isnan(std) | (std <= 1e-8)
    bstd = nanstd(R) if N > 1 else torch.tensor(0.0)
    if c["scale"] == "group":
        A = (R - mean) / (std + 1e-4)
    elif c["scale"] == "batch":
        A = (R - mean) / (bstd + 1e-4)
        trl_zero[:] = bool(torch.isclose(bstd, torch.zeros(())))
    elif c["scale"] == "none":
        A = R - mean
    else:
        A = R - loo
    A = torch.nan_to_num(A, nan=0.0)  # TRL: declined rows (and NaN stds) get 0
    A = torch.where(zero, torch.zeros(N), A)
    seg_adv = None
    if c["advantages"] == "tokens":  # given per token: used as they are, no groups
        At = TADV.clone()
        zero = torch.zeros(N, dtype=torch.bool)
        trl_zero = zero.clone()
    elif c["advantages"] == "segments":
        R_seg = []
        for i, sm in enumerate(samples):
            rs = list(sm["seg_rewards"])
            if c["overlong_buffer"] > 0 and rs[-1] is not None:
                lmax, lc, ln = c["max_completion_length"], c["overlong_buffer"], len(sm["logp"])
                rs[-1] = rs[-1] + (0.0 if ln <= lmax - lc else ((lmax - lc) - ln) / lc if ln <= lmax else -1.0)
            R_seg.append(rs)
        seg_adv, zero = segment_advantages(c, R_seg)
        At = torch.zeros(N, L)
        for i, sm in enumerate(samples):
            for t, k in enumerate(segments_of(sm["mask"])):
                if k >= 0:
                    At[i, t] = seg_adv[i][k]
        R = torch.tensor([sum(r for r in rs if r is not None) if any(r is not None for r in rs) else math.nan
                          for rs in R_seg])
        trl_zero = zero.clone()  # ours for segments: per sample, its group has no spread
    else:
        At = A[:, None].expand(N, L)
    active = ~zero if c["drop_zero_std"] else torch.ones(N, dtype=torch.bool)
    m = MASK * active[:, None]
    if c["mask_truncated"]:
        m = m * (~TRUNC)[:, None]
    # the sampler correction: TRL's vllm_importance_sampling_ratio, for the
    # samples with sampling log-probabilities
    isw = torch.ones(N, L)
    is_vals = []
    diffs = ((OLD - SAMP).abs() * m)[HAS_SAMP][m[HAS_SAMP] > 0]
    if c["is_mode"] != "none":
        lo, hi = c["is_clip_min"], c["is_clip_max"]
        d = (OLD - SAMP) * m
        seq = c["is_mode"].startswith("sequence")
        rho = torch.exp(d.sum(-1, keepdim=True)) if seq else torch.exp(d)
        if c["is_mode"].endswith("truncate"):
            w = torch.clamp(rho, min=lo, max=hi)
        else:
            w = rho.masked_fill((rho < lo) | (rho > hi), 0.0)
        changed = (w != rho).to(torch.float64)
        isw = torch.where(HAS_SAMP[:, None], w.expand(N, L), torch.ones(N, L))
        for i in range(N):
            if not bool(HAS_SAMP[i]) or m[i].sum() == 0:
                continue
            if seq:
                is_vals.append((float(w[i, 0]), float(changed[i, 0])))
            else:
                is_vals += [(float(w[i, t]), float(changed[i, t])) for t in range(L) if m[i, t] > 0]
    # the top-entropy-quantile mask (TRL's get_high_entropy_mask; the
    # entropies of the loss tokens, quantile in float32 as TRL's .float())
    emask = torch.ones(N, L)
    thr = None
    if c["top_entropy_quantile"] < 1.0:
        ents = ENT[m > 0].to(torch.float32)
        thr = torch.quantile(ents, 1.0 - c["top_entropy_quantile"])
        emask = ((ENT.to(torch.float32) * m.to(torch.float32) >= thr) & (m > 0)).to(torch.float64)
        thr = float(thr)
    logp = LOGP.clone().requires_grad_(True)
    log_ratio = logp - OLD
    if c["level"] == "token":
        liw = log_ratio
    else:
        liw = ((log_ratio * m).sum(-1) / m.sum(-1).clamp(min=1.0))[:, None]
    c1 = torch.exp(liw)
    phi = None
    if c["loss_type"] == "cispo":
        clamped = torch.clamp(c1, max=c["eps_high"]).detach()
        ptl = -clamped * At * logp
        c1m = c1
    elif c["loss_type"] == "vespo":
        # TRL's get_gamma_weights (no_grad): the sequence log ratio summed,
        # the token correction's log weights added, clamped, phi by the
        # advantage's sign
        with torch.no_grad():
            kp, lp_, kn, ln_ = c["vespo"]
            lr = torch.clamp(log_ratio.detach(), -20.0, 20.0)
            slr = (lr * m).sum(-1, keepdim=True)
            if c["is_mode"] != "none":
                slr = slr + torch.clamp(torch.log(isw), math.log(1e-8), 20.0).sum(-1, keepdim=True)
            lw = torch.clamp(slr, math.log(1e-8), 20.0)
            ww = torch.exp(lw)
            pos = At >= 0
            kk = torch.where(pos, torch.tensor(kp), torch.tensor(kn))
            ll = torch.where(pos, torch.tensor(lp_), torch.tensor(ln_)).clamp(min=1e-4)
            phi = torch.exp(ll + kk * lw - ll * ww).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)
        ptl = -phi * At * logp
        c1m = c1
    else:
        c2 = torch.clamp(c1, 1 - c["eps_low"], 1 + c["eps_high"])
        if c["delta"] > 0:
            c1 = torch.clamp(c1, max=c["delta"])
        c1m = c1
        ptl = -torch.min(c1 * At, c2 * At)
    ptl = ptl * emask
    if c["loss_type"] != "vespo":  # vespo has the correction inside phi
        ptl = ptl * isw
    kl = torch.exp(REF - logp) - (REF - logp) - 1
    if c["beta"] != 0.0:
        ptl = ptl + c["beta"] * kl
    n_act = active.sum().to(torch.float64)
    lt = c["loss_type"]
    if lt == "grpo":
        loss = (((ptl * m).sum(-1) / m.sum(-1).clamp(min=1.0)) * active).sum() / n_act
    elif lt == "bnpo":
        loss = (ptl * m).sum() / m.sum().clamp(min=1.0)
    elif lt in ("dapo", "cispo", "vespo"):
        denom = c["global_tokens"] if c["global_tokens"] > 0 else m.sum()
        loss = (ptl * m).sum() / denom
    else:
        loss = (ptl * m).sum() / (n_act * c["max_completion_length"])
    loss.backward()
    c1b = c1m.detach().expand(N, L)
    tok = m.sum()
    if lt == "cispo":
        low = high = region = torch.zeros(N, L)
        cispo = ((c1b > c["eps_high"]) & (At > 0)).to(torch.float64)
    elif lt == "vespo":
        low = high = region = cispo = torch.zeros(N, L)
    else:
        low = ((c1b < 1 - c["eps_low"]) & (At < 0)).to(torch.float64)
        high = ((c1b > 1 + c["eps_high"]) & (At > 0)).to(torch.float64)
        region = ((low + high) > 0).to(torch.float64)
        cispo = torch.zeros(N, L)
    mean_ = lambda x: float((x * m).sum() / tok)
    # TRL's global_masked_mean: one value per sequence (B, 1) at sequence
    # level with one advantage per sequence: a mean over the sequences of
    # the batch (masked truncated ones too; ours leaves dropped groups out)
    per_seq = c["level"] == "sequence" and c["advantages"] == "rewards"
    cmean = (lambda x: float((x[:, 0] * active).sum() / active.sum())) if per_seq else mean_
    grad = logp.grad
    out = dict(R=R.tolist(), adv=A.tolist(), loss=float(loss),
               dlogp=[grad[i, :len(samples[i]["logp"])].tolist() for i in range(N)],
               kl=mean_(kl.detach()), clip_low=cmean(low), clip_high=cmean(high), clip_region=cmean(region),
               cispo_clip=cmean(cispo), tokens=float(tok), ent_kept=float((emask * m).sum()),
               frac_zero_std_groups=sum(1 for g in uniq if bool(zero[GID.index(g)])) / len(uniq),
               frac_reward_zero_std=float(trl_zero.to(torch.float64).mean()),
               reward_mean=float(torch.nanmean(R)), reward_std=float(nanstd(R)))
    out["R"] = [None if math.isnan(x) else x for x in R.tolist()]
    if phi is not None:  # TRL's vespo/phi_seq_mean (per sequence with one advantage)
        pv = phi.expand(N, L)
        out["phi_mean"] = (float((phi[:, 0] * active).sum() / active.sum()) if c["advantages"] == "rewards"
                           else mean_(pv))
    if seg_adv is not None:
        out["seg_adv"] = seg_adv
    if thr is not None:
        out["entropy_threshold"] = thr
    if diffs.numel() > 0:
        out["samp_diff_mean"] = float(diffs.mean())
        out["samp_diff_max"] = float(diffs.max())
    if is_vals:
        wv = torch.tensor([v for v, _ in is_vals])
        out.update(is_min=float(wv.min()), is_mean=float(wv.mean()), is_max=float(wv.max()),
                   is_corrected=sum(ch for _, ch in is_vals) / len(is_vals))
    return out

out = dict(reward_weights=WEIGHTS, samples=samples, cases=[])
for c in CASES:
    r = run(c)
    out["cases"].append(dict(c, **r))
here = os.path.dirname(os.path.abspath(__file__))
os.makedirs(os.path.join(here, "grpo"), exist_ok=True)
with open(os.path.join(here, "grpo", "grpo_golden.json"), "w") as f:
    json.dump(out, f, indent=1)
print("wrote", len(out["cases"]), "cases")
