"""The goodput accountant (posttrain/goodput.h) through the binding: TimeKind
from the library's names, exact sums, sections as context managers (also
when the block raises), commit and rollback, OTHER as the wall's remainder,
the totals through a real checkpoint's host JSON and back (pending and
lost_seconds become lost), malformed documents with nothing changed,
Young-Daly, and the errors with the C messages."""

import json
import math
import os
import tempfile
import time
import unittest

import ptest
import posttrain as pt

TINY = ptest.TINY
KINDS = ["step", "generate", "wait", "save", "load", "startup", "eval", "lost", "other"]


def totals(r):
    """Everything in a report but the wall clock's share."""
    return ({k: v for k, v in r.seconds.items() if k != pt.TimeKind.OTHER}, r.pending,
            r.steps_kept, r.steps_lost)


@unittest.skipUnless(pt.has_feature("goodput"), "the loaded libposttrain has no goodput accountant")
class TestGoodput(unittest.TestCase):
    def test_time_kind(self):
        self.assertEqual([(m.name, int(m)) for m in pt.TimeKind],
                         [(n.upper(), i) for i, n in enumerate(KINDS)])
        self.assertEqual([str(m) for m in pt.TimeKind], KINDS)
        self.assertIs(pt.TimeKind("save"), pt.TimeKind.SAVE)
        with self.assertRaises(pt.InvalidArgument) as cm:
            pt.TimeKind("saving")
        self.assertEqual(cm.exception.message, "pt_time_kind_from_name: unknown time kind 'saving' "
                         "(one of: %s)" % ", ".join(KINDS))

    def test_adds_commit_rollback(self):
        with pt.Goodput() as gp:
            gp.add(pt.TimeKind.STEP, 1.5)
            gp.add("generate", 0.25)
            gp.add(2, 0.5)                      # WAIT by its C value
            gp.add("save", 2)
            gp.add(pt.TimeKind.LOST, 1)
            for _ in range(3):
                gp.step_done()
            r = gp.report()
            self.assertIsInstance(r, pt.GoodputReport)
            self.assertEqual(list(r.seconds), list(pt.TimeKind))
            self.assertEqual((r.seconds[pt.TimeKind.STEP], r.seconds[pt.TimeKind.GENERATE]), (0, 0))
            self.assertEqual(r.pending, 1.75)
            self.assertEqual(r.seconds[pt.TimeKind.WAIT], 0.5)
            self.assertEqual(r.seconds[pt.TimeKind.SAVE], 2.0)
            self.assertEqual(r.goodput, 0.0)
            gp.commit()
            r = gp.report()
            self.assertEqual((r.seconds[pt.TimeKind.STEP], r.seconds[pt.TimeKind.GENERATE]), (1.5, 0.25))
            self.assertEqual((r.pending, r.steps_kept, r.steps_lost), (0.0, 3, 0))
            self.assertEqual(r.goodput, 1.75 / r.wall)
            gp.add("step", 4)
            gp.step_done()
            gp.step_done()
            gp.rollback()
            r = gp.report()
            self.assertEqual(r.seconds[pt.TimeKind.LOST], 5.0)
            self.assertEqual(r.seconds[pt.TimeKind.STEP], 1.5)
            self.assertEqual((r.pending, r.steps_kept, r.steps_lost), (0.0, 3, 2))
            # far more attributed than the wall: OTHER is 0, never negative
            self.assertEqual(r.seconds[pt.TimeKind.OTHER], 0.0)

    def test_sections_and_other(self):
        with pt.Goodput() as gp:
            time.sleep(0.02)
            r = gp.report()
            self.assertEqual(r.seconds[pt.TimeKind.OTHER], r.wall)   # nothing attributed
            with gp.section(pt.TimeKind.EVAL) as same:
                self.assertIs(same, gp)
                time.sleep(0.03)
                self.assertGreaterEqual(gp.report().seconds[pt.TimeKind.EVAL], 0.03)  # open: so far
            with self.assertRaises(ZeroDivisionError):
                with gp.section("step"):
                    time.sleep(0.01)
                    1 / 0
            r = gp.report()
            self.assertGreaterEqual(r.seconds[pt.TimeKind.EVAL], 0.03)
            self.assertGreaterEqual(r.pending, 0.01)   # the section ended although it raised
            rest = r.wall - r.pending - sum(v for k, v in r.seconds.items() if k != pt.TimeKind.OTHER)
            self.assertEqual(r.seconds[pt.TimeKind.OTHER], max(rest, 0.0))
            self.assertAlmostEqual(sum(r.seconds.values()) + r.pending, r.wall, delta=1e-12)
            gp.begin("save")
            with self.assertRaises(pt.StateError) as cm:
                gp.begin("eval")
            self.assertIn("the 'save' section is still open", cm.exception.message)
            with self.assertRaises(pt.StateError):
                with gp.section("wait"):
                    pass
            gp.end()
            with self.assertRaises(pt.StateError) as cm:
                gp.end()
            self.assertEqual(cm.exception.message,
                             "pt_goodput_end: no section is open (call pt_goodput_begin first)")

    def test_errors(self):
        with pt.Goodput() as gp:
            gp.add("wait", 0.5)
            before = totals(gp.report())
            for kind, needle in (("other", "pt_goodput_add: kind 'other' cannot be added"),
                                 (9, "pt_goodput_add: kind 9 is not a pt_time_kind (0 .. 8)")):
                with self.subTest(kind=kind), self.assertRaises(pt.InvalidArgument) as cm:
                    gp.add(kind, 1)
                self.assertIn(needle, cm.exception.message)
            with self.assertRaises(pt.InvalidArgument) as cm:
                gp.add("steps", 1)
            self.assertEqual(cm.exception.function, "pt_time_kind_from_name")
            for bad in (-1.0, math.nan, math.inf, 2e12):
                with self.subTest(seconds=bad), self.assertRaises(pt.InvalidArgument) as cm:
                    gp.add("save", bad)
                self.assertIn("pt_goodput_add: seconds must be finite and in [0, 1e12]",
                              cm.exception.message)
            for bad in ("1", None, True):
                with self.subTest(seconds=bad), self.assertRaises(pt.InvalidArgument) as cm:
                    gp.add("save", bad)
                self.assertEqual(cm.exception.function, "Goodput.add")
            with self.assertRaises(pt.InvalidArgument):
                gp.begin(pt.TimeKind.OTHER)
            with self.assertRaises(pt.InvalidArgument):
                gp.add(pt.Schedule.LINEAR, 1)          # a member of another enum
            self.assertEqual(totals(gp.report()), before)
        with self.assertRaises(pt.ClosedHandleError):
            gp.add("save", 1)

    def test_json_round_trip_through_a_checkpoint(self):
        with tempfile.TemporaryDirectory() as d, pt.Model.create(TINY, seed=1) as m, \
                pt.Optimizer(m, lr=1e-3) as opt, pt.Goodput() as gp:
            path = os.path.join(d, "ckpt")
            for k, s in zip(KINDS[:-1], (1.5, 0.25, 0.5, 2, 0.125, 3, 0.75, 1)):
                gp.add(k, s)
            gp.step_done()
            gp.step_done()
            with gp.section("save"):
                gp.commit()
                saved = json.loads(gp.to_json())
                pt.save_checkpoint(path, m, opt, {"data": [0, 8], "goodput": saved})
            self.assertEqual(saved["pending"], 0.0)
            self.assertEqual(saved["steps_kept"], 2)
            self.assertNotIn("other", saved)
            gp.add("step", 0.5)                     # after the checkpoint: lost on restart
            gp.step_done()
            old = gp.report()

            host = pt.load_checkpoint(path, m, opt)
            with pt.Goodput() as resumed:
                resumed.add("load", 0.25)
                resumed.restore(host["goodput"], lost_seconds=0.5, lost_steps=1)
                r = resumed.report()
                self.assertGreaterEqual(r.wall, saved["wall"] + 0.5)
                self.assertEqual(r.seconds[pt.TimeKind.STEP], 1.5)
                self.assertEqual(r.seconds[pt.TimeKind.LOAD], 0.125 + 0.25)
                self.assertEqual(r.seconds[pt.TimeKind.LOST], 1 + 0.5)
                self.assertEqual(r.seconds[pt.TimeKind.SAVE], saved["save"])
                self.assertEqual((r.pending, r.steps_kept, r.steps_lost), (0.0, 2, 1))
                with self.assertRaises(pt.StateError):
                    resumed.restore(host["goodput"])
            # without the commit: what was pending is lost on restore
            with pt.Goodput() as b:
                b.restore(gp.to_json())
                r = b.report()
                self.assertEqual(r.seconds[pt.TimeKind.LOST], old.seconds[pt.TimeKind.LOST] + 0.5)
                self.assertEqual((r.steps_kept, r.steps_lost), (2, 1))

    def test_malformed(self):
        with pt.Goodput() as src:
            src.add("step", 1)
            src.commit()
            good = json.loads(src.to_json())
        with pt.Goodput() as gp:
            gp.add("eval", 0.5)
            before = totals(gp.report())
            for key in good:
                for value in (None, "1", -1, [1], "drop"):
                    doc = dict(good)
                    if value == "drop":
                        del doc[key]
                    else:
                        doc[key] = value
                    with self.subTest(key=key, value=value), self.assertRaises(pt.FormatError) as cm:
                        gp.restore(doc, lost_seconds=3)
                    self.assertTrue(cm.exception.message.startswith("pt_goodput_restore: "))
                    self.assertIn("'%s'" % key, cm.exception.message)
            for text in ("", "[]", "{", json.dumps(good) + " 1"):
                with self.subTest(text=text), self.assertRaises(pt.FormatError):
                    gp.restore(text)
            with self.assertRaises(pt.InvalidArgument):
                gp.restore(dict(good, wall=math.nan))   # not JSON at all
            for kw in (dict(lost_seconds=-1), dict(lost_seconds=math.nan), dict(lost_steps=-1),
                       dict(lost_steps=2**70), dict(lost_steps=1.5)):
                with self.subTest(**kw), self.assertRaises(pt.InvalidArgument):
                    gp.restore(good, **kw)
            self.assertEqual(totals(gp.report()), before)
            gp.restore(good)                         # still takes its one restore
            self.assertEqual(gp.report().seconds[pt.TimeKind.STEP], 1.0)

    def test_young_daly(self):
        self.assertAlmostEqual(pt.young_daly_interval(60, 86400), 3219.937887599697, places=9)
        self.assertEqual(round(pt.young_daly_interval(60, 86400), 2), 3219.94)
        self.assertEqual(pt.young_daly_interval(1, 2), 2.0)
        self.assertAlmostEqual(pt.young_daly_interval(300, 7 * 86400), math.sqrt(2 * 300 * 604800))
        for c, m, arg in ((0, 86400, "checkpoint_seconds"), (60, -1, "mtbf_seconds"),
                          (math.inf, 1, "checkpoint_seconds"), (1, math.nan, "mtbf_seconds")):
            with self.subTest(c=c, m=m), self.assertRaises(pt.InvalidArgument) as cm:
                pt.young_daly_interval(c, m)
            self.assertIn("pt_checkpoint_interval_young_daly: %s must be finite and > 0" % arg,
                          cm.exception.message)
        with self.assertRaises(pt.InvalidArgument):
            pt.young_daly_interval("60", 86400)


if __name__ == "__main__":
    ptest.main()
