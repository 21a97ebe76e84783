"""ONNX Runtime as a serving peer (issue #45): what a user serving ELECTRA on CPUs would run instead.

From the HF classifier dir that `benchmarks.hf_peer_models.write_hf_classifier` writes, `export`
writes
- `model.onnx`: `torch.onnx.export` (the TorchScript exporter, opset 17) of HF's `ElectraModel`
  with the original's one dense(H, C) head on `[CLS]` and a softmax, dynamic batch and length axes;
  HF's shifted two-dense head (hf_peer_models' module doc) is folded back into that one dense, so the
  ONNX graph computes our model's math, not an extra dense and GELU;
- `model_int8.onnx`: the same after `onnxruntime.quantization.quantize_dynamic` (QInt8 weights,
  activations quantized per call), the usual int8 recipe for a transformer on CPU.
`build` serves either with ONNX Runtime (ORT_ENABLE_ALL, 2 intra-op threads) behind HF's fast
WordPiece tokenizer (truncation at 128 tokens, padding to the batch's longest), raw text in,
(label, its probability) out, as the script's other workers.
"""

from pathlib import Path

ONNX_FILES = {"ort": "model.onnx", "ort_int8": "model_int8.onnx"}  # variant -> file in the onnx dir
MAX_LENGTH = 128


def export(hf_dir: Path, out: Path) -> None:
    """`out`/model.onnx and model_int8.onnx from the HF classifier dir `hf_dir`."""
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from transformers import ElectraForSequenceClassification

    hf = ElectraForSequenceClassification.from_pretrained(str(hf_dir)).eval()
    head = hf.classifier  # dense = identity + SHIFT, GELU (the identity there), out_proj
    shift = head.dense.bias.detach()  # [H], every entry SHIFT

    class Classifier(torch.nn.Module):
        """input_ids, attention_mask, token_type_ids int64 [B, L] -> probabilities float32 [B, C]."""

        def __init__(self):
            super().__init__()
            self.electra = hf.electra
            self.dense = torch.nn.Linear(shift.shape[0], head.out_proj.out_features)
            with torch.no_grad():  # out_proj(x + shift) == W x + (b + W shift)
                self.dense.weight.copy_(head.out_proj.weight)
                self.dense.bias.copy_(head.out_proj.bias + head.out_proj.weight @ shift)

        def forward(self, input_ids, attention_mask, token_type_ids):
            hidden = self.electra(input_ids=input_ids, attention_mask=attention_mask,
                                  token_type_ids=token_type_ids).last_hidden_state  # [B, L, H]
            return torch.softmax(self.dense(hidden[:, 0]), dim=-1)

    out.mkdir(parents=True)
    example = torch.ones([2, 8], dtype=torch.int64)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    axes = {name: {0: "batch", 1: "length"} for name in names}
    with torch.no_grad():
        torch.onnx.export(Classifier().eval(), (example, example, torch.zeros_like(example)),
                          str(out / ONNX_FILES["ort"]), input_names=names, output_names=["probabilities"],
                          dynamic_axes={**axes, "probabilities": {0: "batch"}}, opset_version=17, dynamo=False)
    quantize_dynamic(str(out / ONNX_FILES["ort"]), str(out / ONNX_FILES["ort_int8"]), weight_type=QuantType.QInt8)


def build(hf_dir: Path, onnx_dir: Path, variant: str, threads: int = 2):
    """predict(texts) -> [(label, its probability)] through ONNX Runtime on `variant`'s model."""
    import numpy as np
    import onnxruntime as ort
    from transformers import AutoConfig, AutoTokenizer

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(onnx_dir / ONNX_FILES[variant]), options, providers=["CPUExecutionProvider"])
    tokenizer = AutoTokenizer.from_pretrained(str(hf_dir))  # the fast one (tokenizer.json)
    labels = AutoConfig.from_pretrained(str(hf_dir)).id2label

    def predict(texts):
        encoded = tokenizer(texts, padding=True, truncation=True, max_length=MAX_LENGTH, return_tensors="np")
        feeds = {name: encoded[name].astype(np.int64) for name in ("input_ids", "attention_mask", "token_type_ids")}
        probabilities = session.run(None, feeds)[0]  # [B, C]
        return [(labels[int(row.argmax())], float(row.max())) for row in probabilities]

    return predict
