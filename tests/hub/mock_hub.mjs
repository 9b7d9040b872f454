// A local stand-in for the Hugging Face Hub, for hearth's hub tests: real HTTP on
// loopback with the API listing, /resolve/ (302 to a CDN host for LFS files, X-Repo-Commit,
// X-Linked-Etag, X-Linked-Size, ETag, Range) and fault injection. Never the real Hub.
//
// node mock_hub.mjs [--head v1|v2] [--log FILE] [--token T] [--fault SPEC]...
//   prints "listening <port>" once ready. Faults (FILE is a repo path or "api"):
//   drop:FILE:BYTES[:TIMES]   send BYTES of the body, then cut the connection
//   badsha:FILE               serve the file with one byte flipped
//   429:FILE:TIMES:SECONDS    answer 429 with Retry-After: SECONDS
//   500:FILE:TIMES            answer 500
//   norange:FILE              ignore Range headers (always 200, whole body)
//   slow:FILE:MS              pause MS milliseconds between 16 KiB chunks
import { createServer } from "node:http";
import { createHash } from "node:crypto";
import { appendFileSync } from "node:fs";

const args = process.argv.slice(2);
const opt = { head: "v1", log: null, token: null, faults: [] };
for (let i = 0; i < args.length; i++) {
  const a = args[i];
  if (a === "--head") opt.head = args[++i];
  else if (a === "--log") opt.log = args[++i];
  else if (a === "--token") opt.token = args[++i];
  else if (a === "--fault") {
    const [kind, file, x, y] = args[++i].split(":");
    opt.faults.push({ kind, file, x: x === undefined ? undefined : Number(x), y: y === undefined ? undefined : Number(y), used: 0 });
  } else throw new Error(`unknown argument ${a}`);
}

const sha1 = (b) => createHash("sha1").update(b).digest("hex");
const sha256 = (b) => createHash("sha256").update(b).digest("hex");
const gitBlobId = (b) => sha1(Buffer.concat([Buffer.from(`blob ${b.length}\0`), b]));

// Deterministic bytes (an LCG), so every run serves the same files.
function bytes(n, seed) {
  const out = Buffer.alloc(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) { s = (Math.imul(s, 1664525) + 1013904223) >>> 0; out[i] = s >>> 24; }
  return out;
}

// A safetensors file: u64 LE header length, JSON header, then the tensor bytes.
const DTYPE_BYTES = { BF16: 2, F16: 2, F32: 4, U32: 4 };
function safetensors(tensors, seed) {
  const header = { __metadata__: { format: "pt" } };
  let offset = 0;
  for (const [name, dtype, shape] of tensors) {
    const n = shape.reduce((a, b) => a * b, 1) * DTYPE_BYTES[dtype];
    header[name] = { dtype, shape, data_offsets: [offset, offset + n] };
    offset += n;
  }
  let json = JSON.stringify(header);
  while ((8 + json.length) % 8 !== 0) json += " ";
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(json.length));
  return Buffer.concat([len, Buffer.from(json), bytes(offset, seed)]);
}

function llamaLayer(i, h, kv, ffn) {
  const p = `model.layers.${i}.`;
  return [
    [p + "self_attn.q_proj.weight", "BF16", [h, h]], [p + "self_attn.k_proj.weight", "BF16", [kv, h]],
    [p + "self_attn.v_proj.weight", "BF16", [kv, h]], [p + "self_attn.o_proj.weight", "BF16", [h, h]],
    [p + "mlp.gate_proj.weight", "BF16", [ffn, h]], [p + "mlp.up_proj.weight", "BF16", [ffn, h]],
    [p + "mlp.down_proj.weight", "BF16", [h, ffn]],
    [p + "input_layernorm.weight", "BF16", [h]], [p + "post_attention_layernorm.weight", "BF16", [h]],
  ];
}

const json = (o) => Buffer.from(JSON.stringify(o, null, 2) + "\n");

function tinyLlama(version) {
  const config = {
    architectures: ["LlamaForCausalLM"], model_type: "llama", hidden_size: 64,
    intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2,
    vocab_size: 1000, max_position_embeddings: 4096, rms_norm_eps: 1e-5, torch_dtype: "bfloat16",
    rope_theta: 10000.0, tie_word_embeddings: false,
  };
  if (version === "v2") config.rope_theta = 500000.0;
  const shard1 = safetensors([["model.embed_tokens.weight", "BF16", [1000, 64]], ...llamaLayer(0, 64, 32, 128)], 1);
  const shard2 = safetensors([...llamaLayer(1, 64, 32, 128), ["model.norm.weight", "BF16", [64]],
    ["lm_head.weight", "BF16", [1000, 64]]], version === "v2" ? 22 : 2);
  const index = { metadata: { total_size: 0 }, weight_map: {} };
  return {
    "config.json": config && json(config),
    "generation_config.json": json({ bos_token_id: 1, eos_token_id: 2 }),
    "tokenizer_config.json": json({ bos_token: "<s>", eos_token: "</s>" }),
    "tokenizer.json": json({ version: "1.0", model: { type: "BPE", vocab: { a: 0 }, merges: [] } }),
    "model.safetensors.index.json": json(index),
    "model-00001-of-00002.safetensors": { lfs: true, data: shard1 },
    "model-00002-of-00002.safetensors": { lfs: true, data: shard2 },
    "onnx/model.onnx": { lfs: true, data: bytes(40000, 7) },
    "README.md": Buffer.from(`# tiny llama ${version}\n`),
  };
}

function mlxQuantized() {
  // Packed 4-bit weights: [out, in / 8] u32 plus per-64-group scales and biases.
  const h = 128, ffn = 256, vocab = 512;
  const q = (name, out, inp) => [[name + ".weight", "U32", [out, inp / 8]],
    [name + ".scales", "BF16", [out, inp / 64]], [name + ".biases", "BF16", [out, inp / 64]]];
  const tensors = [...q("model.embed_tokens", vocab, h)];
  for (const name of ["q_proj", "k_proj", "v_proj", "o_proj"]) tensors.push(...q(`model.layers.0.self_attn.${name}`, h, h));
  tensors.push(...q("model.layers.0.mlp.gate_proj", ffn, h), ...q("model.layers.0.mlp.up_proj", ffn, h),
    ...q("model.layers.0.mlp.down_proj", h, ffn), ["model.norm.weight", "BF16", [h]]);
  return {
    "config.json": json({
      architectures: ["Qwen3ForCausalLM"], model_type: "qwen3", hidden_size: h, intermediate_size: ffn,
      num_hidden_layers: 1, num_attention_heads: 4, num_key_value_heads: 2, head_dim: 32,
      vocab_size: vocab, max_position_embeddings: 40960, tie_word_embeddings: true,
      torch_dtype: "bfloat16", quantization: { group_size: 64, bits: 4 },
      quantization_config: { group_size: 64, bits: 4 },
    }),
    "model.safetensors": { lfs: true, data: safetensors(tensors, 5) },
    "tokenizer.json": json({ version: "1.0" }),
  };
}

function gated() {
  return { "config.json": json({ architectures: ["LlamaForCausalLM"], model_type: "llama" }),
    "model.safetensors": { lfs: true, data: safetensors([["w", "F32", [16, 16]]], 9) } };
}

// repo -> { gated, revisions: { name -> commit }, commits: { commit -> files } }
function makeRepo(versions, branches, extra = {}) {
  const commits = {}, revisions = {};
  for (const [v, files] of Object.entries(versions)) {
    const commit = sha1(`commit ${v} ${Object.keys(files).join(",")}`);
    const entries = {};
    for (const [path, f] of Object.entries(files)) {
      const data = Buffer.isBuffer(f) ? f : f.data;
      const lfs = !Buffer.isBuffer(f) && f.lfs;
      const oid = sha256(data);
      const pointer = Buffer.from(`version https://git-lfs.github.com/spec/v1\noid sha256:${oid}\nsize ${data.length}\n`);
      entries[path] = { data, lfs, oid, blobId: gitBlobId(lfs ? pointer : data), pointerSize: pointer.length };
    }
    commits[commit] = entries;
    revisions[v] = commit;
  }
  for (const [branch, v] of Object.entries(branches)) revisions[branch] = revisions[v];
  return { commits, revisions, ...extra };
}

const REPOS = {
  "hearth-test/tiny-llama": makeRepo({ v1: tinyLlama("v1"), v2: tinyLlama("v2") },
    { main: opt.head, "v1.0": "v1" }),
  "mlx-test/Qwen3-tiny-4bit": makeRepo({ v1: mlxQuantized() }, { main: "v1" }),
  "hearth-test/gated-model": makeRepo({ v1: gated() }, { main: "v1" }, { gated: "hf_good_token" }),
};

function fault(kind, file) {
  return opt.faults.find((f) => f.kind === kind && f.file === file &&
    (kind === "badsha" || kind === "norange" || kind === "slow" || f.used < (kind === "drop" ? (f.y ?? 1) : f.x)));
}

function fail(res, status, code, message, extra = {}) {
  res.writeHead(status, { "Content-Type": "application/json", "X-Error-Code": code, "X-Error-Message": message, ...extra });
  res.end(JSON.stringify({ error: message }));
}

// Status faults (429/500) for FILE; true when one answered the request.
function statusFault(res, file) {
  let f = fault("429", file);
  if (f) { f.used++; fail(res, 429, "", "rate limited", { "Retry-After": String(f.y ?? 1) }); return true; }
  f = fault("500", file);
  if (f) { f.used++; fail(res, 500, "", "internal error"); return true; }
  return false;
}

// Checks access to a repo; answers and returns null when denied.
function openRepo(req, res, id) {
  const repo = REPOS[id];
  const auth = req.headers.authorization || "";
  if (!repo) { fail(res, 401, "RepoNotFound", "Repository not found"); return null; }
  if (repo.gated && auth !== `Bearer ${repo.gated}`) {
    if (!auth) fail(res, 401, "GatedRepo", `Access to model ${id} is restricted. You must be authenticated to access it.`);
    else fail(res, 403, "GatedRepo", `Access to model ${id} is restricted and you are not in the authorized list.`);
    return null;
  }
  if (!repo.gated && opt.token && auth !== `Bearer ${opt.token}`) { fail(res, 401, "RepoNotFound", "Invalid credentials in Authorization header"); return null; }
  return repo;
}

function commitOf(repo, rev) {
  if (repo.commits[rev]) return rev;
  return repo.revisions[rev] ?? null;
}

// Sends `data` honoring Range, with drop / badsha / norange / slow faults of FILE.
function sendBody(req, res, file, data, headers) {
  if (fault("badsha", file)) { data = Buffer.from(data); data[data.length >> 1] ^= 0xff; }
  let start = 0, end = data.length - 1, status = 200;
  const range = /^bytes=(\d+)-(\d*)$/.exec(req.headers.range || "");
  if (range && !fault("norange", file)) {
    start = Number(range[1]);
    if (range[2]) end = Math.min(end, Number(range[2]));
    if (start >= data.length) {
      res.writeHead(416, { ...headers, "Content-Range": `bytes */${data.length}` });
      return res.end();
    }
    status = 206;
    headers["Content-Range"] = `bytes ${start}-${end}/${data.length}`;
  }
  const body = data.subarray(start, end + 1);
  res.writeHead(status, { ...headers, "Content-Length": body.length, "Accept-Ranges": "bytes" });
  if (req.method === "HEAD") return res.end();
  const drop = fault("drop", file);
  if (drop) {
    drop.used++;
    res.write(body.subarray(0, Math.min(drop.x, body.length)), () => setTimeout(() => req.socket.destroy(), 20));
    return;
  }
  const slow = fault("slow", file);
  if (slow) {
    let pos = 0;
    const next = () => {
      if (res.destroyed) return;
      if (pos >= body.length) return res.end();
      res.write(body.subarray(pos, pos + 16384));
      pos += 16384;
      setTimeout(next, slow.x);
    };
    return next();
  }
  res.end(body);
}

const server = createServer((req, res) => {
  const url = new URL(req.url, "http://x");
  if (opt.log) {
    appendFileSync(opt.log, JSON.stringify({ method: req.method, host: req.headers.host, path: url.pathname,
      range: req.headers.range ?? null, auth: req.headers.authorization ?? null }) + "\n");
  }
  const parts = url.pathname.split("/").slice(1).map(decodeURIComponent);
  // GET /api/models/{org}/{name}/revision/{rev}
  if (parts[0] === "api" && parts[1] === "models" && parts[4] === "revision" && parts.length === 6) {
    if (statusFault(res, "api")) return;
    const id = `${parts[2]}/${parts[3]}`;
    const repo = openRepo(req, res, id);
    if (!repo) return;
    const commit = commitOf(repo, parts[5]);
    if (!commit) return fail(res, 404, "RevisionNotFound", `Invalid rev id: ${parts[5]}`);
    const blobs = url.searchParams.get("blobs") === "true";
    const siblings = Object.entries(repo.commits[commit]).map(([path, e]) => blobs
      ? { rfilename: path, blobId: e.blobId, size: e.lfs ? e.pointerSize : e.data.length,
          ...(e.lfs ? { lfs: { sha256: e.oid, size: e.data.length, pointerSize: e.pointerSize } } : {}) }
      : { rfilename: path });
    res.writeHead(200, { "Content-Type": "application/json" });
    return res.end(JSON.stringify({ _id: commit.slice(0, 24), id, modelId: id, sha: commit, private: false, siblings }));
  }
  // GET /__cdn/{sha256}: the CDN the Hub redirects LFS downloads to.
  if (parts[0] === "__cdn") {
    for (const repo of Object.values(REPOS)) {
      for (const files of Object.values(repo.commits)) {
        for (const [path, e] of Object.entries(files)) {
          if (e.lfs && e.oid === parts[1]) return sendBody(req, res, path, e.data, { ETag: `"${e.oid}"` });
        }
      }
    }
    res.writeHead(404);
    return res.end();
  }
  // GET|HEAD /{org}/{name}/resolve/{rev}/{path...}
  if (parts[2] === "resolve" && parts.length >= 5) {
    const id = `${parts[0]}/${parts[1]}`;
    const file = parts.slice(4).join("/");
    const repo = openRepo(req, res, id);
    if (!repo) return;
    const commit = commitOf(repo, parts[3]);
    if (!commit) return fail(res, 404, "RevisionNotFound", `Invalid rev id: ${parts[3]}`);
    const e = repo.commits[commit][file];
    if (!e) return fail(res, 404, "EntryNotFound", `${file} does not exist on "${parts[3]}"`);
    if (statusFault(res, file)) return;
    const headers = { "X-Repo-Commit": commit, ETag: `"${e.blobId}"` };
    if (e.lfs) {
      const port = server.address().port;
      res.writeHead(302, { ...headers, "X-Linked-Etag": `"${e.oid}"`, "X-Linked-Size": String(e.data.length),
        Location: `http://localhost:${port}/__cdn/${e.oid}?X-Amz-Signature=mock`, "Content-Length": 0 });
      return res.end();
    }
    return sendBody(req, res, file, e.data, headers);
  }
  res.writeHead(404, { "Content-Type": "text/plain" });
  res.end("not found");
});

server.listen(0, "127.0.0.1", () => {
  process.stdout.write(`listening ${server.address().port}\n`);
});
process.on("SIGTERM", () => process.exit(0));
