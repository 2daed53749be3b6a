#!/usr/bin/python3
"""PyTorch goldens for libposttrain's LoRA (tests/lora/test_lora.c).

Run with Debian's python3-torch (no `peft` or `transformers` needed):

    /usr/bin/python3 tests/lora/gen_lora.py

For two tiny reference models of tests/reference/ (llama_tied_gqa: all seven
projections adapted; qwen2_bias_untied: k_proj, v_proj, o_proj and up_proj, so
adapters sit at non-zero offsets of the fused q|k|v and gate|up products) it
writes tests/lora/data/<name>/ with

  adapter_config.json        PEFT's LoraConfig fields (r 4, lora_alpha 8: scaling 2)
  adapter_model.safetensors  seeded non-zero lora_A [r, in] and lora_B [out, r] (F32),
                             PEFT's names "base_model.model.model.layers.{i}.<module>.lora_A.weight"
  golden.safetensors         input_ids, targets, weights, logits [B,T,V] of the model
                             with every adapted weight replaced by W + scaling * B @ A,
                             loss = -sum(w*lp)/sum(w), and grad.<PEFT name> = d loss / d
                             lora_A / lora_B (torch autograd, float64)

The model is tests/reference/gen_parity.py's independent re-implementation of the
Hugging Face forward.  The script prints how far the golden logits are from those of
the base model and of a model with the wrong scaling (alpha instead of alpha/r), so
the C test's 1e-4 tolerance is known to catch those mistakes.
"""
import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REF = os.path.join(HERE, "..", "reference")
sys.path.insert(0, REF)
import gen_parity as gp  # noqa: E402

torch.set_default_dtype(torch.float64)

R, ALPHA = 4, 8.0
CASES = [
    ("llama_tied_gqa", ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                        "down_proj"], 11),
    ("qwen2_bias_untied", ["k_proj", "v_proj", "o_proj", "up_proj"], 12),
]
MODULES = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn",
           "o_proj": "self_attn", "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp"}
PREFIX = "base_model.model."


def loss_of(c, P, batch):
    ids, targets, w = batch["input_ids"], batch["targets"], batch["weights"]
    has = targets >= 0
    logits = gp.forward(c, P, torch.tensor(ids, dtype=torch.long))
    lsm = torch.log_softmax(logits, -1)
    tg = torch.tensor(np.where(has, targets, 0), dtype=torch.long)
    lp = lsm.gather(-1, tg.unsqueeze(-1)).squeeze(-1) * torch.tensor(has.astype(np.float64))
    wt = torch.tensor(np.where(has, w, 0.0).astype(np.float64))
    return logits, -(wt * lp).sum() / wt.sum()


def main():
    for name, targets, seed in CASES:
        src = os.path.join(REF, name)
        with open(os.path.join(src, "config.json")) as f:
            c = json.load(f)
        base = gp.read_safetensors(os.path.join(src, "model.safetensors"))
        rng = np.random.default_rng(seed)
        ad = {}
        for i in range(c["num_hidden_layers"]):
            for t in targets:
                wn = "model.layers.%d.%s.%s" % (i, MODULES[t], t)
                out, inp = base[wn + ".weight"].shape
                bound = 1.0 / np.sqrt(inp)
                ad[wn + ".lora_A.weight"] = rng.uniform(-bound, bound, (R, inp)).astype(np.float32)
                ad[wn + ".lora_B.weight"] = (0.1 * rng.standard_normal((out, R))).astype(np.float32)
        batch = gp.make_batch(c, rng, 2, 7)

        def run(scaling):
            P = {k: torch.tensor(v.astype(np.float64)) for k, v in base.items()}
            L = {k: torch.tensor(v.astype(np.float64), requires_grad=True) for k, v in ad.items()}
            for k in ad:
                if k.endswith(".lora_A.weight"):
                    m = k[:-len(".lora_A.weight")]
                    P[m + ".weight"] = P[m + ".weight"] + scaling * (
                        L[m + ".lora_B.weight"] @ L[m + ".lora_A.weight"])
            logits, loss = loss_of(c, P, batch)
            loss.backward()
            return logits.detach().numpy(), float(loss), {k: L[k].grad.numpy() for k in L}

        logits, loss, grads = run(ALPHA / R)
        base_logits, _, _ = run(0.0)
        wrong_logits, _, _ = run(ALPHA)
        print("%s: loss %.6f; |golden - base| max %.3g; |golden - wrong scaling| max %.3g"
              % (name, loss, np.abs(logits - base_logits).max(),
                 np.abs(logits - wrong_logits).max()))
        out = os.path.join(HERE, "data", name)
        os.makedirs(out, exist_ok=True)
        cfg = {
            "alpha_pattern": {}, "auto_mapping": None, "base_model_name_or_path": name,
            "bias": "none", "fan_in_fan_out": False, "inference_mode": True,
            "init_lora_weights": True, "layers_pattern": None, "layers_to_transform": None,
            "lora_alpha": ALPHA, "lora_dropout": 0.0, "modules_to_save": None,
            "peft_type": "LORA", "r": R, "rank_pattern": {}, "revision": None,
            "target_modules": sorted(targets), "task_type": "CAUSAL_LM",
            "use_dora": False, "use_rslora": False,
        }
        with open(os.path.join(out, "adapter_config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
            f.write("\n")
        gp.write_safetensors(os.path.join(out, "adapter_model.safetensors"),
                             {PREFIX + k: v for k, v in ad.items()}, {"format": "pt"})
        g = {"input_ids": batch["input_ids"], "targets": batch["targets"],
             "weights": batch["weights"], "logits": logits.astype(np.float32),
             "loss": np.array([loss], dtype=np.float32)}
        for k, v in grads.items():
            g["grad." + PREFIX + k] = v.astype(np.float32)
        gp.write_safetensors(os.path.join(out, "golden.safetensors"), g)


if __name__ == "__main__":
    main()
