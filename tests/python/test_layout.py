"""The ctypes.Structure layouts match the C headers: each option struct's C
_init() writes sizeof(struct) into its size field, which must equal
ctypes.sizeof of the Python declaration; the defaults it writes must land in
the right fields (a shifted field would read a wrong default)."""

import ctypes
import os
import tempfile
import unittest

import ptest  # noqa: F401  (sets up the environment)
import posttrain as pt
from posttrain import _lib


def init(name):
    cls, fn = _lib.OPTION_STRUCTS[name]
    s = cls()
    # Poison the memory first so a field _init does not write is visible.
    ctypes.memset(ctypes.byref(s), 0xA5, ctypes.sizeof(s))
    st = getattr(_lib.lib, fn)(ctypes.byref(s))
    if st is not None:
        pt.errors.check(st, fn)
    return s


class TestLayout(unittest.TestCase):
    def test_sizes_match_c(self):
        self.assertEqual(len(_lib.OPTION_STRUCTS), 17 + (1 if pt.has_feature("generate") else 0)
                         + 1  # pt_addition_grpo_options (posttrain/addition.h)
                         + (10 if pt.has_feature("grpo") else 0)  # + grpo_run.h's six
                         + (1 if pt.has_feature("plot") else 0)
                         + (1 if pt.has_feature("gguf") else 0)
                         + (1 if pt.has_feature("goodput") else 0)
                         + (1 if pt.has_feature("dist") else 0)
                         + (1 if pt.has_feature("temperature") else 0)
                         + (3 if pt.has_feature("episodes") else 0)
                         + (3 if pt.has_feature("run") else 0)  # + pt_sft_row_extra
                         + (1 if pt.has_feature("env-process") else 0)
                         + (6 if pt.has_feature("grpo-builtin") else 0))
        for name, (cls, _) in sorted(_lib.OPTION_STRUCTS.items()):
            with self.subTest(struct=name):
                s = init(name)
                self.assertEqual(s.size, ctypes.sizeof(cls),
                                 "%s: C sizeof %d, ctypes %d" % (name, s.size, ctypes.sizeof(cls)))

    def test_model_config_defaults_in_place(self):
        c = init("pt_model_config")
        self.assertEqual(c.arch, 0)
        self.assertEqual(c.vocab_size, 0)
        self.assertEqual(c.head_dim, 0)
        self.assertEqual(c.rms_norm_eps, 1e-6)
        self.assertEqual(c.rope_theta, 10000.0)
        self.assertEqual(c.rope_type, 0)
        self.assertEqual(c.rope_factor, 1.0)
        self.assertFalse(c.tie_word_embeddings)
        self.assertEqual(c.sliding_window, 0)
        self.assertEqual(c.initializer_range, 0.02)
        self.assertEqual((c.bos_token_id, c.eos_token_id, c.pad_token_id), (-1, -1, -1))

    def test_optimizer_defaults_in_place(self):
        o = init("pt_optimizer_options")
        self.assertEqual(o.type, 0)
        self.assertEqual(o.lr, 1e-4)
        self.assertEqual((o.beta1, o.beta2, o.eps), (0.9, 0.999, 1e-8))
        self.assertEqual(o.momentum, 0.9)
        self.assertEqual(o.weight_decay, 0.0)
        self.assertFalse(o.decay_norms_and_biases)
        self.assertEqual((o.schedule, o.warmup_steps, o.total_steps), (0, 0, 0))
        self.assertEqual(o.min_lr_ratio, 0.0)
        self.assertEqual(o.max_grad_norm, 1.0)

    def test_dataset_defaults_in_place(self):
        o = init("pt_dataset_options")
        self.assertEqual(o.max_length, 512)
        self.assertTrue(o.completion_only)
        self.assertFalse(o.skip_bad_rows)
        self.assertTrue(o.add_eos)
        self.assertIsNone(o.chat_template)
        self.assertEqual(o.eval_fraction, 0.0)
        self.assertEqual(o.batch_size, 8)
        self.assertFalse(o.pack)
        self.assertTrue(o.shuffle)
        self.assertEqual(o.seed, 0)

    def test_other_defaults_in_place(self):
        lo = init("pt_lora_options")
        self.assertEqual((lo.rank, lo.alpha, lo.targets, lo.dropout, lo.seed), (8, 8.0, 5, 0.0, 0))
        co = init("pt_chat_options")
        self.assertEqual((co.add_generation_prompt, co.bos, co.enable_thinking), (0, 0, 1))
        self.assertIsNone(co.default_system)
        self.assertIsNone(co.date_string)
        self.assertIsNone(co.tools_json)
        self.assertEqual(co.tools_in_user_message, 1)
        self.assertTrue(init("pt_model_load_options").load_tokenizer)
        so = init("pt_model_save_options")
        self.assertIsNone(so.tokenizer_dir)
        self.assertTrue(so.copy_tokenizer)
        eo = init("pt_eval_options")
        self.assertEqual(eo.max_length, 0)
        self.assertTrue(eo.add_special)
        b = init("pt_batch")
        self.assertFalse(b.targets)
        self.assertFalse(b.positions)
        if pt.has_feature("generate"):
            g = init("pt_generate_options")
            self.assertEqual((g.max_new_tokens, g.temperature, g.top_k, g.top_p, g.min_p, g.seed,
                              g.stream_offset, g.n_stop_ids), (64, 1.0, 0, 1.0, 0.0, 0, 0, -1))
            self.assertFalse(g.stop_ids)
        for name in ("pt_step_stats", "pt_sft_stats", "pt_dataset_stats"):
            s = init(name)
            self.assertEqual(s.step if hasattr(s, "step") else s.rows, 0, name)

    @unittest.skipUnless(pt.has_feature("grpo"), "the loaded libposttrain has no GRPO API")
    def test_grpo_defaults_in_place(self):
        bo = init("pt_rollout_buffer_options")
        self.assertEqual(bo.n_reward_funcs, 1)
        self.assertFalse(bo.reward_names)
        self.assertFalse(bo.reward_weights)
        s = init("pt_rollout_sample")
        self.assertFalse(s.ids or s.loss_mask or s.old_logprobs or s.ref_logprobs or s.rewards)
        self.assertFalse(s.sampling_logprobs or s.advantages or s.segment_rewards)
        self.assertEqual((s.n_ids, s.prompt_len, s.group, s.truncated, s.n_segments),
                         (0, 0, 0, False, 0))
        o = init("pt_grpo_options")
        self.assertEqual((o.scale_rewards, o.loss_type, o.importance_sampling_level), (0, 2, 0))
        self.assertEqual((o.epsilon_low, o.epsilon_high, o.beta), (0.2, 0.2, 0.0))
        self.assertEqual((o.max_completion_length, o.overlong_buffer, o.micro_batch), (0, 0, 0))
        self.assertFalse(o.mask_truncated_completions or o.drop_zero_std_groups)
        self.assertEqual((o.global_tokens, o.global_samples), (0.0, 0.0))
        self.assertEqual((o.temperature, o.importance_sampling_correction,
                          o.importance_sampling_clip_max, o.importance_sampling_clip_min),
                         (1.0, 4, 3.0, 0.0))
        self.assertEqual((o.delta, o.top_entropy_quantile), (0.0, 1.0))
        lo = init("pt_rollout_logprobs_options")
        self.assertEqual(lo.temperature, 1.0)
        b = init("pt_batch")
        self.assertEqual(b.temperature, 1.0)
        st = init("pt_grpo_stats")
        self.assertNotEqual(st.entropy, st.entropy)          # NaN until a step sets it
        self.assertEqual((st.loss, st.groups, st.step, st.skipped_total, st.tokens_per_second),
                         (0.0, 0, 0, 0, 0.0))

    @unittest.skipUnless(pt.has_feature("grpo"), "the loaded libposttrain has no GRPO API")
    def test_reward_batch_layout(self):
        # pt_reward_batch / pt_reward_item have no _init: a raw callback reads
        # the size the library wrote and every item field.
        seen = {}

        def fn(rewards, batch_p, payload):
            b = batch_p.contents
            seen["size"] = b.size
            seen["n"] = b.n
            seen["func"] = (b.func_index, b.func_name)
            seen["items"] = [(b.items[i].ids[:b.items[i].n_ids], b.items[i].prompt_len,
                              b.items[i].group, b.items[i].truncated) for i in range(b.n)]
            for i in range(b.n):
                rewards[i] = 0.5 * i
            return 0
        cb = _lib.REWARD_FN(fn)
        with pt.RolloutBuffer(["a", "b"]) as buf:
            buf.add([1, 2], [3], group=-5)
            buf.add([4], [5, 6, 7], group=1 << 40, truncated=True)
            pt.errors.check(_lib.lib.pt_rollout_buffer_score(buf._ptr, 1, cb, None))
            self.assertEqual(buf.get_reward(1, "b"), 0.5)
        self.assertEqual(seen["size"], ctypes.sizeof(_lib.RewardBatch))
        self.assertEqual(seen["n"], 2)
        self.assertEqual(seen["func"], (1, b"b"))
        self.assertEqual(seen["items"], [([1, 2, 3], 2, -5, False), ([4, 5, 6, 7], 1, 1 << 40, True)])

    def test_dir_info_nested_layout(self):
        # pt_model_dir_info nests a pt_model_config and a dtype table: every
        # field read back must describe the directory we wrote.
        cfg = dict(ptest.TINY)
        with pt.Model.create(cfg, seed=3) as m, tempfile.TemporaryDirectory() as d:
            m.save(d, copy_tokenizer=False)
            info = pt.inspect_dir(d)
            self.assertEqual(info["config"], m.config)
            self.assertEqual(info["num_params"], m.num_params)
            self.assertEqual(info["num_files"], 1)
            self.assertEqual(info["dtypes"], {"F32": {"tensors": info["num_tensors"],
                                                      "bytes": 4 * m.num_params}})
            self.assertEqual(info["weight_bytes"], 4 * m.num_params)
            self.assertFalse(info["sharded"])
            self.assertFalse(info["has_tokenizer"])
            self.assertEqual(info["weights_status"], 0)
            self.assertEqual(info["weights_problem"], "")
            # A missing tensor shows in weights_status/weights_problem (the last fields).
            os.remove(os.path.join(d, "model.safetensors"))
            info = pt.inspect_dir(d)
            self.assertEqual(info["weights_status"], -6)

    def test_eval_result_layout(self):
        # pt_eval_result has no size field: check its fields carry the right values.
        with pt.Model.create(ptest.TINY, seed=3) as m, tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "rows.jsonl")
            with open(path, "w") as f:
                f.write('{"input_ids": [1, 2, 3, 4]}\n{"input_ids": [5, 6, 7]}\n')
            r = m.eval_jsonl(path)
            self.assertEqual(r.tokens, 5)
            self.assertEqual(r.row_tokens, [3, 2])
            l1 = m.loss(pt.Batch.next_token([1, 2, 3, 4]))
            l2 = m.loss(pt.Batch.next_token([5, 6, 7]))
            self.assertAlmostEqual(r.row_loss[0], l1, delta=1e-5)
            self.assertAlmostEqual(r.row_loss[1], l2, delta=1e-5)
            self.assertAlmostEqual(r.loss, (3 * l1 + 2 * l2) / 5, delta=1e-5)


if __name__ == "__main__":
    ptest.main()
