#!/usr/bin/env python3
"""Project data-parallel SFT from the measured figures to 8..4096 nodes.

    python3 bench/scaling_model.py                      # the tables of docs/scaling.md
    python3 bench/scaling_model.py --mtbf-node-h 876    # a less reliable node
    python3 bench/scaling_model.py --lib build/libposttrain/libposttrain.so   # cross-check

Python 3 standard library only.  The defaults are the figures measured by
bench_dist_scaling (docs/scaling.md gives the commands and the load) and,
labelled "assumed", those of a cluster network this project has not
measured.  Every parameter can be overridden.

Model (one data-parallel rank per node, weak scaling: every node keeps the
measured per-node batch, so the global batch grows with the nodes):

  step     = compute + allreduce(P, S)            (no overlap: the library's
                                                   all-reduce starts after the backward)
  compute  = measured seconds per sample x samples per node
  S        = 4 x parameters (FP32 gradient bytes)

  all-reduce, two cost formulas:
    pairwise (ours: per bucket of B bytes, a reduce-scatter in which every
      rank sends its P-1 shards of B/P bytes to their owners at once, a
      rank-order fold, then the all-gather the same way):
        nb = ceil(S / B)
        T  = 2 nb alpha + 2 nb (P-1) o + 2 (P-1)/P S beta + (P-1)/P S gamma
    ring (what MPI and NCCL use for large messages; reference only):
        T  = 2 (P-1) alpha + 2 (P-1)/P S beta + (P-1)/P S gamma_ring
  alpha: latency of one exchange round; o: per-message overhead (message
  rate); beta: seconds per byte on a node's link; gamma: seconds per byte
  of the fold (one add per element per peer).

  failures and checkpoints (first order, failures independent, exponential):
    MTBF_job = MTBF_node / P,  failures per hour = 3600 P / MTBF_node
    Young-Daly interval tau = sqrt(2 C MTBF_job)   (C: checkpoint save seconds)
    kept fraction = tau / (tau + C) x (1 - (R + (tau + C) / 2) / MTBF_job)
      (each failure costs the restart R and on average half a segment of work)
    goodput = kept fraction x compute / step   (posttrain/goodput.h: time
      waiting at collectives is PT_TIME_WAIT, not step time)
"""

import argparse
import ctypes
import math
import os
import sys

# ---- measured on this machine (docs/scaling.md) -------------------------------
MEASURED = {
    # SmolLM2-135M shape, pt_model_num_params
    "params": 134515008,
    # bench_dist_scaling sft at 1 rank, 2 threads (--bind-to none), 4 x 256: the median step
    # of 5 runs started at load < 1 (9.87-10.69 s; AMD EPYC Zen 3, 2 vCPUs, BLIS zen3 kernels)
    "compute_step_s": 10.3,
    "samples_per_step": 4,
    # pt_checkpoint_save / pt_checkpoint_load of that model with its AdamW state
    # (1614 MB; the median of 2 runs of 3 saves each: 13.4 and 13.9 s; loads 8.6 and 8.8 s)
    "ckpt_save_s": 13.7,
    "ckpt_load_s": 8.7,
    # our all-reduce at 2 local ranks (shared memory, not oversubscribed), 4 MiB buckets:
    # the alpha-beta fit of the medians of 3 runs (t = alpha * buckets + beta * bytes)
    "local_alpha_bucket_s": 3.5e-6,
    "local_beta_s_per_byte": 1.05e-9,
    # the rank-order fold of pt_comm_allreduce_f32 today (dist.c), seconds per byte per add,
    # measured inside the all-reduce at 2 ranks on 2 MiB shards: 890-990 us
    "fold_gamma_s_per_byte": 0.45e-9,
    # the same fold as one loop per peer (vectorised; a patched copy, not the library): 317-340 us
    "fold_gamma_vec_s_per_byte": 0.15e-9,
}

# ---- assumed: a cluster network this project has not measured -----------------
ASSUMED = {
    "link_gbit_s": 100.0,    # one 100 Gb/s port per node
    "alpha_s": 5e-6,         # MPI small-message latency over RoCE/InfiniBand-class fabric
    "msg_overhead_s": 1e-6,  # per-message cost: about a million messages per second per node
    "restart_s": 120.0,      # relaunch the job (scheduler, mpirun, model and data load)
    "mtbf_node_h": 8760.0,   # one failure per node-year
}


def allreduce_pairwise(p, s, bucket, alpha, o, beta, gamma):
    if p == 1:
        return 0.0
    nb = math.ceil(s / bucket)
    return 2 * nb * alpha + 2 * nb * (p - 1) * o + 2 * (p - 1) / p * s * beta + (p - 1) / p * s * gamma


def allreduce_ring(p, s, alpha, beta, gamma):
    if p == 1:
        return 0.0
    return 2 * (p - 1) * alpha + 2 * (p - 1) / p * s * beta + (p - 1) / p * s * gamma


def young_daly(c, mtbf):
    return math.sqrt(2 * c * mtbf)


def kept_fraction(tau, c, r, mtbf):
    f = tau / (tau + c) * (1 - (r + (tau + c) / 2) / mtbf)
    return max(f, 0.0)


def best_interval(c, r, mtbf):
    """The tau that maximises kept_fraction, by golden-section search on log tau."""
    lo, hi = math.log(c / 100), math.log(max(mtbf, c) * 10)
    g = (math.sqrt(5) - 1) / 2
    a, b = hi - g * (hi - lo), lo + g * (hi - lo)
    for _ in range(200):
        if kept_fraction(math.exp(a), c, r, mtbf) > kept_fraction(math.exp(b), c, r, mtbf):
            hi = b
        else:
            lo = a
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
    return math.exp((lo + hi) / 2)


def fmt_time(s):
    if s < 1:
        return "%.0f ms" % (s * 1e3)
    if s < 120:
        return "%.1f s" % s
    if s < 7200:
        return "%.1f min" % (s / 60)
    return "%.1f h" % (s / 3600)


def table(args, title, comm_fn):
    s = 4 * args.params
    compute = args.compute_step_s / args.samples_per_step * args.samples_per_node / args.node_speedup
    restart = args.restart_s + args.ckpt_load_s
    print("\n### %s\n" % title)
    print("compute per step %.2f s (%d samples of %d tokens per node), checkpoint C = %.1f s, restart R = %.0f s, "
          "MTBF_node = %.0f h\n" % (compute, args.samples_per_node, args.seq, args.ckpt_save_s, restart,
                                    args.mtbf_node_h))
    print("| nodes | all-reduce | step | comm share | step with overlap | failures/h | MTBF_job | Young-Daly tau "
          "| = steps | best tau | kept | goodput | kept tokens/s (all nodes) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    rows = []
    for p in args.nodes:
        comm = comm_fn(p, s)
        step = compute + comm
        # overlap with the backward (about 2/3 of the compute): the forward
        # then max(backward, all-reduce)
        bwd = compute * 2 / 3
        step_ov = compute - bwd + max(bwd, comm)
        mtbf = args.mtbf_node_h * 3600 / p
        tau = young_daly(args.ckpt_save_s, mtbf)
        best = best_interval(args.ckpt_save_s, restart, mtbf)
        kept = kept_fraction(tau, args.ckpt_save_s, restart, mtbf)
        good = kept * compute / step
        tps = p * args.samples_per_node * args.seq / step * kept
        rows.append((p, comm, step, kept, good, tau, best))
        print("| %d | %s | %s | %.1f%% | %s | %.3f | %s | %s | %.0f | %s | %.1f%% | %.1f%% | %.0f |" % (
            p, fmt_time(comm), fmt_time(step), 100 * comm / step, fmt_time(step_ov), 3600 / mtbf, fmt_time(mtbf),
            fmt_time(tau), tau / step, fmt_time(best), 100 * kept, 100 * good, tps))
    return rows


def sensitivity(args, bucket, alpha, o, beta, g, gv):
    """Goodput at a few node counts when a node computes faster than this
    2-core machine, or fails more often: the comm share grows as compute
    shrinks, which is when overlapping the all-reduce with the backward pays."""
    s = 4 * args.params
    print("\n### Sensitivity (ASSUMED network as above): goodput / comm share of the step\n")
    print("| node speed-up | MTBF_node | nodes | ours, %.0f MiB, today's fold | ours, 256 MiB, vectorised fold "
          "| ring | ring, all-reduce overlapped with the backward |" % args.bucket_mib)
    print("|---:|---:|---:|---:|---:|---:|---:|")
    restart = args.restart_s + args.ckpt_load_s
    for speed in (1, 16, 64):
        for mtbf_h in (args.mtbf_node_h, args.mtbf_node_h / 10):
            for p in (8, 512, 4096):
                compute = args.compute_step_s / args.samples_per_step * args.samples_per_node / speed
                mtbf = mtbf_h * 3600 / p
                kept = kept_fraction(young_daly(args.ckpt_save_s, mtbf), args.ckpt_save_s, restart, mtbf)
                cells = []
                for comm, overlap in ((allreduce_pairwise(p, s, bucket, alpha, o, beta, g), False),
                                      (allreduce_pairwise(p, s, 256 * 1048576, alpha, o, beta, gv), False),
                                      (allreduce_ring(p, s, alpha, beta, gv), False),
                                      (allreduce_ring(p, s, alpha, beta, gv), True)):
                    bwd = compute * 2 / 3
                    step = compute - bwd + max(bwd, comm) if overlap else compute + comm
                    cells.append("%.1f%% / %.0f%%" % (100 * kept * compute / step, 100 * (step - compute) / step))
                print("| %gx | %.0f h | %d | %s |" % (speed, mtbf_h, p, " | ".join(cells)))


def cross_check(lib_path):
    lib = ctypes.CDLL(lib_path)
    f = lib.pt_checkpoint_interval_young_daly
    f.argtypes = [ctypes.POINTER(ctypes.c_double), ctypes.c_double, ctypes.c_double]
    f.restype = ctypes.c_int
    print("\n### Cross-check: pt_checkpoint_interval_young_daly (%s) against sqrt(2 C M)\n" % lib_path)
    print("| C (s) | M (s) | library (s) | this script (s) | relative difference |")
    print("|---:|---:|---:|---:|---:|")
    worst = 0.0
    for c, m in [(5.0, 3600.0), (5.0, 3.1536e7 / 4096), (60.0, 86400.0), (0.5, 1e9), (1234.5, 6.7e5)]:
        out = ctypes.c_double(0)
        st = f(ctypes.byref(out), c, m)
        if st != 0:
            print("| %g | %g | status %d | | |" % (c, m, st))
            worst = math.inf
            continue
        mine = young_daly(c, m)
        rel = abs(out.value - mine) / mine
        worst = max(worst, rel)
        print("| %g | %g | %.6f | %.6f | %.1e |" % (c, m, out.value, mine, rel))
    bad = ctypes.c_double(0)
    st = f(ctypes.byref(bad), 0.0, 100.0)
    print("\nC = 0 is rejected by the library: status %d (PT_EINVAL expected); worst relative difference %.1e"
          % (st, worst))
    return worst < 1e-12 and st != 0


def main():
    a = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("--nodes", default="8,16,32,64,128,256,512,1024,2048,4096")
    a.add_argument("--params", type=int, default=MEASURED["params"])
    a.add_argument("--compute-step-s", type=float, default=MEASURED["compute_step_s"],
                   help="measured compute seconds of one step at 1 rank (default %(default)s)")
    a.add_argument("--samples-per-step", type=int, default=MEASURED["samples_per_step"])
    a.add_argument("--samples-per-node", type=int, default=4, help="the per-node batch (default %(default)s)")
    a.add_argument("--seq", type=int, default=256)
    a.add_argument("--node-speedup", type=float, default=1.0,
                   help="a node computes this many times faster than the measured 2-core machine (default 1)")
    a.add_argument("--ckpt-save-s", type=float, default=MEASURED["ckpt_save_s"])
    a.add_argument("--ckpt-load-s", type=float, default=MEASURED["ckpt_load_s"])
    a.add_argument("--restart-s", type=float, default=ASSUMED["restart_s"],
                   help="relaunch time before the checkpoint load (assumed, default %(default)s)")
    a.add_argument("--mtbf-node-h", type=float, default=ASSUMED["mtbf_node_h"])
    a.add_argument("--bucket-mib", type=float, default=4.0)
    a.add_argument("--link-gbit", type=float, default=ASSUMED["link_gbit_s"])
    a.add_argument("--alpha-us", type=float, default=ASSUMED["alpha_s"] * 1e6)
    a.add_argument("--msg-overhead-us", type=float, default=ASSUMED["msg_overhead_s"] * 1e6)
    a.add_argument("--gamma-ns", type=float, default=MEASURED["fold_gamma_s_per_byte"] * 1e9,
                   help="our fold, ns per byte per add (measured: %(default)s)")
    a.add_argument("--gamma-vec-ns", type=float, default=MEASURED["fold_gamma_vec_s_per_byte"] * 1e9,
                   help="a vectorised fold (MPI's, and ours if rewritten), ns per byte")
    a.add_argument("--local-alpha-us", type=float, default=MEASURED["local_alpha_bucket_s"] * 1e6)
    a.add_argument("--local-beta-ns", type=float, default=MEASURED["local_beta_s_per_byte"] * 1e9)
    a.add_argument("--lib", help="libposttrain.so: cross-check pt_checkpoint_interval_young_daly")
    a.add_argument("--only", choices=["all", "local", "cluster"], default="all")
    args = a.parse_args()
    args.nodes = [int(x) for x in args.nodes.split(",")]

    s = 4 * args.params
    bucket = args.bucket_mib * 1048576
    beta = 8 / (args.link_gbit * 1e9)
    alpha, o = args.alpha_us * 1e-6, args.msg_overhead_us * 1e-6
    g, gv = args.gamma_ns * 1e-9, args.gamma_vec_ns * 1e-9
    print("gradient %d floats = %.0f MB; bucket %.0f MiB" % (args.params, s / 1e6, args.bucket_mib))
    if args.only in ("all", "local"):
        la, lb = args.local_alpha_us * 1e-6, args.local_beta_ns * 1e-9
        # the fit already holds the fold and both rounds: alpha per bucket, beta per byte of
        # the gradient at P = 2, where a rank sends S/2 twice (so beta per wire byte as well)
        table(args, "MEASURED network (this machine's shared memory, 2-rank fit: alpha %.1f us per bucket, "
              "%.2f ns/byte), pairwise formula, %.0f MiB buckets; a bound no real cluster reaches" %
              (args.local_alpha_us, args.local_beta_ns, args.bucket_mib),
              lambda p, sz: allreduce_pairwise(p, sz, bucket, la / 2, 0.0, lb, 0.0))
    if args.only in ("all", "cluster"):
        net = "ASSUMED network %.0f Gb/s, alpha %.0f us, %.1f us per message" % (args.link_gbit, args.alpha_us,
                                                                             args.msg_overhead_us)
        table(args, "%s: ours (pairwise, %.0f MiB buckets, today's fold %.2f ns/B)" % (net, args.bucket_mib,
                                                                                    args.gamma_ns),
              lambda p, sz: allreduce_pairwise(p, sz, bucket, alpha, o, beta, g))
        big = 256
        table(args, "%s: ours with %d MiB buckets and a vectorised fold (%.2f ns/B)" % (net, big, args.gamma_vec_ns),
              lambda p, sz: allreduce_pairwise(p, sz, big * 1048576, alpha, o, beta, gv))
        table(args, "%s: ring all-reduce (reference, vectorised fold)" % net,
              lambda p, sz: allreduce_ring(p, sz, alpha, beta, gv))
    if args.only in ("all", "cluster"):
        sensitivity(args, bucket, alpha, o, beta, g, gv)
    if args.lib:
        ok = cross_check(args.lib)
        print("cross-check: %s" % ("OK" if ok else "MISMATCH"))
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
