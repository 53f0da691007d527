"""Saves a small random BertForMaskedLM with Hugging Face transformers: hf_make_bert.py DIR.
2 layers, hidden 64, 4 heads, 32 positions, vocabulary 1000 (not a multiple of 128:
Strata pads it), the published defaults otherwise (exact GELU, layer-norm eps 1e-12)."""
import sys

import torch
from transformers import BertConfig, BertForMaskedLM

out = sys.argv[1]
torch.manual_seed(7)
config = BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                    intermediate_size=256, max_position_embeddings=32, vocab_size=1000,
                    hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
model = BertForMaskedLM(config)
with torch.no_grad():  # nonzero biases and layer-norm parameters, so every tensor matters
    for name, p in model.named_parameters():
        if name.endswith("bias") or "LayerNorm" in name:
            p.add_(0.1 * torch.randn_like(p))
    # The padding token's row starts at zero; give it values, so that a run from these
    # weights at lr 1e-30 leaves every weight as it was (0 + 1e-30 x update would not).
    model.bert.embeddings.word_embeddings.weight[0].normal_(0.0, 0.02)
model.save_pretrained(out, safe_serialization=True)
print("saved", type(model).__name__)
