#!/usr/bin/env bash
# serve_tools.sh - tool calling in `refusion serve`, read with the official
# OpenAI client (npm `openai` v6, as serve_openai.sh), on the demo model with
# Qwen3's chat template (tests/data/templates/qwen3.jinja, which renders the
# tools):
#  - the prompt holds the tools as the template renders them (/apply-template);
#  - a named tool_choice, AR, the rolling slot and plan-and-infill greedy
#    and sampled (4 seeds), mdm greedy, plain and streamed: finish_reason "tool_calls", one call of
#    that function (id, type "function", name), content null; the stream's
#    delta.tool_calls (by index) give the plain answer's call; every call's
#    arguments are JSON valid under the function's parameters schema
#    (checked with Debian's python3-jsonschema when installed);
#  - "required" with one tool: the same as naming it;
#  - "none" and "auto" with this model (which writes no call): text, no
#    tool_calls;
#  - a conversation with the call and its result (role "tool") sent back;
#  - refusals: a named function that is not in tools, tools in completions.
# Skipped (exit 77) only when the npm package cannot be installed.
set -u
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup serve_tools
rf_openai_pkg
M="$SRC/models/refusion-demo"

rf_serve_start "$T/server.log" -m "$M" --parallel 2 -n 96 --chat-template "$SRC/tests/data/templates/qwen3.jinja"
OPENAI_PKG=$PKG BASE=$URL OUT="$T/args.jsonl" timeout 300 node - <<'EOF' || fails=$((fails + 1))
const OpenAI = require(process.env.OPENAI_PKG);
const fs = require('fs');
const client = new OpenAI({ baseURL: process.env.BASE + '/v1', apiKey: 'none', maxRetries: 0, timeout: 120000 });
let fails = 0, pass = 0;
const ok = (c, m) => { if (c) pass++; else { fails++; console.log('FAIL: ' + m); } };
const model = 'refusion-demo';
const weather = { type: 'object', properties: { city: { type: 'string', maxLength: 16 }, days: { type: 'integer', minimum: 1, maximum: 7 },
  unit: { enum: ['C', 'F'] } }, required: ['city', 'days'], additionalProperties: false };
const add = { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'integer' } }, required: ['a', 'b'], additionalProperties: false };
const tools = [{ type: 'function', function: { name: 'get_weather', description: 'The weather of a city', parameters: weather } },
               { type: 'function', function: { name: 'add', description: 'Add two integers', parameters: add } }];
const schemas = { get_weather: weather, add };
const messages = [{ role: 'user', content: 'What is the weather in Paris for the next 3 days?' }];
const found = [];  // {schema, args} for python3-jsonschema

function checkCall(msg, finish, name, what) {
  ok(finish === 'tool_calls', `${what}: finish_reason ${finish}`);
  const calls = msg.tool_calls || [];
  ok(calls.length === 1 && calls[0].type === 'function' && typeof calls[0].id === 'string' && calls[0].id.length > 0 &&
     calls[0].function.name === name, `${what}: tool_calls ${JSON.stringify(calls)}`);
  ok(msg.content === null || msg.content === undefined || msg.content === '', `${what}: content ${JSON.stringify(msg.content)}`);
  if (calls.length) {
    let args = null;
    try { args = JSON.parse(calls[0].function.arguments); } catch (e) { }
    ok(args && typeof args === 'object', `${what}: arguments are not a JSON object: ${calls[0].function.arguments}`);
    found.push({ what, schema: schemas[name], args: calls[0].function.arguments });
  }
  return calls[0];
}

(async () => {
  // the tools are in the prompt, as the template renders them
  const r = await fetch(process.env.BASE + '/apply-template', { method: 'POST', body: JSON.stringify({ messages, tools }) });
  const prompt = (await r.json()).prompt || '';
  ok(prompt.includes('<tools>') && prompt.includes('"name": "get_weather"') && prompt.includes('"name": "add"'), 'tools not in the prompt: ' + prompt.slice(0, 300));

  const named = (name) => ({ type: 'function', function: { name } });
  for (const mode of [{ mode: 'ar' }, { mode: 'refusion', rolling: true, slot_size: 4 }, { mode: 'refusion', rolling: false },
                      { mode: 'mdm', serial_num_blocks: 1 }]) {
    for (const samp of [{ temperature: 0 }, ...[1, 2, 3, 4].map(seed => ({ temperature: 0.9, seed }))]) {
      for (const name of ['get_weather', 'add']) {
        // mdm greedy only: its sampled strings are free text that may run past max_tokens
        if (mode.mode === 'mdm' && samp.temperature !== 0) continue;
        const what = `${JSON.stringify(mode)} ${JSON.stringify(samp)} ${name}`;
        const c = await client.chat.completions.create({ model, messages, tools, tool_choice: named(name), ...mode, ...samp });
        const call = checkCall(c.choices[0].message, c.choices[0].finish_reason, name, what);
        if (samp.temperature !== 0 || name !== 'get_weather') continue;
        // streamed: delta.tool_calls by index, as the client's accumulation reads them
        const st = await client.chat.completions.create({ model, messages, tools, tool_choice: named(name), stream: true, ...mode, ...samp });
        const acc = {}; let finish = null, text = '';
        for await (const ch of st) {
          if (!ch.choices.length) continue;
          const d = ch.choices[0].delta;
          if (d.content) text += d.content;
          for (const t of d.tool_calls || []) {
            const a = acc[t.index] || (acc[t.index] = { id: t.id, type: t.type, function: { name: '', arguments: '' } });
            if (t.function && t.function.name) a.function.name += t.function.name;
            if (t.function && t.function.arguments) a.function.arguments += t.function.arguments;
          }
          if (ch.choices[0].finish_reason) finish = ch.choices[0].finish_reason;
        }
        const sc = Object.values(acc);
        ok(finish === 'tool_calls' && sc.length === 1 && text === '', `${what} streamed: finish ${finish}, ${sc.length} calls, text ${JSON.stringify(text)}`);
        ok(call && sc.length && sc[0].function.name === call.function.name && sc[0].function.arguments === call.function.arguments &&
           sc[0].type === 'function', `${what} streamed: ${JSON.stringify(sc)} != ${JSON.stringify(call)}`);
        // the same through the client's stream helper
        const runner = client.chat.completions.stream({ model, messages, tools, tool_choice: named(name), ...mode, ...samp });
        const final = await runner.finalChatCompletion();
        ok(JSON.stringify(final.choices[0].message.tool_calls.map(t => t.function)) === JSON.stringify([call.function]),
           `${what}: the stream helper's calls ${JSON.stringify(final.choices[0].message.tool_calls)}`);
      }
    }
  }
  // "required" with one tool: that call
  const req = await client.chat.completions.create({ model, messages, tools: tools.slice(1), tool_choice: 'required', mode: 'ar' });
  checkCall(req.choices[0].message, req.choices[0].finish_reason, 'add', 'required');
  // none / auto: this model writes text, not a call
  for (const choice of ['none', 'auto']) {
    const c = await client.chat.completions.create({ model, messages, tools, tool_choice: choice, mode: 'ar', max_tokens: 24 });
    ok(typeof c.choices[0].message.content === 'string' && !c.choices[0].message.tool_calls && c.choices[0].finish_reason !== 'tool_calls',
       `tool_choice ${choice}: ${JSON.stringify(c.choices[0])}`);
  }
  // the call and its result sent back
  const first = await client.chat.completions.create({ model, messages, tools, tool_choice: named('get_weather'), mode: 'ar' });
  const call = first.choices[0].message.tool_calls[0];
  const back = await client.chat.completions.create({ model, tools, mode: 'ar', max_tokens: 16,
    messages: [...messages, { role: 'assistant', content: null, tool_calls: [call] },
               { role: 'tool', tool_call_id: call.id, content: '{"temperature": 21}' }] });
  ok(typeof back.choices[0].message.content === 'string', 'the answer after a tool result: ' + JSON.stringify(back.choices[0]));

  // refusals
  const refused = [
    ['a named function not in tools', { tools, tool_choice: named('nope'), mode: 'ar' }, 'tool_choice', null],
  ];
  for (const [what, extra, param, code] of refused) {
    let e = null;
    try { await client.chat.completions.create({ model, messages, ...extra }); } catch (x) { e = x; }
    ok(e && e.status === 400 && e.param === param && e.code === code, `${what}: ${e ? e.status + ' ' + e.param + ' ' + e.code + ' ' + e.message : 'accepted'}`);
  }
  let e = null;
  try { await client.completions.create({ model, prompt: 'x', tools }); } catch (x) { e = x; }
  ok(e && e.status === 400 && e.param === 'tools', 'tools in completions: ' + (e && e.message));

  fs.writeFileSync(process.env.OUT, found.map(f => JSON.stringify(f)).join('\n') + '\n');
  console.log(`serve_tools (node): ${pass} passed, ${fails} failed`);
  process.exit(fails ? 1 : 0);
})().catch(e => { console.log('FAIL: ' + (e.stack || e)); process.exit(1); });
EOF
# every call's arguments valid under its function's parameters
if python3 -c 'import jsonschema' 2>/dev/null; then
  python3 - "$T/args.jsonl" <<'PY' && ok || bad "arguments not valid under their schema"
import json, sys, jsonschema
n = 0
for line in open(sys.argv[1]):
    if not line.strip():
        continue
    f = json.loads(line)
    jsonschema.validate(json.loads(f["args"]), f["schema"])
    n += 1
assert n >= 20, n
print("%d calls' arguments valid under their schema" % n, file=sys.stderr)
PY
fi
rf_serve_stop "$SPID" "$T/server.log" || fails=$((fails + 1))
SPID=""
echo "serve_tools: $pass passed, $fails failed"
[ "$fails" -eq 0 ]
