// check_gguf.mjs - read a GGUF file written by `refusion convert` with an
// independent reader (the npm package @huggingface/gguf) and check it
// against what the source checkpoint says it must hold, computed here from
// the source's config.json, tokenizer.json, tokenizer_config.json and
// model.safetensors (never from our GGUF code):
//   - every metadata key: present, of the right GGUF type, with the right
//     value; no key that is not expected;
//   - every tensor: llama.cpp's name, ggml type, shape (ne[0] innermost),
//     offset (32-aligned, packed in order, inside the file);
//   - every tensor's bytes: float types equal to the source weights; Q8_0 and
//     Q4_0 blocks equal to ggml's reference quantiser (quantize_row_q8_0_ref,
//     quantize_row_q4_0_ref) re-implemented here (a Q4_0 file's Q6_K output
//     matrix: its type and size only).
// usage: node check_gguf.mjs NPM_PREFIX FILE.gguf SOURCE_DIR DTYPE NAME
// Prints one line per problem and exits 1, or "ok ..." and exits 0.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const [prefix, file, srcDir, dtype, name] = process.argv.slice(2);
const require = createRequire(path.join(prefix, "node_modules", "x.js"));
const { gguf } = require("@huggingface/gguf");

const problems = [];
const bad = (msg) => { if (problems.length < 40) problems.push(msg); };

// ---- the expectation, from the source checkpoint -------------------------------
const cfg = JSON.parse(fs.readFileSync(path.join(srcDir, "config.json"), "utf8"));
const tokJson = JSON.parse(fs.readFileSync(path.join(srcDir, "tokenizer.json"), "utf8"));
const tokCfg = JSON.parse(fs.readFileSync(path.join(srcDir, "tokenizer_config.json"), "utf8"));
const T = { UINT32: 4, INT32: 5, FLOAT32: 6, BOOL: 7, STRING: 8, ARRAY: 9 };
const FILE_TYPE = { f32: 0, f16: 1, q4_0: 2, q8_0: 7, bf16: 32 };
const GGML = { f32: 0, f16: 1, q4_0: 2, q8_0: 8, bf16: 30 };
const V = cfg.vocab_size, L = cfg.num_hidden_layers, d = cfg.hidden_size, hd = cfg.head_dim;
const tied = cfg.tie_word_embeddings === true;

const expectKV = new Map();
const kv = (key, type, value, subType) => expectKV.set(key, { type, value, subType });
kv("general.architecture", T.STRING, "qwen3");
kv("general.name", T.STRING, name);
kv("general.file_type", T.UINT32, FILE_TYPE[dtype]);
kv("general.quantization_version", T.UINT32, 2);
kv("qwen3.block_count", T.UINT32, L);
kv("qwen3.context_length", T.UINT32, cfg.max_position_embeddings);
kv("qwen3.embedding_length", T.UINT32, d);
kv("qwen3.feed_forward_length", T.UINT32, cfg.intermediate_size);
kv("qwen3.attention.head_count", T.UINT32, cfg.num_attention_heads);
kv("qwen3.attention.head_count_kv", T.UINT32, cfg.num_key_value_heads);
kv("qwen3.rope.freq_base", T.FLOAT32, Math.fround(cfg.rope_theta));
kv("qwen3.attention.layer_norm_rms_epsilon", T.FLOAT32, Math.fround(cfg.rms_norm_eps));
kv("qwen3.attention.key_length", T.UINT32, hd);
kv("qwen3.attention.value_length", T.UINT32, hd);
const firstId = (v) => Array.isArray(v) ? v[0] : v;
if (cfg.bos_token_id != null) kv("tokenizer.ggml.bos_token_id", T.UINT32, firstId(cfg.bos_token_id));
if (cfg.eos_token_id != null) kv("tokenizer.ggml.eos_token_id", T.UINT32, firstId(cfg.eos_token_id));
if (cfg.pad_token_id != null) kv("tokenizer.ggml.padding_token_id", T.UINT32, cfg.pad_token_id);
kv("refusion.mask_token_id", T.UINT32, cfg.mask_token_id);
if (cfg.bot_token_id != null) kv("refusion.bot_token_id", T.UINT32, cfg.bot_token_id);
kv("tokenizer.ggml.model", T.STRING, "gpt2");
kv("tokenizer.ggml.pre", T.STRING, "qwen2");
// the vocabulary as llama.cpp's converter lays it out: ids the tokenizer
// lacks become "[PAD<id>]" of type UNUSED (5); added tokens are CONTROL (3)
// when special, else USER_DEFINED (4); the rest NORMAL (1)
const tokens = new Array(V).fill(null), types = new Array(V).fill(1);
for (const [s, id] of Object.entries(tokJson.model.vocab)) tokens[id] = s;
for (const a of tokJson.added_tokens) { tokens[a.id] = a.content; types[a.id] = a.special ? 3 : 4; }
for (let i = 0; i < V; i++) if (tokens[i] === null) { tokens[i] = `[PAD${i}]`; types[i] = 5; }
kv("tokenizer.ggml.tokens", T.ARRAY, tokens, T.STRING);
kv("tokenizer.ggml.token_type", T.ARRAY, types, T.INT32);
kv("tokenizer.ggml.merges", T.ARRAY, tokJson.model.merges.map((m) => Array.isArray(m) ? m.join(" ") : m), T.STRING);
kv("tokenizer.ggml.add_bos_token", T.BOOL, false);
if (tokCfg.chat_template) kv("tokenizer.chat_template", T.STRING, tokCfg.chat_template);

// tensors, in the converter's order, with ne = [cols, rows]
const quant = dtype === "q8_0" || dtype === "q4_0";
const expectT = [];
const mat = (hf, gg, rows, cols, isOutput) => {
    let ty = GGML[dtype];
    // llama-quantize's Q4_0: the output matrix in Q6_K (its bytes are
    // compared with llama-quantize's in tests/gguf_kquant.sh, not here)
    if (dtype === "q4_0" && isOutput) ty = 14;
    expectT.push({ hf, name: gg, shape: [cols, rows], type: ty });
};
const vec = (hf, gg, n) => expectT.push({ hf, name: gg, shape: [n], type: GGML.f32 });
mat("model.embed_tokens.weight", "token_embd.weight", V, d, tied);
const q = cfg.num_attention_heads * hd, kvd = cfg.num_key_value_heads * hd, ffn = cfg.intermediate_size;
for (let l = 0; l < L; l++) {
    const p = `model.layers.${l}.`, b = `blk.${l}.`;
    vec(p + "input_layernorm.weight", b + "attn_norm.weight", d);
    mat(p + "self_attn.q_proj.weight", b + "attn_q.weight", q, d);
    mat(p + "self_attn.k_proj.weight", b + "attn_k.weight", kvd, d);
    mat(p + "self_attn.v_proj.weight", b + "attn_v.weight", kvd, d);
    mat(p + "self_attn.o_proj.weight", b + "attn_output.weight", d, q);
    vec(p + "self_attn.q_norm.weight", b + "attn_q_norm.weight", hd);
    vec(p + "self_attn.k_norm.weight", b + "attn_k_norm.weight", hd);
    vec(p + "post_attention_layernorm.weight", b + "ffn_norm.weight", d);
    mat(p + "mlp.gate_proj.weight", b + "ffn_gate.weight", ffn, d);
    mat(p + "mlp.up_proj.weight", b + "ffn_up.weight", ffn, d);
    mat(p + "mlp.down_proj.weight", b + "ffn_down.weight", d, ffn);
}
vec("model.norm.weight", "output_norm.weight", d);
if (!tied) mat("lm_head.weight", "output.weight", V, d, true);

// ---- what the independent reader finds -----------------------------------------
const r = await gguf(file, { allowLocalFile: true, typedMetadata: true });
const got = r.typedMetadata;
const same = (a, b) => typeof a === "bigint" || typeof b === "bigint" ? BigInt(a) === BigInt(b) : a === b;
for (const [key, e] of expectKV) {
    const g = got[key];
    if (!g) { bad(`metadata ${key}: missing`); continue; }
    if (g.type !== e.type) { bad(`metadata ${key}: type ${g.type}, want ${e.type}`); continue; }
    if (e.type === T.ARRAY) {
        if (g.subType !== e.subType) bad(`metadata ${key}: element type ${g.subType}, want ${e.subType}`);
        if (g.value.length !== e.value.length) { bad(`metadata ${key}: ${g.value.length} elements, want ${e.value.length}`); continue; }
        const i = e.value.findIndex((v, i) => !same(g.value[i], v));
        if (i >= 0) bad(`metadata ${key}[${i}]: ${JSON.stringify(g.value[i])}, want ${JSON.stringify(e.value[i])}`);
    } else if (!same(g.value, e.value)) {
        bad(`metadata ${key}: ${JSON.stringify(String(g.value)).slice(0, 80)}, want ${JSON.stringify(String(e.value)).slice(0, 80)}`);
    }
}
for (const key of Object.keys(got))
    if (!["version", "tensor_count", "kv_count"].includes(key) && !expectKV.has(key)) bad(`metadata ${key}: not expected`);
if (Number(got.version.value) !== 3) bad(`GGUF version ${got.version.value}`);
if (Number(got.kv_count.value) !== expectKV.size) bad(`kv_count ${got.kv_count.value}, want ${expectKV.size}`);
if (r.tensorInfos.length !== expectT.length) bad(`${r.tensorInfos.length} tensors, want ${expectT.length}`);

// ---- tensors: names, types, shapes, offsets, bytes ------------------------------
const buf = fs.readFileSync(file);
const st = fs.readFileSync(path.join(srcDir, "model.safetensors"));
const stLen = Number(st.readBigUInt64LE(0));
const stHdr = JSON.parse(st.subarray(8, 8 + stLen).toString("utf8"));
const stData = 8 + stLen;
const srcFloats = (hf) => { // the source tensor as f32 values (bf16/f16/f32 safetensors)
    const h = stHdr[hf], [b, e] = h.data_offsets, raw = st.subarray(stData + b, stData + e);
    const n = h.dtype === "F32" ? raw.length / 4 : raw.length / 2, out = new Float32Array(n);
    for (let i = 0; i < n; i++) {
        if (h.dtype === "F32") out[i] = raw.readFloatLE(4 * i);
        else if (h.dtype === "BF16") out[i] = new Float32Array(new Uint32Array([raw.readUInt16LE(2 * i) << 16]).buffer)[0];
        else out[i] = f16ToF32(raw.readUInt16LE(2 * i));
    }
    return { dtype: h.dtype, raw, values: out };
};
function f16ToF32(h) {
    const s = h & 0x8000 ? -1 : 1, e = (h >> 10) & 31, m = h & 1023;
    if (e === 0) return s * m * 2 ** -24;
    if (e === 31) return m ? NaN : s * Infinity;
    return s * (1 + m / 1024) * 2 ** (e - 15);
}
function f32ToF16(x) { // round to nearest even, as _cvtss_sh / ggml's GGML_FP32_TO_FP16
    x = Math.fround(x);
    const s = x < 0 || Object.is(x, -0) ? 0x8000 : 0, a = Math.abs(x);
    if (Number.isNaN(a)) return 0x7e00;
    if (a >= 65520) return s | 0x7c00;
    if (a < 2 ** -14) return s | roundEven(a / 2 ** -24); // subnormal (1024 -> the smallest normal)
    let e = Math.floor(Math.log2(a));
    if (2 ** e > a) e--; else if (2 ** (e + 1) <= a) e++;
    let mant = roundEven((a / 2 ** e - 1) * 1024), ee = e + 15;
    if (mant === 1024) { mant = 0; ee++; }
    return ee >= 31 ? s | 0x7c00 : s | (ee << 10) | mant;
}
function roundEven(v) {
    const f = Math.floor(v), rem = v - f;
    return f + (rem > 0.5 || (rem === 0.5 && (f & 1)) ? 1 : 0);
}
const roundf = (v) => Math.sign(v) * Math.floor(Math.abs(v) + 0.5); // C roundf: half away from zero

const TYPE_SIZE = { 0: [1, 4], 1: [1, 2], 30: [1, 2], 8: [32, 34], 2: [32, 18], 14: [256, 210] };
const dataStart = Number(r.tensorDataOffset);
if (dataStart % 32) bad(`data section starts at ${dataStart}, not 32-aligned`);
let expectOffset = 0, checkedBlocks = 0;
for (let i = 0; i < expectT.length && i < r.tensorInfos.length; i++) {
    const e = expectT[i], g = r.tensorInfos[i];
    const shape = g.shape.map(Number);
    if (g.name !== e.name) { bad(`tensor ${i}: ${g.name}, want ${e.name}`); continue; }
    if (g.dtype !== e.type) bad(`${e.name}: ggml type ${g.dtype}, want ${e.type}`);
    if (JSON.stringify(shape) !== JSON.stringify(e.shape)) bad(`${e.name}: shape ${JSON.stringify(shape)}, want ${JSON.stringify(e.shape)}`);
    const off = Number(g.offset);
    if (off !== expectOffset) bad(`${e.name}: offset ${off}, want ${expectOffset} (32-aligned, packed in order)`);
    const [bs, bb] = TYPE_SIZE[e.type], n = shape.reduce((a, b) => a * b, 1), nbytes = n / bs * bb;
    expectOffset = Math.ceil((off + nbytes) / 32) * 32;
    if (dataStart + off + nbytes > buf.length) { bad(`${e.name}: bytes run past the end of the file`); continue; }
    const bytes = buf.subarray(dataStart + off, dataStart + off + nbytes);
    const src = srcFloats(e.hf);
    if (src.values.length !== n) { bad(`${e.name}: ${n} elements, the source has ${src.values.length}`); continue; }
    let mismatch = -1;
    if (e.type === GGML.bf16 && src.dtype === "BF16") mismatch = Buffer.compare(bytes, src.raw) ? 0 : -1;
    else if (e.type === GGML.f32) { for (let k = 0; k < n && mismatch < 0; k++) if (bytes.readFloatLE(4 * k) !== src.values[k]) mismatch = k; }
    else if (e.type === GGML.f16) { for (let k = 0; k < n && mismatch < 0; k++) if (bytes.readUInt16LE(2 * k) !== f32ToF16(src.values[k])) mismatch = k; }
    else if (e.type === GGML.bf16) { for (let k = 0; k < n && mismatch < 0; k++) if (bytes.readUInt16LE(2 * k) !== (new Uint32Array(new Float32Array([src.values[k]]).buffer)[0] >>> 16)) mismatch = k; }
    else if (e.type === GGML.q8_0) { // ggml quantize_row_q8_0_ref
        for (let b = 0; b < n / 32 && mismatch < 0; b++) {
            const x = src.values.subarray(32 * b, 32 * b + 32);
            let amax = 0;
            for (const v of x) amax = Math.max(amax, Math.abs(v));
            const dd = Math.fround(amax / 127), id = dd ? Math.fround(1 / dd) : 0;
            if (bytes.readUInt16LE(34 * b) !== f32ToF16(dd)) mismatch = 32 * b;
            for (let j = 0; j < 32 && mismatch < 0; j++)
                if (bytes.readInt8(34 * b + 2 + j) !== roundf(Math.fround(x[j] * id))) mismatch = 32 * b + j;
            checkedBlocks++;
        }
    } else if (e.type === GGML.q4_0) { // ggml quantize_row_q4_0_ref
        for (let b = 0; b < n / 32 && mismatch < 0; b++) {
            const x = src.values.subarray(32 * b, 32 * b + 32);
            let amax = 0, max = 0;
            for (const v of x) if (Math.abs(v) > amax) { amax = Math.abs(v); max = v; }
            const dd = Math.fround(max / -8), id = dd ? Math.fround(1 / dd) : 0;
            if (bytes.readUInt16LE(18 * b) !== f32ToF16(dd)) mismatch = 32 * b;
            for (let j = 0; j < 16 && mismatch < 0; j++) {
                const q0 = Math.min(15, Math.trunc(Math.fround(Math.fround(x[j] * id) + 8.5)));
                const q1 = Math.min(15, Math.trunc(Math.fround(Math.fround(x[j + 16] * id) + 8.5)));
                if (bytes[18 * b + 2 + j] !== (q0 | (q1 << 4))) mismatch = 32 * b + j;
            }
            checkedBlocks++;
        }
    }
    if (mismatch >= 0) bad(`${e.name}: data differs from the source at element ${mismatch}`);
}
const lastEnd = r.tensorInfos.length ? dataStart + Number(r.tensorInfos.at(-1).offset) : 0;
if (problems.length) {
    for (const p of problems) console.log(`check_gguf: ${file}: ${p}`);
    process.exit(1);
}
console.log(`ok ${path.basename(file)}: ${expectKV.size} metadata keys, ${expectT.length} tensors, ` +
            `${quant ? checkedBlocks + " blocks re-quantised, " : ""}data from byte ${dataStart} (last tensor at ${lastEnd}, file ${buf.length})`);
