#!/usr/bin/env bash
# serve_logprobs.sh - token log-probabilities from `refusion serve`, read
# with the official OpenAI client (npm `openai` v6, as serve_openai.sh) on
# the demo model:
#  - completions ("logprobs": 3, the prompt as the ids `refusion generate`
#    used): token_logprobs are the CLI's --logprobs values, the tokens join
#    into the text, text_offset points at each token's text, at most 3
#    alternatives each;
#  - chat ("logprobs": true, "top_logprobs": 3): choices[].logprobs.content
#    is the CLI's answer token for token (token, logprob, bytes, 3 sorted
#    alternatives; the bytes join into the content), for AR and for the
#    rolling slot (the same values, within rf_width_tol), plain and streamed (the chunks'
#    content lists join into the plain one), and streamed completions
#    likewise;
#  - llama-server's /completion "n_probs": 3: completion_probabilities with
#    the same values;
#  - plan-and-infill and mdm: an entry per answer token (its bytes join into
#    the content), the answer as without logprobs, streamed the same;
#  - refusals (400, param and code as OpenAI fills them):
#    top_logprobs without logprobs, top_logprobs 21, a chat "logprobs" that
#    is not a boolean.
# Skipped (exit 77) only when the npm package cannot be installed.
set -u
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup serve_logprobs
rf_openai_pkg
M="$SRC/models/refusion-demo"
Q="Tom has 12 apples. He finds 7 more apples. He loses 5 of them. How many apples does Tom have now?"

run generate -m "$M" -p "$Q" -n 24 --json --logprobs 3 --decoder ar
[ "$rc" -eq 0 ] && ok || bad "generate: $err"
cp "$T/out" "$T/cli.json"

rf_serve_start "$T/server.log" -m "$M" --parallel 2 -n 64
OPENAI_PKG=$PKG BASE=$URL Q=$Q CLI="$T/cli.json" TOL=$(rf_width_tol) timeout 300 node - <<'EOF' || fails=$((fails + 1))
const OpenAI = require(process.env.OPENAI_PKG);
const fs = require('fs');
const client = new OpenAI({ baseURL: process.env.BASE + '/v1', apiKey: 'none', maxRetries: 0, timeout: 120000 });
const cli = JSON.parse(fs.readFileSync(process.env.CLI, 'utf8'));
let fails = 0, pass = 0;
const ok = (c, m) => { if (c) pass++; else { fails++; console.log('FAIL: ' + m); } };
const model = 'refusion-demo', Q = process.env.Q;
// within rf_width_tol where the values come from calls of other widths (the rolling slot's rows)
const TOL = Number(process.env.TOL), close = (a, b) => Math.abs(a - b) <= Math.max(1e-6 * Math.max(1, Math.abs(b)), TOL);
const EOS = cli.answer_ids[cli.answer_ids.length - 1];
// the CLI's values of the tokens that are text (the answer's EOS is not)
const want = cli.logprobs.filter((l, i) => !(i === cli.logprobs.length - 1 && l.token === EOS && cli.hit_eos));

// chat's content list against the CLI's
function sameAsCli(content, what) {
  ok(Array.isArray(content) && content.length === want.length, `${what}: ${content && content.length} entries, want ${want.length}`);
  if (!Array.isArray(content)) return;
  content.forEach((e, i) => {
    const w = want[i] || {};
    ok(typeof e.token === 'string' && close(e.logprob, w.logprob) && e.logprob <= 0, `${what}[${i}]: ${JSON.stringify(e)} vs ${JSON.stringify(w)}`);
    ok(Array.isArray(e.bytes) && Buffer.from(e.bytes).toString('utf8') === e.token || e.token.startsWith('bytes:'), `${what}[${i}]: bytes ${e.bytes} / ${e.token}`);
    ok(e.top_logprobs.length === 3 && e.top_logprobs.every((t, k) => k === 0 || t.logprob <= e.top_logprobs[k - 1].logprob),
       `${what}[${i}]: top ${JSON.stringify(e.top_logprobs)}`);
    ok(e.top_logprobs.every((t, k) => close(t.logprob, w.top_logprobs[k].logprob)), `${what}[${i}]: top values differ from the CLI's`);
  });
}

(async () => {
  // ---- completions: the CLI's prompt ids, legacy shape --------------------------------------------
  const cp = await client.completions.create({ model, prompt: cli.prompt_ids, max_tokens: 24, mode: 'ar', logprobs: 3 });
  const lp = cp.choices[0].logprobs;
  ok(lp && lp.token_logprobs.length === want.length, 'completions: ' + JSON.stringify(lp).slice(0, 300));
  if (lp) {
    ok(lp.token_logprobs.every((x, i) => close(x, want[i].logprob)), 'completions: values differ from the CLI\'s');
    ok(lp.tokens.join('') === cp.choices[0].text, `completions: tokens ${JSON.stringify(lp.tokens)} do not join into the text`);
    ok(lp.text_offset.every((o, i) => cp.choices[0].text.startsWith(lp.tokens[i], o)), 'completions: text_offset ' + lp.text_offset);
    ok(lp.top_logprobs.every(t => Object.keys(t).length >= 1 && Object.keys(t).length <= 3), 'completions: top_logprobs ' + JSON.stringify(lp.top_logprobs[0]));
  }
  // streamed: the chunks' lists join into the plain one
  const cs = await client.completions.create({ model, prompt: cli.prompt_ids, max_tokens: 24, mode: 'ar', logprobs: 3, stream: true });
  let slp = [];
  for await (const ch of cs) if (ch.choices.length && ch.choices[0].logprobs) slp = slp.concat(ch.choices[0].logprobs.token_logprobs);
  ok(JSON.stringify(slp) === JSON.stringify(lp && lp.token_logprobs), `completions streamed: ${slp.length} values`);

  // ---- chat: AR and the rolling slot, plain and streamed ------------------------------------------
  const messages = [{ role: 'user', content: Q }];
  let plain = null;
  for (const mode of [{ mode: 'ar' }, { mode: 'refusion', rolling: true, slot_size: 4 }]) {
    const what = mode.rolling ? 'rolling' : 'ar';
    const c = await client.chat.completions.create({ model, messages, max_tokens: 24, logprobs: true, top_logprobs: 3, ...mode });
    ok(JSON.stringify(c.choices[0].token_ids) === JSON.stringify(cli.answer_ids), `${what}: answer ${c.choices[0].token_ids} != the CLI's ${cli.answer_ids}`);
    const content = c.choices[0].logprobs && c.choices[0].logprobs.content;
    sameAsCli(content, what);
    ok(content && Buffer.concat(content.map(e => Buffer.from(e.bytes))).toString('utf8') === c.choices[0].message.content,
       `${what}: the bytes do not join into the content`);
    if (!plain) plain = content;
    else ok(content && content.length === plain.length && content.every((e, i) => e.token === plain[i].token &&
              close(e.logprob, plain[i].logprob) && e.top_logprobs.every((t, k) => close(t.logprob, plain[i].top_logprobs[k].logprob))),
            'rolling: logprobs differ from AR\'s');
    const st = await client.chat.completions.create({ model, messages, max_tokens: 24, logprobs: true, top_logprobs: 3, stream: true, ...mode });
    let joined = [];
    for await (const ch of st) if (ch.choices.length && ch.choices[0].logprobs) joined = joined.concat(ch.choices[0].logprobs.content);
    ok(JSON.stringify(joined) === JSON.stringify(content), `${what} streamed: ${joined.length} entries != the plain ${content && content.length}`);
  }
  // logprobs without alternatives
  const c0 = await client.chat.completions.create({ model, messages, max_tokens: 4, logprobs: true, mode: 'ar' });
  ok(c0.choices[0].logprobs.content.every(e => e.top_logprobs.length === 0) && c0.choices[0].logprobs.content.length === 4,
     'logprobs without top_logprobs: ' + JSON.stringify(c0.choices[0].logprobs));

  // ---- plan-and-infill and MDM: an entry per answer token, the answer unchanged, streamed alike ----
  for (const mode of [{ mode: 'refusion', rolling: false }, { mode: 'mdm' }]) {
    const what = mode.mode === 'mdm' ? 'mdm' : 'plan-and-infill';
    const a = await client.chat.completions.create({ model, messages, max_tokens: 16, ...mode });
    const c = await client.chat.completions.create({ model, messages, max_tokens: 16, logprobs: true, top_logprobs: 2, ...mode });
    const content = c.choices[0].logprobs && c.choices[0].logprobs.content;
    ok(c.choices[0].message.content === a.choices[0].message.content, `${what}: logprobs changed the answer`);
    ok(content && content.length > 0 && Buffer.concat(content.map(e => Buffer.from(e.bytes))).toString('utf8') === c.choices[0].message.content &&
       content.every(e => e.logprob <= 0 && e.top_logprobs.length === 2 && e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob),
       `${what}: ${JSON.stringify(content).slice(0, 300)}`);
    const st = await client.chat.completions.create({ model, messages, max_tokens: 16, logprobs: true, top_logprobs: 2, stream: true, ...mode });
    let joined = [];
    for await (const ch of st) if (ch.choices.length && ch.choices[0].logprobs) joined = joined.concat(ch.choices[0].logprobs.content);
    ok(JSON.stringify(joined) === JSON.stringify(content), `${what} streamed: ${joined.length} entries != the plain ${content && content.length}`);
  }

  // ---- llama-server's /completion n_probs -------------------------------------------------------
  const r = await fetch(process.env.BASE + '/completion', { method: 'POST', body: JSON.stringify({ prompt: cli.prompt_ids, n_predict: 24, mode: 'ar', n_probs: 3 }) });
  const nat = await r.json();
  const cpr = nat.completion_probabilities || [];
  ok(cpr.length === want.length && cpr.every((e, i) => e.id === want[i].token && close(e.logprob, want[i].logprob) && e.top_logprobs.length === 3),
     '/completion n_probs: ' + JSON.stringify(cpr).slice(0, 300));

  // ---- refusals -----------------------------------------------------------------------------------
  const refused = [
    ['top_logprobs without logprobs', { top_logprobs: 2, mode: 'ar' }, 'top_logprobs', null],
    ['top_logprobs 21', { logprobs: true, top_logprobs: 21, mode: 'ar' }, 'top_logprobs', null],
    ['logprobs 3 in chat', { logprobs: 3, mode: 'ar' }, 'logprobs', null],
  ];
  for (const [what, extra, param, code] of refused) {
    let e = null;
    try { await client.chat.completions.create({ model, messages, max_tokens: 4, ...extra }); } catch (x) { e = x; }
    ok(e && e.status === 400 && e.param === param && e.code === code, `${what}: ${e ? e.status + ' ' + e.param + ' ' + e.code + ' ' + e.message : 'accepted'}`);
  }
  console.log(`serve_logprobs (node): ${pass} passed, ${fails} failed`);
  process.exit(fails ? 1 : 0);
})().catch(e => { console.log('FAIL: ' + (e.stack || e)); process.exit(1); });
EOF
rf_serve_stop "$SPID" "$T/server.log" || fails=$((fails + 1))
SPID=""
echo "serve_logprobs: $pass passed, $fails failed"
[ "$fails" -eq 0 ]
