#!/usr/bin/env python3
"""Trains hearth's starter model end to end in one run on one GPU (see README.md beside this).

Corpus (corpus.py) -> byte-level BPE tokenizer -> Qwen3ForCausalLM trained from scratch under
a wall-clock budget -> MLX-affine 8-bit safetensors shards + HF tokenizer/config files ->
read back, dequantized and evaluated with transformers (held-out perplexity, greedy samples).

    PYTHONUNBUFFERED=1 python3 tools/starter/train_starter.py --out "$OUT"

Writes to --out: model-0000N-of-0000K.safetensors shards (each < 15 MiB) and starter_files.tar
(config.json, generation_config.json, tokenizer.json, tokenizer_config.json,
chat_template.jinja, model.safetensors.index.json, heldout.txt, report.json,
corpus_manifest.json).
"""
import time

T0 = time.time()

import argparse  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import struct  # noqa: E402
import sys  # noqa: E402
import sysconfig  # noqa: E402
import tarfile  # noqa: E402
import traceback  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402
from seed_tasks import PROBE_REQUESTS  # noqa: E402

SEED = 20261130
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
EOT_ID, IM_START_ID, IM_END_ID = 0, 1, 2
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
RAW_PROMPTS = ["def fibonacci(n):\n", "import os\n\n\ndef list_python_files(directory):\n"]
SHARD_LIMIT = 14 << 20
REPORT = {"stages": {}}


def log(*args):
    print(f"[{time.time() - T0:7.1f}s]", *args, flush=True)


def stage_done(name, t):
    REPORT["stages"][name] = round(time.time() - t, 1)
    log(f"stage {name}: {time.time() - t:.1f}s")


# ---- corpus and tokenizer -------------------------------------------------------------------

def build_corpus(args):
    t = time.time()
    sources, packages = corpus.list_sources()
    chosen = corpus.cap_sources(sources, args.per_package_mb << 20, args.corpus_mb << 20)
    log(f"{len(sources)} candidate files, {len(chosen)} chosen")
    results = corpus.read_all(chosen, os.cpu_count() or 1)
    results = [r for r in results if r[2]]
    # Held out: whole standard-library modules (PSF), in stable-hash order, ~heldout_chars.
    stdlib_dir = os.path.realpath(sysconfig.get_paths()["stdlib"])
    stdlib = sorted((corpus.stable_hash(os.path.relpath(r[1], stdlib_dir)), r[1], r)
                    for r in results if r[0] == "python-stdlib" and len(r[2]) <= 40_000)
    heldout_paths, parts, used = set(), [], 0
    for _, _, r in stdlib:
        if used >= args.heldout_chars:
            break
        heldout_paths.add(r[1])
        parts.append(r[2].rstrip("\n") + "\n")
        used += len(parts[-1])
    heldout_text = "\n\n".join(parts)
    train = [r for r in results if r[1] not in heldout_paths]
    rng = random.Random(SEED)
    pairs = [(p, r[0]) for r in train for p in r[3]]
    rng.shuffle(pairs)
    pairs = pairs[: args.max_pairs]
    chats = []
    for (name, sentence, code), _pkg in pairs:
        chats.append(corpus.chat_pair(rng, name, corpus.third_person(sentence), sentence, code))
    seeds = corpus.seed_chats(rng, args.seed_repeats)
    docs = [r[2] for r in train] + chats + seeds
    rng.shuffle(docs)
    per_pkg = {}
    for r in train:
        d = per_pkg.setdefault(r[0], {"used_files": 0, "used_bytes": 0})
        d["used_files"] += 1
        d["used_bytes"] += len(r[2].encode("utf-8"))
    manifest = {
        "packages": {name: dict(info, **per_pkg.get(name, {"used_files": 0, "used_bytes": 0}),
                                included=name in per_pkg)
                     for name, info in packages.items()},
        "heldout_files": sorted(os.path.relpath(p, stdlib_dir) for p in heldout_paths),
        "code_files": len(train), "code_chars": sum(len(r[2]) for r in train),
        "docstring_pairs": len(chats), "seed_chats": len(seeds),
        "chat_chars": sum(len(c) for c in chats) + sum(len(s) for s in seeds),
    }
    log(f"corpus: {len(train)} code files ({manifest['code_chars'] / 1e6:.1f} M chars), "
        f"{len(chats)} docstring chats, {len(seeds)} seed chats, held-out "
        f"{len(heldout_paths)} stdlib files ({len(heldout_text)} chars)")
    for r in rng.sample(chats, min(2, len(chats))):
        log("example chat:\n" + r)
    stage_done("corpus", t)
    return docs, heldout_text, manifest


def train_tokenizer(docs, args):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    t = time.time()
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=args.vocab, min_frequency=2, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    sample, used = [], 0
    for d in docs:  # docs are shuffled: a prefix is a random sample
        if used >= args.tokenizer_mb << 20:
            break
        sample.append(d)
        used += len(d)
    tok.train_from_iterator(sample, trainer=trainer, length=len(sample))
    for i, s in enumerate(SPECIALS):
        assert tok.token_to_id(s) == i, (s, tok.token_to_id(s))
    log(f"tokenizer: vocab {tok.get_vocab_size()} from {used / 1e6:.1f} M chars")
    stage_done("tokenizer", t)
    return tok


def tokenize(tok, docs, deadline):
    t = time.time()
    encode = getattr(tok, "encode_batch_fast", tok.encode_batch)
    arrays, n_docs, eot = [], 0, np.array([EOT_ID], dtype=np.int32)
    for i in range(0, len(docs), 2000):
        for enc in encode(docs[i: i + 2000]):
            arrays.append(np.asarray(enc.ids, dtype=np.int32))
            arrays.append(eot)
        n_docs = min(len(docs), i + 2000)
        if time.time() > deadline:
            log(f"tokenize: time budget reached after {n_docs}/{len(docs)} docs")
            break
    tokens = np.concatenate(arrays)
    chars = sum(len(d) for d in docs[:n_docs])
    log(f"tokenized {n_docs} docs: {tokens.size / 1e6:.1f} M tokens "
        f"({chars / max(1, tokens.size):.2f} chars/token)")
    REPORT["train_tokens_available"] = int(tokens.size)
    REPORT["train_docs_tokenized"] = n_docs
    stage_done("tokenize", t)
    return tokens


# ---- model ------------------------------------------------------------------------------------

def model_config(args, vocab):
    return dict(
        vocab_size=vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads, head_dim=args.hidden // args.heads,
        hidden_act="silu", max_position_embeddings=args.max_positions, initializer_range=0.02,
        rms_norm_eps=1e-6, use_cache=True, tie_word_embeddings=True, attention_bias=False,
        attention_dropout=0.0, use_sliding_window=False, bos_token_id=EOT_ID,
        eos_token_id=IM_END_ID,
        rope_parameters={"rope_type": "default", "rope_theta": args.rope_theta})


def make_model(cfg):
    from transformers import AutoModelForCausalLM
    try:
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
    except TypeError:
        model = AutoModelForCausalLM.from_config(cfg)
    return model.float()


def perplexity(model, ids, seq_len, batch=8):
    """mlx_lm.perplexity's method: rows of seq_len tokens, mean NLL of tokens 1.. of each row."""
    import torch
    import torch.nn.functional as F
    n = len(ids) // seq_len
    data = torch.tensor(ids[: n * seq_len], dtype=torch.long, device="cuda").view(n, seq_len)
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, n, batch):
            b = data[i: i + batch]
            logits = model(input_ids=b[:, :-1], use_cache=False).logits.float()
            total += F.cross_entropy(logits.reshape(-1, logits.size(-1)), b[:, 1:].reshape(-1),
                                     reduction="sum").item()
            count += b[:, 1:].numel()
    return math.exp(total / count), n, count


def train(args, tokens, heldout_ids, vocab, deadline):
    import torch
    import torch.nn.functional as F
    from transformers import Qwen3Config
    t = time.time()
    random.seed(SEED)
    np.random.seed(SEED)
    torch.manual_seed(SEED)
    torch.cuda.manual_seed_all(SEED)
    torch.backends.cuda.matmul.allow_tf32 = True
    cfg = Qwen3Config(**model_config(args, vocab))
    model = make_model(cfg).cuda()
    if model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr():
        log("WARNING: lm_head was not tied to embed_tokens; tying it")
        model.lm_head.weight = model.model.embed_tokens.weight
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: {n_params / 1e6:.2f} M parameters, attn "
        f"{getattr(model.config, '_attn_implementation', '?')}")
    REPORT["parameters"] = n_params
    data = torch.from_numpy(tokens.astype(np.int64)).cuda()
    n_tok, L, B = data.numel(), args.seq_len, args.batch
    offsets = torch.arange(L + 1, device="cuda")
    gen = torch.Generator(device="cuda")
    gen.manual_seed(SEED)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    val_n = (min(len(heldout_ids), 64 * 512) // 512) * 512
    val = torch.tensor(heldout_ids[:val_n], dtype=torch.long, device="cuda").view(-1, 512)
    model.train()
    t_start = time.time()
    t_end = min(t_start + args.train_seconds, deadline)
    log(f"training for {t_end - t_start:.0f}s: batch {B} x {L}, peak lr {args.lr}")
    step, losses, history = 0, [], []
    while True:
        now = time.time()
        if now >= t_end:
            break
        frac = min(1.0, (now - t_start) / (t_end - t_start))
        lr = args.lr * min(1.0, (step + 1) / args.warmup) * (
            args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * frac)))
        for group in opt.param_groups:
            group["lr"] = lr
        starts = torch.randint(0, n_tok - L - 1, (B,), device="cuda", generator=gen)
        batch = data[starts[:, None] + offsets]  # [B, L + 1]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=batch[:, :-1], use_cache=False).logits  # [B, L, vocab]
        loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)),
                               batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.detach())
        step += 1
        if step % 25 == 0:  # keep the CPU's clock close to the GPU's work
            torch.cuda.synchronize()
        if step % 100 == 0:
            mean = torch.stack(losses).mean().item()
            losses = []
            el = time.time() - t_start
            msg = (f"step {step} loss {mean:.3f} lr {lr:.2e} "
                   f"{step * B * L / el / 1e3:.0f} k tok/s elapsed {el:.0f}s")
            if step % 500 == 0:
                model.eval()
                with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
                    vl = model(input_ids=val[:, :-1], use_cache=False).logits.float()
                    vloss = F.cross_entropy(vl.reshape(-1, vl.size(-1)),
                                            val[:, 1:].reshape(-1)).item()
                model.train()
                msg += f" heldout {vloss:.3f}"
                history.append({"step": step, "loss": round(mean, 4),
                                "heldout": round(vloss, 4), "seconds": round(el, 1)})
            log(msg)
    torch.cuda.synchronize()
    el = time.time() - t_start
    REPORT.update(steps=step, train_seconds=round(el, 1), tokens_seen=step * B * L,
                  epochs=round(step * B * L / n_tok, 3), history=history,
                  tokens_per_second=round(step * B * L / el))
    log(f"trained {step} steps, {step * B * L / 1e6:.1f} M tokens "
        f"({REPORT['epochs']} epochs) in {el:.0f}s")
    model.eval()
    stage_done("train", t)
    return model, cfg


# ---- MLX-affine 8-bit export ------------------------------------------------------------------

def mlx_quantize(w, bits, group_size):
    """MLX-affine quantization of w [out, in] (float32): w ~ scales * q + biases.

    Per group: biases = min, scales = (max - min) / (2^bits - 1), q = round((w - bias) / scale)
    in [0, 2^bits - 1]. Scales and biases are stored in bf16, so they are rounded first (the
    scale upwards, so that the group's max stays in range) and q is computed against the
    rounded values: the dequantization error stays within about half a step. Returns q int64
    [out, in], scales and biases bf16 [out, in / group_size]."""
    import torch
    out_f, in_f = w.shape
    g = w.float().reshape(out_f, in_f // group_size, group_size)
    n_bins = float((1 << bits) - 1)
    w_min = g.amin(dim=-1, keepdim=True)
    w_max = g.amax(dim=-1, keepdim=True)
    b16 = w_min.to(torch.bfloat16)
    scale = torch.clamp((w_max - b16.float()) / n_bins, min=0.0)
    s16 = scale.to(torch.bfloat16)
    up = (s16.view(torch.int16) + 1).view(torch.bfloat16)  # next bf16 above (scale >= 0)
    s16 = torch.where(s16.float() < scale, up, s16)
    safe = torch.where(s16.float() > 0, s16.float(), torch.ones_like(scale))
    q = torch.clamp(torch.round((g - b16.float()) / safe), 0, n_bins)
    return (q.reshape(out_f, in_f).to(torch.int64), s16.reshape(out_f, -1),
            b16.reshape(out_f, -1))


def pack_u32(q, bits):
    """[out, in] ints -> [out, in*bits/32] words; element 0 in the lowest bits."""
    import torch
    per = 32 // bits
    out_f, in_f = q.shape
    q = q.reshape(out_f, in_f // per, per)
    word = torch.zeros(out_f, in_f // per, dtype=torch.int64, device=q.device)
    for i in range(per):
        word |= q[:, :, i] << (bits * i)
    return word


def unpack_u32(words, bits, in_f):
    import torch
    per = 32 // bits
    shifts = torch.arange(per, dtype=torch.int64, device=words.device) * bits
    q = (words.to(torch.int64)[:, :, None] >> shifts) & ((1 << bits) - 1)
    return q.reshape(words.shape[0], in_f)


def bf16_bytes(t):
    import torch
    return t.detach().to(torch.bfloat16).contiguous().cpu().view(torch.int16).numpy().tobytes()


def write_safetensors(path, tensors, metadata):
    """tensors: [(name, dtype, shape, bytes)] written in order."""
    header, offset = {"__metadata__": metadata}, 0
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    hjson = json.dumps(header, separators=(",", ":")).encode()
    hjson += b" " * ((8 - len(hjson) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for _, _, _, data in tensors:
            f.write(data)


def read_safetensors(path):
    import torch
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        buf = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        if info["dtype"] == "U32":
            t = torch.from_numpy(np.frombuffer(buf[a:b], dtype="<u4").astype(np.int64))
        elif info["dtype"] == "BF16":
            t = torch.from_numpy(np.frombuffer(buf[a:b], dtype="<i2").copy()).view(torch.bfloat16)
        else:
            raise ValueError(f"unexpected dtype {info['dtype']} for {name}")
        out[name] = t.reshape(info["shape"])
    return out


def quantizable(name, t, group_size):
    return t.dim() == 2 and not name.endswith("norm.weight") and t.shape[1] % group_size == 0


def export_tensors(model, bits, group_size):
    """[(name, dtype, shape, bytes)] in mlx-community layout (tied lm_head omitted)."""
    out = []
    for name, p in model.state_dict().items():
        if name == "lm_head.weight" or "rotary_emb" in name:
            continue
        p = p.detach().float()
        if quantizable(name, p, group_size):
            q, s, b = mlx_quantize(p, bits, group_size)
            packed = pack_u32(q, bits).cpu()
            module = name[: -len(".weight")]
            out.append((name, "U32", packed.shape,
                        packed.numpy().astype("<u4").tobytes()))
            out.append((module + ".scales", "BF16", s.shape, bf16_bytes(s)))
            out.append((module + ".biases", "BF16", b.shape, bf16_bytes(b)))
        else:
            out.append((name, "BF16", p.shape, bf16_bytes(p)))
    return out


def write_shards(tensors, out_dir, prefix="model"):
    shards, cur, size = [], [], 0
    for t in tensors:
        if cur and size + len(t[3]) > SHARD_LIMIT:
            shards.append(cur)
            cur, size = [], 0
        cur.append(t)
        size += len(t[3])
    shards.append(cur)
    weight_map, names = {}, []
    for i, shard in enumerate(shards):
        fname = f"{prefix}-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        write_safetensors(os.path.join(out_dir, fname), shard, {"format": "mlx"})
        names.append(fname)
        for t in shard:
            weight_map[t[0]] = fname
    index = {"metadata": {"total_size": sum(len(t[3]) for t in tensors)},
             "weight_map": weight_map}
    with open(os.path.join(out_dir, f"{prefix}.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
    return names


def write_hf_files(ship, tok, cfg, args, quantization):
    tok.save(os.path.join(ship, "tokenizer.json"))
    tok_cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
        "unk_token": None, "model_max_length": args.max_positions,
        "clean_up_tokenization_spaces": False,
        "added_tokens_decoder": {str(i): {"content": s, "lstrip": False, "normalized": False,
                                          "rstrip": False, "single_word": False,
                                          "special": True}
                                 for i, s in enumerate(SPECIALS)},
        "chat_template": CHAT_TEMPLATE,
    }
    with open(os.path.join(ship, "tokenizer_config.json"), "w") as f:
        json.dump(tok_cfg, f, indent=2)
    with open(os.path.join(ship, "chat_template.jinja"), "w") as f:
        f.write(CHAT_TEMPLATE)
    with open(os.path.join(ship, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": EOT_ID, "eos_token_id": [IM_END_ID, EOT_ID],
                   "pad_token_id": EOT_ID, "do_sample": True, "temperature": 0.7,
                   "top_p": 0.9, "top_k": 20}, f, indent=2)
    c = cfg.to_dict()
    c["architectures"] = ["Qwen3ForCausalLM"]
    c["model_type"] = "qwen3"
    c["dtype"] = "bfloat16"
    c["torch_dtype"] = "bfloat16"
    c["rope_theta"] = float(args.rope_theta)
    if quantization:
        c["quantization"] = quantization
    for k in ("_name_or_path", "id2label", "label2id", "problem_type", "output_hidden_states",
              "output_attentions", "return_dict", "chunk_size_feed_forward",
              "is_encoder_decoder"):
        c.pop(k, None)
    with open(os.path.join(ship, "config.json"), "w") as f:
        json.dump(c, f, indent=2)


SMALL_FILES = ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
               "chat_template.jinja", "model.safetensors.index.json", "heldout.txt", "report.json",
               "corpus_manifest.json"]


def write_tar(ship, out):
    with tarfile.open(os.path.join(out, "starter_files.tar"), "w") as tf:
        for f in SMALL_FILES:
            p = os.path.join(ship, f)
            if os.path.exists(p):
                tf.add(p, arcname=f)


def save_report(ship, out):
    with open(os.path.join(ship, "report.json"), "w") as f:
        json.dump(REPORT, f, indent=2)
    write_tar(ship, out)


# ---- verification with transformers ----------------------------------------------------------

def dequantize_all(raw, bits, group_size):
    """{name: tensor} as stored -> {name: float32 weight}, w = scales * q + biases."""
    sd = {}
    for name, t in raw.items():
        if name.endswith((".scales", ".biases")):
            continue
        module = name[: -len(".weight")]
        if module + ".scales" in raw:
            s, b = raw[module + ".scales"].float(), raw[module + ".biases"].float()
            in_f = t.shape[1] * 32 // bits
            q = unpack_u32(t, bits, in_f).float().reshape(t.shape[0], in_f // group_size,
                                                         group_size)
            sd[name] = (q * s[:, :, None] + b[:, :, None]).reshape(t.shape[0], in_f)
        else:
            sd[name] = t.float()
    return sd


def load_shipped(ship, bits, group_size, fallback_cfg):
    """The shipped directory, dequantized to float32, in a fresh transformers model."""
    import torch
    from transformers import AutoConfig
    with open(os.path.join(ship, "model.safetensors.index.json")) as f:
        index = json.load(f)
    raw = {}
    for fname in sorted(set(index["weight_map"].values())):
        part = read_safetensors(os.path.join(ship, fname))
        try:  # the reference reader must see the same tensors
            from safetensors.torch import load_file
            ref = load_file(os.path.join(ship, fname))
            same = all(torch.equal(ref[k].to(torch.int64) if v.dtype == torch.int64 else ref[k],
                                   v) for k, v in part.items())
            log(f"{fname}: safetensors reader agrees: {same}")
            REPORT.setdefault("safetensors_reader_agrees", []).append(same)
        except Exception as e:
            log(f"{fname}: safetensors reference check skipped: {e}")
        raw.update(part)
    sd = dequantize_all(raw, bits, group_size)
    try:
        cfg = AutoConfig.from_pretrained(ship)
        REPORT["config_loads_in_transformers"] = True
    except Exception as e:
        log(f"AutoConfig.from_pretrained FAILED on the shipped config.json: {e!r}")
        REPORT["config_loads_in_transformers"] = repr(e)
        cfg = fallback_cfg
    model = make_model(cfg)
    missing, unexpected = model.load_state_dict(sd, strict=False)
    log(f"shipped model: missing {missing}, unexpected {unexpected}")
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    if model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr():
        log("WARNING: lm_head not tied after load; copying embeddings")
        with torch.no_grad():
            model.lm_head.weight.copy_(model.model.embed_tokens.weight)
    return model.cuda().eval(), sd


def greedy(model, ids, max_new, stop_ids):
    import torch
    ids, out = list(ids), []
    with torch.no_grad():
        for _ in range(max_new):
            x = torch.tensor([ids[-1024:]], device="cuda")
            nxt = int(model(input_ids=x, use_cache=False).logits[0, -1].argmax())
            if nxt in stop_ids:
                break
            out.append(nxt)
            ids.append(nxt)
    return out


def check_hf_tokenizer(ship, tok):
    """transformers must load the tokenizer dir and render the template as we train on it."""
    from transformers import AutoTokenizer
    try:
        try:
            hf = AutoTokenizer.from_pretrained(ship)
        except Exception as e:  # a transformers without PreTrainedTokenizerFast: its backend
            log(f"AutoTokenizer failed ({e!r}); retrying with tokenizer_class TokenizersBackend")
            path = os.path.join(ship, "tokenizer_config.json")
            with open(path) as f:
                tc = json.load(f)
            tc["tokenizer_class"] = "TokenizersBackend"
            with open(path, "w") as f:
                json.dump(tc, f, indent=2)
            hf = AutoTokenizer.from_pretrained(ship)
        msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi there"}]
        rendered = hf.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        ok_tmpl = rendered == corpus.render_chat(msgs, add_generation_prompt=True)
        probe = "def f(x):\n    return x  # <|im_end|> ok\n"
        ok_ids = hf(probe, add_special_tokens=False)["input_ids"] == tok.encode(probe).ids
        REPORT["hf_tokenizer"] = {"class": type(hf).__name__, "template_matches": ok_tmpl,
                                  "ids_match": ok_ids, "eos_token": hf.eos_token}
        log(f"transformers tokenizer {type(hf).__name__}: template matches {ok_tmpl}, "
            f"ids match {ok_ids}, eos {hf.eos_token}")
    except Exception as e:
        REPORT["hf_tokenizer"] = {"error": repr(e)}
        log(f"transformers tokenizer check FAILED: {e!r}")


def evaluate(args, ship, tok, trained, heldout_path):
    import torch
    t = time.time()
    check_hf_tokenizer(ship, tok)
    with open(heldout_path, encoding="utf-8") as f:
        text = f.read()
    ids = tok.encode(text).ids
    ppl_fp, rows, count = perplexity(trained, ids, args.ppl_seq_len)
    shipped, _ = load_shipped(ship, args.bits, args.group_size, trained.config)
    ppl_q, _, _ = perplexity(shipped, ids, args.ppl_seq_len)
    with torch.no_grad():
        x = torch.tensor([ids[:512]], device="cuda")
        diff = (trained(input_ids=x).logits - shipped(input_ids=x).logits).abs().max().item()
    REPORT["perplexity"] = {
        "heldout_file": "heldout.txt", "heldout_chars": len(text), "heldout_tokens": len(ids),
        "sequence_length": args.ppl_seq_len, "rows": rows, "scored_tokens": count,
        "method": "tokens = encode(whole file, no special tokens); rows of sequence_length "
                  "consecutive tokens (tail dropped); ppl = exp(mean NLL of tokens 1.. of "
                  "each row), as mlx_lm.perplexity; float32, transformers Qwen3ForCausalLM",
        "shipped_8bit": round(ppl_q, 4), "trained_float32": round(ppl_fp, 4),
        "max_abs_logit_diff_shipped_vs_trained": round(diff, 4),
    }
    log(f"held-out perplexity ({rows} rows x {args.ppl_seq_len}): shipped 8-bit {ppl_q:.3f}, "
        f"trained float32 {ppl_fp:.3f}; max |logit diff| {diff:.3f}")
    samples = []
    stops = {IM_END_ID, EOT_ID}
    for req in PROBE_REQUESTS:
        prompt = corpus.render_chat([{"role": "user", "content": req}], add_generation_prompt=True)
        out = greedy(shipped, tok.encode(prompt).ids, args.sample_tokens, stops)
        samples.append({"chat": req, "completion": tok.decode(out, skip_special_tokens=False)})
        log(f"SAMPLE chat {req!r}:\n{samples[-1]['completion']}\n---")
    for raw in RAW_PROMPTS:
        out = greedy(shipped, tok.encode(raw).ids, args.sample_tokens, stops)
        samples.append({"raw": raw, "completion": tok.decode(out, skip_special_tokens=False)})
        log(f"SAMPLE raw {raw!r}:\n{raw}{samples[-1]['completion']}\n---")
    REPORT["samples"] = samples
    REPORT["sampling"] = f"greedy (argmax), at most {args.sample_tokens} new tokens, " \
                         "stop at <|im_end|> or <|endoftext|>, shipped 8-bit model dequantized"
    stage_done("evaluate", t)


# ---- main -------------------------------------------------------------------------------------

def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="where the shards and starter_files.tar go")
    ap.add_argument("--work", default="/tmp/starter_ship", help="scratch model directory")
    ap.add_argument("--deadline", type=float, default=535, help="seconds after start by which "
                    "everything (training and export/eval) should be done")
    ap.add_argument("--reserve", type=float, default=55, help="seconds kept for export/eval")
    ap.add_argument("--train-seconds", type=float, default=420)
    ap.add_argument("--prep-seconds", type=float, default=170, help="tokenizing stops here")
    ap.add_argument("--corpus-mb", type=int, default=320)
    ap.add_argument("--per-package-mb", type=int, default=24)
    ap.add_argument("--tokenizer-mb", type=int, default=40)
    ap.add_argument("--max-pairs", type=int, default=120_000)
    ap.add_argument("--seed-repeats", type=int, default=12)
    ap.add_argument("--heldout-chars", type=int, default=110_000)
    ap.add_argument("--vocab", type=int, default=12288)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--intermediate", type=int, default=1536)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--max-positions", type=int, default=2048)
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--bits", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=64)
    ap.add_argument("--ppl-seq-len", type=int, default=512)
    ap.add_argument("--sample-tokens", type=int, default=160)
    return ap.parse_args()


def main():
    args = parse_args()
    os.makedirs(args.out, exist_ok=True)
    shutil.rmtree(args.work, ignore_errors=True)
    ship = args.work
    os.makedirs(ship)
    REPORT["args"] = vars(args)
    REPORT["seed"] = SEED
    REPORT["command"] = " ".join(sys.argv)
    log("args", json.dumps(vars(args)))

    docs, heldout_text, manifest = build_corpus(args)
    heldout_path = os.path.join(ship, "heldout.txt")
    with open(heldout_path, "w", encoding="utf-8") as f:
        f.write(heldout_text)
    with open(os.path.join(ship, "corpus_manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
    tok = train_tokenizer(docs, args)
    tokens = tokenize(tok, docs, T0 + args.prep_seconds)
    del docs
    with open(heldout_path, encoding="utf-8") as f:
        heldout_ids = tok.encode(f.read()).ids
    vocab = ((tok.get_vocab_size() + 63) // 64) * 64

    import torch
    import transformers
    REPORT["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__,
                          "python": sys.version.split()[0],
                          "gpu": torch.cuda.get_device_name(0)}
    log("versions", REPORT["versions"])
    model, cfg = train(args, tokens, heldout_ids, vocab, T0 + args.deadline - args.reserve)

    t = time.time()
    quant = {"group_size": args.group_size, "bits": args.bits}
    try:
        write_hf_files(ship, tok, cfg, args, quant)
        names = write_shards(export_tensors(model, args.bits, args.group_size), ship)
        for n in names:
            shutil.copy(os.path.join(ship, n), os.path.join(args.out, n))
        REPORT["shards"] = {n: os.path.getsize(os.path.join(ship, n)) for n in names}
        save_report(ship, args.out)
        log(f"exported {names}, total {sum(REPORT['shards'].values()) / 2**20:.2f} MiB")
    except Exception:
        traceback.print_exc()
        log("8-bit export FAILED: writing unquantized bf16 fallback shards")
        for d in (ship, args.out):
            for f in os.listdir(d):
                if f.endswith(".safetensors") or f.endswith(".index.json"):
                    os.remove(os.path.join(d, f))
        write_hf_files(ship, tok, cfg, args, None)
        tensors = [(n, "BF16", p.shape, bf16_bytes(p)) for n, p in model.state_dict().items()
                   if n != "lm_head.weight" and "rotary_emb" not in n]
        for n in write_shards(tensors, ship):
            shutil.copy(os.path.join(ship, n), os.path.join(args.out, n))
        save_report(ship, args.out)
        raise
    stage_done("export", t)
    try:
        evaluate(args, ship, tok, model, heldout_path)
    except Exception:
        traceback.print_exc()
        log("evaluation FAILED (model files are already in --out)")
    REPORT["total_seconds"] = round(time.time() - T0, 1)
    save_report(ship, args.out)
    log("done; files in --out:", sorted(os.listdir(args.out)))


if __name__ == "__main__":
    main()
