"""The scalevec architecture in transformers: Llama's layers plus the scale-vector pieces that do not fold.

export.py copies this file next to config.json and model.safetensors when a checkpoint uses
DNP (mlp_placement="dual_norm"), its control "in_norm", or output norms; then

    AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)

Paper: "Negligible in Size, Significant in Effect: On Scale Vectors in Large Language
Models". Every input-role scale vector is already folded into its linear map (Theorem
2.2), so what remains is a Llama decoder (with Qwen3's attention, per-head RMSNorm on q
and k before RoPE, when `qk_norm`) and, per switch of ScalevecConfig:

    ff_norm        DNP: gate and up are normalized over d_ff before SiLU and the product,
                       mlp(x) = W_down (silu(g * rms(W_gate x)) * rms(W_up x))
                   g (mlp.gate_norm.weight) is DNP's output-role gamma_a on the gate, which
                   SiLU follows; ones for the in_norm control. The up branch's gamma_a is
                   input-role and is folded into W_down's columns.
    output_norms   Gemma's sandwich norms: each branch's output passes through an RMSNorm
                   with an output-role gamma before the residual add,
                       x = x + attn_output_norm(attn(input_layernorm(x)))
                       x = x + mlp_output_norm(mlp(post_attention_layernorm(x)))

The rest (embedding, RoPE, cache, generate, LM head) is Llama's own code, reused by subclassing.
"""

import torch
import transformers
from torch import nn
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import (LlamaDecoderLayer, LlamaForCausalLM, LlamaMLP, LlamaModel,
                                                      LlamaRMSNorm)
from transformers.models.qwen3.modeling_qwen3 import Qwen3Attention

if int(transformers.__version__.split(".")[0]) < 5:  # 4.x decoder layers return tuples, not a tensor
    raise ImportError(f"modeling_scalevec.py needs transformers >= 5 (found {transformers.__version__}): "
                      "pip install -U transformers")


class ScalevecConfig(LlamaConfig):
    """LlamaConfig plus the three switches above (config.json carries them)."""

    model_type = "scalevec"
    qk_norm: bool = False
    ff_norm: bool = False
    output_norms: bool = False


def rms(x, eps):
    """x / rms(x) over the last dim, in float32, returned in x's dtype: LlamaRMSNorm without a weight."""
    h = x.float()
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


class ScalevecMLP(LlamaMLP):
    """Llama's SwiGLU; with ff_norm, DNP's normalization over d_ff on gate and up (see the module docstring).

    Shapes: (..., hidden_size) -> (..., hidden_size); intermediate_size = d_ff.
    """

    def __init__(self, config):
        super().__init__(config)
        self.gate_norm = LlamaRMSNorm(config.intermediate_size, eps=config.rms_norm_eps) if config.ff_norm else None

    def forward(self, x):
        if self.gate_norm is None:
            return super().forward(x)
        gate = self.gate_norm(self.gate_proj(x))
        up = rms(self.up_proj(x), self.gate_norm.variance_epsilon)  # its gamma_a lives in down_proj
        return self.down_proj(self.act_fn(gate) * up)


class ScalevecDecoderLayer(LlamaDecoderLayer):
    """Llama's pre-norm layer with Qwen3's attention under qk_norm, ScalevecMLP, and (under
    output_norms) an RMSNorm on each branch's output before the residual add.

    Shapes: hidden_states (batch, seq, hidden_size) -> the same.
    """

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)
        if config.qk_norm:
            self.self_attn = Qwen3Attention(config, layer_idx)
        self.mlp = ScalevecMLP(config)

        def output_norm():
            return LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps) if config.output_norms else nn.Identity()

        self.attn_output_norm, self.mlp_output_norm = output_norm(), output_norm()

    def forward(self, hidden_states, **kwargs):
        # kwargs: what LlamaModel hands a layer (mask, position embeddings, cache, ...), all the attention's
        attn, _ = self.self_attn(hidden_states=self.input_layernorm(hidden_states), **kwargs)
        hidden_states = hidden_states + self.attn_output_norm(attn)
        mlp = self.mlp(self.post_attention_layernorm(hidden_states))
        return hidden_states + self.mlp_output_norm(mlp)


class ScalevecModel(LlamaModel):
    """LlamaModel with ScalevecDecoderLayers."""

    config_class = ScalevecConfig
    _no_split_modules = ["ScalevecDecoderLayer"]

    def __init__(self, config):
        super().__init__(config)
        self.layers = nn.ModuleList(ScalevecDecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.post_init()


class ScalevecForCausalLM(LlamaForCausalLM):
    """LlamaForCausalLM on a ScalevecModel: logits (batch, seq, vocab_size), generate(), as Llama's."""

    config_class = ScalevecConfig
    _no_split_modules = ["ScalevecDecoderLayer"]

    def __init__(self, config):
        super().__init__(config)
        self.model = ScalevecModel(config)
        self.post_init()


# save_pretrained() then writes config.json's auto_map and copies this file, as export.py does
ScalevecConfig.register_for_auto_class()
ScalevecForCausalLM.register_for_auto_class("AutoModelForCausalLM")
