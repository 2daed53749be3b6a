"""Chat templates with tools through the binding: tool definitions as dicts or
JSON text, tool calls with dict or JSON-text arguments, the assistant mask over
tool calls, and parse_tool_calls.  The renderings are checked against the
Jinja goldens of tests/reference/chat (no shared data needed)."""

import json
import os
import unittest

import ptest
import posttrain as pt
from posttrain.chat import ToolCalls

GOLDENS = os.path.join(ptest.SOURCE_ROOT, "tests", "reference", "chat", "chat_goldens.json")


def _golden_doc():
    with open(GOLDENS, encoding="utf-8") as f:
        return json.load(f)


class TestChatTools(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.doc = _golden_doc()

    def golden_cases(self, name):
        for t in self.doc["templates"]:
            if t["name"] == name:
                return t
        self.fail("no golden template %s" % name)

    def test_goldens_with_tools(self):
        """Every tool case of the tool-calling templates, with the tools and the
        arguments handed over as Python objects (json.dumps-ed by the binding)."""
        checked = 0
        for name in ("qwen2.5", "qwen3", "llama3.1", "llama3.2"):
            spec = self.golden_cases(name)
            ct = pt.ChatTemplate.from_source(spec["template"], spec["bos_token"], spec["eos_token"])
            self.assertTrue(ct.supports_tools)
            for case in spec["cases"]:
                if "tools" not in case and not case["conversation"].startswith("call_"):
                    continue
                conv = self.doc["conversations"][case["conversation"]]
                msgs = []
                for m in conv:
                    d = {"role": m["role"], "content": m["content"]}
                    if m.get("tool_calls"):
                        # alternate the two shapes the binding takes
                        d["tool_calls"] = [
                            {"type": "function", "function": {"name": c["name"],
                                                              "arguments": json.loads(c["arguments"])}}
                            if k % 2 == 0 else {"name": c["name"], "arguments": c["arguments"]}
                            for k, c in enumerate(m["tool_calls"])]
                    msgs.append(d)
                tools = json.loads(self.doc["toolsets"][case["tools"]]) if "tools" in case else None
                kw = dict(add_generation_prompt=case["add_generation_prompt"], tools=tools,
                          tools_in_user_message=case.get("tools_in_user_message", True),
                          date_string=case.get("date_string", case.get("strftime_now")),
                          enable_thinking=case.get("enable_thinking", True))
                if "expected" in case:
                    self.assertEqual(ct.render(msgs, **kw), case["expected"],
                                     "%s/%s" % (name, case["conversation"]))
                else:
                    with self.assertRaises(pt.Error):
                        ct.render(msgs, **kw)
                checked += 1
            ct.close()
        self.assertGreater(checked, 150)

    def test_mask_and_text_tools(self):
        tok = pt.Tokenizer.bytes()
        ct = pt.ChatTemplate.from_name("qwen2.5")
        msgs = [{"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": None,
                 "tool_calls": [{"name": "get_weather", "arguments": {"city": "Zürich", "n": 1.0}}]},
                {"role": "tool", "content": "21 C"},
                {"role": "assistant", "content": "21 C."}]
        tools = '[{"type": "function", "function": {"name": "get_weather"}}]'
        text = ct.render(msgs, tools=tools)
        self.assertIn('<tools>\n{"type": "function", "function": {"name": "get_weather"}}\n</tools>', text)
        self.assertIn('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich", "n": 1.0}}\n'
                      '</tool_call><|im_end|>', text)
        r = ct.render_ids(tok, msgs, tools=tools)
        runs, cur = [], []
        for i, m in zip(r.ids, r.mask):
            if m:
                cur.append(i)
            elif cur:
                runs.append(tok.decode(cur))
                cur = []
        self.assertEqual(runs, ['<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich", '
                                '"n": 1.0}}\n</tool_call><|im_end|>', "21 C.<|im_end|>"])
        # templates without tools: definitions ignored, calls refused
        sm = pt.ChatTemplate.from_name("smollm2")
        self.assertFalse(sm.supports_tools)
        self.assertEqual(sm.render(msgs[:1], tools=tools), sm.render(msgs[:1]))
        with self.assertRaises(pt.Unsupported):
            sm.render(msgs)
        with self.assertRaises(pt.FormatError):
            ct.render(msgs, tools="[{]")
        with self.assertRaises(pt.InvalidArgument):
            ct.render([{"role": "assistant", "content": "", "tool_calls": [{"name": "f", "arguments": [1]}]}])
        with self.assertRaises(pt.InvalidArgument):
            ct.render([{"role": "assistant", "tool_calls": [{"arguments": {}}]}])
        for h in (sm, ct, tok):
            h.close()

    def test_parse_tool_calls(self):
        ct = pt.ChatTemplate.from_name("qwen3")
        gen = ('<think>\nneed data\n</think>\n\nChecking.\n<tool_call>\n{"name": "get_weather", '
               '"arguments": {"city": "Paris"}}\n</tool_call>\n<tool_call>\n{"name": "ping", '
               '"arguments": {}}\n</tool_call>')
        r = ct.parse_tool_calls(gen)
        self.assertIsInstance(r, ToolCalls)
        self.assertEqual(r.content, "<think>\nneed data\n</think>\n\nChecking.")
        self.assertEqual(r.calls, [{"name": "get_weather", "arguments": {"city": "Paris"}},
                                   {"name": "ping", "arguments": {}}])
        # round trip through render
        msgs = [{"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": r.content, "tool_calls": r.calls}]
        self.assertEqual(ct.render(msgs), "<|im_start|>user\nWeather?<|im_end|>\n"
                                          "<|im_start|>assistant\n" + gen + "<|im_end|>\n")
        self.assertEqual(ct.parse_tool_calls("no calls"), ToolCalls("no calls", []))
        with self.assertRaises(pt.FormatError) as cm:
            ct.parse_tool_calls('<tool_call>\n{"arguments": {}}\n</tool_call>')
        self.assertIn('tool call 1 (at byte 0): the call has no "name"', str(cm.exception))
        with self.assertRaises(pt.FormatError) as cm:
            ct.parse_tool_calls('<tool_call>\n{"name": "f", "arguments": {"a": }}\n</tool_call>')
        self.assertIn("malformed JSON at byte 45", str(cm.exception))
        with self.assertRaises(pt.FormatError):
            ct.parse_tool_calls('<tool_call>\n{"name": "f"}')
        ll = pt.ChatTemplate.from_name("llama3.1")
        self.assertEqual(ll.parse_tool_calls(' {"name": "f", "parameters": {"x": [1, 2.50]}}').calls,
                         [{"name": "f", "arguments": {"x": [1, 2.5]}}])
        with self.assertRaises(pt.Unsupported):
            pt.ChatTemplate.from_name("phi3").parse_tool_calls("x")
        ct.close()
        ll.close()


if __name__ == "__main__":
    unittest.main()
