"""posttrain.GRPOConfig against docs/grpo.md's table "TRL's GRPOConfig,
option by option": every TRL name the table lists is accepted (used or
ignored: also with a value other than TRL's default for the ignored ones)
or refused with an InvalidArgument naming it and the table, as the table
says; every field GRPOConfig knows is in the table; TRL's defaults and the
checks made when a config is built."""

import math
import os
import re
import unittest

import ptest
import posttrain as pt

HAVE = pt.has_feature("grpo")
DOC = os.path.join(ptest.SOURCE_ROOT, "docs", "grpo.md")


def table_rows():
    """(names, status) of every row of the table, status "used", "ignored"
    or "refused"; rows of our own fields ("— (ours)") are left out."""
    with open(DOC, encoding="utf-8") as f:
        text = f.read()
    start = text.index("## TRL's `GRPOConfig`, option by option")
    end = text.index("\n## ", start + 1)
    rows = []
    for line in text[start:end].splitlines():
        if not line.startswith("| ") or line.startswith("| TRL ") or line.startswith("| ---"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        first, status = cells[0], cells[1].split(":")[0].split(" ")[0]
        if first.startswith("—"):
            continue
        # the names are the backticked identifiers; [defaults] and (notes) are not
        names = re.findall(r"`([a-z_][a-z0-9_]*)`", re.sub(r"\[[^\]]*\]", "", first))
        rows.append((names, status))
    return rows


def other_value(default):
    """A value other than TRL's default."""
    if isinstance(default, bool):
        return not default
    if default is None:
        return {"x": 1}
    if isinstance(default, (int, float)):
        return default + 3
    if isinstance(default, str):
        return default + "_other"
    return None


@unittest.skipUnless(HAVE, "the loaded libposttrain has no GRPO API")
class TestTable(unittest.TestCase):
    def test_every_listed_name_behaves_as_the_table_says(self):
        rows = table_rows()
        self.assertGreater(len(rows), 40)
        defaults = pt.GRPOConfig()
        listed = set()
        counts = {"used": 0, "ignored": 0, "refused": 0}
        for names, status in rows:
            self.assertIn(status, counts, (names, status))
            self.assertTrue(names)
            for name in names:
                listed.add(name)
                counts[status] += 1
                with self.subTest(name=name, status=status):
                    self.assertTrue(hasattr(defaults, name), name)
                    d = getattr(defaults, name)
                    if status == "refused":
                        # TRL's default is accepted, another value is not
                        pt.GRPOConfig(**{name: d})
                        with self.assertRaises(pt.InvalidArgument) as cm:
                            pt.GRPOConfig(**{name: other_value(d)})
                        self.assertIn(name, cm.exception.message)
                        self.assertIn("docs/grpo.md", cm.exception.message)
                        self.assertIn("not supported here", cm.exception.message)
                    elif status == "ignored":
                        c = pt.GRPOConfig(**{name: other_value(d)})
                        self.assertEqual(getattr(c, name), other_value(d))
                        # and nothing the trainer uses changes
                        self.assertEqual(c.grpo_options, defaults.grpo_options)
                        self.assertEqual(c.optimizer_options(10), defaults.optimizer_options(10))
                    else:
                        pt.GRPOConfig(**{name: d})
        print("table: %d used, %d ignored, %d refused" % (counts["used"], counts["ignored"],
                                                         counts["refused"]))
        # every TRL field GRPOConfig knows is in the table
        from posttrain import trl_config
        self.assertEqual(sorted(set(trl_config._GRPO_TABLE) - listed), [])

    def test_unknown_name(self):
        with self.assertRaises(pt.InvalidArgument) as cm:
            pt.GRPOConfig(num_generation=4)
        self.assertIn("'num_generation'", cm.exception.message)
        self.assertIn("docs/grpo.md", cm.exception.message)


@unittest.skipUnless(HAVE, "the loaded libposttrain has no GRPO API")
class TestConfig(unittest.TestCase):
    def test_trl_defaults(self):
        c = pt.GRPOConfig()
        # TRL 1.9's GRPOConfig (and TrainingArguments) defaults
        for k, v in dict(learning_rate=1e-6, lr_scheduler_type="linear", num_generations=8,
                         per_device_train_batch_size=8, max_completion_length=256,
                         temperature=1.0, top_p=1.0, top_k=0, min_p=None, beta=0.0,
                         epsilon=0.2, epsilon_high=None, delta=None, loss_type="dapo",
                         scale_rewards="group", importance_sampling_level="token",
                         mask_truncated_completions=False, top_entropy_quantile=1.0,
                         num_iterations=1, logging_steps=10, save_steps=500, seed=42,
                         output_dir="trainer_output", num_train_epochs=3.0, max_steps=-1,
                         weight_decay=0.0, max_grad_norm=1.0, warmup_steps=0,
                         remove_unused_columns=False, shuffle_dataset=True).items():
            self.assertEqual(getattr(c, k), v, k)
        # one generation batch of 8 completions per step: one prompt
        self.assertEqual((c.generation_batch_size, c.steps_per_generation), (8, 1))
        g = c.grpo_options
        self.assertEqual((g["epsilon_low"], g["epsilon_high"], g["delta"], g["beta"]),
                         (0.2, 0.2, 0.0, 0.0))
        self.assertEqual(str(g["loss_type"]), "dapo")
        self.assertEqual(str(g["importance_sampling_correction"]), "sequence_mask")
        self.assertEqual(g["importance_sampling_clip_max"], 3.0)
        self.assertEqual(g["max_completion_length"], 256)
        o = c.optimizer_options(100)
        self.assertEqual((o["type"], o["lr"], o["schedule"], o["total_steps"], o["warmup_steps"]),
                         ("adamw", 1e-6, "linear", 100, 0))

    def test_mapping(self):
        c = pt.GRPOConfig(epsilon=0.1, delta=1.5, scale_rewards=False, loss_type="cispo",
                          epsilon_high=4.0, vllm_importance_sampling_correction=False,
                          warmup_ratio=0.1, optim="sgd", per_device_train_batch_size=12,
                          num_generations=4, gradient_accumulation_steps=2)
        g = c.grpo_options
        self.assertEqual((g["epsilon_low"], g["epsilon_high"], g["delta"]), (0.1, 4.0, 1.5))
        self.assertEqual(str(g["scale_rewards"]), "none")
        self.assertEqual(str(g["importance_sampling_correction"]), "none")
        self.assertEqual(g["micro_batch"], 12)
        # 12 x 2 completions per step, 4 per prompt: 6 prompts
        self.assertEqual((c.generation_batch_size, c.prompts_per_step), (24, 6))
        o = c.optimizer_options(25)
        self.assertEqual((o["type"], o["momentum"], o["warmup_steps"]), ("sgd", 0.0, 3))
        self.assertEqual(pt.GRPOConfig(scale_rewards=True).grpo_options["scale_rewards"],
                         pt.ScaleRewards.GROUP)
        self.assertEqual(pt.GRPOConfig(vllm_importance_sampling_cap=2.0)
                         .grpo_options["importance_sampling_clip_max"], 2.0)
        self.assertTrue(math.isinf(pt.GRPOConfig(vllm_importance_sampling_clip_max=None)
                                   .grpo_options["importance_sampling_clip_max"]))
        # our own pt_grpo_options fields by their C names
        g = pt.GRPOConfig(drop_zero_std_groups=True, scale_rewards="rloo").grpo_options
        self.assertTrue(g["drop_zero_std_groups"])
        self.assertEqual(str(g["scale_rewards"]), "rloo")

    def test_checked_when_built(self):
        bad = [dict(loss_type="sapo"), dict(scale_rewards="mean"),
               dict(importance_sampling_level="tokens"), dict(num_generations=1),
               dict(per_device_train_batch_size=6),                # not a multiple of 8
               dict(generation_batch_size=16, steps_per_generation=2),
               dict(steps_per_generation=2),                       # 2 steps per generation
               dict(lr_scheduler_type="polynomial"), dict(optim="adafactor"),
               dict(vllm_importance_sampling_mode="token"),
               dict(vllm_importance_sampling_clip_min=3.0),        # >= clip_max
               dict(temperature=-1.0), dict(top_p=1.5), dict(learning_rate="x"),
               dict(epsilon=0.1, epsilon_low=0.2), dict(chat_template_kwargs={"foo": 1}),
               dict(logging_strategy="epoch"), dict(overlong_buffer="x")]
        for kw in bad:
            with self.subTest(kw=kw), self.assertRaises(pt.InvalidArgument) as cm:
                pt.GRPOConfig(**kw)
            self.assertTrue(any(k in cm.exception.message for k in kw) or
                            "divisible" in cm.exception.message, cm.exception.message)
        # assignment is checked too, and derived values follow
        c = pt.GRPOConfig()
        c.per_device_train_batch_size = 16
        self.assertEqual(c.generation_batch_size, 16)
        with self.assertRaises(pt.InvalidArgument):
            c.loss_type = "sapo"
        self.assertEqual(c.loss_type, "dapo")

    def test_trainer_refuses_a_bad_grpo_key_at_once(self):
        # the older keywords: a wrong grpo={} key fails when the trainer is made
        with pt.Model.create(ptest.TINY, seed=1) as m, pt.Tokenizer.bytes() as tok:
            with self.assertRaises(pt.InvalidArgument) as cm:
                pt.GRPOTrainer(m, lambda completions, **kw: [0.0] * len(completions),
                               [{"prompt": "a"}], tokenizer=tok, grpo={"epsilon": 0.1})
            self.assertIn("'epsilon'", cm.exception.message)


if __name__ == "__main__":
    unittest.main(verbosity=2)
