"""Make the Optimum fixtures: a tiny GPT-2 exported by Hugging Face Optimum's ONNX exporter for text
generation with a KV cache, in the two forms LLM ONNX files on the hub take.

    python3 -m venv /tmp/optimum-venv
    /tmp/optimum-venv/bin/pip install torch==2.13.0 optimum-onnx==0.1.0 onnx==1.23.2 onnxruntime==1.32.0
    # (pulls optimum 2.1.0 and transformers 4.57.6; reruns write byte-identical files)
    /tmp/optimum-venv/bin/python tests/models/export_optimum.py

The model is built from a config (the same GPT-2 config as export_hf.py) with seeded random weights and
saved to a temporary folder (no hub download); `optimum.exporters.onnx.main_export(...,
task="text-generation-with-past")` writes one `model.onnx` (the TorchScript exporter underneath) whose
inputs are `input_ids [batch_size, sequence_length]`, `past_key_values.{i}.key/value [batch_size, 4,
past_sequence_length, 32]`, `attention_mask [batch_size, past_sequence_length + sequence_length]` and
`position_ids`; outputs `logits` and `present.{i}.key/value`. A prefill is past_sequence_length = 0, a
decode step sequence_length = 1. That is `optimum_gpt2_tiny_with_past.onnx`; the same export of the tiny
Llama config (GQA, RoPE, SwiGLU) is `optimum_llama_tiny_with_past.onnx`.

The older form, `decoder_model_merged.onnx` (still what many hub repositories ship): Optimum exported a
decoder without past inputs (but with present outputs) and one with, then joined them with
`optimum.onnx.merge_decoders` into one graph whose only node is an If on the boolean input
`use_cache_branch` (then: with past, else: without). Made the same way here, the first export with
`GPT2OnnxConfig(use_past=True, use_past_in_inputs=False)`: `optimum_gpt2_tiny_merged.onnx`.
Saved graph-only: tensors over 1 KiB to external data, that file deleted.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import onnx

HERE = Path(__file__).parent


def graph_only(model: onnx.ModelProto, name: str) -> None:
    out = HERE / f"{name}.onnx"
    onnx.save_model(
        model,
        out,
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=f"{name}.onnx.data",
        size_threshold=1024,
    )
    (HERE / f"{name}.onnx.data").unlink()
    print(f"{out}: {out.stat().st_size} bytes, external data deleted")


def main() -> None:
    import torch
    from optimum.exporters.onnx import main_export
    from optimum.exporters.onnx.model_configs import GPT2OnnxConfig
    from optimum.onnx import merge_decoders
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    sys.path.insert(0, str(HERE))
    from export_hf import GPT2, LLAMA

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        GPT2LMHeadModel(GPT2Config(**GPT2)).save_pretrained(f"{tmp}/model")
        main_export(f"{tmp}/model", output=f"{tmp}/past", task="text-generation-with-past", library_name="transformers")
        no_past = GPT2OnnxConfig(
            GPT2Config.from_pretrained(f"{tmp}/model"), task="text-generation", use_past=True, use_past_in_inputs=False
        )
        main_export(
            f"{tmp}/model",
            output=f"{tmp}/no_past",
            task="text-generation-with-past",
            custom_onnx_configs={"model": no_past},
            library_name="transformers",
        )
        graph_only(onnx.load(f"{tmp}/past/model.onnx"), "optimum_gpt2_tiny_with_past")
        merge_decoders(f"{tmp}/no_past/model.onnx", f"{tmp}/past/model.onnx", save_path=f"{tmp}/merged.onnx")
        graph_only(onnx.load(f"{tmp}/merged.onnx"), "optimum_gpt2_tiny_merged")

        torch.manual_seed(0)
        LlamaForCausalLM(LlamaConfig(**LLAMA)).save_pretrained(f"{tmp}/llama")
        main_export(
            f"{tmp}/llama", output=f"{tmp}/llama_past", task="text-generation-with-past", library_name="transformers"
        )
        graph_only(onnx.load(f"{tmp}/llama_past/model.onnx"), "optimum_llama_tiny_with_past")


if __name__ == "__main__":
    if os.environ.get("PYTHONHASHSEED") != "0":  # merge_decoders orders initializers by set iteration:
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "PYTHONHASHSEED": "0"})  # pin it
    main()
