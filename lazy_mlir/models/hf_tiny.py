"""Every ``transformers`` architecture a task mapping lists, at a tiny size
derived mechanically from its default config.

For each task (causal LM, masked LM, seq2seq LM, sequence, image and audio
classification) the installed ``transformers``' auto mapping names a model
class per model type; the config is the type's default with every size
field the shrink table knows set small (hidden 64, 2 layers, 2 heads, 1
key-value head, 128-wide feed-forward, vocabulary 256, 32x32 images),
per-layer lists cut to the layer count, token ids kept inside the
vocabulary, dropout left at the config's default. A type whose tiny config
does not build, or whose model does not train eagerly, is reported as such
by the runner, not left out silently.
"""
from __future__ import annotations

import torch

from .entry import Entry, generator, seeded

BATCH, SEQ, VOCAB, IMAGE = 2, 16, 256, 32
HIDDEN, LAYERS, HEADS, FFN = 64, 2, 2, 128

# config attribute -> tiny value (set only where the default config has it)
_SIZES = {
    "vocab_size": VOCAB, "decoder_vocab_size": VOCAB, "target_vocab_size": VOCAB,
    "hidden_size": HIDDEN, "d_model": HIDDEN, "n_embd": HIDDEN, "embed_dim": HIDDEN,
    "dim": HIDDEN, "emb_dim": HIDDEN, "word_embed_proj_dim": HIDDEN, "embedding_size": HIDDEN,
    "num_hidden_layers": LAYERS, "n_layer": LAYERS, "num_layers": LAYERS, "n_layers": LAYERS,
    "encoder_layers": LAYERS, "decoder_layers": LAYERS, "num_decoder_layers": LAYERS,
    "num_attention_heads": HEADS, "n_head": HEADS, "n_heads": HEADS, "num_heads": HEADS,
    "encoder_attention_heads": HEADS, "decoder_attention_heads": HEADS,
    "num_key_value_heads": 1, "num_kv_heads": 1, "multi_query_group_num": 1,
    "intermediate_size": FFN, "ffn_dim": FFN, "encoder_ffn_dim": FFN, "decoder_ffn_dim": FFN,
    "d_ff": FFN, "d_inner": FFN, "n_inner": FFN, "hidden_dim": FFN, "moe_intermediate_size": FFN,
    "shared_expert_intermediate_size": FFN,
    "head_dim": HIDDEN // HEADS, "d_head": HIDDEN // HEADS, "d_kv": HIDDEN // HEADS, "kv_channels": HIDDEN // HEADS,
    "num_local_experts": 4, "num_experts": 4, "n_routed_experts": 4,
    "max_position_embeddings": 128, "n_positions": 128, "max_seq_len": 128,
    "image_size": IMAGE, "num_channels": 3, "num_labels": 3,
    "num_mel_bins": 16,
    "window_size": 4,  # (Swin's 7 divides no stage of a 32x32 image: eager fails on the mask)
    # multi-head latent attention (DeepSeek V2/V3, MiniCPM3): rope + nope = head_dim
    "qk_rope_head_dim": HIDDEN // HEADS // 2, "qk_nope_head_dim": HIDDEN // HEADS // 2,
    "v_head_dim": HIDDEN // HEADS, "q_lora_rank": HIDDEN, "kv_lora_rank": HIDDEN // 2,
    "rotary_dim": HIDDEN // HEADS // 2,  # (GPT-J's, CodeGen's 64 exceed the head)
    "num_encoder_layers": LAYERS, "num_encoder_blocks": LAYERS,  # (ProphetNet; PoolFormer)
    "hidden_size_global": HIDDEN,  # (BLT's local encoder and decoder: the global transformer's)
    "entity_vocab_size": VOCAB, "entity_emb_size": HIDDEN,  # (LUKE's 500000 entities: 129M)
    "vocab_size_per_layer_input": VOCAB,  # (Gemma 3n's and 4's per-layer embeddings: 134M)
}
# config attribute -> tiny value where the default config leaves it None
# and the model divides or raises by it: Nemotron's key-value heads
# (None: as many as the heads), HunYuan MoE's head_dim, DeepSeek V2's
# experts per token (topk's k), Qwen4-exp's indexer sizes
_UNSET_SIZES = {"num_key_value_heads": HEADS, "head_dim": HIDDEN // HEADS,
                "num_experts_per_tok": 2,
                # Qwen4-exp's block-sparse indexer: heads, blocks of 2 keys, 4 blocks kept
                "indexer_n_heads": HEADS, "indexer_kv_heads": 1,
                "indexer_head_dim": HIDDEN // HEADS, "indexer_budget": 8,
                "indexer_compress_ratio": 2,
                "vocab_size": 32}  # (Wav2Vec2-Conformer's CTC head: characters)
# list-valued per-stage fields of vision models -> (per-stage value, stages)
_STAGES = {"hidden_sizes": [16, 32], "depths": [1, 1], "embed_dims": [16, 32],
           "num_heads": None, "sr_ratios": [2, 1], "block_sizes": [1, 1],
           "sequence_reduction_ratios": [2, 1]}  # (PVT's: 1 at its last stage, the one with [CLS])
# Mamba-2 heads of hybrids whose heads x head_dim must be expand x hidden (128 x 64 by default)
_MAMBA_HEADS = {"mamba_n_heads": 4, "mamba_d_head": HIDDEN // HEADS}
# Zamba's attention, over the hidden state and the embeddings concatenated (derived when built)
_ZAMBA_SIZES = {"attention_hidden_size": 2 * HIDDEN, "attention_head_dim": 2 * HIDDEN // HEADS}
# model type -> settings its architecture needs beyond the shrink table
_OVERRIDES = {
    # (segmentation reads 4 layers' features, ``idx + 1 in out_indices``: 4 layers)
    "beit": {"num_hidden_layers": 4, "out_indices": [1, 2, 3, 4]},
    "data2vec-vision": {"num_hidden_layers": 4, "out_indices": [1, 2, 3, 4]},
    # (its auxiliary head reads the third backbone stage, of two)
    "upernet": {"use_auxiliary_head": False},
    # (its top conv's width is derived from width_coefficient; hidden_dim must match it)
    "efficientnet": {"width_coefficient": 0.25, "depth_coefficient": 0.5, "hidden_dim": 320},
    # (heads x head_dim must equal expand x hidden; 8 groups would not divide 4 heads)
    "mamba2": {"num_heads": 4, "n_groups": 1},
    "bamba": _MAMBA_HEADS, "granitemoehybrid": _MAMBA_HEADS,
    "nemotron_h": {"mamba_num_heads": 4, "mamba_head_dim": HIDDEN // HEADS, "n_groups": 1,
                   "moe_shared_expert_intermediate_size": FFN},  # (a 64 x 64 mixer: 2.9M)
    # (sizes derived when built: mamba heads x head_dim = 2 x hidden, attention over 2 x hidden)
    "zamba2": {**_ZAMBA_SIZES, "n_mamba_heads": 4, "mamba_headdim": HIDDEN // HEADS,
               "num_query_groups": HEADS},
    # (its hybrid layers share one transformer, tied to the first: at least two of them)
    "zamba": {**_ZAMBA_SIZES, "layers_block_type": ["hybrid", "hybrid"], "mamba_dt_rank": 4},
    # (derived when built: the encoder's hidden x cross_attn_k patches, projected to the global's)
    # (and hash n-gram embeddings of 500002 rows each: 192M parameters)
    "blt": {"global_config.encoder_cross_output_size": 2 * HIDDEN,
            "encoder_hash_byte_group_vocab": VOCAB},
    # (a stage per downsampling ratio and one more: the table's two depths fit one ratio)
    "vibevoice_acoustic_tokenizer_encoder": {"downsampling_ratios": [2], "depths": [1, 1]},
    # (layer kinds are None by default, a checkpoint lists them; a dense first layer, then MoE)
    "lfm2_moe": {"layer_types": ["conv", "full_attention"], "num_dense_layers": 1},
    "diffllama": {"num_key_value_heads": HEADS},  # (its two attention calls split the KV heads)
    # (multi-head latent attention expands its latents to every head before the attention,
    # which repeats them num_heads / num_key_value_heads times more; an indexer of 64 x 128)
    **dict.fromkeys(("deepseek_v32", "glm_moe_dsa"), {
        "num_key_value_heads": HEADS, "index_n_heads": HEADS, "index_head_dim": HIDDEN // HEADS}),
    # (its width, the default 4096 beside hidden 64; its blocks, the layers it builds:
    # num_blocks is num_hidden_layers' default 32, copied when the config was made)
    "xlstm": {"embedding_dim": HIDDEN, "num_blocks": LAYERS},
    # (15 of 35 layers share the KV cache, and per-layer fields are per 35 layers)
    "gemma3n_text": {"num_kv_shared_layers": 0, "intermediate_size": [FFN] * LAYERS,
                     "activation_sparsity_pattern": [0.0] * LAYERS,
                     "vocab_size_per_layer_input": VOCAB},
    # (the LM head needs a decoder; axial positions must multiply to the sequence, chunks divide it)
    "reformer": {"is_decoder": True, "axial_pos_shape": (4, SEQ // 4),
                 "axial_pos_embds_dim": (HIDDEN // 2, HIDDEN // 2),
                 "local_attn_chunk_length": SEQ // 2, "lsh_attn_chunk_length": SEQ // 2},
    # (its position embeddings are per patch of a max_length x num_mel_bins spectrogram)
    "audio-spectrogram-transformer": {"max_length": 64},
    # (three stages in every per-stage tuple: the table's two-stage num_heads left one short;
    # stage i reads the i-th of its depth[i] drop-path rates, so depth[i] > i)
    "cvt": {"num_heads": [1, 2, 2], "embed_dim": [16, 32, 64], "depth": [1, 2, 3]},
    "esm": {"vocab_size": VOCAB},  # (None by default: the table sets only int sizes)
    "esmc": {"num_key_value_heads": HEADS},  # (no grouped-query attention: its k_norm is hidden-wide)
    # (its decoder queries every position: a loss over max_position_embeddings tokens;
    # its latents are sizes of their own: 256 x 1280 wide, 26 self-attends, 260M parameters)
    "perceiver": {"max_position_embeddings": SEQ, "num_latents": SEQ, "d_latents": HIDDEN,
                  "num_self_attends_per_block": LAYERS, "num_self_attention_heads": HEADS,
                  "num_cross_attention_heads": HEADS},
    # (a width per stage and one for the stem; its stages are its kernel lists': two)
    "textnet": {"stem_out_channels": 16, "hidden_sizes": [16, 16, 32],
                "conv_layer_kernel_sizes": [[[3, 3], [3, 3]], [[3, 3], [1, 3]]],
                "conv_layer_strides": [[1, 2], [2, 1]]},
    # (per-stage lists of its own, four long; its classifier reads hidden_sizes[-1])
    "hgnet_v2": {"stem_channels": [3, 16, 16], "stage_in_channels": [16, 32],
                 "stage_mid_channels": [16, 16], "stage_out_channels": [32, 32],
                 "stage_num_blocks": [1, 1], "stage_downsample": [False, True],
                 "stage_downsample_strides": [2, 2], "stage_light_block": [False, True],
                 "stage_kernel_size": [3, 5], "stage_numb_of_layers": [2, 2]},
    "mobilevit": {"hidden_sizes": [32, 48, 64]},  # (its three transformer stages' widths)
    "mobilevitv2": {"image_size": 2 * IMAGE},  # (its last stage unfolds 2x2 patches of 1/32)
}

TASKS = {  # family -> auto mapping name
    "causal-lm": "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "masked-lm": "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
    "seq2seq-lm": "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
    "image-classification": "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
    "audio-classification": "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES",
    "ctc": "MODEL_FOR_CTC_MAPPING_NAMES",
    "semantic-segmentation": "MODEL_FOR_SEMANTIC_SEGMENTATION_MAPPING_NAMES",
}


def tiny_config(model_type: str):
    """The default config of ``model_type`` with its sizes made tiny, and
    those of its sub-configs (a multimodal model's text, vision and audio
    towers)."""
    import os

    from transformers import CONFIG_MAPPING
    cfg = _shrink(CONFIG_MAPPING[model_type]())
    _override(cfg, model_type)
    if os.environ.get("LAZY_MLIR_SWEEP_NO_DROPOUT"):  # (a mismatch checked without RNG)
        _no_dropout(cfg)
    return cfg


def _override(cfg, model_type: str) -> None:
    import functools
    for key, value in _OVERRIDES.get(model_type, {}).items():
        *subs, attr = key.split(".")  # ("global_config.x": a sub-config's)
        setattr(functools.reduce(getattr, subs, cfg), attr, value)


def _no_dropout(cfg, depth: int = 0) -> None:
    """Every dropout probability of ``cfg`` (and its sub-configs) set to 0:
    the lazy device draws its own dropout stream, so only a loss computed
    without dropout can be compared with eager's exactly."""
    from transformers import PretrainedConfig
    for key in list(vars(cfg)):
        value = getattr(cfg, key, None)
        if isinstance(value, PretrainedConfig) and depth < 3:
            _no_dropout(value, depth + 1)
        elif isinstance(value, float) and ("drop" in key or key.endswith("_prob")) and value:
            _set(cfg, key, 0.0)


def _shrink(cfg, depth: int = 0):
    spec = vars(cfg).get("_heterogeneity_spec")
    if spec is None:
        return _shrink_global(cfg, depth)
    # (a per-layer config, Gemma 4's: the global reads of its per-layer sizes
    # raise unless allowed, and its layers' own sizes are set small as well)
    allowed = vars(cfg).get("allow_global_per_layer_attribute_access", False)
    cfg.allow_global_per_layer_attribute_access = True
    try:
        _shrink_global(cfg, depth)
    finally:
        cfg.allow_global_per_layer_attribute_access = allowed
    for overrides in spec.per_layer_overrides.values():
        for key in overrides:
            if key in _SIZES and isinstance(overrides[key], int):
                overrides[key] = _SIZES[key]
    return cfg


def _shrink_global(cfg, depth: int):
    from transformers import PretrainedConfig
    if depth < 3:
        for key in list(vars(cfg)):
            sub = getattr(cfg, key, None)
            if isinstance(sub, PretrainedConfig):  # (a tower: its type's overrides too)
                setattr(cfg, key, _shrink(sub, depth + 1))
                _override(sub, sub.model_type)
    for key, value in _SIZES.items():
        if isinstance(getattr(cfg, key, None), int) and not isinstance(getattr(cfg, key), bool):
            _set(cfg, key, value)
    for key, value in _UNSET_SIZES.items():  # (None by default, read as a number)
        if key in vars(cfg) and vars(cfg)[key] is None:
            _set(cfg, key, value)
    for key, stages in _STAGES.items():
        current = getattr(cfg, key, None)
        if isinstance(current, (list, tuple)) and current:
            setattr(cfg, key, list(stages) if stages else [HEADS] * 2)
    _backbone_stages(cfg)
    for key in ("num_experts_per_tok", "num_experts_per_token", "top_k", "moe_top_k",
                "moe_topk", "num_selected_experts"):
        if isinstance(getattr(cfg, key, None), int):
            setattr(cfg, key, min(getattr(cfg, key), 2))  # (of 4 experts)
    # GroupNorm's groups (BiT's 32) must divide the tiny stages' 4-wide bottlenecks
    if isinstance(getattr(cfg, "num_groups", None), int):
        cfg.num_groups = min(cfg.num_groups, 4)
    for key in ("n_group", "topk_group"):  # grouped routing: one group
        if isinstance(getattr(cfg, key, None), int):
            setattr(cfg, key, 1)
    if _is_pair(getattr(cfg, "image_size", None)):  # (Hiera's (224, 224): the batch's are 32x32)
        cfg.image_size = type(cfg.image_size)((IMAGE, IMAGE))
    if isinstance(getattr(cfg, "num_stages", None), int):
        cfg.num_stages = 2
    layers = next((getattr(cfg, k) for k in ("num_hidden_layers", "n_layer", "num_layers")
                   if isinstance(getattr(cfg, k, None), int)), LAYERS)
    for key in ("layer_types", "block_types", "attention_layers", "layers_block_type",
                "mlp_layer_types"):
        value = getattr(cfg, key, None)
        if isinstance(value, (list, tuple)) and len(value) > layers:
            _set(cfg, key, every_kind_cut(list(value), layers))
    if isinstance(getattr(cfg, "hybrid_layer_ids", None), list):  # (Zamba2: derived from them)
        cfg.hybrid_layer_ids = [i for i, t in enumerate(cfg.layers_block_type) if t == "hybrid"]
    for key in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id",
                "sep_token_id", "cls_token_id", "mask_token_id"):
        value = getattr(cfg, key, None)
        if isinstance(value, int) and value >= VOCAB:
            setattr(cfg, key, VOCAB - 1 - ("pad" in key))
    if isinstance(getattr(cfg, "qk_rope_head_dim", None), int) and hasattr(cfg, "head_dim"):
        _set(cfg, "head_dim", cfg.qk_rope_head_dim)  # (latent attention: the rotary part's)
    if all(isinstance(getattr(cfg, k, None), int)  # (derived when built: LongCat's)
           for k in ("qk_head_dim", "qk_nope_head_dim", "qk_rope_head_dim")):
        _set(cfg, "qk_head_dim", cfg.qk_nope_head_dim + cfg.qk_rope_head_dim)
    if getattr(cfg, "use_cache", None):  # (training: hybrid linear-attention caches refuse it)
        cfg.use_cache = False
    if getattr(cfg, "pad_token_id", None) is None and hasattr(cfg, "pad_token_id"):
        cfg.pad_token_id = 0  # (sequence classification of a batch > 1 needs one)
    if getattr(cfg, "is_encoder_decoder", False) and \
            getattr(cfg, "decoder_start_token_id", None) is None:
        cfg.decoder_start_token_id = getattr(cfg, "pad_token_id", None) or 0  # (T5 shifts labels)
    return cfg


def _backbone_stages(cfg) -> None:
    """A backbone's stage names and the stages it outputs, for its tiny
    stages (set when the config was built, from its four default ones:
    UperNet's ResNet backbone then named 'stage4' of two)."""
    names, depths = vars(cfg).get("stage_names"), getattr(cfg, "depths", None)
    if not (isinstance(names, list) and isinstance(depths, list)) or \
            len(names) == len(depths) + 1:
        return
    cfg.stage_names = names[:len(depths) + 1]
    cfg.out_features = [f for f in (getattr(cfg, "out_features", None) or [])
                        if f in cfg.stage_names] or cfg.stage_names[-1:]
    cfg.out_indices = [cfg.stage_names.index(f) for f in cfg.out_features]


def every_kind_cut(kinds: list, layers: int) -> list:
    """The first ``layers`` of a per-layer list of kinds, with the kinds the
    cut would drop in place of its last entries (in the order they first
    appear): a hybrid's 2 tiny layers are one of each kind (Qwen3.5's
    linear-attention and full-attention layers), not two of its first."""
    distinct = list(dict.fromkeys(kinds))[:layers]
    kept = kinds[:layers]
    missing = [k for k in distinct if k not in kept]
    repeats = [i for i in range(len(kept)) if kept[i] in kept[:i]]
    for i, kind in zip(repeats[len(repeats) - len(missing):], missing):
        kept[i] = kind
    return kept


def _is_pair(value) -> bool:
    return isinstance(value, (list, tuple)) and len(value) == 2 and \
        all(isinstance(v, int) for v in value)


def _set(cfg, key: str, value) -> None:
    try:
        setattr(cfg, key, value)
    except (AttributeError, NotImplementedError):  # (derived: Falcon's head_dim, Funnel's layers)
        pass


def _token_batch(step: int) -> dict:
    ids = torch.randint(3, VOCAB - 2, (BATCH, SEQ), generator=generator(step))
    return {"input_ids": ids, "labels": ids.clone()}


def _image_batch(cfg):
    side = getattr(cfg, "image_size", IMAGE)
    side = side if isinstance(side, int) else IMAGE
    channels = getattr(cfg, "num_channels", 3)

    def batch(step: int) -> dict:
        g = generator(step)
        return {"pixel_values": torch.randn(BATCH, channels, side, side, generator=g),
                "labels": torch.randint(0, cfg.num_labels, (BATCH,), generator=g)}
    return batch


def _segmentation_batch(cfg):
    """Images with a class per pixel (255 ignored, as in ADE20k's labels)."""
    images = _image_batch(cfg)

    def batch(step: int) -> dict:
        out = images(step)
        side = out["pixel_values"].shape[-1]
        labels = torch.randint(0, max(cfg.num_labels, 2), (BATCH, side, side),
                               generator=generator(step + 1000))
        labels[:, :2, :2] = 255
        out["labels"] = labels
        return out
    return batch


def _patch_batch(cfg):
    """An image already cut into patches, as Siglip2's processor gives it:
    (batch, patches, channels x patch x patch) with each image's patch grid
    (``spatial_shapes``) and the mask of real patches."""
    vision = cfg.vision_config
    side = IMAGE // vision.patch_size

    def batch(step: int) -> dict:
        g = generator(step)
        width = vision.num_channels * vision.patch_size ** 2
        return {"pixel_values": torch.randn(BATCH, side * side, width, generator=g),
                "pixel_attention_mask": torch.ones(BATCH, side * side, dtype=torch.long),
                "spatial_shapes": torch.tensor([[side, side]] * BATCH),
                "labels": torch.randint(0, cfg.num_labels, (BATCH,), generator=g)}
    return batch


def _takes_patches(class_name: str) -> bool:
    """Whether the image model's forward takes images cut into patches
    (``spatial_shapes`` beside them: Siglip2)."""
    import inspect

    import transformers
    return "spatial_shapes" in inspect.signature(getattr(transformers, class_name).forward).parameters


def _takes_tokens(class_name: str) -> bool:
    """Whether the image model's input is token ids (ImageGPT's color
    clusters), not pixels."""
    import transformers
    return getattr(transformers, class_name).main_input_name == "input_ids"


def _audio_batch(model_cls, cfg):
    name = getattr(model_cls, "main_input_name", "input_values")

    def batch(step: int) -> dict:
        g = generator(step)
        if isinstance(getattr(cfg, "max_length", None), int):  # (AST: a whole spectrogram)
            x = torch.randn(BATCH, cfg.max_length, cfg.num_mel_bins, generator=g)
        elif name == "input_features":
            x = torch.randn(BATCH, getattr(cfg, "num_mel_bins", 16), 3000 if
                            "whisper" in cfg.model_type else 64, generator=g)
        else:
            x = torch.randn(BATCH, 4000, generator=g)
        return {name: x, "labels": torch.randint(0, cfg.num_labels, (BATCH,), generator=g)}
    return batch


def _ctc_batch(model_cls, cfg):
    """Audio with transcripts: 2-4 labels a sample (not blank, the pad id
    0), padded with -100 as a data collator pads them; the audio's 12 or so
    frames fit them (an impossible alignment's loss is inf unless the
    config's ``ctc_zero_infinity``)."""
    audio = _audio_batch(model_cls, cfg)
    vocab = min(getattr(cfg, "vocab_size", 32) or 32, VOCAB)

    def batch(step: int) -> dict:
        out = audio(step)
        g = generator(step + 1000)
        labels = torch.randint(1, vocab, (BATCH, 4), generator=g)
        lengths = torch.randint(2, 5, (BATCH,), generator=g)
        out["labels"] = labels.masked_fill(torch.arange(4) >= lengths.unsqueeze(1), -100)
        return out
    return batch


def _loss(model, batch):
    return model(**batch).loss


def entries() -> list[Entry]:
    """One entry per (family, model type) of the installed ``transformers``."""
    import transformers
    import transformers.models.auto.modeling_auto as auto
    out = []
    for family, mapping in TASKS.items():
        for model_type, class_name in sorted(getattr(auto, mapping).items()):
            if not isinstance(class_name, str) or not hasattr(transformers, class_name):
                continue
            out.append(_entry(family, model_type, class_name))
    return out


def _config_for(cls, cfg):
    """The sub-config ``cls`` takes: a multimodal model type whose causal-LM
    class is its text model (Llama 4, Qwen 3.5) is given the composite
    config's text part, as ``AutoModelForCausalLM`` of a checkpoint is."""
    want = getattr(cls, "config_class", None)
    if want is None or isinstance(cfg, want) or not hasattr(cfg, "get_text_config"):
        return cfg
    text = cfg.get_text_config()
    return text if isinstance(text, want) else cfg


def _entry(family: str, model_type: str, class_name: str) -> Entry:
    def build():
        import transformers
        cfg = tiny_config(model_type)
        if family == "masked-lm" and getattr(cfg, "is_decoder", False):
            cfg.is_decoder = False  # (bidirectional: Reformer's causal-LM override refused)
        cls = getattr(transformers, class_name)
        model = cls(_config_for(cls, cfg))
        if hasattr(model, "set_default_language") and getattr(cfg, "languages", None):
            model.set_default_language(cfg.languages[0])  # (X-MOD's adapters: one per language)
        return model

    def batch(step: int) -> dict:
        if family == "image-classification" and _takes_tokens(class_name):
            return _token_batch(step) | {"labels": torch.randint(
                0, tiny_config(model_type).num_labels, (BATCH,), generator=generator(step))}
        if family == "semantic-segmentation":
            return _segmentation_batch(tiny_config(model_type))(step)
        if family in ("image-classification",):
            return (_patch_batch if _takes_patches(class_name) else _image_batch)(
                tiny_config(model_type))(step)
        if family == "ctc":
            import transformers
            return _ctc_batch(getattr(transformers, class_name), tiny_config(model_type))(step)
        if family == "audio-classification":
            import transformers
            return _audio_batch(getattr(transformers, class_name), tiny_config(model_type))(step)
        return _token_batch(step)
    return Entry(f"hf/{family}/{model_type}", family, seeded(build), batch, _loss)
