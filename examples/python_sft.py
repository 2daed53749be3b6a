#!/usr/bin/env python3
"""Supervised fine-tuning from Python through the ctypes binding.

A tiny Llama model (built from a config, no files needed) learns single-digit
addition, "3+4=" -> "7", with the built-in byte tokenizer: the loss is on the
answer and EOS only (completion-only SFT).  It prints the loss as it trains,
the held-out loss before and after, a few greedy answers, then saves the
model in Hugging Face layout and a resumable checkpoint.

From the source tree (after `meson setup build && ninja -C build`):
    PYTHONPATH=python python3 examples/python_sft.py
Against an installed library:
    POSTTRAIN_LIBRARY=/usr/local/lib/x86_64-linux-gnu/libposttrain.so.0 \\
        PYTHONPATH=python python3 examples/python_sft.py
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


def greedy_answer(model, tok, prompt, max_new=4):
    """Greedy decoding: pt_generate (KV cache) when the library has it, else
    plain forwards (fine for a few tokens).  Both stop after EOS."""
    ids = tok.encode(prompt, add_special=True)
    if pt.has_feature("generate"):
        g = model.generate(ids, max_new_tokens=max_new, temperature=0, stop_ids=[tok.eos_id])
        return tok.decode(g.tokens, skip_special=True)
    out = []
    for _ in range(max_new):
        logits = model.logits(ids + out, numpy=False)[-1]
        nxt = max(range(len(logits)), key=logits.__getitem__)
        if nxt == tok.eos_id:
            break
        out.append(nxt)
    return tok.decode(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--out", help="directory for the trained model and checkpoint "
                                  "(default: a temporary one, removed at exit)")
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()

    if args.threads:
        pt.set_num_threads(args.threads)
    pt.log_to_python("posttrain")   # library warnings go to Python logging
    print("libposttrain %s (%s)" % (pt.version(), pt.library_path))
    print(pt.blas_info())

    tmp = tempfile.TemporaryDirectory()
    out = args.out or tmp.name
    data = os.path.join(tmp.name, "addition.jsonl")
    make_rows(data)

    config = dict(vocab_size=261, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                  tie_word_embeddings=False, bos_token_id=256, eos_token_id=257)
    with pt.Tokenizer.bytes() as tok, \
            pt.Model.create(config, seed=1) as model, \
            pt.Dataset.load_jsonl(data, tok, batch_size=16, max_length=16, eval_fraction=0.2,
                                  seed=1) as ds, \
            pt.Optimizer(model, lr=args.lr, schedule=pt.Schedule.COSINE, warmup_steps=20,
                         total_steps=args.steps, weight_decay=0.01) as opt, \
            model.context(16, ds.max_seq) as ctx:
        st = ds.stats
        print("model: %d parameters; data: %d training / %d held-out examples"
              % (model.num_params, st["train_examples"], st["eval_examples"]))
        before, _ = ds.eval_loss(ctx)
        for step in range(1, args.steps + 1):
            batch, weights = ds.next_batch()
            s = opt.sft_step(batch, [weights], context=ctx)
            if step == 1 or step % 50 == 0 or step == args.steps:
                print("step %4d  loss %.4f  grad-norm %.3f  lr %.2e"
                      % (s.step, s.loss, s.grad_norm, s.lr))
        after, _ = ds.eval_loss(ctx)
        print("held-out loss: %.4f -> %.4f" % (before, after))
        for a, b in ((2, 3), (7, 8), (9, 9), (4, 0)):
            print("  %d+%d= %s" % (a, b, greedy_answer(model, tok, "%d+%d=" % (a, b))))

        model.save(os.path.join(out, "model"), copy_tokenizer=False)
        pt.save_checkpoint(os.path.join(out, "checkpoint-%d" % args.steps), model, opt,
                           {"data_position": list(ds.position)})
        print("saved %s/model (Hugging Face layout) and %s/checkpoint-%d" % (out, out, args.steps))
    tmp.cleanup()
    return 0 if after < before else 1


if __name__ == "__main__":
    sys.exit(main())
