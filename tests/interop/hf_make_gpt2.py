"""Saves a small random GPT2LMHeadModel with Hugging Face transformers:
hf_make_gpt2.py DIR TIED(true|false). 2 layers, n_embd 64, 4 heads, 32 positions,
vocabulary 1000 (not a multiple of 128: Strata pads it)."""
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel

out, tied = sys.argv[1], sys.argv[2] == "true"
torch.manual_seed(7)
config = GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=32, vocab_size=1000,
                    activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0,
                    attn_pdrop=0.0, tie_word_embeddings=tied)
model = GPT2LMHeadModel(config)
with torch.no_grad():  # nonzero biases and layer-norm parameters, so every tensor matters
    for name, p in model.named_parameters():
        if name.endswith("bias") or "ln_" in name:
            p.add_(0.1 * torch.randn_like(p))
model.save_pretrained(out, safe_serialization=True)
print("saved", type(model).__name__, "tied" if tied else "untied")
