# Renders small templates with Jinja2 configured as transformers'
# apply_chat_template does, and writes ../jinja_cases.json for the Go tests.
# Usage: python3 jinja_cases.py   (needs Jinja2 3.1.x)
import json, os
import jinja2, jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)
def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception

VARS_JSON = '''{"x": [1, 2, 3], "d": {"a": 1, "items": 5, "b": {"c": [true, null]}}, "s": "hello",
 "f": 2.5, "big": 12345678901234567890, "neg": -7, "e": "", "n": null, "t": true,
 "msgs": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"},
          {"role": "assistant", "content": "yo", "tool_calls": [{"function": {"name": "f", "arguments": {"q": "x", "n": 1.0}}}]}],
 "u8": "caf\\u00e9 \\u6771\\u4eac \\ud83d\\ude80", "ws": " \\t\\n\\u001c a b \\u00a0\\u2028",
 "words": ["b", "A", "a", "c"], "objs": [{"k": 2, "v": "x"}, {"k": 1, "v": "y"}, {"k": 3}]}'''

CASES = r'''
plain text only
===
{{ s }} {{ x }} {{ d }} {{ f }} {{ big }} {{ neg }} {{ n }} {{ t }} [{{ e }}]
===
{% if true %}
  a
  {% endif %}
  b
    {{ 'c' }}
  {# comment #}
d
===
  {%- if true -%}  x  {%- endif -%}  y
===
a  {%+ if true %}b{% endif %}
  {%+ if true %}c{% endif %}
===
{% for i in x %}
    {{ i }}
{% endfor %}
end
===
line1
    {{- ' joined' }}
  {{ 'kept indent' }}
===
{# c1 #}
  {#- c2 -#}
  text
   {# c3 #}
more
===
{% raw %}{{ x }}{% endraw %}
  {%- raw -%}  {{ y }}  {%- endraw %}
  {% raw %}
  {% if %}
  {% endraw %}
===
trailing newline is dropped
===
{{ "a" }}{#
multi
line #}{{ "b" }}
===
{% for i in range(3) %}{% if i == 1 %}{% set y = 5 %}{% endif %}[{{ y }}]{% endfor %}
===
{% set y = 1 %}{% macro m() %}{{ y }}{% endmacro %}{% set y = 2 %}{{ m() }}
===
{% for i in x %}{% set y = i %}{% endfor %}[{{ y }}]
===
{% set y = 0 %}{% for i in x %}{% set y = y + i %}{{ y }}{% endfor %}{{ y }}
===
{% set ns = namespace(a=1, b=[]) %}{% for i in x %}{% set ns.a = ns.a + i %}{% endfor %}{{ ns.a }} {{ ns.b }} {{ ns }}
===
{{ d.items is callable }}|{{ d['items'] }}|{{ d.get('a') }}|{{ d.get('zz', 'dflt') }}|{{ d.b.c }}|{{ d['b']['c'][1] }}
===
{{ (1|safe) + '<' }}|{{ '<'|safe ~ '<' }}|{{ '<' + ('<'|safe) }}|{{ '<&>'|e }}|{{ ('<'|safe) is escaped }}
===
{{ [1,'a',None,True,1.5,{'k':(1,2)}] }} {{ (1,) }} {{ () }} {{ ('a',1) }}
===
{{ ["it's", 'a"b', 'a\'b"c', "\n\x01\u00e9\u2028\\", "\t\u00a0\x7f\u200b"] }}
===
{{ x.append }}|{{ d.update }}
===
{{ x.append(4) }}
===
{{ d.pop('a') }}
===
{{ undefinedvar.foo }}
===
{{ d.zzz.foo }}
===
{{ x[10].foo }}
===
{{ x[10] }}|{{ x[-1] }}|{{ s[1:3] }}|{{ x[::-1] }}|{{ s[::-2] }}|{{ x[5:] }}|{{ x[-10:2] }}|{{ s[10] }}
===
{{ 1/2 }} {{ 4/2 }} {{ 7//2 }} {{ -7//2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2**10 }} {{ 2**-1 }} {{ -7.5 // 2 }} {{ -7.5 % 2 }}
===
{{ 1e16 }} {{ 1e15 }} {{ 0.1+0.2 }} {{ 1.0 }} {{ -0.0 }} {{ 1e22 }} {{ 1e-7 }} {{ 123456789.123 }} {{ 1e100 }} {{ 5e-324 }} {{ 0.0001 }} {{ 0.00001 }} {{ 1.5e300 * 1e10 }}
===
{{ 'a' * 3 }} {{ 3 * 'ab' }} {{ [1] * 2 }} {{ 'x' * -1 }}|
===
{{ 'a' + 1 }}
===
{{ 1 + 'a' }}
===
{{ [1] + (2,) }}
===
{{ 1 == 1.0 }} {{ True == 1 }} {{ none is none }} {{ 1 is number }} {{ True is number }} {{ True is integer }} {{ 1.0 is float }} {{ 1 is float }}
===
{{ 'a' ~ 1 ~ none ~ undefinedv ~ [1] ~ 1.0 }}|{{ undefinedv|length }}|{{ undefinedv|trim }}|{{ undefinedv|string }}|{{ undefinedv|list }}
===
{{ undefinedv + 1 }}
===
{{ undefinedv < 1 }}
===
{% for a in x %}{{ loop.index }}{{ loop.index0 }}{{ loop.previtem }}{{ loop.nextitem }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.cycle('a','b') }};{% endfor %}
===
{% for a in x if a > 1 %}{{ loop.index }}{{ a }}{{ loop.length }}{% else %}none{% endfor %}|{% for a in [] %}{% else %}empty{% endfor %}
===
{% for a in [[1,2],[3,4]] %}{% for b in a %}{{ loop.index }}{{ loop.depth }}{% endfor %}{{ loop.index }}{% endfor %}
===
{% for i in x %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}
===
{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}{% for c in 'ab' %}{{ c }}{% endfor %}
===
{% for k, v in d|items %}{{ k }};{% endfor %}{% for a, b in [[1, 2], (3, 4)] %}{{ a }}{{ b }}{% endfor %}
===
{% for a, b in [[1, 2, 3]] %}{% endfor %}
===
{{ d|items|list }} {{ d|tojson }} {{ x|tojson(indent=2) }} {{ d|tojson(indent=1, sort_keys=true) }} {{ d|tojson(separators=(',', ':')) }}
===
{{ u8|tojson }} {{ u8|tojson(ensure_ascii=true) }} {{ ws|tojson }} {{ [1.0, -0.0, 1e16, big, none, true, 'q"\\'] | tojson }} {{ {} | tojson }} {{ [] | tojson(indent=2) }}
===
{{ undefinedq|tojson }}
===
{{ none|items|list }}
===
{{ undefinedq|items|list }} {{ {}|items|list }}
===
{{ "a,b,,c".split(',') }} {{ " a b ".split() }} {{ "a b c".split(' ', 1) }} {{ "  x\n".strip() }} {{ "xxaxx".strip('x') }} {{ "a b c".rsplit(None, 1) }} {{ "a,b,c".rsplit(',', 1) }} {{ ''.split() }} {{ ''.split(',') }}
===
{{ d.keys() }} {{ d.values() }} {{ d.items() }} {{ d.keys()|list }} {{ 'a' in d.keys() }}
===
{{ 'abc'.startswith(('x','a')) }} {{ '%s-%d' % ('a', 3) }} {{ 'x{}y{}'.format(1, 'z') }} {{ '%05.1f|%x|%r' % (3.14159, 255, 'q') }} {{ '%s' % none }} {{ '%d%%' % 50 }}
===
{{ x|join(', ') }} {{ x|first }} {{ x|last }} {{ x|reverse|list }} {{ x|sum }} {{ x|max }} {{ x|min }} {{ [3,1,2]|sort }} {{ s|reverse }} {{ s|first }} {{ []|first }}|
===
{{ ws|trim|length }} {{ ws|trim }} {{ "a"|default("b") }} {{ undefinedv|default("b") }} {{ none|default("b") }} {{ none|default("b", true) }} {{ ''|d('z', true) }}
===
{{ x is sequence }} {{ s is sequence }} {{ d is sequence }} {{ d is iterable }} {{ s is iterable }} {{ d is mapping }} {{ none is string }} {{ undefinedv is iterable }} {{ 1 is iterable }} {{ n is none }} {{ t is true }} {{ t is false }} {{ x is not mapping }}
===
{{ 1 if false }}|{{ 'a' if true else 'b' }}|{{ 'a' if false else 'b' if false else 'c' }}
===
{{ (1 if false).foo }}
===
{{ -1|abs }} {{ not 1 == 2 }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'b' in 'abc' }} {{ 1 not in x }} {{ 'a' in d }} {{ 2 in x }} {{ 'x' in undefinedv }}
===
{{ -x|length }}
===
{{ 3.0|int }} {{ '12'|int + 1 }} {{ 'x'|int }} {{ 2.5|round }} {{ 3.5|round }} {{ 2|float }} {{ 1.23456|round(2) }} {{ '3.7'|float }} {{ ' 42 '|int }} {{ '0x1f'|int(base=16) }} {{ 2.7|round(0, 'floor') }} {{ -2.7|int }}
===
{{ "x"|string ~ 1|string }} {{ [1]|string }} {{ none|string }} {{ true|lower }} {{ "ab"|upper }} {{ "hello world"|title }} {{ "hELLO"|capitalize }} {{ "they're bill's"|title }}
===
{{ 12345678901234567890 + 1 }} {{ 2 ** 64 }} {{ -2 ** 2 }} {{ 2 ** 3 ** 2 }} {{ 1_000 }} {{ 0x10 }} {{ 0o17 }} {{ 0b101 }} {{ 1.5e3 }} {{ 1E3 }} {{ big * big }} {{ big // 7 }} {{ big % 7 }} {{ -big }}
===
{{ "a\tb\x41\u00e9\\n" }} {{ 'a' 'b' }} {{ "\'" }} {{ '\q' }}
===
{{ x|map('string')|join('-') }} {{ objs|map(attribute='k')|list }} {{ [1,2,3,4]|select('even')|list }} {{ objs|selectattr('v','defined')|list }} {{ [{'a':1},{'a':0}]|selectattr('a')|list }} {{ x|reject('odd')|list }} {{ objs|rejectattr('k', 'gt', 1)|list }} {{ objs|map(attribute='v', default='?')|list }}
===
{{ x|length }} {{ s|length }} {{ d|length }} {{ s|count }} {{ s|list }} {{ u8|length }}
===
{% macro m(a, b='B') %}{{ a }}-{{ b }}-{{ varargs }}-{{ kwargs }}{% endmacro %}{{ m(1) }} {{ m(1, 2) }} {{ m(b=3, a=4) }}
===
{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}
===
{% macro m(a) %}{{ a }}{{ varargs }}{% endmacro %}{{ m(1, 2, 3) }}
===
{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, c=2) }}
===
{% macro m(a) %}{{ a }}{{ kwargs }}{% endmacro %}{{ m(1, c=2) }}
===
{% macro m(a) %}[{{ a }}]{% endmacro %}{{ m() }}|{{ m }}
===
{% macro m(a) %}{{ a.x }}{% endmacro %}{{ m() }}
===
{% macro outer(n) %}{% macro inner() %}<{{ n }}>{% endmacro %}{{ inner() }}{{ inner() }}{% endmacro %}{{ outer(3) }}
===
{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n }}*{{ fact(n - 1) }}{% endif %}{% endmacro %}{{ fact(4) }}
===
{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = 1, 2 %}{{ t }}{% set (c, e2) = [3, 4] %}{{ c }}{{ e2 }}
===
{% set c %}  hi {{ 1 }}  {% endset %}[{{ c }}]{% set c2 | upper | trim %} x {% endset %}[{{ c2 }}]
===
{% filter upper %}abc {{ s }}{% endfilter %}
===
{% with a = 1, b = s %}{{ a }}{{ b }}{% set z = 3 %}{% endwith %}[{{ a }}{{ z }}]
===
{{ 'a' < 'b' }} {{ [1,2] < [1,3] }} {{ (1, 2) <= (1, 2) }} {{ 'B' < 'a' }}
===
{{ 1 < 'a' }}
===
{{ none.foo }}|{{ 'x'.foo }}|{{ d.zzz }}|{{ d.zzz is defined }}|{{ d['zzz'] }}|{{ x.foo }}|{{ s.upper() }}
===
{{ "ab"|replace("a","x") }} {{ "aaa"|replace("a","x",2) }} {{ "Hello World"|wordcount }} {{ "a\nb"|indent(2) }} {{ "a\n\nb"|indent(2, true) }} {{ "a\n\nb"|indent(2, blank=true) }} {{ "x"|center(6) }}|
===
{{ words|sort }} {{ words|sort(case_sensitive=true) }} {{ words|sort(reverse=true) }} {{ [1,1,2]|unique|list }} {{ words|unique|list }} {{ objs|sort(attribute='k')|map(attribute='k')|list }}
===
{{ {'b':1,'a':2}|dictsort }} {{ {'b':1,'a':2}|dictsort(by='value') }} {{ [1.5,2]|sum }} {{ objs|sum(attribute='k', start=10) }} {{ [[1,2]]|first|last }} {{ x|batch(2)|list }} {{ x|batch(2, 'f')|list }} {{ x|slice(2)|list }} {{ [1,2,3,4]|slice(2, 'f')|list }}
===
{{ true and 'x' }} {{ false or 'y' }} {{ none or 0 }} {{ 'a' and none }} {{ not none }} {{ not undefinedv }}
===
{{ s.split('l') }} {{ s.rsplit('l', 1) }} {{ s.find('l') }} {{ s.rfind('l') }} {{ s.find('z') }} {{ s.count('l') }} {{ s.replace('l','L') }} {{ s.title() }} {{ 'a-b'.partition('-') }} {{ ' x '.lstrip() }}| {{ ' x '.rstrip() }}| {{ s.upper().lower() }} {{ s.capitalize() }} {{ s.index('e') }} {{ ','.join(['a','b']) }}
===
{{ s.isalpha() }} {{ '12'.isdigit() }} {{ 'ab\ncd\r\nef\n'.splitlines() }} {{ s.center(9, '*') }} {{ s.center(10, '*') }} {{ 'ab'.center(5, '*') }} {{ s.zfill(7) }} {{ '-5'.zfill(4) }} {{ s.endswith('lo') }} {{ s.endswith(('x', 'o')) }} {{ 'AbC'.swapcase() }} {{ ' '.isspace() }} {{ 'Ab'.isupper() }} {{ 'AB'.isupper() }} {{ s.ljust(7, '.') }} {{ s.rjust(7) }}
===
{{ 'abc'[0] }} {{ d['a'] }} {{ d.a }} {{ x.0 }} {{ x['0'] }}|{{ s[-1] }}
===
{{ msgs[0].role }} {{ msgs[-1].tool_calls[0].function.arguments.n }} {{ msgs[-1].tool_calls[0].function.arguments|tojson }} {{ msgs|selectattr('role', 'equalto', 'user')|list|length }} {{ msgs|map(attribute='role')|join(',') }}
===
{% if msgs[0].role == 'system' %}{% set rest = msgs[1:] %}{% else %}{% set rest = msgs %}{% endif %}{% for m in rest %}{{ m.role }}{% if not loop.last %},{% endif %}{% endfor %}
===
{{ raise_exception('custom message ' ~ 42) }}
===
{% if x|length > 2 %}{{ raise_exception('too long') }}{% endif %}
===
{{ range(3) }} {{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }} {{ dict(a=1, b=2) }} {{ dict(d, z=0) }} {{ range(3)|length }}
===
{{ range(1000000) }}
===
{{ 1 / 0 }}
===
{{ 5 // 0 }}
===
{{ s() }}
===
{% if %}
===
{% for x in %}{% endfor %}
===
{% if true %}
===
{% endif %}
===
{% foo %}
===
{{ x|nosuchfilter }}
===
{{ x is nosuchtest }}
===
{{ 'unterminated }}
===
{{ x[ }}
===
{{ (1, 2 }}
===
{# never closed
===
{{ 'a' }
===
{% set 1 = 2 %}
===
{% set x.y = 1 %}
===
{{ 1 is divisibleby 3 }} {{ 9 is divisibleby(3) }} {{ 3 is odd }} {{ 'a' is lower }} {{ 'A' is upper }} {{ 1 is eq 1 }} {{ 2 is gt 1 }} {{ 2 is in x }} {{ none is sameas none }} {{ m is callable }} {{ range is callable }} {{ 'a' is string and 'a' is not mapping }}
===
{{ 1 < 2 and 'x' }} {{ 1 if 0 else 2 }} {{ x|length - 1 }} {{ -x[0] }} {{ not x[0] == 1 }} {{ (x|length) * 2 }} {{ x | length * 2 }} {{ 10 - 2 - 3 }} {{ 2 * 3 + 4 }} {{ 2 + 3 * 4 }} {{ 'a' ~ (2 + 3) }}
===
{{ 'a' ~ 2 + 3 }}
===
{{ [1, 2, 3][1:] }} {{ {'a': {'b': 1}}['a']['b'] }} {{ {'a': 1}.a }} {{ [ ] }} {{ { } }} {{ [1,] }} {{ {'a': 1,} }}
===
{%- set content = '  <tool_response>x</tool_response> ' | trim %}{{ content.startswith('<tool_response>') and content.endswith('</tool_response>') }}
===
{%- set c = '<think>\nr\n</think>\n\nanswer' %}{{ c.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') }}|{{ c.split('</think>')[-1].lstrip('\n') }}
===
{{ n|string }} {{ n is not none }} {{ e is string }} {{ f is number }} {{ big is integer }} {{ t is boolean }} {{ x is iterable and x is not string }}
===
{% for m in msgs %}{% if loop.previtem %}{{ loop.previtem.role }}>{% endif %}{{ m.role }}{% if loop.nextitem is defined %}<{{ loop.nextitem.role }}{% endif %};{% endfor %}
===
{{ loop }}|{{ varargs }}
===
{% for i in x %}{{ loop.previtem.foo }}{% endfor %}
===
{% block b %}in block {{ s }}{% endblock %}
===
{{ 'é'|upper }} {{ 'ß'.upper() }} {{ 'ǅ'.lower() }} {{ 'İ'.lower()|length }}
'''

def main():
    vars_ = json.loads(VARS_JSON)
    out = []
    for src in CASES.strip('\n').split('\n===\n'):
        c = {"template": src}
        try:
            c["output"] = env.from_string(src).render(**vars_)
        except Exception as e:
            c["error"] = type(e).__name__
            c["message"] = str(e)
        out.append(c)
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "jinja_cases.json"), "w", encoding="utf-8") as f:
        json.dump({"jinja2": jinja2.__version__, "vars": json.loads(VARS_JSON, object_pairs_hook=dict), "vars_json": VARS_JSON, "cases": out}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(len(out), "cases;", sum("error" in c for c in out), "errors")

main()
