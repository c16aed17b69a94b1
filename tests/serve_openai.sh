#!/usr/bin/env bash
# serve_openai.sh - `refusion serve` driven by the official OpenAI client
# (npm `openai` v6, installed into .deps/npm-openai by
# scripts/serve/fetch_openai.sh), on the shipped demo model:
#  - chat and completions; a stream with stream_options.include_usage is
#    the plain answer, its usage in a final chunk with choices [];
#  - max_tokens is a hard cap (1 token: 1 token back, finish "length");
#  - stop (a piece of the plain answer): the answer ends just before it;
#  - content as a list of text parts and the developer role = the string
#    and the system role; seeds reproduce sampled answers;
#  - n = 3 at temperature 1.5 (chat, AR and ReFusion; completions): 3 choices,
#    index 0..2, choice i = the single answer with seed + i, usage summing
#    them; streamed n = 2 = the plain n = 2 answer, chunk by chunk per index;
#  - a stream without include_usage: every chunk has a choice (the usual
#    chunk.choices[0].delta.content loop), the statistics on the last one;
#  - a tool-using conversation sent back (assistant content null with
#    tool_calls, tool answers): the prompt is the one python3-jinja2 renders
#    with Qwen3's template (tests/data/templates);
#  - param / code as OpenAI fills them (context_length_exceeded on messages
#    or prompt, messages[i].content, missing_required_parameter, ...);
#  - unsupported fields (functions; penalties with plan-and-infill) and bad values (n 0,
#    n 100) are
#    400 with OpenAI's error shape (param names the field, code a string or
#    null), an unknown model 404, a wrong API key 401;
#  - GET /v1/models/{id}, CORS preflight, /metrics;
#  - concurrency: 4 clients at once each get their solo answer, and the
#    server ran at least two at once (its requests_running_peak gauge).
# Skipped (exit 77) only when the npm package cannot be installed.
set -u
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup serve_openai
rf_openai_pkg

# 4 rows of one thread: the concurrency check needs them decoded together
rf_serve_start "$T/server.log" -m "$SRC/models/refusion-demo" --parallel 4 --threads 1 --api-key sk-test-123 -n 64 --cors '*'

OPENAI_PKG=$PKG BASE=http://127.0.0.1:$PORT SRC=$SRC timeout 300 node - <<'EOF'
const OpenAI = require(process.env.OPENAI_PKG);
const base = process.env.BASE;
const client = new OpenAI({ baseURL: base + '/v1', apiKey: 'sk-test-123', maxRetries: 0, timeout: 120000 });
let fails = 0, pass = 0;
const ok = (c, m) => { if (c) pass++; else { fails++; console.log('FAIL: ' + m); } };
const model = 'refusion-demo';
const Q = 'Write a Python function f(x) that does this: start from x, multiply by 3, then add 2.';
const fast = { slot_size: 8, blocks: 2, slot_threshold: 0.9, token_threshold: 0.4 };
const chat = (extra = {}) => client.chat.completions.create({ model, messages: [{ role: 'user', content: Q }], max_tokens: 64, ...fast, ...extra });
async function status(f) { try { await f(); return 200; } catch (e) { return e; } }

(async () => {
  // ---- chat and completions --------------------------------------------------------------
  const c = await chat();
  const text = c.choices[0].message.content;
  ok(c.object === 'chat.completion' && c.choices[0].message.role === 'assistant', 'chat shape');
  ok(/def f\(x\)/.test(text) && /3/.test(text) && /2/.test(text), 'the demo model answers the code task: ' + JSON.stringify(text));
  ok(c.usage.completion_tokens === c.choices[0].token_ids.length && c.usage.prompt_tokens > 10, 'usage ' + JSON.stringify(c.usage));
  ok(c.choices[0].finish_reason === 'stop', 'finish ' + c.choices[0].finish_reason);
  const cp = await client.completions.create({ model, prompt: 'def f(x):', max_tokens: 16, mode: 'ar' });
  ok(cp.object === 'text_completion' && typeof cp.choices[0].text === 'string' && cp.usage.completion_tokens <= 16, 'completion ' + JSON.stringify(cp.choices[0]));

  // ---- streaming with include_usage ----------------------------------------------------------
  const st = await chat({ stream: true, stream_options: { include_usage: true } });
  let stext = '', usage = null, finish = null, afterUsage = 0;
  for await (const ch of st) {
    if (usage) afterUsage++;
    if (ch.choices.length) { stext += ch.choices[0].delta.content || ''; if (ch.choices[0].finish_reason) finish = ch.choices[0].finish_reason; }
    else if (ch.usage) usage = ch.usage;
  }
  ok(stext === text, `stream text ${JSON.stringify(stext)} != ${JSON.stringify(text)}`);
  ok(usage && usage.completion_tokens === c.usage.completion_tokens && afterUsage === 0, 'stream usage ' + JSON.stringify(usage));
  ok(finish === 'stop', 'stream finish ' + finish);

  // ---- max_tokens cap ------------------------------------------------------------------------
  for (const [n, mode] of [[1, 'refusion'], [3, 'refusion'], [5, 'ar']]) {
    const r = await chat({ max_tokens: n, mode });
    ok(r.usage.completion_tokens === n && r.choices[0].token_ids.length === n && r.choices[0].finish_reason === 'length',
       `max_tokens ${n} (${mode}): ${r.usage.completion_tokens} tokens, ${r.choices[0].finish_reason}`);
    ok(text.startsWith(r.choices[0].message.content), `max_tokens ${n}: not a prefix of the answer: ${JSON.stringify(r.choices[0].message.content)}`);
  }
  const sc = await chat({ max_tokens: 2, stream: true, stream_options: { include_usage: true } });
  let sn = 0, su = null;
  for await (const ch of sc) { if (ch.choices.length) sn += (ch.choices[0].token_ids || []).length; else su = ch.usage; }
  ok(sn === 2 && su && su.completion_tokens === 2, `stream max_tokens 2: ${sn} ids, usage ${JSON.stringify(su)}`);

  // ---- stop sequences (in ReFusion and AR mode) ------------------------------------------------
  const cut = text.indexOf('y = y');
  ok(cut > 0, 'the answer has the stop piece');
  for (const mode of ['refusion', 'ar']) {
    const full = (await chat({ mode })).choices[0].message.content;
    const k = full.indexOf('y = y');
    const r = await chat({ mode, stop: ['y = y', 'never'] });
    ok(k > 0 && r.choices[0].message.content === full.slice(0, k) && r.choices[0].finish_reason === 'stop',
       `stop (${mode}): ${JSON.stringify(r.choices[0].message.content)} vs ${JSON.stringify(full.slice(0, k))}`);
    const s2 = await chat({ mode, stop: 'y = y', stream: true });
    let t2 = '';
    for await (const ch of s2) if (ch.choices.length) t2 += ch.choices[0].delta.content || '';
    ok(t2 === full.slice(0, k), `streamed stop (${mode}): ${JSON.stringify(t2)}`);
  }

  // ---- content parts, developer role, seeds ----------------------------------------------------
  const parts = await client.chat.completions.create({ model, max_tokens: 64, ...fast,
    messages: [{ role: 'developer', content: 'Answer with code.' }, { role: 'user', content: [{ type: 'text', text: Q }] }] });
  const plain = await client.chat.completions.create({ model, max_tokens: 64, ...fast,
    messages: [{ role: 'system', content: 'Answer with code.' }, { role: 'user', content: Q }] });
  ok(parts.choices[0].message.content === plain.choices[0].message.content && parts.usage.prompt_tokens === plain.usage.prompt_tokens,
     'content parts + developer != string + system');
  const s1 = await chat({ temperature: 0.9, seed: 7, mode: 'ar' }), s2 = await chat({ temperature: 0.9, seed: 7, mode: 'ar' });
  ok(s1.choices[0].message.content === s2.choices[0].message.content, 'same seed, different answers');

  // ---- n choices: choice i is its own generation with seed + i -----------------------------------
  for (const mode of ['ar', 'refusion']) {
    const hot = { temperature: 1.5, seed: 7, mode }; // hot enough for the demo model's seeds to differ
    const r = await chat({ ...hot, n: 3 });
    ok(r.choices.length === 3 && r.choices.every((ch, i) => ch.index === i && ch.message.role === 'assistant'),
       `n 3 (${mode}): indexes ${JSON.stringify(r.choices.map(ch => ch.index))}`);
    const single = [];
    for (let i = 0; i < 3; i++) single.push((await chat({ ...hot, seed: 7 + i })).choices[0].message.content);
    ok(r.choices.every((ch, i) => ch.message.content === single[i]), `n 3 (${mode}): choice i != the answer with seed 7+i`);
    ok(new Set(single).size > 1, `n 3 (${mode}): seeds 7, 8, 9 at temperature 1.5 gave one answer`);
    const sum = r.choices.reduce((a, ch) => a + ch.token_ids.length, 0);
    ok(r.usage.completion_tokens === sum && r.usage.total_tokens === r.usage.prompt_tokens + sum,
       `n 3 (${mode}): usage ${JSON.stringify(r.usage)} vs ${sum} tokens`);
  }
  const cn = await client.completions.create({ model, prompt: 'def f(x):', max_tokens: 8, mode: 'ar', n: 2, temperature: 0.9, seed: 3 });
  ok(cn.choices.length === 2 && cn.choices[0].index === 0 && cn.choices[1].index === 1 &&
     cn.usage.completion_tokens === cn.choices[0].token_ids.length + cn.choices[1].token_ids.length,
     'completions n 2: ' + JSON.stringify(cn.choices.map(ch => [ch.index, ch.text])));
  const n2 = await chat({ temperature: 0.9, seed: 11, mode: 'ar', n: 2 });
  const sn2 = await chat({ temperature: 0.9, seed: 11, mode: 'ar', n: 2, stream: true, stream_options: { include_usage: true } });
  const per = ['', ''], fin = [null, null];
  let nu = null;
  for await (const ch of sn2) {
    for (const x of ch.choices) { per[x.index] += x.delta.content || ''; if (x.finish_reason) fin[x.index] = x.finish_reason; }
    if (!ch.choices.length && ch.usage) nu = ch.usage;
  }
  ok(per[0] === n2.choices[0].message.content && per[1] === n2.choices[1].message.content && fin[0] && fin[1],
     `streamed n 2: ${JSON.stringify(per)} vs ${JSON.stringify(n2.choices.map(ch => ch.message.content))}`);
  ok(nu && nu.completion_tokens === n2.usage.completion_tokens, `streamed n 2 usage ${JSON.stringify(nu)}`);
  // the raw stream prints floats shortly (0.6, not 0.59999999999999998), as the plain answer does
  const raw = await (await fetch(base + '/v1/chat/completions', { method: 'POST', headers: { Authorization: 'Bearer sk-test-123',
    'Content-Type': 'application/json' }, body: JSON.stringify({ messages: [{ role: 'user', content: Q }], max_tokens: 8, stream: true,
    slot_threshold: 0.6, token_threshold: 0.3 }) })).text();
  ok(/"slot_threshold":0\.6[,}]/.test(raw) && /"lookahead":false[,}]/.test(raw) && !/\d\.\d{10,}/.test(raw), 'stream floats: ' + (raw.match(/"settings":\{[^}]*\}/) || [raw.slice(-300)])[0]);

  // ---- a stream without include_usage: every chunk has a choice (the usual loop reads
  // chunk.choices[0] unchecked, as OpenAI's own streams allow); the statistics ride on the last
  for (const mode of ['refusion', 'ar']) {
    const full = await chat({ mode });
    const su = await chat({ mode, stream: true });
    let t = '', n = 0, lastCh = null;
    try {
      for await (const ch of su) { t += ch.choices[0].delta.content || ''; n++; lastCh = ch; }
    } catch (e) { ok(false, `stream without include_usage (${mode}): the usual loop threw: ${e}`); }
    ok(t === full.choices[0].message.content, `stream without include_usage (${mode}): ${JSON.stringify(t)}`);
    ok(lastCh && lastCh.choices[0].finish_reason === full.choices[0].finish_reason && lastCh.refusion &&
       lastCh.refusion.model_calls === full.refusion.model_calls && !lastCh.usage,
       `stream without include_usage (${mode}): last chunk ${JSON.stringify(lastCh)}`);
  }

  // ---- a tool-using conversation sent back: the assistant's tool call (content null) and the
  // tool's answer, rendered as Qwen3's template renders them (python3-jinja2 as transformers
  // sets it up: the prompt the server builds is the reference text's)
  const toolMsgs = [
    { role: 'user', content: 'What is the weather in Paris?' },
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function',
      function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: 'sunny, 21 C' },
    { role: 'assistant', content: 'Let me check the hour too.', tool_calls: [
      { id: 'call_2', type: 'function', function: { name: 'get_time', arguments: '{"tz": "CET"}' } },
      { id: 'call_3', type: 'function', function: { name: 'get_date', arguments: '{}' } }] },
    { role: 'tool', tool_call_id: 'call_2', content: '14:00' },
    { role: 'tool', tool_call_id: 'call_3', content: 'Monday' },
  ];
  const ref = JSON.parse(require('child_process').execFileSync('python3', [process.env.SRC + '/tests/data/templates/hf_render.py'],
    { input: JSON.stringify({ template: process.env.SRC + '/tests/data/templates/qwen3.jinja',
      vars: { messages: toolMsgs, add_generation_prompt: true } }) + '\n' }).toString());
  ok(ref.text && ref.text.includes('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'),
     'reference rendering: ' + JSON.stringify(ref));
  let tc = null;
  try { tc = await client.chat.completions.create({ model, messages: toolMsgs, max_tokens: 8, mode: 'ar' }); }
  catch (e) { ok(false, `tool calls in the history refused: ${e.status} ${JSON.stringify(e.error)}`); }
  if (tc && ref.text) {
    // the reference text's markers are the template's: parsed as special tokens, as asked
    const viaText = await client.completions.create({ model, prompt: ref.text, max_tokens: 8, mode: 'ar', parse_special: true });
    ok(tc.usage.prompt_tokens === viaText.usage.prompt_tokens && tc.choices[0].message.content === viaText.choices[0].text,
       `tool calls rendered unlike Qwen3's template: ${tc.usage.prompt_tokens} prompt tokens vs ${viaText.usage.prompt_tokens}`);
  }

  // ---- errors --------------------------------------------------------------------------------
  const long = 'hello '.repeat(5000); // over the demo's 4,096-token context
  const errs = [
    ['over the context', () => client.chat.completions.create({ model, messages: [{ role: 'user', content: long }], max_tokens: 8 }),
     400, 'messages', 'context_length_exceeded'],
    ['completion over the context', () => client.completions.create({ model, prompt: long, max_tokens: 8 }), 400, 'prompt',
     'context_length_exceeded'],
    ['content null without tool_calls', () => client.chat.completions.create({ model, messages: [{ role: 'user', content: null }] }),
     400, 'messages[0].content', null],
    ['bad tool call', () => client.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' },
      { role: 'assistant', content: null, tool_calls: [{ type: 'function', function: { arguments: '{}' } }] }] }),
     400, 'messages[1].tool_calls', null],
    ['missing messages', () => client.chat.completions.create({ model }), 400, 'messages', 'missing_required_parameter'],
    ['stream_options without stream', () => chat({ stream_options: { include_usage: true } }), 400, 'stream_options', null],
    ['unknown field', () => chat({ frobnicate: 1 }), 400, 'frobnicate', 'unsupported_parameter'],
    ['n 0', () => chat({ n: 0 }), 400, 'n', null],
    ['n 100', () => chat({ n: 100 }), 400, 'n', null],
    ['functions (the old spelling of tools)', () => chat({ functions: [{ name: 'f', parameters: {} }] }), 400, 'functions', 'unsupported_parameter'],
    ['penalty', () => chat({ presence_penalty: 0.5, mode: 'refusion', rolling: false }), 400, 'presence_penalty', 'unsupported_parameter'],
    ['json schema keyword not enforced', () => chat({ response_format: { type: 'json_schema', json_schema: { name: 'd', schema: { type: 'string', format: 'date' } } } }), 400, 'response_format', 'unsupported_parameter'],
    ['max_tokens 0', () => chat({ max_tokens: 0 }), 400, 'max_tokens', null],
    ['bad stop', () => chat({ stop: [''] }), 400, 'stop', null],
    ['image part', () => client.chat.completions.create({ model, messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'http://x' } }] }] }), 400, null, null],
    ['unknown model', () => client.models.retrieve('nope'), 404, 'model', 'model_not_found'],
    ['wrong key', () => new OpenAI({ baseURL: base + '/v1', apiKey: 'wrong', maxRetries: 0 }).models.list(), 401, null, 'invalid_api_key'],
  ];
  for (const [name, p, want, param, code] of errs) {
    const e = await status(p);
    ok(e !== 200 && e.status === want, `${name}: status ${e === 200 ? 200 : e.status}, want ${want}`);
    if (e === 200) continue;
    const body = e.error || {};
    ok(typeof body.message === 'string' && body.message.length > 0 && 'param' in body && 'code' in body && 'type' in body,
       `${name}: error shape ${JSON.stringify(body)}`);
    ok((param === null || body.param === param) && (body.code === null || typeof body.code === 'string') &&
       (code === null || body.code === code), `${name}: param/code ${JSON.stringify(body)}`);
  }

  // ---- models, CORS, metrics --------------------------------------------------------------------
  const m = await client.models.retrieve(model);
  ok(m.id === model && m.object === 'model', 'models.retrieve ' + JSON.stringify(m));
  const pre = await fetch(base + '/v1/chat/completions', { method: 'OPTIONS', headers: { Origin: 'http://example.com',
    'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'authorization, content-type' } });
  ok(pre.status === 204 && pre.headers.get('access-control-allow-origin') === '*' &&
     /POST/.test(pre.headers.get('access-control-allow-methods')) && /authorization/i.test(pre.headers.get('access-control-allow-headers')),
     `preflight ${pre.status} ${[...pre.headers].join(' ')}`);
  const h = await fetch(base + '/health');
  const hj = await h.json();
  ok(h.status === 200 && h.headers.get('access-control-allow-origin') === '*' && hj.status === 'ok' && !('model' in hj),
     '/health without a key, with --cors *, no model id: ' + JSON.stringify(hj));
  const hk = await (await fetch(base + '/health', { headers: { Authorization: 'Bearer sk-test-123' } })).json();
  ok(hk.model === model, '/health with the key names the model: ' + JSON.stringify(hk));
  const met = await (await fetch(base + '/metrics', { headers: { Authorization: 'Bearer sk-test-123' } })).text();
  const metric = n => Number((met.match(new RegExp('^refusion_' + n + ' (\\S+)$', 'm')) || [])[1]);
  ok(metric('requests_total') >= 15 && metric('completion_tokens_total') > 100 && metric('queue_depth') === 0 &&
     metric('tokens_per_second') > 0 && metric('parallel') === 4 && /^# TYPE refusion_requests_total counter$/m.test(met),
     '/metrics: ' + ['requests_total', 'completion_tokens_total', 'queue_depth', 'tokens_per_second', 'parallel'].map(n => n + '=' + metric(n)).join(' '));

  // ---- concurrency: 4 at once, each its solo answer, faster than one after the other -----------
  const qs = [3, 5, 7, 9].map(k => `Write a Python function f(x) that does this: start from x, multiply by ${k}, then add 1.`);
  const one = q => client.chat.completions.create({ model, messages: [{ role: 'user', content: q }], max_tokens: 64, mode: 'ar' });
  await one(qs[0]); // warm
  let t0 = Date.now();
  const solo = [];
  for (const q of qs) solo.push((await one(q)).choices[0].message.content);
  const tSeq = (Date.now() - t0) / 1000;
  t0 = Date.now();
  const par = await Promise.all(qs.map(one));
  const tPar = (Date.now() - t0) / 1000;
  ok(par.every((r, i) => r.choices[0].message.content === solo[i]), 'concurrent answers differ from the solo ones');
  // ran side by side (not a timing: the server's own count of generations running at once)
  const met2 = await (await fetch(base + '/metrics', { headers: { Authorization: 'Bearer sk-test-123' } })).text();
  const peak = Number((met2.match(/^refusion_requests_running_peak (\S+)$/m) || [])[1]);
  ok(peak >= 2, `4 concurrent requests never ran two at once (peak ${peak})`);
  console.log(`serve_openai: concurrency: 4 requests one after the other ${tSeq.toFixed(2)} s, at once ${tPar.toFixed(2)} s (loaded shared machine)`);
  console.log(`serve_openai: ${pass} checks passed, ${fails} failed`);
  process.exit(fails ? 1 : 0);
})().catch(e => { console.log('FAIL: ' + (e.stack || e)); process.exit(1); });
EOF
rf_serve_finish $? "$SPID" "$T/server.log"
