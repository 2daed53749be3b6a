#!/usr/bin/python3
"""Golden renderings of chat templates for tests/chat/test_chat.c.

Run with Debian's /usr/bin/python3 (python3-jinja2):

    /usr/bin/python3 tests/reference/chat/gen_chat.py [--shared-data DIR] [--check]

Each template is rendered the way Hugging Face transformers' apply_chat_template
does it (ImmutableSandboxedEnvironment with trim_blocks=True and
lstrip_blocks=True, the extensions loopcontrols, a raise_exception() global, a
tojson filter equal to json.dumps(ensure_ascii=False), bos_token / eos_token
variables and add_generation_prompt), over the conversations below, with and
without the generation prompt.  The output, chat_goldens.json, holds the
template sources, the conversations and the expected strings (or the fact that
the template raises), so the C test needs nothing from ../shared/data.

Template sources:
  * qwen3, llama3-shared, phi3-vision: read from the REAL tokenizer_config.json
    files in ../shared/data/tokenizers/{qwen3,llama3,llama-spm}/ (see that
    folder's README.md for their provenance); required.
  * The others are written below from the public model repositories on the
    Hugging Face hub (tokenizer_config.json, "chat_template" field), as cited
    next to each one.
  * The tool-calling templates (Qwen2.5, Qwen3's later revision, Llama 3.1 and
    3.2, SmolLM2) are read from templates/*.jinja; templates/README.md names
    where each came from and the second copy it was checked against.

Tool goldens: a case may name a tool set (TOOLSETS, JSON text as a host
would hold it; json.loads gives the `tools` list), its conversation may hold
assistant messages with tool calls (name + arguments as JSON text;
json.loads gives the dict the templates `tojson`), and transformers' other
template inputs are set as apply_chat_template sets them: tools=None when
there are none, strftime_now fixed to one date.  JSON_CASES pins
json.dumps(json.loads(text), ensure_ascii=False) (with and without indent=4)
for the C re-serialiser.
"""
import argparse
import datetime
import json
import os
import random
import struct
import sys

import jinja2
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "chat_goldens.json")
TEMPLATES_DIR = os.path.join(HERE, "templates")
# What strftime_now("%d %b %Y") returns while rendering (Llama 3.2's date).
FIXED_NOW = datetime.datetime(2026, 3, 9)

# ---- templates from the public model repositories -------------------------

# HuggingFaceTB/SmolLM2-135M-Instruct, tokenizer_config.json (same in the
# 360M and 1.7B instruct models).
SMOLLM2 = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Plain ChatML, as in the transformers chat-templating documentation and many
# ChatML fine-tunes (e.g. cognitivecomputations/dolphin-2.5-mixtral-8x7b).
CHATML = (
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}"
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# meta-llama/Meta-Llama-3-8B-Instruct, tokenizer_config.json after the fix
# that made the generation prompt conditional (the file in
# ../shared/data/tokenizers/llama3 is the first revision, which always adds it).
LLAMA3 = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

# meta-llama/Llama-3.1-8B-Instruct, tokenizer_config.json (Llama-3.3-70B-Instruct
# has the same template).
LLAMA31 = """{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message + builtin tools #}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\\n\\n"}}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\\n\\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\\n\\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\\n\\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\\n\\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\\n\\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\\n\\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}
            {{- "<|python_tag|>" + tool_call.name + ".call(" }}
            {%- for arg_name, arg_val in tool_call.arguments | items %}
                {{- arg_name + '="' + arg_val + '"' }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- endif %}
                {%- endfor %}
            {{- ")" }}
        {%- else  %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}
            {{- '{"name": "' + tool_call.name + '", ' }}
            {{- '"parameters": ' }}
            {{- tool_call.arguments | tojson }}
            {{- "}" }}
        {%- endif %}
        {%- if builtin_tools is defined %}
            {#- This means we're in ipython mode #}
            {{- "<|eom_id|>" }}
        {%- else %}
            {{- "<|eot_id|>" }}
        {%- endif %}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\\n\\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

# meta-llama/Llama-2-7b-chat-hf, tokenizer_config.json.
LLAMA2 = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}"
    "{% endfor %}"
)

# mistralai/Mistral-7B-Instruct-v0.2, tokenizer_config.json before system
# prompts were added (also Mistral-7B-Instruct-v0.1 and Mixtral-8x7B-Instruct-v0.1).
MISTRAL = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}"
    "{% endfor %}"
)

# microsoft/Phi-3-mini-4k-instruct, tokenizer_config.json (revision of May 2024).
PHI3_MINI = (
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}{{'<|system|>\n' + message['content'] + '<|end|>\n'}}"
    "{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}"
    "{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}"
)

# Plain prompt + completion: no markup.  Not a model's template but the
# definition libposttrain implements (message contents concatenated, the
# eos_token, when one is set, after each assistant message).
PLAIN = (
    "{% for message in messages %}{{ message['content'] }}"
    "{% if message['role'] == 'assistant' and eos_token %}{{ eos_token }}{% endif %}"
    "{% endfor %}"
)

# ---- conversations ---------------------------------------------------------

def m(role, content):
    return {"role": role, "content": content}

SYS = "You are a helpful assistant."
CONVERSATIONS = {
    "sys_user_asst": [m("system", SYS), m("user", "What is 2+2?"), m("assistant", "2+2 equals 4.")],
    "user_asst": [m("user", "Hello!"), m("assistant", "Hi there. How can I help?")],
    "user_only": [m("user", "Write a haiku about CPUs.")],
    "sys_user": [m("system", SYS), m("user", "Name three primes.")],
    "multi": [m("system", "Answer briefly."), m("user", "Capital of France?"), m("assistant", "Paris."),
              m("user", "And of Italy?"), m("assistant", "Rome.")],
    "multi_open": [m("user", "Capital of France?"), m("assistant", "Paris."), m("user", "And of Spain?")],
    "whitespace": [m("system", "  Be terse.\n"), m("user", "  padded question \n\n"),
                   m("assistant", "\n answer with spaces  "), m("user", "\tnext\t")],
    "unicode": [m("user", "naïve café 日本語 🦙 — ok?"), m("assistant", "Ça va! 🦙\u00a0")],
    "newlines": [m("user", "line one\nline two\n\nline four"), m("assistant", "first\n\nsecond\n")],
    "markup_text": [m("user", "Use <b>bold</b>, [brackets] and {braces}."), m("assistant", "Done: <b>x</b> [y] {z}")],
    "empty_asst": [m("user", "Say nothing."), m("assistant", "")],
    "tool": [m("system", SYS), m("user", "What's the weather in Paris?"), m("assistant", "Let me check."),
             m("tool", "{\"temp_c\": 21, \"sky\": \"clear\"}"), m("assistant", "It is 21 degrees and clear.")],
    "tool_two": [m("user", "Weather in Paris and Rome?"), m("assistant", "Checking both."),
                 m("tool", "Paris: 21C"), m("tool", "Rome: 25C\n\"sunny\""), m("assistant", "Paris 21C, Rome 25C.")],
    "tool_open": [m("user", "Weather in Oslo?"), m("assistant", "Checking."), m("tool", "Oslo: 3C")],
    "think_last": [m("user", "What is 3*7?"), m("assistant", "<think>\n3*7 = 21\n</think>\n\n21")],
    "think_earlier": [m("user", "What is 3*7?"), m("assistant", "<think>\nmultiply\n</think>\n\n21"),
                      m("user", "And 3*8?"), m("assistant", "24")],
    "system_late": [m("user", "Hi"), m("assistant", "Hello."), m("system", "Switch to French."),
                    m("user", "Bonjour"), m("assistant", "Salut.")],
    "starts_assistant": [m("assistant", "I speak first."), m("user", "OK")],
    "two_users": [m("user", "One"), m("user", "Two")],
    "sys_only": [m("system", SYS)],
}


# ---- tools ------------------------------------------------------------------

# Tool definitions as JSON text, the way a host holds them (pt_chat_options.tools_json).
# Deliberately not in json.dumps form: no spaces, escapes json.dumps does not write
# (\u00e9, \/, a surrogate pair), numbers it re-spells (1e1, 1.5E+3, -0.0, 1e16, 0.10).
TOOLSETS = {
    "weather": (
        '[{"type":"function","function":{"name":"get_weather","description":'
        '"Current weather for a city. Returns \u00b0C; use \\"city, country\\".",'
        '"parameters":{"type":"object","properties":{"city":{"type":"string",'
        '"description":"City name, e.g. Z\\u00fcrich or \u6771\u4eac"},"unit":{"type":"string",'
        '"enum":["c","f"]},"days":{"type":"integer","minimum":0,"maximum":1e1,"default":1}},'
        '"required":["city"]}}},'
        ' {"type": "function", "function": {"name": "add", "description": '
        '"Add two numbers.\\nTab:\\tend \\u0007 bell \u2028 sep \\ud83e\\udd99 \\/ slash",'
        ' "parameters": {"type": "object", "properties": {"a": {"type": "number", "default": -0.0},'
        ' "b": {"type": "number", "default": 1.5E+3, "examples": [0.10, 1e-7, 1e16, 12345678901234567890, -0, 2.5e-300]}},'
        ' "required": [], "additionalProperties": {}}}}]'
    ),
    "empty": "[]",
    "bare": '[{"name": "ping", "description": "No parameters.", "parameters": {"type": "object", "properties": {}}}]',
}

def tc(name, arguments):
    """A tool call as libposttrain takes it: the name and the arguments as JSON text."""
    return {"name": name, "arguments": arguments}

def am(content, calls):
    return {"role": "assistant", "content": content, "tool_calls": calls}

W_PARIS = tc("get_weather", '{"city":"Paris","unit":"c"}')
W_ZURICH = tc("get_weather", '{ "city" : "Z\\u00fcrich",\n "days": 3, "opts": {"deep": [1, 2.50, {"x": null}, []], "flag": true, "e": {}} }')
ADD = tc("add", '{"a": 2, "b": 0.1, "note": "say \\"hi\\"\\n\\u00e9 \u65e5\u672c \U0001f999"}')
PING = tc("ping", "{}")

CONVERSATIONS.update({
    "tools_user": [m("user", "What's the weather in Paris?")],
    "tools_sys_user": [m("system", "  You are a weather bot.\n"), m("user", " Weather in Paris? ")],
    "call_one": [m("user", "What's the weather in Paris?"), am("", [W_PARIS]),
                 m("tool", '{"temp_c": 21, "sky": "clear"}'), m("assistant", "It is 21 \u00b0C and clear.")],
    "call_content": [m("system", SYS), m("user", "Weather in Z\u00fcrich for 3 days?"),
                     am("Let me check.", [W_ZURICH]), m("tool", "sunny\n\"warm\"\n")],
    "call_two": [m("user", "Weather in Paris, and 2 + 0.1?"), am("", [W_PARIS, ADD]),
                 m("tool", "21 C"), m("tool", "2.1"), m("assistant", "Paris: 21 C. Sum: 2.1.")],
    "call_last": [m("user", "Ping it."), am("", [PING])],
    "call_think": [m("user", "Weather in Paris?"),
                   am("<think>\nI should call the tool.\n</think>\n\n", [W_PARIS]),
                   m("tool", "21 C")],
    "call_then_user": [m("user", "Ping it."), am("", [PING]), m("tool", "pong"),
                       m("assistant", "Done."), m("user", "Thanks!"), m("assistant", "You're welcome.")],
})

# (conversation, tool set) pairs rendered by every template that knows tools: each
# conversation with its tools, plus an empty tool list and tool calls without tools.
TOOL_CASES = [("tools_user", "weather"), ("tools_sys_user", "weather"), ("call_one", "weather"),
              ("call_content", "weather"), ("call_two", "weather"), ("call_last", "bare"),
              ("call_think", "weather"), ("call_then_user", "bare"), ("tools_user", "empty"),
              ("call_one", None), ("call_then_user", None)]

# Inputs of the C JSON re-serialiser: (text, what json.loads gives, dumped as json.dumps
# does it with and without indent=4).
def _json_cases():
    cases = [
        '{}', '[]', ' {"a" : [ ] , "b":{ }}', '"\\u0000\\u001f\\u007f\\u0080\\u2028\\ud83e\\udd99\\"\\\\\\/\\b\\f\\n\\r\\t"',
        '[0, -0, 1, -1, 12345678901234567890123, -9007199254740993]',
        '[0.0, -0.0, 1.0, 1e0, 1E+2, 1e-2, 0.1, 0.2, 0.30000000000000004, 1e15, 1e16, 123456789012345678, '
        '1.5e300, 2.5e-300, 5e-324, 1.7976931348623157e308, 1e400, -1e400, 1e-400, 0.0001, 0.00001, '
        '100.0, 1e22, 1e21, 9007199254740993.0, 4.35, 0.1e1, 123.456e-7]',
        '[true, false, null, "x", [[[]]], {"k": {"k": {"k": [1, {"z": "\u00e9"}]}}}]',
        '{"z": 1, "a": 2, "m": {"b": [], "a": {}}}',
        TOOLSETS["weather"], W_ZURICH["arguments"], ADD["arguments"],
    ]
    rng = random.Random(20260309)
    floats = []
    for _ in range(400):
        while True:
            v = struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0]
            if v == v and v not in (float("inf"), float("-inf")):
                break
        floats.append(repr(v))
    for _ in range(200):
        floats.append("%s%d.%de%d" % (rng.choice(["", "-"]), rng.randrange(0, 10 ** rng.randrange(1, 12)),
                                      rng.randrange(0, 10 ** rng.randrange(1, 20)), rng.randrange(-330, 330)))
    for e in range(-1074, 1024, 7):  # powers of two: asymmetric rounding intervals
        floats.append(repr(2.0 ** e))
    cases.append("[" + ", ".join(floats) + "]")
    out = []
    for text in cases:
        value = json.loads(text)
        out.append({"text": text, "dumps": json.dumps(value, ensure_ascii=False),
                    "dumps_indent4": json.dumps(value, ensure_ascii=False, indent=4)})
    return out

ALL_BASIC = ["sys_user_asst", "user_asst", "user_only", "sys_user", "multi", "multi_open", "whitespace",
             "unicode", "newlines", "markup_text", "empty_asst"]

# name: (source or loader, bos, eos, expected variant, extra conversations, by_name)
TEMPLATES = [
    # name, template key, bos, eos, expected variant, conversation names, extra vars cases
    dict(name="qwen3", origin="shared:qwen3", bos=None, eos="<|im_end|>", variant="qwen3",
         convs=ALL_BASIC + ["tool", "tool_two", "tool_open", "think_last", "think_earlier", "system_late",
                            "starts_assistant", "two_users"] + TOOL_CASES,
         extra=[{"enable_thinking": False}]),
    dict(name="llama3-shared", origin="shared:llama3", bos="<|begin_of_text|>", eos="<|end_of_text|>",
         variant="llama3-genprompt", convs=ALL_BASIC + ["tool", "system_late", "starts_assistant", "two_users"]),
    dict(name="phi3-vision", origin="shared:llama-spm", bos="<s>", eos="<|endoftext|>", variant="phi3-vision",
         convs=ALL_BASIC + ["tool", "system_late", "starts_assistant", "two_users"]),
    dict(name="chatml", origin="CHATML", bos=None, eos="<|im_end|>", variant="chatml",
         convs=ALL_BASIC + ["tool", "system_late", "starts_assistant", "two_users", ("tools_user", "weather")]),
    dict(name="smollm2", origin="SMOLLM2", bos="<|im_start|>", eos="<|im_end|>", variant="smollm2",
         convs=ALL_BASIC + ["tool", "system_late", "starts_assistant", "two_users"] + TOOL_CASES),
    dict(name="llama3", origin="LLAMA3", bos="<|begin_of_text|>", eos="<|eot_id|>", variant="llama3",
         convs=ALL_BASIC + ["tool", "system_late", "starts_assistant", "two_users", ("tools_user", "weather")]),
    dict(name="llama3.1", origin="LLAMA31", bos="<|begin_of_text|>", eos="<|eot_id|>", variant="llama3.1",
         convs=ALL_BASIC + ["tool", "tool_two", "system_late", "starts_assistant", "two_users"] + TOOL_CASES
         + [("sys_only", "weather")],
         extra=[{"date_string": "30 Nov 2026"}, {"tools_in_user_message": False}]),
    dict(name="llama2", origin="LLAMA2", bos="<s>", eos="</s>", variant="llama2",
         convs=ALL_BASIC + ["starts_assistant", "two_users"]),
    dict(name="mistral", origin="MISTRAL", bos="<s>", eos="</s>", variant="mistral",
         convs=ALL_BASIC + ["tool", "starts_assistant", "two_users"]),
    dict(name="phi3", origin="PHI3_MINI", bos="<s>", eos="<|endoftext|>", variant="phi3",
         convs=ALL_BASIC + ["system_late", "starts_assistant", "two_users"]),
    dict(name="plain", origin="PLAIN", bos=None, eos=None, variant="plain",
         convs=ALL_BASIC + ["tool", "starts_assistant", "two_users"]),
    dict(name="plain-eos", origin="PLAIN", bos=None, eos="</s>", variant="plain",
         convs=["user_asst", "multi", "unicode"]),
    # the tool-calling templates, read from templates/ (see its README.md)
    dict(name="qwen2.5", origin="file:qwen2.5-instruct.jinja", bos=None, eos="<|im_end|>", variant="qwen2.5",
         convs=ALL_BASIC + ["tool", "tool_two", "tool_open", "think_last", "system_late", "starts_assistant",
                            "two_users"] + TOOL_CASES),
    dict(name="qwen3-later", origin="file:qwen3-later.jinja", bos=None, eos="<|im_end|>", variant="qwen3",
         convs=["sys_user_asst", "multi", "tool_two", "think_last", "think_earlier"] + TOOL_CASES,
         extra=[{"enable_thinking": False}]),
    dict(name="llama3.2", origin="file:llama3.2-instruct.jinja", bos="<|begin_of_text|>", eos="<|eot_id|>",
         variant="llama3.2",
         convs=ALL_BASIC + ["tool", "tool_two", "system_late", "two_users"] + TOOL_CASES + [("sys_only", "weather")],
         extra=[{"date_string": "30 Nov 2026"}, {"tools_in_user_message": False}]),
]

SOURCES = {"CHATML": CHATML, "SMOLLM2": SMOLLM2, "LLAMA3": LLAMA3, "LLAMA31": LLAMA31, "LLAMA2": LLAMA2,
           "MISTRAL": MISTRAL, "PHI3_MINI": PHI3_MINI, "PLAIN": PLAIN}


def make_env():
    # The environment transformers builds in _compile_jinja_template.
    def raise_exception(message):
        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: FIXED_NOW.strftime(fmt)
    return env


def jinja_messages(conv):
    """The messages as transformers hands them to the template: tool calls in the
    OpenAI/transformers shape with their arguments as a dict."""
    out = []
    for msg in conv:
        d = {"role": msg["role"], "content": msg["content"]}
        if msg.get("tool_calls"):
            d["tool_calls"] = [{"type": "function",
                                "function": {"name": c["name"], "arguments": json.loads(c["arguments"])}}
                               for c in msg["tool_calls"]]
        out.append(d)
    return out


def load_shared(shared, folder):
    path = os.path.join(shared, "tokenizers", folder, "tokenizer_config.json")
    with open(path, encoding="utf-8") as f:
        cfg = json.load(f)
    tpl = cfg["chat_template"]
    if not isinstance(tpl, str):
        sys.exit("%s: chat_template is not a string" % path)
    return tpl, cfg


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared-data", default=os.path.normpath(os.path.join(HERE, "../../../../shared/data")))
    ap.add_argument("--check", action="store_true", help="compare with the committed file instead of writing")
    args = ap.parse_args()

    with open(os.path.join(TEMPLATES_DIR, "llama3.1-instruct.jinja"), encoding="utf-8", newline="") as f:
        if f.read() != LLAMA31:
            sys.exit("templates/llama3.1-instruct.jinja differs from LLAMA31")
    with open(os.path.join(TEMPLATES_DIR, "smollm2-instruct.jinja"), encoding="utf-8", newline="") as f:
        if f.read() != SMOLLM2:
            sys.exit("templates/smollm2-instruct.jinja differs from SMOLLM2")
    env = make_env()
    out_templates = []
    for spec in TEMPLATES:
        origin = spec["origin"]
        if origin.startswith("shared:"):
            folder = origin.split(":", 1)[1]
            source, cfg = load_shared(args.shared_data, folder)
            where = "../shared/data/tokenizers/%s/tokenizer_config.json" % folder
            for key, field in (("bos", "bos_token"), ("eos", "eos_token")):
                val = cfg.get(field)
                if isinstance(val, dict):
                    val = val.get("content")
                if val != spec[key]:
                    sys.exit("%s: %s is %r, generator expects %r" % (where, field, val, spec[key]))
        elif origin.startswith("file:"):
            fname = origin.split(":", 1)[1]
            with open(os.path.join(TEMPLATES_DIR, fname), encoding="utf-8", newline="") as f:
                source = f.read()
            where = "tests/reference/chat/templates/" + fname
        else:
            source = SOURCES[origin]
            where = "gen_chat.py:" + origin
        tpl = env.from_string(source)
        cases = []
        option_sets = [{}] + spec.get("extra", [])
        for conv in spec["convs"]:
            conv_name, tools = conv if isinstance(conv, tuple) else (conv, None)
            for opts in option_sets:
                for agp in (False, True):
                    ctx = dict(messages=jinja_messages(CONVERSATIONS[conv_name]), add_generation_prompt=agp,
                               tools=json.loads(TOOLSETS[tools]) if tools else None)
                    if spec["bos"] is not None:
                        ctx["bos_token"] = spec["bos"]
                    if spec["eos"] is not None:
                        ctx["eos_token"] = spec["eos"]
                    ctx.update(opts)
                    case = {"conversation": conv_name, "add_generation_prompt": agp}
                    if tools:
                        case["tools"] = tools
                    if "strftime_now" in source and "date_string" not in opts:
                        case["strftime_now"] = FIXED_NOW.strftime("%d %b %Y")
                    case.update(opts)
                    try:
                        case["expected"] = tpl.render(**ctx)
                    except TemplateError as e:
                        case["error"] = str(e)
                    cases.append(case)
        out_templates.append({
            "name": spec["name"], "variant": spec["variant"], "source_from": where,
            "bos_token": spec["bos"], "eos_token": spec["eos"], "template": source, "cases": cases,
        })

    doc = {
        "generator": "tests/reference/chat/gen_chat.py",
        "jinja2_version": jinja2.__version__,
        "conversations": CONVERSATIONS,
        "toolsets": TOOLSETS,
        "json_cases": _json_cases(),
        "templates": out_templates,
    }
    text = json.dumps(doc, ensure_ascii=False, indent=1) + "\n"
    if args.check:
        with open(OUT, encoding="utf-8") as f:
            if f.read() != text:
                sys.exit("chat_goldens.json differs from a fresh rendering")
        print("chat_goldens.json is up to date")
        return
    with open(OUT, "w", encoding="utf-8") as f:
        f.write(text)
    n = sum(len(t["cases"]) for t in out_templates)
    print("wrote %s: %d templates, %d cases" % (OUT, len(out_templates), n))


if __name__ == "__main__":
    main()
