"""A minimal stand-in for Hugging Face `transformers`, for running llama.cpp's
convert_hf_to_gguf.py and convert_lora_to_gguf.py where transformers is not
installed.  It implements only what those converters touch for the models in
make_goldens.py (Llama with a SentencePiece-style or byte-level BPE
tokenizer.json, Qwen2, Qwen3):

  AutoTokenizer.from_pretrained(dir) -> a fast-tokenizer-like object with
    vocab / get_vocab(), vocab_size (without added tokens), get_added_vocab(),
    added_tokens_decoder / added_tokens_encoder, all_special_tokens /
    all_special_ids, is_fast, encode(text, add_special_tokens=True) and
    decode(ids)
  AutoConfig.from_pretrained(dir) -> config.json as an object with to_dict()

The vocabulary and added tokens are read from tokenizer.json and
tokenizer_config.json as transformers reads them; encode and decode go through
libposttrain's own tokenizer (python/posttrain), whose ids match the Hugging
Face `tokenizers` library on the reference vectors in ../shared/data.  The
converter hashes encode()'s ids of a fixed text to name the pre-tokenizer, so
a wrong encode shows up as an unrecognised pre-tokenizer.

Written for libposttrain; no transformers code is used.
"""

import json
import os

__all__ = ["AutoTokenizer", "AutoConfig", "AddedToken"]

_SPECIAL_ATTRS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                  "cls_token", "mask_token")


class AddedToken:
    """transformers' AddedToken: content and its flags."""

    def __init__(self, content, special=False, normalized=True, lstrip=False, rstrip=False,
                 single_word=False):
        self.content = content
        self.special = special
        self.normalized = normalized
        self.lstrip = lstrip
        self.rstrip = rstrip
        self.single_word = single_word

    def __str__(self):
        return self.content

    def __repr__(self):
        return "AddedToken(%r, special=%r, normalized=%r)" % (self.content, self.special,
                                                              self.normalized)


def _load_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _token_text(v):
    """A special token in tokenizer_config.json: a string or {"content": ...}."""
    if isinstance(v, dict):
        return v.get("content")
    return v


def _cleanup(text):
    """transformers' clean_up_tokenization (clean_up_tokenization_spaces)."""
    for a, b in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"),
                 (" n't", "n't"), (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"),
                 (" 're", "'re")):
        text = text.replace(a, b)
    return text


class _FastTokenizer:
    is_fast = True

    def __init__(self, directory):
        from posttrain import Tokenizer
        self.name_or_path = str(directory)
        tj = _load_json(os.path.join(directory, "tokenizer.json"))
        cpath = os.path.join(directory, "tokenizer_config.json")
        self._config = _load_json(cpath) if os.path.isfile(cpath) else {}
        self._tok = Tokenizer.load(str(directory))
        self._model_vocab = dict(tj["model"]["vocab"])
        self.added_tokens_decoder = {}
        for t in tj.get("added_tokens", []):
            self.added_tokens_decoder[t["id"]] = AddedToken(
                t["content"], special=t.get("special", False),
                normalized=t.get("normalized", True), lstrip=t.get("lstrip", False),
                rstrip=t.get("rstrip", False), single_word=t.get("single_word", False))
        self.added_tokens_encoder = {t.content: i for i, t in
                                     sorted(self.added_tokens_decoder.items())}
        self._vocab = dict(self._model_vocab)
        self._vocab.update(self.added_tokens_encoder)
        self.clean_up_tokenization_spaces = bool(
            self._config.get("clean_up_tokenization_spaces", False))

    # -- vocabulary ---------------------------------------------------------------
    @property
    def vocab(self):
        return dict(self._vocab)

    def get_vocab(self):
        return dict(self._vocab)

    @property
    def vocab_size(self):
        """The model's vocabulary without added tokens (as the Rust
        tokenizer's get_vocab_size(with_added_tokens=False))."""
        return len(self._model_vocab)

    def __len__(self):
        return len(self._vocab)

    def get_added_vocab(self):
        return dict(self.added_tokens_encoder)

    @property
    def special_tokens_map(self):
        out = {}
        for a in _SPECIAL_ATTRS:
            v = _token_text(self._config.get(a))
            if v is not None:
                out[a] = v
        extra = self._config.get("additional_special_tokens") or []
        if extra:
            out["additional_special_tokens"] = [_token_text(x) for x in extra]
        return out

    @property
    def all_special_tokens(self):
        seen = []
        for k, v in self.special_tokens_map.items():
            for t in (v if isinstance(v, list) else [v]):
                if t not in seen:
                    seen.append(t)
        return seen

    @property
    def all_special_ids(self):
        return [self._vocab[t] for t in self.all_special_tokens if t in self._vocab]

    # -- encode / decode ------------------------------------------------------------
    def encode(self, text, add_special_tokens=True, **kwargs):
        return list(self._tok.encode(text, add_special=add_special_tokens))

    def decode(self, ids, skip_special_tokens=False, clean_up_tokenization_spaces=None,
               **kwargs):
        if isinstance(ids, int):
            ids = [ids]
        text = self._tok.decode(list(ids), skip_special=skip_special_tokens)
        clean = (self.clean_up_tokenization_spaces if clean_up_tokenization_spaces is None
                 else clean_up_tokenization_spaces)
        return _cleanup(text) if clean else text


class AutoTokenizer:
    @staticmethod
    def from_pretrained(path, *args, **kwargs):
        path = os.fspath(path)
        if not os.path.isfile(os.path.join(path, "tokenizer.json")):
            raise OSError("shim AutoTokenizer: no tokenizer.json in %s" % path)
        return _FastTokenizer(path)


class _Config:
    def __init__(self, d):
        self._d = dict(d)
        for k, v in d.items():
            setattr(self, k, v)

    def to_dict(self):
        return dict(self._d)


class AutoConfig:
    @staticmethod
    def from_pretrained(path, *args, **kwargs):
        path = os.fspath(path)
        cfg = os.path.join(path, "config.json")
        if not os.path.isfile(cfg):
            raise OSError("shim AutoConfig: no config.json in %s (no hub access)" % path)
        return _Config(_load_json(cfg))
