#!/usr/bin/env bash
# serve_webui.sh - the web page at / in a real browser: Debian's chromium,
# headless, driven by npm puppeteer-core (scripts/serve/fetch_puppeteer.sh),
# against `refusion serve` on the demo model:
#  - the page loads with no console errors and its settings show the
#    server's defaults from /props;
#  - changed settings (plan-and-infill, max tokens, temperature) are what the
#    request sends;
#  - a prompt typed into the textarea and sent with Enter gets the streamed
#    answer, rendered, equal to the API's answer for the same settings;
#  - the live view's cells change state while it decodes (planned or draft
#    cells beside committed ones, then all committed);
#  - a second turn sends the history (multi-turn);
#  - the stop button stops a long answer (the server counts it cancelled);
#  - a screenshot is kept in the build folder (serve_webui.png).
# Skipped (exit 77) only when chromium or puppeteer-core cannot be had.
set -u
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup serve_webui
CHROME=$(command -v chromium || command -v chromium-browser || true)
[ -n "$CHROME" ] || { echo "serve_webui: SKIPPED: chromium is not installed (apt-get install chromium)"; exit 77; }
PKG=$(bash "$SRC/scripts/serve/fetch_puppeteer.sh") || {
  echo "serve_webui: SKIPPED: the puppeteer-core npm package could not be installed"; exit 77; }
SHOT=$(dirname "$BIN")/serve_webui.png

# --ignore-eos: every answer runs to max_tokens, so the one to stop is long
rf_serve_start "$T/server.log" -m "$SRC/models/refusion-demo" --parallel 2 --threads 1 -n 48 --ignore-eos
PUPPETEER=$PKG CHROME=$CHROME BASE=$URL SHOT=$SHOT timeout 300 node - <<'EOF_JS'
const puppeteer = require(process.env.PUPPETEER);
const base = process.env.BASE;
let fails = 0, pass = 0;
const ok = (c, m) => { if (c) pass++; else { fails++; console.log('FAIL: ' + m); } };
const Q = 'Tom has 12 apples. He buys 7 more. How many apples does he have now?';
const settings = { mode: 'refusion', rolling: false, slot_size: 4, slot_threshold: 0.5, token_threshold: 0.4, temperature: 0, max_tokens: 40 };

(async () => {
  const browser = await puppeteer.launch({ executablePath: process.env.CHROME, headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
  const page = await browser.newPage();
  await page.setViewport({ width: 1200, height: 800 });
  const errors = [], bodies = [];
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('request', (r) => { if (r.url().endsWith('/v1/chat/completions')) bodies.push(JSON.parse(r.postData())); });
  await page.goto(base + '/', { waitUntil: 'networkidle0' });
  const props = await (await fetch(base + '/props')).json();
  const d = props.default_generation_settings.params;
  const shown = await page.evaluate(() => ({ model: document.getElementById('model').textContent,
    mode: document.getElementById('mode').value, slot: document.getElementById('slot_size').value,
    max: document.getElementById('max_tokens').value }));
  ok(shown.model === props.model_alias && shown.mode === d.mode && +shown.slot === d.slot_size && +shown.max === d.max_tokens,
     'settings from /props: ' + JSON.stringify(shown) + ' vs ' + JSON.stringify(d));

  // the settings panel
  await page.select('#mode', settings.mode);
  await page.evaluate((s) => {
    document.getElementById('rolling').checked = s.rolling;
    for (const k of ['slot_size', 'slot_threshold', 'token_threshold', 'temperature', 'max_tokens'])
      document.getElementById(k).value = String(s[k]);
  }, settings);
  // watch the cells' classes as the page changes them
  await page.evaluate(() => {
    window.seen = new Set(); window.mixed = false;
    new MutationObserver(() => {
      const cls = [...document.querySelectorAll('#cells .cell')].map((c) => c.className.split(' ')[1]);
      cls.forEach((c) => window.seen.add(c));
      if (cls.includes('committed') && (cls.includes('planned') || cls.includes('draft') || cls.includes('verified'))) window.mixed = true;
    }).observe(document.getElementById('cells'), { subtree: true, attributes: true, childList: true });
  });
  await page.type('#input', Q);
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => !document.getElementById('send').disabled && document.querySelector('.msg.assistant'), { timeout: 120000 });
  const answer = await page.evaluate(() => document.querySelector('.msg.assistant').textContent);
  const b0 = bodies[0] || {};
  ok(b0.stream === true && b0.decode_events === true && b0.mode === 'refusion' && b0.rolling === false &&
     b0.max_tokens === 40 && b0.temperature === 0 && b0.slot_size === 4, 'the request carries the settings: ' + JSON.stringify(b0));
  const api = await (await fetch(base + '/v1/chat/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ messages: [{ role: 'user', content: Q }], ...settings }) })).json();
  const want = api.choices[0].message.content;
  ok(answer.replace(/\s+/g, ' ').trim() === want.replace(/\s+/g, ' ').trim() && want.length > 0,
     'streamed answer ' + JSON.stringify(answer) + ' != API ' + JSON.stringify(want));
  const live = await page.evaluate(() => ({ seen: [...window.seen], mixed: window.mixed,
    cells: document.querySelectorAll('#cells .cell').length,
    committed: document.querySelectorAll('#cells .cell.committed').length }));
  ok(live.mixed && live.seen.includes('committed') && (live.seen.includes('planned') || live.seen.includes('draft')),
     'the live view changed state while decoding: ' + JSON.stringify(live));
  ok(live.cells >= 40 && live.committed > 0, 'cells: ' + JSON.stringify(live));
  const stats = await page.evaluate(() => document.getElementById('stats').textContent);
  ok(/tokens\/s/.test(stats) && /tokens per call/.test(stats), 'stats line: ' + stats);
  await new Promise((r) => setTimeout(r, 1500)); // the live view's last frames
  await page.screenshot({ path: process.env.SHOT });

  // a second turn: the history goes with it
  await page.type('#input', 'And 3 more?');
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => document.querySelectorAll('.msg.assistant').length === 2 && !document.getElementById('send').disabled, { timeout: 120000 });
  const b1 = bodies[1] || { messages: [] };
  ok(b1.messages.length === 3 && b1.messages[1].role === 'assistant' && b1.messages[2].content === 'And 3 more?', 'multi-turn: ' + JSON.stringify(b1.messages));

  // the stop button
  const metric = async () => +(/refusion_requests_cancelled_total (\d+)/.exec(await (await fetch(base + '/metrics')).text())[1]);
  const before = await metric();
  // MDM over 1500 positions: a full pass per step, long enough to stop
  await page.select('#mode', 'mdm');
  await page.evaluate(() => { document.getElementById('max_tokens').value = '1500'; });
  await page.click('#reset');
  await page.type('#input', 'Write a very long story about apples.');
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => !document.getElementById('stop').disabled, { timeout: 10000 });
  await new Promise((r) => setTimeout(r, 1000));
  ok(await page.evaluate(() => !document.getElementById('stop').disabled), 'the long answer ran for a second');
  await page.click('#stop');
  await page.waitForFunction(() => !document.getElementById('send').disabled, { timeout: 10000 });
  let after = before;
  for (let i = 0; i < 100 && after === before; i++) { await new Promise((r) => setTimeout(r, 100)); after = await metric(); }
  const stopped = await page.evaluate(() => document.querySelector('.msg.assistant').dataset.stopped === '1');
  ok(stopped && after === before + 1, `stop: the page stopped (${stopped}), cancelled ${before} -> ${after}`);
  ok(errors.length === 0, 'console errors: ' + JSON.stringify(errors));
  await browser.close();
  console.log(`serve_webui: ${pass} passed, ${fails} failed`);
  process.exit(fails ? 1 : 0);
})().catch((e) => { console.log('FAIL: ' + (e.stack || e)); process.exit(1); });
EOF_JS
rc=$?
rf_serve_stop "$SPID" "$T/server.log" || rc=1
SPID=""
exit $rc
