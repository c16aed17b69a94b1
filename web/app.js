// app.js - the chat page: streams answers from /v1/chat/completions and, with
// "live view", the decoder's events ("decode_events": true) as cells, one per
// answer position: mask, planned (a slot chosen, its draft), draft (infilling),
// verified (accepted by the AR check), committed (final).
'use strict';
const $ = (id) => document.getElementById(id);
const fields = ['slot_size', 'slot_threshold', 'token_threshold', 'temperature', 'max_tokens'];
let history = [], controller = null, key = localStorage.getItem('refusion-key') || '';

function headers() {
  const h = { 'Content-Type': 'application/json' };
  if (key) h.Authorization = 'Bearer ' + key;
  return h;
}

// ---- Markdown: fenced code, inline code, headings, lists, bold, italics, links as text
function escapeHtml(s) {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}
function inline(s) {
  return escapeHtml(s)
    .replace(/`([^`]+)`/g, '<code>$1</code>')
    .replace(/\*\*([^*]+)\*\*/g, '<b>$1</b>')
    .replace(/(^|[^*])\*([^*\s][^*]*)\*/g, '$1<i>$2</i>');
}
function markdown(text) {
  const out = [], lines = text.split('\n');
  let i = 0, list = null, para = [];
  const flush = () => {
    if (para.length) out.push('<p>' + para.map(inline).join('<br>') + '</p>');
    para = [];
    if (list) out.push('</' + list + '>');
    list = null;
  };
  while (i < lines.length) {
    const l = lines[i];
    const fence = l.match(/^```\s*([\w+-]*)/);
    if (fence) {
      flush();
      const code = [];
      for (i++; i < lines.length && !/^```/.test(lines[i]); i++) code.push(lines[i]);
      out.push('<pre><code class="lang-' + escapeHtml(fence[1]) + '">' + escapeHtml(code.join('\n')) + '</code></pre>');
      i++;
      continue;
    }
    const h = l.match(/^(#{1,6})\s+(.*)/), li = l.match(/^\s*(?:[-*]|(\d+)\.)\s+(.*)/);
    if (h) { flush(); out.push('<h' + h[1].length + '>' + inline(h[2]) + '</h' + h[1].length + '>'); }
    else if (li) {
      const kind = li[1] ? 'ol' : 'ul';
      if (para.length || list !== kind) { flush(); out.push('<' + kind + '>'); list = kind; }
      out.push('<li>' + inline(li[2]) + '</li>');
    } else if (!l.trim()) flush();
    else { if (list) flush(); para.push(l); }
    i++;
  }
  flush();
  return out.join('');
}

// ---- the live view
let cells = [];
function resetCells(n) {
  cells = [];
  pending = [];
  const box = $('cells');
  box.textContent = '';
  for (let p = 0; p < n; p++) {
    const c = document.createElement('span');
    c.className = 'cell mask';
    c.textContent = '\u00b7';
    c.title = 'position ' + p;
    box.appendChild(c);
    cells.push(c);
  }
}
function setCell(p, state, text) {
  while (p >= cells.length) resetCellsGrow();
  const c = cells[p];
  if (c.classList.contains('committed') && state !== 'mask') return;
  c.className = 'cell ' + state;
  if (text !== undefined) c.textContent = text.replace(/\n/g, '\u21b5').replace(/ /g, '\u2423') || '\u2205';
}
function resetCellsGrow() {
  const c = document.createElement('span');
  c.className = 'cell mask';
  c.textContent = '\u00b7';
  $('cells').appendChild(c);
  cells.push(c);
}
// Events are drawn one animation frame at a time (more per frame when they
// arrive faster than that), so that a state the decoder passes through in
// one network read - a slot planned, then committed - is seen.
let pending = [], drawing = false;
function queueDecodeEvent(ev) {
  pending.push(ev);
  if (!drawing) { drawing = true; requestAnimationFrame(drawEvents); }
}
function drawEvents() {
  const k = Math.max(1, Math.ceil(pending.length / 20));
  for (const ev of pending.splice(0, k)) applyDecodeEvent(ev);
  if (pending.length) requestAnimationFrame(drawEvents); else drawing = false;
}
function applyDecodeEvent(ev) {
  const n = ev.apos.length;
  for (let i = 0; i < n; i++) {
    const p = ev.apos[i], t = ev.text[i];
    switch (ev.kind) {
      case 'plan': setCell(p, 'planned', t); break;
      case 'infill_iter': setCell(p, ev.accepted[i] ? 'verified' : 'draft', t); break;
      case 'fast_commit': case 'infill_commit': case 'ar_token': setCell(p, 'committed', t); break;
      case 'drop': setCell(p, 'mask', '\u00b7'); break;
    }
  }
}

// ---- requests
function settings() {
  const body = { mode: $('mode').value, rolling: $('rolling').checked };
  for (const f of fields) {
    const v = $(f).value;
    if (v !== '') body[f] = f === 'slot_size' || f === 'max_tokens' ? parseInt(v, 10) : parseFloat(v);
  }
  if (body.mode !== 'refusion') delete body.rolling;
  return body;
}

function addMessage(role, text) {
  const d = document.createElement('div');
  d.className = 'msg ' + role;
  if (role === 'assistant') d.innerHTML = markdown(text); else d.textContent = text;
  $('log').appendChild(d);
  $('log').scrollTop = $('log').scrollHeight;
  return d;
}

async function send(text) {
  history.push({ role: 'user', content: text });
  addMessage('user', text);
  const out = addMessage('assistant', '');
  const body = { messages: history, stream: true, stream_options: { include_usage: true }, ...settings() };
  if ($('live').checked) body.decode_events = true;
  resetCells(body.max_tokens || 0);
  controller = new AbortController();
  $('stop').disabled = false;
  $('send').disabled = true;
  let answer = '';
  const t0 = performance.now();
  try {
    const r = await fetch('v1/chat/completions', { method: 'POST', headers: headers(), body: JSON.stringify(body), signal: controller.signal });
    if (r.status === 401) {
      key = prompt('This server needs an API key:') || '';
      localStorage.setItem('refusion-key', key);
      throw new Error('API key needed: send again');
    }
    if (!r.ok) throw new Error((await r.json()).error.message);
    const reader = r.body.getReader(), dec = new TextDecoder();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let k;
      while ((k = buf.indexOf('\n\n')) >= 0) {
        const block = buf.slice(0, k);
        buf = buf.slice(k + 2);
        let event = 'message', data = '';
        for (const line of block.split('\n')) {
          if (line.startsWith('event: ')) event = line.slice(7);
          else if (line.startsWith('data: ')) data += line.slice(6);
        }
        if (!data || data === '[DONE]') continue;
        const o = JSON.parse(data);
        if (event === 'decode') { queueDecodeEvent(o); continue; }
        if (o.error) throw new Error(o.error.message);
        if (o.choices && o.choices.length && o.choices[0].delta.content) {
          answer += o.choices[0].delta.content;
          out.innerHTML = markdown(answer);
          $('log').scrollTop = $('log').scrollHeight;
        }
        if (o.refusion) showStats(o.refusion, o.timings);
      }
    }
  } catch (e) {
    if (e.name === 'AbortError') out.dataset.stopped = '1';
    else { out.className = 'msg error'; out.textContent = String(e.message || e); }
  }
  history.push({ role: 'assistant', content: answer });
  $('rate').textContent = ((performance.now() - t0) / 1000).toFixed(1) + ' s';
  controller = null;
  $('stop').disabled = true;
  $('send').disabled = false;
}

function showStats(st, tm) {
  const tps = tm ? tm.predicted_per_second : st.tokens_per_s;
  $('stats').textContent = st.mode + ': ' + (tps || 0).toFixed(1) + ' tokens/s, ' + (st.tokens_per_call || 0).toFixed(2) +
    ' tokens per call, ' + st.model_calls + ' model calls, ' + st.steps + ' steps, seed ' + st.settings.seed;
}

async function loadProps() {
  const r = await fetch('props', { headers: headers() });
  if (!r.ok) return;
  const p = await r.json(), d = p.default_generation_settings.params;
  $('model').textContent = p.model_alias;
  $('mode').value = d.mode;
  $('rolling').checked = !!d.rolling;
  for (const f of fields) if (d[f] !== undefined) $(f).value = d[f];
}

$('form').addEventListener('submit', (e) => {
  e.preventDefault();
  const text = $('input').value.trim();
  if (!text || controller) return;
  $('input').value = '';
  send(text);
});
$('input').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey) { e.preventDefault(); $('form').requestSubmit(); }
});
$('stop').addEventListener('click', () => { if (controller) controller.abort(); });
$('reset').addEventListener('click', () => { history = []; $('log').textContent = ''; resetCells(0); });
loadProps();
