#!/usr/bin/python3
"""Random test strings for the differential check, one {"text"} JSON line each.
Usage: gen.py MODE SEED COUNT, MODE one of:
  mix   - pieces known to be tricky (whitespace kinds, contractions, digits, scripts,
          emoji, combining marks, special tokens of the four shared tokenizers)
  uni   - random code points from all planes, with many marks and space characters
  long  - 1-3000 character slices of /usr/share/common-licenses with insertions"""
import json, os, random, sys

mode, seed, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
random.seed(seed)
POOL = [" ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "\u2028", "\u0085", "\u000b", "a", "Z", "hello",
        "World", "'s", "'S", "'ll", "'LL", "'Ve", "'re", "'d", "n't", "I'm", "0", "12", "123", "1234567",
        "3.14", "\u0663", "\u00b2", "\u216b", "\u00e9", "e\u0301", "\u00f1", "\u00fc", "\u00df", "\u0130",
        "\ufb01", "\u00c5", "A\u030a", "\ud55c\uad6d\uc5b4", "\u65e5\u672c\u8a9e", "\u4e2d\u6587",
        "\u043a\u0438\u0440\u0438\u043b\u043b\u0438\u0446\u0430", "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac",
        "\u05e2\u05d1\u05e8\u05d9\u05ea", "\u0627\u0644\u0639\u0631\u0628\u064a\u0629", "\u0939\u093f\u0928\u094d\u0926\u0940",
        "\u0e44\u0e17\u0e22", "\u1780\u17d2\u179a\u17bb\u1784", "\U0001f999", "\U0001f636\u200d\U0001f32b\ufe0f",
        "\U0001f44d\U0001f3fd", "\U0001f1eb\U0001f1f7", "\ufe0f", "\u200d", "\u200b", "\ufeff", "!", "?!", "...",
        "---", "===", "``", "\"", "(", ")", "{}", "<", ">", "<|", "|>", "@", "#", "$", "%", "^", "&", "*", "_",
        "~", "\\", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<s>", "</s>", "<unk>",
        "<|user|>", "<|assistant|>", "<|end|>", "<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>",
        "<tool_call>", "<|endoftext", "<|im_start", "\u2581", "\u2581\u2581", "\u0120"]


def rand_cp():
    r = random.random()
    if r < 0.3:
        return random.randint(0x20, 0x7e)
    if r < 0.4:
        return random.choice([9, 10, 11, 12, 13, 0x85, 0xa0, 0x1680, 0x2000, 0x2005, 0x200a, 0x2028, 0x2029,
                              0x202f, 0x205f, 0x3000, 0x180e, 0x200b, 0xfeff, 0])
    if r < 0.5:
        return random.randint(0x300, 0x36f)
    if r < 0.8:
        return random.randint(0xa0, 0xffef)
    return random.randint(0x10000, 0x3134f)


if mode == "long":
    d = "/usr/share/common-licenses"
    corpus = "".join(open(os.path.join(d, f), encoding="utf-8", errors="replace").read()
                     for f in sorted(os.listdir(d)) if os.path.isfile(os.path.join(d, f))
                     and not os.path.islink(os.path.join(d, f)))
for _ in range(count):
    if mode == "mix":
        s = "".join(random.choice(POOL) for _ in range(random.randint(0, 12)))
    elif mode == "uni":
        s = "".join(chr(c) for c in (rand_cp() for _ in range(random.randint(1, 40))) if not 0xd800 <= c < 0xe000)
    else:
        a = random.randint(0, len(corpus) - 1)
        s = corpus[a:a + random.randint(1, 3000)]
        for _ in range(random.randint(0, 4)):
            p = random.randint(0, len(s))
            s = s[:p] + random.choice(POOL) + s[p:]
    print(json.dumps({"text": s}, ensure_ascii=False))
