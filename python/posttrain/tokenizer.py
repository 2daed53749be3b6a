"""Tokenizers and chat templates (posttrain/tokenizer.h, chat.h)."""

import ctypes

from ._handle import Handle, out_handle
from ._lib import ChatMessage, ChatOptions, lib
from ._util import cstr, fspath, int32_array, shaped
from .errors import check, invalid

__all__ = ["Tokenizer", "DecodeStream", "ChatTemplate", "BYTE_BOS", "BYTE_EOS", "BYTE_PAD",
           "BYTE_IM_START", "BYTE_IM_END", "BYTE_VOCAB"]

ADD_SPECIAL, SKIP_SPECIAL, TRUNCATE = 1, 2, 4
BYTE_BOS, BYTE_EOS, BYTE_PAD, BYTE_IM_START, BYTE_IM_END, BYTE_VOCAB = 256, 257, 258, 259, 260, 261


def _text(b):
    return b.decode("utf-8", "replace") if b is not None else None


def _take_string(ptr, n):
    """Copy n bytes of a pt_free-able buffer into a str and free it."""
    try:
        return ctypes.string_at(ptr.value, n.value).decode("utf-8") if ptr.value else ""
    finally:
        lib.pt_free(ptr)


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
        return _take_string(out, ln)

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
        return ChatTemplate.from_tokenizer(self)


class DecodeStream(Handle):
    """Incremental decoding: step(id) returns only complete text; flush()
    returns what is held back and resets the stream."""

    _free_fn = "pt_decode_stream_free"
    _kind = "decode stream"

    def __init__(self, tokenizer, skip_special=False):
        out = out_handle()
        check(lib.pt_decode_stream_new(ctypes.byref(out), tokenizer._ptr,
                                       SKIP_SPECIAL if skip_special else 0), "pt_decode_stream_new")
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


# ---- chat templates ----------------------------------------------------------

_BOS = {"template": 0, "none": 1}


def role_name(role):
    return _text(lib.pt_chat_role_name(int(role)))


def _role(r):
    if isinstance(r, int):
        return r
    v = ctypes.c_int()
    check(lib.pt_chat_role_from_name(ctypes.byref(v), cstr(r, "role", False)),
          "pt_chat_role_from_name")
    return v.value


def _messages(messages):
    """A pt_chat_message array from [{"role", "content", "name"?}] (or
    (role, content) pairs); the bytes it points to are returned to keep them
    alive during the call."""
    msgs = list(messages)
    arr = (ChatMessage * max(len(msgs), 1))()
    keep = []
    for i, m in enumerate(msgs):
        if isinstance(m, dict):
            role, content, name = m.get("role"), m.get("content"), m.get("name")
        else:
            role, content = m
            name = None
        if role is None:
            raise invalid("message %d has no role" % i, "chat")
        c = cstr(content, "message %d content" % i, allow_none=False)
        nm = cstr(name, "message %d name" % i)
        keep += [c, nm]
        arr[i].role = _role(role)
        arr[i].content = c
        arr[i].name = nm
    return arr, len(msgs), keep


class ChatTemplate(Handle):
    """A chat template family (pt_chat_template): render conversations to
    text, or to ids with the assistant-token mask."""

    _free_fn = "pt_chat_template_free"
    _kind = "chat template"

    @classmethod
    def from_name(cls, name):
        """"chatml", "smollm2", "qwen3", "llama3", "llama3.1", "llama2",
        "mistral", "phi3", "phi3-vision", "plain" (case-insensitive)."""
        out = out_handle()
        check(lib.pt_chat_template_from_name(ctypes.byref(out), cstr(name, "name", False)),
              "pt_chat_template_from_name")
        return cls(out.value)

    @classmethod
    def from_source(cls, source, bos_token=None, eos_token=None):
        """Recognise a Jinja chat_template string by its markers."""
        out = out_handle()
        check(lib.pt_chat_template_from_source(ctypes.byref(out), cstr(source, "source", False),
                                               cstr(bos_token, "bos_token"),
                                               cstr(eos_token, "eos_token")),
              "pt_chat_template_from_source")
        return cls(out.value)

    @classmethod
    def from_tokenizer(cls, tokenizer):
        out = out_handle()
        check(lib.pt_chat_template_from_tokenizer(ctypes.byref(out), tokenizer._ptr),
              "pt_chat_template_from_tokenizer")
        return cls(out.value)

    @property
    def family(self):
        """The family name: "chatml", "qwen3", "llama3", "llama2", "phi3", "plain"."""
        return _text(lib.pt_chat_family_name(lib.pt_chat_template_family(self._ptr)))

    @property
    def name(self):
        return _text(lib.pt_chat_template_name(self._ptr))

    def set_tokens(self, bos_token=None, eos_token=None):
        check(lib.pt_chat_template_set_tokens(self._ptr, cstr(bos_token, "bos_token"),
                                              cstr(eos_token, "eos_token")),
              "pt_chat_template_set_tokens")

    @staticmethod
    def _options(add_generation_prompt, bos, default_system, enable_thinking, date_string, keep):
        o = ChatOptions()
        check(lib.pt_chat_options_init(ctypes.byref(o)), "pt_chat_options_init")
        o.add_generation_prompt = 1 if add_generation_prompt else 0
        if isinstance(bos, str):
            if bos not in _BOS:
                raise invalid("bos must be 'template' or 'none', not %r" % bos, "chat")
            bos = _BOS[bos]
        o.bos = int(bos)
        ds = cstr(default_system, "default_system")
        dt = cstr(date_string, "date_string")
        keep += [ds, dt]
        o.default_system = ds
        o.enable_thinking = 1 if enable_thinking else 0
        o.date_string = dt
        return o

    def render(self, messages, add_generation_prompt=False, bos="template", default_system=None,
               enable_thinking=True, date_string=None):
        """The conversation as text, exactly as the model's template renders it."""
        arr, n, keep = _messages(messages)
        o = self._options(add_generation_prompt, bos, default_system, enable_thinking,
                          date_string, keep)
        out, ln = ctypes.c_void_p(), ctypes.c_size_t()
        check(lib.pt_chat_render(ctypes.byref(out), ctypes.byref(ln), self._ptr, arr, n,
                                 ctypes.byref(o)), "pt_chat_render")
        return _take_string(out, ln)

    def render_ids(self, tokenizer, messages, add_generation_prompt=False, bos="template",
                   default_system=None, enable_thinking=True, date_string=None, numpy=False):
        """(ids, mask): token ids of the rendered conversation and 1 on the
        assistant's own tokens (content and end-of-turn marker), else 0."""
        arr, n, keep = _messages(messages)
        o = self._options(add_generation_prompt, bos, default_system, enable_thinking,
                          date_string, keep)
        ids = ctypes.POINTER(ctypes.c_int32)()
        mask = ctypes.POINTER(ctypes.c_uint8)()
        cnt = ctypes.c_size_t()
        check(lib.pt_chat_render_ids(ctypes.byref(ids), ctypes.byref(mask), ctypes.byref(cnt),
                                     self._ptr, tokenizer._ptr, arr, n, ctypes.byref(o)),
              "pt_chat_render_ids")
        try:
            k = cnt.value
            if not k:
                return [], []
            i_arr = (ctypes.c_int32 * k).from_buffer_copy(ctypes.string_at(ids, 4 * k))
            m_arr = (ctypes.c_uint8 * k).from_buffer_copy(ctypes.string_at(mask, k))
            return shaped(i_arr, (k,), numpy, "i"), shaped(m_arr, (k,), numpy, "B")
        finally:
            lib.pt_free(ids)
            lib.pt_free(mask)
