#!/usr/bin/env node
// compare.js - check `refusion tokenize --jsonl` answers against the
// expectations gen_cases.js wrote.
//   node compare.js CASES.jsonl ANSWERS.jsonl [--min N]
// Every key of a case's "expect" must equal the same key of the answer.
// Prints a summary and the first mismatches; exit status 1 on any mismatch
// or if fewer than N text cases were checked.
'use strict';
const fs = require('fs');

const [casesPath, answersPath, ...rest] = process.argv.slice(2);
const min = rest[0] === '--min' ? +rest[1] : 0;
const read = (p) => fs.readFileSync(p, 'utf8').split('\n').filter((l) => l.length).map((l) => JSON.parse(l));
const cases = read(casesPath), answers = read(answersPath);

const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
let nText = 0, nChat = 0, bad = 0;
const kinds = {};
if (answers.length !== cases.length) {
  console.error(`compare: ${cases.length} cases but ${answers.length} answers`);
  process.exit(1);
}
cases.forEach((c, i) => {
  const a = answers[i];
  if ('text' in c) nText++; else nChat++;
  for (const k of Object.keys(c.expect)) {
    if (same(c.expect[k], a[k])) continue;
    kinds[k] = (kinds[k] || 0) + 1;
    if (++bad > 12) continue;
    const input = 'text' in c ? c.text : c.messages;
    console.error(`MISMATCH case ${i} field "${k}"${a.error ? ' (error: ' + a.error + ')' : ''}`);
    console.error(`  input:    ${JSON.stringify(input).slice(0, 300)}`);
    if (k === 'ids' && Array.isArray(a.ids)) {
      const e = c.expect.ids;
      let j = 0;
      while (j < e.length && e[j] === a.ids[j]) j++;
      console.error(`  first difference at id ${j}: expected ${JSON.stringify(e.slice(j, j + 8))} got ${JSON.stringify(a.ids.slice(j, j + 8))}`);
    } else {
      console.error(`  expected: ${JSON.stringify(c.expect[k]).slice(0, 300)}`);
      console.error(`  got:      ${JSON.stringify(a[k]).slice(0, 300)}`);
    }
  }
});
console.log(`compare: ${nText} text cases, ${nChat} chat cases, ${bad} mismatches` +
  (bad ? ' ' + JSON.stringify(kinds) : ''));
if (nText < min) {
  console.error(`compare: only ${nText} text cases, need at least ${min}`);
  process.exit(1);
}
process.exit(bad ? 1 : 0);
