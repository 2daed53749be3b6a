#!/usr/bin/python3
"""Write tests/modelio/bad_configs/*.json and MANIFEST (file, status, message fragment).

Each file is a small llama config.json with one thing wrong.  Run from anywhere:
    /usr/bin/python3 tests/modelio/make_bad_configs.py
"""
import copy
import json
import os

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bad_configs")

BASE = {
    "architectures": ["LlamaForCausalLM"],
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 64,
    "intermediate_size": 172,
    "max_position_embeddings": 512,
    "model_type": "llama",
    "num_attention_heads": 8,
    "num_hidden_layers": 5,
    "num_key_value_heads": 4,
    "rms_norm_eps": 1e-05,
    "rope_scaling": None,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
    "vocab_size": 512,
}


def cfg(**changes):
    c = copy.deepcopy(BASE)
    for k, v in changes.items():
        if v is DELETE:
            c.pop(k, None)
        else:
            c[k] = v
    return json.dumps(c, indent=2)


DELETE = object()

CASES = [
    # (name, text, status, fragment)
    ("not_json", '{"model_type": "llama", hidden_size: 64', "PT_EFORMAT", "not valid JSON"),
    ("empty", "", "PT_EFORMAT", "empty document"),
    ("trailing_garbage", cfg() + "\n}", "PT_EFORMAT", "after the JSON document"),
    ("array_root", "[1, 2, 3]", "PT_ECONFIG", "must be a JSON object"),
    ("deep_nesting", '{"model_type": "llama", "x": ' + "[" * 5000 + "]" * 5000 + "}",
     "PT_EFORMAT", "not valid JSON"),
    ("duplicate_key", cfg()[:-2] + ',\n  "hidden_size": 128\n}', "PT_EFORMAT",
     "duplicate key 'hidden_size'"),
    ("missing_model_type", cfg(model_type=DELETE), "PT_ECONFIG", "'model_type' is missing"),
    ("unknown_model_type", cfg(model_type="gpt2"), "PT_EUNSUPPORTED", "model_type 'gpt2'"),
    ("model_type_number", cfg(model_type=7), "PT_ECONFIG", "'model_type' must be a string"),
    ("missing_hidden_size", cfg(hidden_size=DELETE), "PT_ECONFIG", "'hidden_size' is missing"),
    ("missing_vocab_size", cfg(vocab_size=DELETE), "PT_ECONFIG", "'vocab_size' is missing"),
    ("hidden_size_string", cfg(hidden_size="64"), "PT_ECONFIG",
     "'hidden_size' must be an integer, got a string"),
    ("hidden_size_negative", cfg(hidden_size=-64), "PT_ECONFIG", "'hidden_size' = -64"),
    ("hidden_size_zero", cfg(hidden_size=0), "PT_ECONFIG", "'hidden_size' = 0"),
    ("hidden_size_absurd", cfg(hidden_size=10**12), "PT_ECONFIG", "'hidden_size' = 1000000000000"),
    ("vocab_absurd", cfg(vocab_size=5000000), "PT_ECONFIG", "'vocab_size' = 5000000"),
    ("layers_fraction", cfg(num_hidden_layers=5.5), "PT_ECONFIG",
     "'num_hidden_layers' must be an integer"),
    ("layers_absurd", cfg(num_hidden_layers=100000), "PT_ECONFIG", "'num_hidden_layers'"),
    ("heads_not_dividing_hidden", cfg(num_attention_heads=7, num_key_value_heads=7),
     "PT_ECONFIG", "'num_attention_heads' (7) does not divide 'hidden_size' (64)"),
    ("kv_heads_not_dividing", cfg(num_key_value_heads=3), "PT_ECONFIG",
     "'num_key_value_heads' (3) does not divide"),
    ("head_dim_odd", cfg(head_dim=7), "PT_ECONFIG", "'head_dim' (7) must be even"),
    ("q_dim_overflow", cfg(num_attention_heads=1024, num_key_value_heads=1024, head_dim=1024),
     "PT_ECONFIG", "exceeds"),
    ("rope_yarn", cfg(rope_scaling={"rope_type": "yarn", "factor": 4.0}), "PT_EUNSUPPORTED",
     "'yarn' is not supported"),
    ("rope_dynamic_type", cfg(rope_scaling={"type": "dynamic", "factor": 2.0}),
     "PT_EUNSUPPORTED", "'dynamic' is not supported"),
    ("rope_llama3_incomplete", cfg(rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                                 "high_freq_factor": 4.0,
                                                 "original_max_position_embeddings": 8192}),
     "PT_ECONFIG", "'rope_scaling.low_freq_factor' is missing"),
    ("rope_scaling_string", cfg(rope_scaling="linear"), "PT_ECONFIG",
     "'rope_scaling' must be an object or null"),
    ("rope_theta_string", cfg(rope_theta="10000"), "PT_ECONFIG", "'rope_theta' must be a number"),
    ("rope_linear_zero_factor", cfg(rope_scaling={"rope_type": "linear", "factor": 0}),
     "PT_ECONFIG", "'rope_scaling.factor'"),
    ("hidden_act_gelu", cfg(hidden_act="gelu"), "PT_EUNSUPPORTED", "'hidden_act' 'gelu'"),
    ("mlp_bias_true", cfg(mlp_bias=True), "PT_EUNSUPPORTED", "'mlp_bias'"),
    ("attention_bias_llama", cfg(attention_bias=True), "PT_EUNSUPPORTED", "'attention_bias'"),
    ("tie_string", cfg(tie_word_embeddings="yes"), "PT_ECONFIG",
     "'tie_word_embeddings' must be true or false"),
    ("rms_eps_negative", cfg(rms_norm_eps=-1e-5), "PT_ECONFIG", "'rms_norm_eps'"),
    ("eos_out_of_vocab", cfg(eos_token_id=600), "PT_ECONFIG", "'eos_token_id' = 600"),
    ("eos_empty_list", cfg(eos_token_id=[]), "PT_ECONFIG", "'eos_token_id' is an empty list"),
    ("architectures_mismatch", cfg(architectures=["Qwen2ForCausalLM"]), "PT_ECONFIG",
     "'architectures' names Qwen2ForCausalLM but model_type is 'llama'"),
    ("architectures_unsupported", cfg(architectures=["LlamaForSequenceClassification"]),
     "PT_EUNSUPPORTED", "LlamaForSequenceClassification"),
    ("architectures_not_list", cfg(architectures="LlamaForCausalLM"), "PT_ECONFIG",
     "'architectures' must be a list"),
    ("quantized", cfg(quantization_config={"quant_method": "gptq", "bits": 4}),
     "PT_EUNSUPPORTED", "'quantization_config'"),
    ("qwen2_sliding", cfg(model_type="qwen2", architectures=["Qwen2ForCausalLM"],
                          use_sliding_window=True, sliding_window=4096),
     "PT_EUNSUPPORTED", "'use_sliding_window'"),
    ("max_positions_zero", cfg(max_position_embeddings=0), "PT_ECONFIG",
     "'max_position_embeddings' = 0"),
    ("partial_rotary", cfg(partial_rotary_factor=0.5), "PT_EUNSUPPORTED",
     "'partial_rotary_factor'"),
]


def main():
    os.makedirs(HERE, exist_ok=True)
    lines = ["# file<TAB>expected status<TAB>fragment of the error message"]
    for name, text, status, frag in CASES:
        with open(os.path.join(HERE, name + ".json"), "w") as f:
            f.write(text)
        lines.append("\t".join([name + ".json", status, frag]))
    with open(os.path.join(HERE, "MANIFEST"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(len(CASES), "files")


if __name__ == "__main__":
    main()
