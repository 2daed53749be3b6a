#!/usr/bin/env python3
"""Summarise bench_dist_scaling logs (several runs) as the tables of docs/scaling.md.

    bench/dist_scaling.sh build allreduce "2 3 4" > run1.log    (repeat: run2.log ...)
    python3 bench/dist_scaling_summary.py run1.log run2.log ...

For every (ranks, size, bucket): the median over runs of each run's median
time (ours = pt_comm_allreduce_f32, mpi-b = MPI_Allreduce over the same
buckets, mpi-1 = one MPI_Allreduce of the whole buffer), the median of the
per-run ratios ours / mpi-b (each measured in the same minute), and the
load averages seen.  Then the alpha-beta fit of the medians at each rank
count, t = alpha * buckets + beta * bytes (mpi-1: t = alpha + beta *
bytes), least squares on the relative error, as the benchmark itself fits
one run.  sft lines: the median over runs of each figure.  Python 3
standard library only.
"""

import collections
import math
import statistics
import sys


def parse(line):
    out = {}
    for tok in line.split()[2:]:
        if "=" in tok:
            k, v = tok.split("=", 1)
            try:
                out[k] = float(v)
            except ValueError:
                out[k] = v
    return out


def fit(x, s, t):
    sxx = sxs = sss = sxt = sst = 0.0
    for xi, si, ti in zip(x, s, t):
        w = 1 / (ti * ti)
        sxx += w * xi * xi
        sxs += w * xi * si
        sss += w * si * si
        sxt += w * xi * ti
        sst += w * si * ti
    det = sxx * sss - sxs * sxs
    a = (sxt * sss - sst * sxs) / det
    b = (sxx * sst - sxs * sxt) / det
    e = math.sqrt(sum(((a * xi + b * si - ti) / ti) ** 2 for xi, si, ti in zip(x, s, t)) / len(t))
    return a, b, e


def fmt_s(t):
    if t < 1e-3:
        return "%.0f us" % (t * 1e6)
    if t < 1:
        return "%.1f ms" % (t * 1e3)
    return "%.2f s" % t


def fmt_bytes(b):
    for unit, k in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= k:
            return ("%.0f %s" if b % k == 0 else "%.1f %s") % (b / k, unit)
    return "%d B" % b


def main(paths):
    ar = collections.defaultdict(list)   # (np, bytes, bucket) -> [fig]
    sft = collections.defaultdict(list)  # np -> [fig]
    grad = collections.defaultdict(list)
    ckpt = []
    per_log = []  # per log: {np: step_s} of its sft runs, for ratios within one sequence
    for p in paths:
        steps = {}
        per_log.append(steps)
        before = math.nan
        for line in open(p, errors="replace"):
            if line.startswith("== ") and "load average:" in line:
                # bench/dist_scaling.sh's line before each command: the load before the run
                before = float(line.split("load average:")[1].split(",")[0])
                continue
            if not line.startswith("figure: "):
                continue
            kind = line.split()[1]
            f = parse(line)
            f["before"] = before
            if kind == "allreduce" and f["np"] >= 2:
                ar[(int(f["np"]), f["bytes"], f["bucket_mib"])].append(f)
            elif kind == "sft":
                sft[(int(f["np"]), int(f["threads"]), f["bucket_mib"])].append(f)
                steps[int(f["np"])] = f["step_s"]
            elif kind == "grad_allreduce":
                grad[(int(f["np"]), f["bucket_mib"])].append(f)
            elif kind == "checkpoint":
                ckpt.append(f)
    med = statistics.median
    if ar:
        print("### All-reduce (median over %d log(s))\n" % len(paths))
        print("| ranks | size | bucket | ours | ours busbw | MPI_Allreduce, same buckets | one MPI_Allreduce "
              "| ours / same buckets (per-run median) | runs | load |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for key in sorted(ar):
            np_, b, bk = key
            fs = ar[key]
            to, tb, t1 = med([f["ours_s"] for f in fs]), med([f["mpib_s"] for f in fs]), med([f["mpi1_s"] for f in fs])
            ratio = med([f["ours_s"] / f["mpib_s"] for f in fs])
            loads = [f["before"] for f in fs]
            print("| %d | %s | %g MiB | %s | %.2f GB/s | %s | %s | %.2fx | %d | %.1f-%.1f |" % (
                np_, fmt_bytes(b), bk, fmt_s(to), 2 * (np_ - 1) / np_ * b / to / 1e9, fmt_s(tb), fmt_s(t1), ratio,
                len(fs), min(loads), max(loads)))
        print("\n### Alpha-beta fits of the medians\n")
        print("| ranks | method | bucket | alpha | beta | 1/beta | busbw = 2(P-1)/P / beta | rel. rms error |")
        print("|---:|---|---:|---:|---:|---:|---:|---:|")
        for np_ in sorted({k[0] for k in ar}):
            for method, col in (("ours", "ours_s"), ("MPI, same buckets", "mpib_s"), ("one MPI_Allreduce", "mpi1_s")):
                buckets = sorted({k[2] for k in ar if k[0] == np_})
                for bk in (buckets if col != "mpi1_s" else buckets[:1]):
                    keys = sorted(k for k in ar if k[0] == np_ and k[2] == bk)
                    s = [k[1] for k in keys]
                    t = [med([f[col] for f in ar[k]]) for k in keys]
                    x = [1.0 if col == "mpi1_s" else math.ceil(si / (bk * 1048576)) for si in s]
                    if len(s) < 2:
                        continue
                    a, b, e = fit(x, s, t)
                    print("| %d | %s | %s | %.1f us%s | %.3f ns/B | %.2f GB/s | %.2f GB/s | %.2f |" % (
                        np_, method, "-" if col == "mpi1_s" else "%g MiB" % bk, a * 1e6,
                        "" if col == "mpi1_s" else " per bucket", b * 1e9, 1 / b / 1e9, 2 * (np_ - 1) / np_ / b / 1e9,
                        e))
    if sft:
        print("\n### SFT step (median over runs)\n")
        print("| ranks | threads/rank | bucket | step | tokens/s | compute (rank 0) | comm (rank 0) | comm min..max "
              "over ranks | comm share | grad all-reduce alone | peak RSS/rank | runs | load |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for key in sorted(sft):
            fs = sft[key]
            g = grad.get((key[0], key[2]), [])
            m = lambda k: med([f[k] for f in fs])
            loads = [f["before"] for f in fs]
            print("| %d | %d | %g MiB | %.2f s | %.1f | %.2f s | %.3f s | %.3f..%.3f s | %.1f%% | %s | %.0f MB | %d | "
                  "%.1f-%.1f |" % (key[0], key[1], key[2], m("step_s"), m("tokens_per_s"), m("compute_s_rank0"),
                                  m("comm_s_rank0"), m("comm_s_min"), m("comm_s_max"), 100 * m("comm_frac"),
                                  fmt_s(med([f["isolated_s"] for f in g])) if g else "-", m("peak_rss_mb_max"),
                                  len(fs), min(loads), max(loads)))
    seqs = [st for st in per_log if 1 in st and len(st) > 1]
    if seqs:
        print("\n### Step time relative to 1 rank, within one sequence of runs (median over %d sequences)\n"
              % len(seqs))
        print("| ranks | step / step at 1 rank | per sequence |")
        print("|---:|---:|---|")
        for np_ in sorted({k for st in seqs for k in st if k > 1}):
            r = [st[np_] / st[1] for st in seqs if np_ in st]
            print("| %d | %.2f | %s |" % (np_, med(r), ", ".join("%.2f" % x for x in r)))
    if any(k[0] > 1 for k in grad):
        print("\n### Gradient all-reduce alone (pt_dist_allreduce_grads, every rank idle otherwise)\n")
        print("| ranks | bucket | time | algbw | runs | load |")
        print("|---:|---:|---:|---:|---:|---:|")
        for key in sorted(k for k in grad if k[0] > 1):
            fs = grad[key]
            t = med([f["isolated_s"] for f in fs])
            print("| %d | %g MiB | %s | %.2f GB/s | %d | %.1f-%.1f |" % (
                key[0], key[1], fmt_s(t), fs[0]["bytes"] / t / 1e9, len(fs), min(f["before"] for f in fs),
                max(f["before"] for f in fs)))
    if ckpt:
        print("\n### Checkpoint (rank 0)\n")
        print("| bytes | save | load | runs | load average |")
        print("|---:|---:|---:|---:|---:|")
        print("| %.0f MB | %.2f s (%.2f GB/s) | %.2f s | %d | %.1f-%.1f |" % (
            med([f["bytes"] for f in ckpt]) / 1e6, med([f["save_s"] for f in ckpt]),
            med([f["save_gbs"] for f in ckpt]), med([f["load_s"] for f in ckpt]), len(ckpt),
            min(f["before"] for f in ckpt), max(f["before"] for f in ckpt)))
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1:]))
