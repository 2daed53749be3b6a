"""Tokenizers and incremental decoding (posttrain/tokenizer.h); chat
templates are in posttrain.chat."""

import ctypes

from ._handle import Handle, out_handle
from ._lib import lib
from ._util import cstr, fspath, int32_array, take_string
from ._util import text as _text
from .errors import check

__all__ = ["Tokenizer", "DecodeStream", "BYTE_BOS", "BYTE_EOS", "BYTE_PAD",
           "BYTE_IM_START", "BYTE_IM_END", "BYTE_VOCAB"]

ADD_SPECIAL, SKIP_SPECIAL, TRUNCATE = 1, 2, 4
BYTE_BOS, BYTE_EOS, BYTE_PAD, BYTE_IM_START, BYTE_IM_END, BYTE_VOCAB = 256, 257, 258, 259, 260, 261


class Tokenizer(Handle):
    """A Hugging Face tokenizer.json tokenizer (pt_tokenizer); immutable, so
    one may be used from several threads."""

    _free_fn = "pt_tokenizer_free"
    _kind = "tokenizer"

    @classmethod
    def load(cls, path):
        """Load a tokenizer.json file or a directory holding one (and its
        tokenizer_config.json)."""
        out = out_handle()
        check(lib.pt_tokenizer_load(ctypes.byref(out), fspath(path)), "pt_tokenizer_load")
        return cls(out.value)

    @classmethod
    def from_json(cls, json_text, config_json=None):
        """Load from tokenizer.json text (and optionally tokenizer_config.json text)."""
        j = json_text.encode("utf-8") if isinstance(json_text, str) else bytes(json_text)
        out = out_handle()
        if config_json is None:
            check(lib.pt_tokenizer_load_memory(ctypes.byref(out), j, len(j)),
                  "pt_tokenizer_load_memory")
        else:
            c = config_json.encode("utf-8") if isinstance(config_json, str) else bytes(config_json)
            check(lib.pt_tokenizer_load_memory_config(ctypes.byref(out), j, len(j), c, len(c)),
                  "pt_tokenizer_load_memory_config")
        return cls(out.value)

    @classmethod
    def bytes(cls):
        """The built-in byte tokenizer: ids 0-255 are bytes, then <|bos|> 256,
        <|eos|> 257, <|pad|> 258, <|im_start|> 259, <|im_end|> 260."""
        out = out_handle()
        check(lib.pt_tokenizer_create_bytes(ctypes.byref(out)), "pt_tokenizer_create_bytes")
        return cls(out.value)

    @classmethod
    def _borrowed(cls, ptr, owner):
        t = cls(ptr, owned=False)
        t._owner = owner          # keeps the model alive while the tokenizer is used
        owner._add_dependent(t)
        return t

    # -- encode / decode -----------------------------------------------------------
    def encode(self, text, add_special=False, truncate=False):
        """Token ids of text (str or UTF-8 bytes) as a list of ints."""
        b = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        ids = ctypes.POINTER(ctypes.c_int32)()
        n = ctypes.c_size_t()
        flags = (ADD_SPECIAL if add_special else 0) | (TRUNCATE if truncate else 0)
        check(lib.pt_tokenizer_encode(ctypes.byref(ids), ctypes.byref(n), self._ptr, b, len(b),
                                      flags), "pt_tokenizer_encode")
        try:
            return ids[:n.value] if n.value else []
        finally:
            lib.pt_free(ids)

    def decode(self, ids, skip_special=False):
        """Text of a sequence of ids (always valid UTF-8)."""
        arr, n = int32_array(ids, "ids")
        out = ctypes.c_void_p()
        ln = ctypes.c_size_t()
        check(lib.pt_tokenizer_decode(ctypes.byref(out), ctypes.byref(ln), self._ptr, arr, n,
                                      SKIP_SPECIAL if skip_special else 0), "pt_tokenizer_decode")
        return take_string(out, ln)

    def decode_stream(self, skip_special=False):
        """An incremental decoder (DecodeStream) over this tokenizer."""
        return DecodeStream(self, skip_special)

    # -- vocabulary ----------------------------------------------------------------
    @property
    def vocab_size(self):
        return lib.pt_tokenizer_vocab_size(self._ptr)

    def __len__(self):
        return self.vocab_size

    def token_to_id(self, token):
        """Id of a vocabulary string; raises NotFound when absent."""
        i = ctypes.c_int32()
        check(lib.pt_tokenizer_token_to_id(ctypes.byref(i), self._ptr, cstr(token, "token", False)),
              "pt_tokenizer_token_to_id")
        return i.value

    def id_to_token(self, i):
        """The vocabulary string of an id, or None when out of range or unused."""
        return _text(lib.pt_tokenizer_id_to_token(self._ptr, int(i)))

    def is_special(self, i):
        return bool(lib.pt_tokenizer_is_special(self._ptr, int(i)))

    def is_added(self, i):
        return bool(lib.pt_tokenizer_is_added(self._ptr, int(i)))

    def _id(self, v):
        return None if v < 0 else v

    @property
    def bos_id(self):
        return self._id(lib.pt_tokenizer_bos_id(self._ptr))

    @property
    def eos_id(self):
        return self._id(lib.pt_tokenizer_eos_id(self._ptr))

    @property
    def pad_id(self):
        return self._id(lib.pt_tokenizer_pad_id(self._ptr))

    @property
    def unk_id(self):
        return self._id(lib.pt_tokenizer_unk_id(self._ptr))

    @property
    def bos_token(self):
        return _text(lib.pt_tokenizer_bos_token(self._ptr))

    @property
    def eos_token(self):
        return _text(lib.pt_tokenizer_eos_token(self._ptr))

    @property
    def pad_token(self):
        return _text(lib.pt_tokenizer_pad_token(self._ptr))

    @property
    def add_bos(self):
        """tokenizer_config.json's add_bos_token: True, False or None (absent)."""
        v = lib.pt_tokenizer_add_bos(self._ptr)
        return None if v < 0 else bool(v)

    @property
    def add_eos(self):
        v = lib.pt_tokenizer_add_eos(self._ptr)
        return None if v < 0 else bool(v)

    def chat_template_source(self, name=None):
        """tokenizer_config.json's chat_template string (or the named entry), or None."""
        return _text(lib.pt_tokenizer_chat_template(self._ptr, cstr(name, "name")))

    def chat_template(self):
        """The ChatTemplate recognised from this tokenizer's chat_template."""
        from .chat import ChatTemplate
        return ChatTemplate.from_tokenizer(self)


class DecodeStream(Handle):
    """Incremental decoding: step(id) returns only complete text; flush()
    returns what is held back and resets the stream."""

    _free_fn = "pt_decode_stream_free"
    _kind = "decode stream"

    def __init__(self, tokenizer, skip_special=False):
        out = out_handle()
        check(lib.pt_decode_stream_create(ctypes.byref(out), tokenizer._ptr,
                                          SKIP_SPECIAL if skip_special else 0), "pt_decode_stream_create")
        super().__init__(out.value)
        self.tokenizer = tokenizer
        tokenizer._add_dependent(self)

    def _piece(self, p, n):
        return ctypes.string_at(p.value, n.value).decode("utf-8") if n.value else ""

    def step(self, token_id):
        p, n = ctypes.c_void_p(), ctypes.c_size_t()
        check(lib.pt_decode_stream_step(ctypes.byref(p), ctypes.byref(n), self._ptr,
                                        int(token_id)), "pt_decode_stream_step")
        return self._piece(p, n)

    def flush(self):
        p, n = ctypes.c_void_p(), ctypes.c_size_t()
        check(lib.pt_decode_stream_flush(ctypes.byref(p), ctypes.byref(n), self._ptr),
              "pt_decode_stream_flush")
        return self._piece(p, n)
