# Sourced by the grpo tests: tiny_grpo_model REF DIR makes DIR a model
# directory of the committed tiny model (tests/reference/llama_tied_gqa,
# vocabulary 61: its config.json and model.safetensors) with a hand-written
# character tokenizer (ids 3 .. 60: digits, '+', '=', ' ', a-z, A-S).
tiny_grpo_model() {
    local ref=$1 model=$2 i c
    mkdir -p "$model"
    cp "$ref/config.json" "$ref/model.safetensors" "$model/"
    {
        printf '{"version": "1.0", "added_tokens": ['
        printf '{"id": %d, "content": "%s", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}' \
            0 '<unk>'; printf ', '
        printf '{"id": %d, "content": "%s", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}' \
            1 '<s>'; printf ', '
        printf '{"id": %d, "content": "%s", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}' \
            2 '</s>'
        printf '], "normalizer": null, "pre_tokenizer": null, "post_processor": null, "decoder": null,\n'
        printf ' "model": {"type": "BPE", "unk_token": "<unk>", "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2'
        i=3
        for c in 0 1 2 3 4 5 6 7 8 9 + = ' ' a b c d e f g h i j k l m n o p q r s t u v w x y z \
                 A B C D E F G H I J K L M N O P Q R S; do   # ids 3 .. 60: the model's 61
            printf ', "%s": %d' "$c" "$i"; i=$((i + 1))
        done
        printf '}, "merges": []}}\n'
    } > "$model/tokenizer.json"
}
