#!/usr/bin/env python3
"""Data-parallel supervised fine-tuning from Python (posttrain.Dist).

The addition task of examples/python_sft.py ("3+4=" -> "7", a tiny Llama and
the byte tokenizer), trained by every rank of an MPI job: each rank loads the
same data and model (same seeds), takes its share of the rows of each global
batch, and the library sums the gradients across the ranks, so the weights
are those of one process over the whole batch.  Rank 0 prints and saves;
the ranks agree on whether the save worked.  It runs alone too (a job of
one process).

From the source tree (after `meson setup build && ninja -C build`):
    PYTHONPATH=python mpirun -np 2 python3 examples/python_dist_sft.py
    PYTHONPATH=python python3 examples/python_dist_sft.py        # one process
(Open MPI run as root also needs --allow-run-as-root; on a machine with fewer
cores than ranks, --oversubscribe.)
"""

import argparse
import json
import os
import sys
import tempfile

import posttrain as pt


def make_rows(path):
    """Every a+b with a, b in 0..9 as a prompt/completion row."""
    with open(path, "w") as f:
        for a in range(10):
            for b in range(10):
                f.write(json.dumps({"prompt": "%d+%d=" % (a, b), "completion": str(a + b)}) + "\n")


def rows_of(batch, weights, rows):
    """The rows `rows` (a range) of a Batch and of its loss weights."""
    part = pt.Batch([batch.input_ids[i] for i in rows], [batch.targets[i] for i in rows])
    return part, [weights[i] for i in rows]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--batch", type=int, default=16, help="rows of the global batch")
    ap.add_argument("--out", help="directory rank 0 saves the model into "
                                  "(default: a temporary one, removed at exit)")
    args = ap.parse_args()

    with pt.Dist() as d:
        say = print if d.rank == 0 else (lambda *a, **k: None)
        if d.size > 1:
            pt.set_num_threads(max(1, (os.cpu_count() or 1) // d.size))
        say("libposttrain %s: %d rank(s)%s" % (pt.version(), d.size,
                                               "" if pt.has_mpi() else " (built without MPI)"))
        tmp = tempfile.TemporaryDirectory()
        data = os.path.join(tmp.name, "addition.jsonl")
        make_rows(data)

        config = dict(vocab_size=261, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                      tie_word_embeddings=False, bos_token_id=256, eos_token_id=257)
        with pt.Tokenizer.bytes() as tok, \
                pt.Model.create(config, seed=1) as model, \
                pt.Dataset.load_jsonl(data, tok, batch_size=args.batch, max_length=16,
                                      eval_fraction=0.2, seed=1) as ds, \
                pt.Optimizer(model, lr=args.lr, schedule="cosine", warmup_steps=20,
                             total_steps=args.steps, weight_decay=0.01, dist=d) as opt:
            d.check_replicas(opt)          # every rank starts from the same weights
            before, _ = ds.eval_loss(model=model)
            for step in range(1, args.steps + 1):
                batch, weights = ds.next_batch()         # the global batch, on every rank
                mine, w = rows_of(batch, weights, d.shard(batch.batch))
                s = opt.sft_step(mine, [w])              # loss and tokens: global
                if step == 1 or step % 50 == 0 or step == args.steps:
                    say("step %4d  loss %.4f  tokens %4.0f  grad-norm %.3f  comm %.3f s"
                        % (s.step, s.loss, s.tokens, s.grad_norm, s.comm_seconds))
            after, _ = ds.eval_loss(model=model)
            h = d.check_replicas(opt)      # ChecksumError naming the rank if one drifted
            say("held-out loss: %.4f -> %.4f; replicas agree (hash %016x); %.3f s in collectives"
                % (before, after, h, d.comm_seconds))

            # Rank 0 saves; every rank learns whether that worked.
            out = args.out or tmp.name
            err = None
            if d.rank == 0:
                try:
                    model.save(os.path.join(out, "model"), copy_tokenizer=False)
                except (pt.Error, OSError) as e:
                    err = e
            d.agree(err)                   # raises on every rank if rank 0 failed
            say("saved %s/model" % out)
        tmp.cleanup()
        return 0 if after < before else 1


if __name__ == "__main__":
    sys.exit(main())
