"""Chat templates (posttrain/chat.h): render a conversation to text, or to
token ids with the mask of the assistant's own tokens."""

import collections
import ctypes
import json

from ._handle import Handle, out_handle
from ._lib import ChatMessage, ChatOptions, ChatToolCall, lib
from ._util import cstr, shaped, take_string
from ._util import text as _text
from .enums import ChatFamily, ChatRole
from .errors import check, invalid

__all__ = ["ChatTemplate", "ChatIds", "ToolCalls", "role_name"]

# ChatTemplate.render_ids(): the ids and the assistant-token mask.
ChatIds = collections.namedtuple("ChatIds", ["ids", "mask"])
# ChatTemplate.parse_tool_calls(): the text before the calls, and the calls as
# [{"name": str, "arguments": dict}].
ToolCalls = collections.namedtuple("ToolCalls", ["content", "calls"])

_BOS = {"template": 0, "none": 1}


def role_name(role):
    """The library's name of a role ("system", "user", "assistant", "tool"),
    or None for an unknown value."""
    return _text(lib.pt_chat_role_name(int(role)))


def _json_text(value, what):
    """A JSON value as text: a str is taken as JSON already, anything else is
    json.dumps-ed (ensure_ascii=False, as transformers' tojson)."""
    if isinstance(value, (str, bytes, bytearray)):
        return cstr(value, what)
    try:
        return json.dumps(value, ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError) as e:
        raise invalid("%s is not JSON-serialisable: %s" % (what, e), "chat") from None


def _tool_calls(calls, i, keep):
    """A pt_chat_tool_call array from [{"name", "arguments"}] or the
    OpenAI/transformers shape [{"type": "function", "function": {...}}];
    arguments a dict (or any JSON value) or JSON text."""
    calls = list(calls or [])
    if not calls:
        return None, 0
    arr = (ChatToolCall * len(calls))()
    for k, c in enumerate(calls):
        what = "message %d tool call %d" % (i, k)
        if not isinstance(c, dict):
            raise invalid("%s must be a dict with 'name' and 'arguments'" % what, "chat")
        if isinstance(c.get("function"), dict):
            c = c["function"]
        name = cstr(c.get("name"), what + " name", allow_none=False)
        args = c.get("arguments")
        args = None if args is None else _json_text(args, what + " arguments")
        keep += [name, args]
        arr[k].name = name
        arr[k].arguments = args
    keep.append(arr)
    return arr, len(calls)


def _messages(messages):
    """A pt_chat_message array from [{"role", "content", "name"?, "tool_calls"?}]
    (or (role, content) pairs; a role is a ChatRole, its name or its C value);
    the bytes it points to are returned to keep them alive during the call."""
    msgs = list(messages)
    arr = (ChatMessage * max(len(msgs), 1))()
    keep = []
    for i, m in enumerate(msgs):
        calls = None
        if isinstance(m, dict):
            role, content, name = m.get("role"), m.get("content"), m.get("name")
            calls = m.get("tool_calls")
        else:
            role, content = m
            name = None
        if role is None:
            raise invalid("message %d has no role" % i, "chat")
        tc, ntc = _tool_calls(calls, i, keep)
        c = cstr(content, "message %d content" % i, allow_none=ntc > 0)
        nm = cstr(name, "message %d name" % i)
        keep += [c, nm]
        arr[i].role = ChatRole.coerce(role, "message %d role" % i, "chat")
        arr[i].content = c
        arr[i].name = nm
        if ntc:
            arr[i].tool_calls = tc
            arr[i].n_tool_calls = ntc
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
        check(lib.pt_chat_template_create(ctypes.byref(out), cstr(name, "name", False)),
              "pt_chat_template_create")
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
        """The template's family: a ChatFamily (CHATML, QWEN3, LLAMA3, LLAMA2,
        PHI3, PLAIN; str() gives the library's name, e.g. "chatml")."""
        return ChatFamily.wrap(lib.pt_chat_template_family(self._ptr))

    @property
    def name(self):
        return _text(lib.pt_chat_template_name(self._ptr))

    @property
    def supports_tools(self):
        """True if the template renders tool definitions and tool calls
        ("qwen2.5", "qwen3", "llama3.1", "llama3.2")."""
        return bool(lib.pt_chat_template_supports_tools(self._ptr))

    def set_tokens(self, bos_token=None, eos_token=None):
        check(lib.pt_chat_template_set_tokens(self._ptr, cstr(bos_token, "bos_token"),
                                              cstr(eos_token, "eos_token")),
              "pt_chat_template_set_tokens")

    @staticmethod
    def _options(add_generation_prompt, bos, default_system, enable_thinking, date_string, tools,
                 tools_in_user_message, keep):
        o = ChatOptions.new()
        o.add_generation_prompt = 1 if add_generation_prompt else 0
        if isinstance(bos, str):
            if bos not in _BOS:
                raise invalid("bos must be 'template' or 'none', not %r" % bos, "chat")
            bos = _BOS[bos]
        o.bos = int(bos)
        ds = cstr(default_system, "default_system")
        dt = cstr(date_string, "date_string")
        tj = None if tools is None else _json_text(list(tools) if isinstance(tools, tuple) else tools,
                                                    "tools")
        keep += [ds, dt, tj]
        o.default_system = ds
        o.enable_thinking = 1 if enable_thinking else 0
        o.date_string = dt
        o.tools_json = tj
        o.tools_in_user_message = 1 if tools_in_user_message else 0
        return o

    def render(self, messages, add_generation_prompt=False, bos="template", default_system=None,
               enable_thinking=True, date_string=None, tools=None, tools_in_user_message=True):
        """The conversation as text, exactly as the model's template renders it.

        tools: the tool definitions (a list of JSON-schema dicts, as
        transformers' apply_chat_template(tools=...) takes them, or their JSON
        text).  A message may carry "tool_calls": [{"name", "arguments"}] (or
        the {"type": "function", "function": {...}} shape), arguments a dict or
        JSON text; tool results are "tool" messages."""
        arr, n, keep = _messages(messages)
        o = self._options(add_generation_prompt, bos, default_system, enable_thinking,
                          date_string, tools, tools_in_user_message, keep)
        out, ln = ctypes.c_void_p(), ctypes.c_size_t()
        check(lib.pt_chat_render(ctypes.byref(out), ctypes.byref(ln), self._ptr, arr, n,
                                 ctypes.byref(o)), "pt_chat_render")
        return take_string(out, ln)

    def render_ids(self, tokenizer, messages, add_generation_prompt=False, bos="template",
                   default_system=None, enable_thinking=True, date_string=None, tools=None,
                   tools_in_user_message=True, numpy=None):
        """ChatIds(ids, mask): token ids of the rendered conversation and 1 on
        the assistant's own tokens (content, tool calls and end-of-turn marker;
        never tool definitions or tool results), else 0; lists, or numpy arrays
        as use_numpy() / numpy= says.  tools and tool calls as in render()."""
        arr, n, keep = _messages(messages)
        o = self._options(add_generation_prompt, bos, default_system, enable_thinking,
                          date_string, tools, tools_in_user_message, keep)
        ids = ctypes.POINTER(ctypes.c_int32)()
        mask = ctypes.POINTER(ctypes.c_uint8)()
        cnt = ctypes.c_size_t()
        check(lib.pt_chat_render_ids(ctypes.byref(ids), ctypes.byref(mask), ctypes.byref(cnt),
                                     self._ptr, tokenizer._ptr, arr, n, ctypes.byref(o)),
              "pt_chat_render_ids")
        try:
            k = cnt.value
            if not k:
                i_arr, m_arr = (ctypes.c_int32 * 0)(), (ctypes.c_uint8 * 0)()
                return ChatIds(shaped(i_arr, (0,), numpy, "i"), shaped(m_arr, (0,), numpy, "B"))
            i_arr = (ctypes.c_int32 * k).from_buffer_copy(ctypes.string_at(ids, 4 * k))
            m_arr = (ctypes.c_uint8 * k).from_buffer_copy(ctypes.string_at(mask, k))
            return ChatIds(shaped(i_arr, (k,), numpy, "i"), shaped(m_arr, (k,), numpy, "B"))
        finally:
            lib.pt_free(ids)
            lib.pt_free(mask)

    def parse_tool_calls(self, text):
        """ToolCalls(content, calls): the tool calls a model generated in this
        template's format (Qwen/ChatML <tool_call> blocks, Llama-3.1/3.2's JSON
        object), as [{"name": str, "arguments": dict}], and the text before
        them.  Put them back on an assistant message ({"role": "assistant",
        "content": content, "tool_calls": calls}) and the template renders the
        generated text again.  A malformed call raises FormatError naming the
        call, its byte offset and what is wrong."""
        b = cstr(text, "text", allow_none=False) if not isinstance(text, (bytes, bytearray)) \
            else bytes(text)
        calls = ctypes.POINTER(ChatToolCall)()
        n, content = ctypes.c_size_t(), ctypes.c_size_t()
        check(lib.pt_chat_parse_tool_calls(ctypes.byref(calls), ctypes.byref(n), ctypes.byref(content),
                                           self._ptr, b, len(b)), "pt_chat_parse_tool_calls")
        try:
            out = [{"name": calls[k].name.decode("utf-8"),
                    "arguments": json.loads(calls[k].arguments.decode("utf-8"))}
                   for k in range(n.value)]
        finally:
            lib.pt_free(calls)
        return ToolCalls(b[:content.value].decode("utf-8", errors="replace"), out)
