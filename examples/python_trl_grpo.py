#!/usr/bin/env python3
"""TRL's GRPO quickstart (docs/source/quickstart.md and grpo_trainer.md of
trl 1.9), ported to posttrain.

What differs from TRL's script, and nothing else:
- the imports: posttrain's GRPOTrainer and accuracy_reward instead of
  trl's (accuracy_reward here compares the last \\boxed{} answer, numbers
  and fractions by value, instead of TRL's math_verify: docs/python.md);
- the model path: stories260K (../shared/data, or $PT_SHARED_DATA) instead
  of "Qwen/Qwen2.5-0.5B-Instruct" from the Hub;
- the dataset: trl-lib/DeepMath-103K is on the Hugging Face Hub, out of
  reach here, so `dataset` is a tiny in-memory list of rows of the same
  columns ("prompt", "solution"), with plain-text prompts instead of
  DeepMath's chat messages (stories260K has no chat template).

Everything else is TRL's default GRPOConfig: learning rate 1e-6 with the
linear schedule, 8 completions per prompt, 8 completions per step (one
prompt), up to 256 new tokens, 3 epochs (here 3 x 2 = 6 steps), logs every
10 steps (and at the end).  At 1e-6 a model this small does not measurably learn
(docs/grpo.md, "Learning rate"): this is the API, not a recipe.

From the source tree (after `meson setup build && ninja -C build`):
    PYTHONPATH=python python3 examples/python_trl_grpo.py
"""

import os
import sys

from posttrain import GRPOTrainer
from posttrain.rewards import accuracy_reward

_shared = os.environ.get("PT_SHARED_DATA") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data")
MODEL_PATH = os.path.join(_shared, "models", "stories260K")
if not os.path.isdir(MODEL_PATH):
    print("SKIP: stories260K not found at %s (set PT_SHARED_DATA)" % MODEL_PATH)
    sys.exit(77)

# trl-lib/DeepMath-103K's columns, two rows
dataset = [
    {"prompt": "What is 2 + 3? Put the final answer in \\boxed{}.", "solution": "5"},
    {"prompt": "What is 1/2 + 1/4? Put the final answer in \\boxed{}.", "solution": "\\frac{3}{4}"},
]

trainer = GRPOTrainer(
    model=MODEL_PATH,
    reward_funcs=accuracy_reward,
    train_dataset=dataset,
)
trainer.train()
