#!/usr/bin/env python3
"""TRL's SFT quickstart (docs/source/quickstart.md and sft_trainer.md of
trl 1.9), ported to posttrain.

What differs from TRL's script, and nothing else:
- the import: posttrain's SFTTrainer instead of trl's;
- the model path: stories260K (../shared/data, or $PT_SHARED_DATA) instead
  of "Qwen/Qwen3-0.6B" from the Hub;
- the dataset: trl-lib/Capybara is on the Hugging Face Hub, out of reach
  here, so the train_dataset is a tiny in-memory list of rows, in TRL's
  "prompt"/"completion" format instead of Capybara's "messages" (stories260K
  has no chat template).

Everything else is TRL's default SFTConfig: learning rate 2e-5 with the
linear schedule, 8 rows per step, 3 epochs (here 3 x 2 = 6 steps), loss on
the completions only, logs every 10 steps (and at the end).

From the source tree (after `meson setup build && ninja -C build`):
    PYTHONPATH=python python3 examples/python_trl_sft.py
"""

import os
import sys

from posttrain import SFTTrainer

_shared = os.environ.get("PT_SHARED_DATA") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data")
MODEL_PATH = os.path.join(_shared, "models", "stories260K")
if not os.path.isdir(MODEL_PATH):
    print("SKIP: stories260K not found at %s (set PT_SHARED_DATA)" % MODEL_PATH)
    sys.exit(77)

_names = ["Tom", "Lily", "Max", "Sue", "Ben", "Mia", "Sam", "Amy"]
_pets = ["dog", "cat"]
# sixteen prompt/completion rows
rows = [{"prompt": "Once upon a time, %s had a" % n, "completion": " little %s. They played all day." % p}
        for n in _names for p in _pets]

trainer = SFTTrainer(
    model=MODEL_PATH,
    train_dataset=rows,
)
trainer.train()
