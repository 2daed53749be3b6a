"""Multi-turn episodes (posttrain/episode.h) through the binding: a Python
callable as the environment; three turns through the cache against a
forward over the final sequence; the loss mask and the appended ids; batch
vs alone; text answers, decode_text and stop strings with the byte
tokenizer; exceptions becoming an episode's error or stopping the run;
limits; the results into a RolloutBuffer and a GRPO step; the C layouts of
the turn and the reply."""

import ctypes
import math
import unittest

import ptest
import posttrain as pt
from posttrain import _lib

TINY = ptest.TINY
IM_END = 260
PROMPTS = [[256, 72, 105], [256, 50, 43, 51, 61], [256, 72, 105], [256, 9]]


def scripted(turns=3, fail=None, bad=None, record=None):
    """An environment: episode e appends 2 + (e + turn) % 3 ids for
    turns - 1 turns, then is done with rewards [e, turn]."""
    def env(t):
        if record is not None:
            record.append(t)
        if fail is not None and (t.episode, t.turn) == fail:
            raise ValueError("boom in episode %d" % t.episode)
        if bad is not None and (t.episode, t.turn) == bad:
            return 42
        if t.turn + 1 >= turns or t.final:
            return pt.Done(rewards=[t.episode, t.turn], turn_rewards=[t.turn, None])
        n = 2 + (t.episode + t.turn) % 3
        return pt.Append(ids=[(7 * t.episode + 3 * t.turn + j) % 250 for j in range(n)],
                         turn_rewards=[10 * t.episode + t.turn, 0.5])
    return env


@unittest.skipUnless(pt.has_feature("episodes"), "the loaded libposttrain has no episode engine")
class TestEpisodes(unittest.TestCase):
    def setUp(self):
        self.m = pt.Model.create(TINY, seed=9)
        self.gen = self.m.generator(4, 64)

    def tearDown(self):
        self.gen.close()
        self.m.close()

    def play(self, env, prompts=PROMPTS, gen=None, **kw):
        opts = dict(max_turns=3, n_reward_funcs=2, max_new_tokens=5, temperature=1.0,
                    seed=3, stop_ids=[IM_END])
        opts.update(kw)
        return (gen or self.gen).play(prompts, env, **opts)

    def test_enums(self):
        self.assertEqual([m.name for m in pt.EnvAction], ["APPEND", "DONE", "PENDING"])
        self.assertEqual([m.name for m in pt.EpisodeEnd],
                         ["DONE", "MAX_TURNS", "MAX_TOKENS", "ERROR", "STOPPED"])

    def test_defaults(self):
        self.assertEqual(pt.episode_defaults(),
                         {"max_turns": 4, "max_total_tokens": 0, "decode_text": False,
                          "n_reward_funcs": 1, "max_step_tokens": 0,
                          "on_error": pt.OnError.CONTINUE})

    def test_three_turns_match_forward(self):
        seen = []
        eps = self.play(scripted(record=seen))
        self.assertEqual(len(eps), 4)
        appended = 0
        for e in eps:
            self.assertIs(e.end, pt.EpisodeEnd.DONE)
            self.assertIs(e.status, pt.Status.OK)
            self.assertIsNone(e.error)
            self.assertEqual(len(e.turns), 3)
            self.assertEqual(e.rewards, [e.index, 2.0])
            self.assertEqual(e.turn_rewards[0], [10 * e.index, 0.5])
            self.assertEqual(e.turn_rewards[2][0], 2.0)
            self.assertTrue(math.isnan(e.turn_rewards[2][1]))
            self.assertEqual(e.ids[:e.prompt_len], PROMPTS[e.index])
            self.assertEqual(e.completion, e.ids[e.prompt_len:])
            # the mask: 1 exactly on the turns' sampled ids; between them the appended ids
            want = [0] * len(e.completion)
            for t in e.turns:
                for j in range(t.start, t.start + t.length):
                    want[j - e.prompt_len] = 1
            self.assertEqual(e.loss_mask, want)
            for t, nxt in zip(e.turns, e.turns[1:]):
                n = 2 + (e.index + e.turns.index(t)) % 3
                self.assertEqual(nxt.start - (t.start + t.length), n)
                appended += n
            self.assertEqual(e.turns[-1].start + e.turns[-1].length, len(e.ids))
            # the sampling log-probabilities are those of one forward (temperature 1)
            full = self.m.logprobs(e.ids[:-1], targets=e.ids[1:])
            for j, (mk, lp) in enumerate(zip(e.loss_mask, e.logprobs)):
                if mk:
                    self.assertAlmostEqual(lp, full[e.prompt_len - 1 + j], delta=2e-5)
                else:
                    self.assertEqual(lp, 0.0)
        s = eps.stats
        self.assertEqual((s.episodes, s.done, s.turns, s.env_calls), (4, 4, 12, 12))
        self.assertEqual(s.appended_tokens, appended)
        # episodes 0 and 2 share a prompt: prefilled once
        self.assertEqual(s.prompt_tokens_shared, 3)
        self.assertEqual(s.prefill_tokens, 3 + 5 + 2 + appended)
        # what the environment saw
        self.assertEqual(len(seen), 12)
        t = seen[0]
        self.assertIsInstance(t, pt.Turn)
        self.assertEqual(t.turn_ids, t.ids[t.turn_start:])
        self.assertIsNone(t.turn_text)
        self.assertIsInstance(t.turn_end, pt.TurnEnd)
        self.assertTrue(all(x.final == (pt.EpisodeEnd.MAX_TURNS if x.turn == 2 else 0)
                            for x in seen))
        eps.close()

    def test_batch_vs_alone(self):
        kw = dict(top_k=40, temperature=0.9, seed=11)
        many = self.play(scripted(), **kw)
        with self.m.generator(1, 64) as g1:
            for i, p in enumerate(PROMPTS):
                env = scripted()
                alone = self.play(lambda t, i=i: env(t._replace(episode=i)), prompts=[p], gen=g1,
                                  stream_offset=i, **kw)
                self.assertEqual(alone[0].ids, many[i].ids)
                self.assertEqual(alone[0].logprobs, many[i].logprobs)
        # more episodes than rows: recycled, same episodes
        with self.m.generator(2, 64) as g2:
            two = self.play(scripted(), gen=g2, **kw)
            self.assertEqual([e.ids for e in two], [e.ids for e in many])

    def test_text_and_stop_strings(self):
        tok = pt.Tokenizer.bytes()
        texts = []

        def env(t):
            texts.append(t)
            self.assertEqual(t.turn_text, tok.decode(t.turn_ids))
            self.assertEqual(t.text, tok.decode(t.ids[t.prompt_len:]))
            if t.turn >= 1:
                return pt.Done(rewards=[1.0, 0.0])
            return "<|im_end|>\ntool: 42\n<|im_start|>assistant\n"   # a str appends its encoding
        eps = self.play(env, tokenizer=tok, decode_text=True, max_new_tokens=12)
        enc = tok.encode("<|im_end|>\ntool: 42\n<|im_start|>assistant\n")
        for e in eps:
            a = e.turns[0].start + e.turns[0].length
            self.assertEqual(e.ids[a:a + len(enc)], enc)
            self.assertEqual(e.turns[1].start, a + len(enc))
        # a stop string made of what episode 0 sampled: its turn now ends there
        first = eps[0].turns[0]
        ids = eps[0].ids[first.start:first.start + first.length]
        pair = next((ids[j - 1:j + 1] for j in range(1, len(ids))
                     if all(97 <= x <= 122 for x in ids[j - 1:j + 1])), None)
        if pair is None:
            self.skipTest("no two lower-case letters in the first turn")
        stop = bytes(pair).decode()
        again = self.play(env, tokenizer=tok, decode_text=True, max_new_tokens=12,
                          stop_strings=[stop])
        t0 = again[0].turns[0]
        self.assertIs(t0.end, pt.TurnEnd.STOP_STRING)
        self.assertTrue(again[0].ids[t0.start + t0.length - 2:t0.start + t0.length] == pair)
        with self.assertRaises(pt.InvalidArgument) as cm:
            self.play(env, stop_strings=["x"])
        self.assertIn("tokenizer is NULL", cm.exception.message)

    def test_exceptions(self):
        ok = self.play(scripted())
        eps = self.play(scripted(fail=(1, 1)))
        self.assertIs(eps[1].end, pt.EpisodeEnd.ERROR)
        self.assertIs(eps[1].status, pt.Status.ECALLBACK)
        self.assertIn("episode 1 turn 1: the environment returned 1: ValueError: boom in episode 1",
                      eps[1].error)
        for i in (0, 2, 3):
            self.assertEqual(eps[i].ids, ok[i].ids)          # the others go on, unaffected
            self.assertIs(eps[i].end, pt.EpisodeEnd.DONE)
        self.assertEqual(eps.stats.errors, 1)
        bad = self.play(scripted(bad=(2, 0)))
        self.assertIs(bad[2].end, pt.EpisodeEnd.ERROR)
        self.assertIn("TypeError: the environment returned 42", bad[2].error)
        # on_error="stop": the exception comes back, the results with it
        with self.assertRaises(ValueError) as cm:
            self.play(scripted(fail=(1, 1)), on_error="stop")
        self.assertIsInstance(cm.exception.__cause__, pt.CallbackError)
        self.assertIn("pt_episodes_run: episode 1 turn 1", cm.exception.__cause__.message)
        got = cm.exception.episodes
        self.assertIs(got[1].end, pt.EpisodeEnd.ERROR)
        self.assertTrue(any(e.end is pt.EpisodeEnd.STOPPED for e in got))
        got.close()
        # malformed answers the library finds
        for ans, msg in ((pt.Append(ids=[1, 999]), "appended id 999 (ids[1]) is outside"),
                         (pt.Append(text="x"), "no tokenizer"),
                         (pt.Done(rewards=[math.inf, 0]), "rewards[0] is inf")):
            r = self.play(lambda t, ans=ans: ans if t.episode == 0 else scripted()(t))
            self.assertIs(r[0].end, pt.EpisodeEnd.ERROR, msg)
            self.assertIs(r[0].status, pt.Status.EINVAL)
            self.assertIn(msg, r[0].error)
        # KeyboardInterrupt: every episode ends at its next turn, then it is re-raised
        calls = []

        def interrupted(t):
            calls.append(t.episode)
            if len(calls) == 2:
                raise KeyboardInterrupt
            return scripted()(t)
        with self.assertRaises(KeyboardInterrupt):
            self.play(interrupted)
        self.assertLessEqual(len(calls), 2 + 4)
        with self.assertRaises(pt.InvalidArgument) as cm:
            self.play(scripted(), max_turns=0)
        self.assertIn("pt_episodes_run: max_turns 0 must be at least 1", cm.exception.message)
        with self.assertRaises(pt.InvalidArgument):
            self.play(scripted(), on_error="sometimes")

    def test_pending_tools_in_threads(self):
        # tools run in a thread pool: Pending until the result is there; the
        # episodes come out as with an environment that answers at once
        import concurrent.futures
        import time
        sync = scripted()
        pool = concurrent.futures.ThreadPoolExecutor(2)
        jobs = {}

        def env(t):
            key = (t.episode, t.turn)
            if key not in jobs:
                self.assertEqual(t.attempt, 0)
                jobs[key] = pool.submit(lambda t=t: (time.sleep(0.002 * (t.episode + 1)), sync(t))[1])
            if not jobs[key].done():
                return pt.Pending
            return jobs[key].result()
        ok = self.play(scripted())
        got = self.play(env)
        pool.shutdown()
        self.assertEqual([e.ids for e in got], [e.ids for e in ok])
        self.assertEqual([e.logprobs for e in got], [e.logprobs for e in ok])
        self.assertEqual([e.rewards for e in got], [e.rewards for e in ok])
        self.assertEqual(got.stats.env_calls - got.stats.env_pending, 12)

    def test_limits(self):
        eps = self.play(lambda t: [5, 6, 7], max_turns=2)          # never done
        self.assertTrue(all(e.end is pt.EpisodeEnd.MAX_TURNS and e.truncated for e in eps))
        self.assertTrue(all(len(e.turns) == 2 for e in eps))
        self.assertTrue(all(math.isnan(e.rewards[0]) for e in eps))
        eps = self.play(lambda t: [5, 6, 7], max_turns=50, max_total_tokens=20)
        self.assertTrue(all(e.end is pt.EpisodeEnd.MAX_TOKENS and len(e.ids) <= 20 for e in eps))
        self.assertEqual(eps.stats.max_tokens, 4)

    def test_into_rollout_buffer(self):
        eps = self.play(scripted(fail=(3, 0)))
        with pt.RolloutBuffer(["a", "b"]) as buf:
            self.assertEqual(buf.add_episodes(eps), 3)
            self.assertEqual(len(buf), 3)
            for j, e in enumerate(eps[:3]):
                self.assertEqual(buf.sample_info(j), pt.SampleInfo(len(e.ids), e.prompt_len, e.index))
                self.assertEqual(buf.get_logprobs(j, "sampling"), e.logprobs)
                self.assertEqual(buf.rewards()[j], e.rewards)
                # rewarded per turn: one segment reward per turn, the sum
                # of the turn's rewards that were given
                for t, tr in enumerate(e.turn_rewards):
                    want = sum(x for x in tr if not math.isnan(x))
                    self.assertEqual(buf.get_segment_reward(j, t), want)
            with pt.Optimizer(self.m) as opt:
                st = pt.grpo_step(opt, buf)
            self.assertEqual(st.tokens, sum(sum(e.loss_mask) for e in eps[:3]))
        with pt.RolloutBuffer("one") as one, self.assertRaises(pt.InvalidArgument) as cm:
            one.add_episodes(eps)
        self.assertIn("the episodes carry 2 rewards", cm.exception.message)

    def test_model_play_episodes(self):
        eps = self.m.play_episodes(PROMPTS, scripted(turns=2), max_total_tokens=40,
                                   n_reward_funcs=2, max_new_tokens=4, stop_ids=[])
        self.assertEqual([len(e.turns) for e in eps], [2] * 4)
        self.assertTrue(all(len(e.ids) <= 40 for e in eps))


@unittest.skipUnless(pt.has_feature("episodes"), "the loaded libposttrain has no episode engine")
class TestLayout(unittest.TestCase):
    def test_turn_and_reply_layout(self):
        # pt_env_turn / pt_env_reply have no _init: a raw callback reads the
        # sizes the library wrote and every field of the turn.
        seen = {}

        def fn(reply_p, turn_p, payload):
            t, r = turn_p.contents, reply_p.contents
            seen.update(turn=t.size, reply=r.size, episode=t.episode, group=t.group, turn_no=t.turn,
                        ids=t.ids[:t.n_ids], prompt_len=t.prompt_len, start=t.turn_start,
                        end=t.turn_end, final=t.final, left=t.tokens_left, action=r.action)
            r.action = int(pt.EnvAction.DONE)
            return 0
        cb = _lib.ENV_FN(fn)
        with pt.Model.create(TINY, seed=1) as m, m.generator(1, 16) as g, pt.Episodes() as res:
            o = _lib.EpisodeOptions.new()
            so = _lib.GenerateOptions.new()
            so.max_new_tokens = 3
            so.n_stop_ids = 0
            o.sampling = ctypes.pointer(so)
            o.max_turns = 1
            ids = (ctypes.c_int32 * 2)(256, 9)
            lens = (ctypes.c_int32 * 1)(2)
            grp = (ctypes.c_int64 * 1)(1 << 40)
            pt.errors.check(_lib.lib.pt_episodes_run(res._ptr, g._ptr, ids, lens, grp, 1,
                                                     ctypes.byref(o), cb, None))
        self.assertEqual(seen["turn"], ctypes.sizeof(_lib.EnvTurn))
        self.assertEqual(seen["reply"], ctypes.sizeof(_lib.EnvReply))
        self.assertEqual((seen["episode"], seen["group"], seen["turn_no"], seen["prompt_len"],
                          seen["start"], seen["end"], seen["final"], seen["left"], seen["action"]),
                         (0, 1 << 40, 0, 2, 2, int(pt.TurnEnd.LENGTH), int(pt.EpisodeEnd.MAX_TURNS),
                          0, 0))
        self.assertEqual(seen["ids"][:2], [256, 9])
        self.assertEqual(len(seen["ids"]), 5)


if __name__ == "__main__":
    unittest.main()
