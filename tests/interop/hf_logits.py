"""Loads a `strata export` folder with Hugging Face transformers and writes the logits
for the given tokens: hf_logits.py DIR TOKENS_FILE OUT_FILE (raw int64 in, float32 out).
Prints the class it loaded."""
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM

model_dir, tokens_path, out_path = sys.argv[1:4]
model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
model.eval()
ids = torch.from_numpy(np.fromfile(tokens_path, dtype=np.int64)).view(1, -1)
with torch.no_grad():
    logits = model(ids).logits.float()
logits.numpy().astype(np.float32).tofile(out_path)
print(type(model).__name__, tuple(logits.shape))
