# Makes the benchmark model of ANCHORS.md on the GPU machine: random-init Llama-3.1-8B
# shapes, bf16, saved with save_pretrained (safetensors). Usage: make_llama8b.py <out dir>
import sys
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

out = sys.argv[1]
start = time.time()
config = LlamaConfig(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                     num_key_value_heads=8, intermediate_size=14336, vocab_size=128256,
                     rope_theta=500000, max_position_embeddings=8192, torch_dtype=torch.bfloat16)
torch.manual_seed(0)
torch.set_default_dtype(torch.bfloat16)
with torch.device("cuda"):
    model = LlamaForCausalLM(config)
params = sum(p.numel() for p in model.parameters())
model.save_pretrained(out, max_shard_size="5GB")
print(f"made {out}: {params / 1e9:.3f} B parameters in {time.time() - start:.1f} s", flush=True)
