"""Which rotation llama.cpp gives each GGUF architecture: its `llama_model_rope_type` (src/llama-model.cpp),
keyed by the `general.architecture` string the GGUF carries (llama.cpp's LLM_ARCH_NAMES).

NORM rotates adjacent pairs (x[2i], x[2i+1]): the spec's `pairing = gptj`. NEOX rotates (x[i], x[i + n_rot/2]):
`pairing = neox`. MROPE / IMROPE run ggml_rope_multi over four position streams (t, h, w, e); NONE is a model
without rotary embedding. GLM-4, GLM-4-MoE and HunYuan-VL switch to MROPE when the GGUF has
`<arch>.rope.dimension_sections` (llama.cpp's hparams.use_mrope()).
"""
from __future__ import annotations

NORM, NEOX, MROPE, IMROPE, NONE = "NORM", "NEOX", "MROPE", "IMROPE", "NONE"

_TYPES = {
    NONE: """clip gpt2 gptj mpt refact bloom mamba mamba2 jamba jina-bert-v2 t5 t5encoder jais rwkv6 rwkv6qwen2
             rwkv7 arwkv7 wavtokenizer-dec nemotron_h nemotron_h_moe kimi-linear""",
    NORM: """llama llada llama4 deci baichuan starcoder internlm2 minicpm xverse command-r cohere2 olmo arctic
             deepseek deepseek2 deepseek2-ocr plm chatglm granite granitemoe granitehybrid chameleon bailingmoe
             neo-bert smollm3 arcee ernie4_5 ernie4_5-moe mistral3 mistral4 llama-embed maincoder glm-dsa""",
    NEOX: """falcon falcon-h1 grok dbrx bert jina-bert-v3 modern-bert nomic-bert nomic-bert-moe eurobert stablelm
             bitnet qwen qwen2 dream qwen2moe qwen3 qwen3moe qwen3next llada-moe rnd1 olmo2 olmoe phi2 phi3 phimoe
             plamo plamo2 plamo3 gemma gemma2 gemma3 gemma3n gemma4 gemma-embedding starcoder2 openelm gptneox
             codeshell orion nemotron exaone exaone4 exaone-moe minicpm3 bailingmoe2 dots1 hunyuan-moe jais2
             gpt-oss hunyuan-dense lfm2 lfm2moe smallthinker seed_oss grovemoe apertus minimax-m2 cogvlm
             pangu-embedded afmoe mimo2 step35""",
    MROPE: "qwen2vl paddleocr",
    IMROPE: "qwen3vl qwen3vlmoe qwen35 qwen35moe",
}
ROPE_TYPES: dict[str, str] = {arch: kind for kind, archs in _TYPES.items() for arch in archs.split()}
# MROPE when the GGUF gives rope sections, else this type
SECTIONED = {"glm4": NORM, "glm4moe": NEOX, "hunyuan_vl": NEOX}
# llama.cpp refuses these when rope.dimension_count differs from the head size ("invalid n_rot")
FULL_ROTARY = {"llama", "deci", "falcon", "llama-embed"}
# the ggml_rope_ext mode llama.cpp passes for each type (GGML_ROPE_TYPE_NEOX = 2, MROPE = 8, IMROPE = 40)
GGML_MODE = {NORM: 0, NEOX: 2, MROPE: 8, IMROPE: 40}


def rope_type(arch: str, sections: list[int] | None) -> str:
    """llama.cpp's rope type of `arch` (NORM, NEOX, MROPE, IMROPE or NONE); ValueError for an architecture
    llama.cpp's table does not list."""
    if arch in SECTIONED:
        return MROPE if sections and any(sections) else SECTIONED[arch]
    if arch not in ROPE_TYPES:
        raise ValueError(f"general.architecture '{arch}' is not one whose rope type ropegen knows "
                         "(llama.cpp's llama_model_rope_type)")
    return ROPE_TYPES[arch]
