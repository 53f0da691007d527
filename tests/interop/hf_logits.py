"""Loads a Hugging Face folder (a `strata export`, or one saved by transformers) with
transformers and writes the logits for the given tokens: hf_logits.py DIR TOKENS_FILE
OUT_FILE (raw int64 in, float32 out). GPT-2 folders load as a causal LM, BERT folders as
a masked LM (token types 0). Prints the class it loaded."""
import json
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

model_dir, tokens_path, out_path = sys.argv[1:4]
with open(f"{model_dir}/config.json") as f:
    kind = json.load(f)["model_type"]
auto = AutoModelForMaskedLM if kind == "bert" else AutoModelForCausalLM
model = auto.from_pretrained(model_dir, torch_dtype=torch.float32)
model.eval()
ids = torch.from_numpy(np.fromfile(tokens_path, dtype=np.int64)).view(1, -1)
with torch.no_grad():
    logits = model(ids).logits.float()
logits.numpy().astype(np.float32).tofile(out_path)
print(type(model).__name__, tuple(logits.shape))
