// llamacpp.mjs - llama.cpp (through the npm package node-llama-cpp, which
// ships prebuilt llama.cpp binaries) on a GGUF file:
//   node llamacpp.mjs logits NPM_PREFIX MODEL.gguf "ID ID ..." N
//     prints {"greedy": [N argmax ids], "logits": [N rows of vocab floats]}
//     as `refusion logits` does: row k predicts token k of the continuation.
//   node llamacpp.mjs tokenize NPM_PREFIX MODEL.gguf TEXT_FILE
//     llama.cpp's token ids of each line of TEXT_FILE (special tokens parsed),
//     one line of space-separated ids per input line
//   node llamacpp.mjs bench NPM_PREFIX MODEL.gguf "ID ID ..." N THREADS
//     greedy AR decode of N tokens after the prompt; prints
//     {"prompt_s", "decode_s", "tokens", "tokens_per_s", "total_tokens_per_s"}
//     (tokens_per_s: decode only; total: prompt prefill included).
//   node llamacpp.mjs prefill NPM_PREFIX MODEL.gguf "ID ID ..." REPS THREADS
//     the prompt fed into an empty context REPS times (the cache cleared in
//     between; llama.cpp computes the last token's logits only); prints
//     {"tokens", "seconds": [each rep's wall time]}
//   node llamacpp.mjs batch NPM_PREFIX MODEL.gguf SEQS N THREADS [REQS]
//     SEQS sequences of one context decoding at once (llama.cpp batches
//     their tokens into shared calls), each REQS (default 2) requests one
//     after the other: a 16-token prompt of its own, then N greedy tokens;
//     (EOS ignored: decoding goes on past it, as ignore_eos);
//     prints {"seqs", "tokens", "wall_s", "tokens_per_s"} (aggregate: all
//     answer tokens over the wall time, prefills included), the requests of
//     scripts/bench_batch.sh.
// CPU only (gpu: false), never builds or downloads anything.
import path from "node:path";
import { pathToFileURL } from "node:url";

const [mode, prefix, modelPath, idsArg, nArg, threadsArg] = process.argv.slice(2);
const lib = await import(pathToFileURL(path.join(prefix, "node_modules/node-llama-cpp/dist/index.js")).href);
const llama = await lib.getLlama({ gpu: false, build: "never", logLevel: lib.LlamaLogLevel.error,
                                   maxThreads: threadsArg ? Number(threadsArg) : 0 });
const model = await llama.loadModel({ modelPath });
if (mode === "tokenize") {
    const fs = await import("node:fs");
    const lines = fs.readFileSync(idsArg, "utf8").split("\n").filter((l) => l.length);
    for (const l of lines) process.stdout.write(model.tokenize(l, true).join(" ") + "\n");
    await model.dispose();
    await llama.dispose();
    process.exit(0);
}
if (mode === "batch") {
    const seqs = Number(idsArg), N = Number(nArg), threads = Number(threadsArg);
    const reqs = Number(process.argv[8] ?? 2);
    const context = await model.createContext({ contextSize: 128 * seqs, sequences: seqs, batchSize: 512,
                                                threads: { ideal: threads, min: threads } });
    const client = async (c) => {
        const seq = context.getSequence();
        let n = 0;
        for (let i = 0; i < reqs; i++) {
            await seq.clearHistory();
            const prompt = Array.from({ length: 16 }, (_, k) => (c * 131 + i * 17 + k * 7) % 800 + 10);
            let got = 0;
            for await (const tok of seq.evaluate(prompt, { temperature: 0, yieldEogToken: true })) {
                if (++got >= N) break;
            }
            n += got;
        }
        seq.dispose();
        return n;
    };
    const t0 = performance.now();
    const counts = await Promise.all(Array.from({ length: seqs }, (_, c) => client(c)));
    const wall_s = (performance.now() - t0) / 1000;
    const tokens = counts.reduce((a, b) => a + b, 0);
    process.stdout.write(JSON.stringify({ seqs, tokens, wall_s, tokens_per_s: tokens / wall_s }) + "\n");
    await context.dispose();
    await model.dispose();
    await llama.dispose();
    process.exit(0);
}
const ids = idsArg.trim().split(/[ ,]+/).map(Number);
const N = Number(nArg);
const threads = threadsArg ? Number(threadsArg) : 2;
const context = await model.createContext({ contextSize: Math.max(256, ids.length + N + 8), batchSize: 512,
                                            threads: { ideal: threads, min: threads } });
const seq = context.getSequence();
const nVocab = model.tokens.size ?? model.fileInsights?.tensorInfo?.find(t => t.name === "token_embd.weight")?.dims[1];

if (mode === "logits") {
    const greedy = [], rows = [];
    let input = ids;
    for (let k = 0; k < N; k++) {
        // logits of the last token fed; the others only fill the cache
        const items = input.map((t, i) => i === input.length - 1 ? [t, { generateNext: { logits: true } }] : t);
        const res = await seq.controlledEvaluate(items);
        const m = res[res.length - 1].next.logits; // Map token -> logit
        const row = new Array(m.size);
        for (const [tok, v] of m) row[tok] = v;
        let best = 0;
        for (let j = 1; j < row.length; j++) if (row[j] > row[best]) best = j;
        greedy.push(best);
        rows.push(row);
        input = [best];
    }
    process.stdout.write(JSON.stringify({ greedy, logits: rows }) + "\n");
} else if (mode === "bench") {
    // prompt, then one token per call: llama.cpp's own evaluate loop (greedy)
    const t0 = performance.now();
    await seq.evaluateWithoutGeneratingNewTokens(ids.slice(0, -1));
    const t1 = performance.now();
    let n = 0;
    const it = seq.evaluate(ids.slice(-1), { temperature: 0 });
    for await (const tok of it) {
        if (++n >= N) break;
    }
    const t2 = performance.now();
    const decode_s = (t2 - t1) / 1000;
    process.stdout.write(JSON.stringify({ prompt_s: (t1 - t0) / 1000, decode_s, tokens: n,
                                          tokens_per_s: n / decode_s,
                                          total_tokens_per_s: n / ((t2 - t0) / 1000) }) + "\n");
} else if (mode === "prefill") {
    const seconds = [];
    for (let r = 0; r < N; r++) {
        await seq.clearHistory();
        const t0 = performance.now();
        await seq.evaluateWithoutGeneratingNewTokens(ids);
        seconds.push((performance.now() - t0) / 1000);
    }
    process.stdout.write(JSON.stringify({ tokens: ids.length, seconds }) + "\n");
} else {
    console.error("usage: node llamacpp.mjs logits|bench|prefill NPM_PREFIX MODEL.gguf IDS N [THREADS]");
    process.exit(2);
}
await context.dispose();
await model.dispose();
await llama.dispose();
