#!/usr/bin/env node
// Single-thread encode throughput of the reference, HF tokenizers (Rust) through the
// @anush008/tokenizers binding, on a text file: the peer figure for `hearth tokenize --bench`.
//
//   node tools/bench_tokenizer_reference.mjs <tokenizer.json> <text file> [rounds]
//
// One warm-up encode, then `rounds` timed encodes of the whole file (one call each, so the
// binding's per-call cost is negligible); prints the same JSON fields as hearth's --bench.
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(path.join(repo, 'tests', 'package.json'));
const { Tokenizer } = require('@anush008/tokenizers');

const [file, input, roundsArg] = process.argv.slice(2);
if (!file || !input) {
  console.error('usage: bench_tokenizer_reference.mjs <tokenizer.json> <text file> [rounds]');
  process.exit(2);
}
const rounds = Number(roundsArg ?? 5);
const tok = Tokenizer.fromFile(file);
const text = fs.readFileSync(input, 'utf8');
const bytes = Buffer.byteLength(text, 'utf8');
await tok.encode(text, null, { addSpecialTokens: false });
let tokens = 0;
const start = process.hrtime.bigint();
for (let i = 0; i < rounds; i++) {
  tokens += (await tok.encode(text, null, { addSpecialTokens: false })).getLength();
}
const seconds = Number(process.hrtime.bigint() - start) / 1e9;
console.log(JSON.stringify({
  rounds, bytes, tokens: tokens / rounds, seconds,
  mb_per_s: (bytes * rounds) / seconds / 1e6, tokens_per_s: tokens / seconds,
}));
