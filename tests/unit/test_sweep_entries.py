"""The sweep's entries build a new model on each call (lazy_mlir/models)."""
import pytest
import torch

from lazy_mlir.models import nn_blocks


def _trains_eagerly(name: str):
    """One eager training step of the sweep entry ``name`` (its tiny config,
    batch and loss) gives a finite loss; its model."""
    from lazy_mlir.models.sweep import by_name
    entry = by_name(name)
    model = entry.make()
    loss = entry.loss(model, entry.batch(0))
    loss.backward()
    assert torch.isfinite(loss)
    return model


def test_each_nn_entry_builds_new_modules_with_the_same_weights():
    """An entry's eager and lazy runs each build the model: modules built
    once and shared between them (nn/activations' list) made the lazy run
    start from the weights the eager run had trained (0.1 off from the first
    step), and the run without dropout feed CPU batches to modules the lazy
    run had moved to the device (a crash)."""
    for entry in nn_blocks.entries():
        a, b = entry.make(), entry.make()
        pa, pb = list(a.parameters()), list(b.parameters())
        assert not {id(p) for p in pa} & {id(p) for p in pb}, entry.name
        assert all(torch.equal(p, q) for p, q in zip(pa, pb)), entry.name


def test_without_dropout_the_attention_dropout_is_off_too(monkeypatch):
    """nn.MultiheadAttention's dropout is a float, not a Dropout module: the
    run without dropout left it on, and nn/transformer_decoder's eager and
    lazy losses differed by 1% through the two dropout streams alone."""
    monkeypatch.setenv("LAZY_MLIR_SWEEP_NO_DROPOUT", "1")
    entry = next(e for e in nn_blocks.entries() if e.name == "nn/transformer_decoder")
    model = entry.make()
    attention = [m for m in model.modules() if isinstance(m, torch.nn.MultiheadAttention)]
    assert attention and all(m.dropout == 0.0 for m in attention)
    assert all(m.p == 0.0 for m in model.modules()
               if isinstance(m, torch.nn.modules.dropout._DropoutNd))


@pytest.mark.slow
def test_tiny_configs_of_recurrent_and_per_layer_models_train_eagerly():
    """The shrink table alone left Mamba2's heads x head_dim off expand x
    hidden, xLSTM's 4096-wide embedding beside hidden 64, Gemma3n's 35-layer
    lists (KV sharing, widths) on 2 layers and Reformer without a decoder or
    axial positions matching the sequence: each failed eagerly (the sweep's
    eager-fails), so the lazy device was never tried on them."""
    import transformers
    import transformers.models.auto.modeling_auto as auto

    from lazy_mlir.models.hf_tiny import _token_batch, tiny_config
    for model_type in ("mamba2", "bamba", "xlstm", "gemma3n_text", "reformer"):
        name = auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type]
        model = getattr(transformers, name)(tiny_config(model_type))
        loss = model(**_token_batch(0)).loss
        loss.backward()
        assert torch.isfinite(loss), model_type


def test_tiny_configs_keep_the_sizes_their_models_check():
    """The fast sibling of the test above: the config invariants those
    models' forwards check, on the configs alone (no model built)."""
    from lazy_mlir.models.hf_tiny import HIDDEN, LAYERS, SEQ, tiny_config
    mamba2 = tiny_config("mamba2")
    assert mamba2.num_heads * mamba2.head_dim == mamba2.expand * mamba2.hidden_size
    assert mamba2.num_heads % mamba2.n_groups == 0
    bamba = tiny_config("bamba")
    assert bamba.mamba_n_heads * bamba.mamba_d_head == bamba.mamba_expand * bamba.hidden_size
    xlstm = tiny_config("xlstm")  # (its 32 blocks x 16 tokens, each a step: a 900 s 'hang')
    assert xlstm.embedding_dim == HIDDEN and xlstm.num_blocks == LAYERS
    gemma3n = tiny_config("gemma3n_text")
    assert gemma3n.num_kv_shared_layers < LAYERS and len(gemma3n.intermediate_size) == LAYERS
    reformer = tiny_config("reformer")
    assert reformer.is_decoder and reformer.axial_pos_shape[0] * reformer.axial_pos_shape[1] == SEQ
    assert sum(reformer.axial_pos_embds_dim) == reformer.hidden_size


def test_the_audio_spectrogram_transformer_gets_a_spectrogram_it_trains_on():
    """AST's input is a max_length x num_mel_bins spectrogram (its position
    embeddings are per patch of it), not a waveform: the sweep gave it
    (2, 4000) samples and it failed eagerly (IndexError: Dimension out of
    range, the sweep's eager-fails), so the lazy device was never tried."""
    _trains_eagerly("hf/audio-classification/audio-spectrogram-transformer")


def test_siglip2_gets_its_image_cut_into_patches():
    """Siglip2's vision tower takes images already cut into patches, with each
    image's patch grid (``spatial_shapes``) and a patch mask: the sweep gave it
    (2, 3, 32, 32) pixels and it failed eagerly (mat1 and mat2 shapes cannot be
    multiplied (192x32 and 768x64), the sweep's eager-fails)."""
    _trains_eagerly("hf/image-classification/siglip2")


@pytest.mark.parametrize("name", ["hf/image-classification/cvt", "hf/masked-lm/esm",
                                  "hf/image-classification/mobilevit",
                                  "hf/image-classification/mobilevitv2"])
def test_cvt_esm_and_mobilevits_train_eagerly_at_their_tiny_size(name):
    """CvT's per-stage tuples have three stages, and the shrink table's
    two-stage num_heads left one short (IndexError: list index out of range;
    stage i also reads the i-th of its depth[i] drop-path rates);
    ESM's vocab_size is None by default, which the table (int sizes only)
    kept (TypeError: empty(): argument 'size' ... NoneType); MobileViT's three
    transformer widths were cut to the table's two stages (IndexError) and
    MobileViTV2's last stage unfolds 2x2 patches of a 1x1 map of a 32x32
    image (im2col: sliding blocks (0, 0)): each failed eagerly (the sweep's
    eager-fails)."""
    _trains_eagerly(name)


@pytest.mark.parametrize("name", ["nemotron", "hunyuan_v1_moe", "deepseek_v2", "diffllama",
                                  "qwen4_exp"])
def test_sizes_left_none_by_default_train_eagerly(name):
    """Nemotron's num_key_value_heads, HunYuan MoE's head_dim and DeepSeek
    V2's num_experts_per_tok are None by default and the shrink table set
    int sizes only: each failed eagerly (unsupported operand ... NoneType;
    topk(): argument 'k' must be int, not NoneType), the sweep's eager-fails.
    DiffLlama splits its KV heads in two: the table's one KV head failed
    ('requires num_key_value_heads to be even'). Qwen4-exp's indexer sizes
    are None too ('unsupported operand type(s) for //')."""
    _trains_eagerly(f"hf/causal-lm/{name}")


def test_bits_group_norm_groups_divide_its_tiny_widths():
    """BiT's GroupNorm keeps its default 32 groups, which the tiny stages'
    bottlenecks (4 and 8 channels) cannot hold: it failed eagerly
    ('num_channels (8) must be divisible by num_groups (32)')."""
    _trains_eagerly("hf/image-classification/bit")


@pytest.mark.parametrize("name", ["zamba2", "granitemoehybrid", "lfm2_moe", "longcat_flash",
                                  "zamba", "blt"])
def test_sizes_derived_when_a_config_is_built_train_eagerly(name):
    """Transformers derives some sizes when a config is built (Zamba2's and
    GraniteMoeHybrid's mamba head_dim = expand x hidden / heads, Zamba's
    attention width, LongCat's qk_head_dim = nope + rope) and the shrink
    table set the others afterwards: each failed eagerly (shape '[2, 16, 8,
    640]' is invalid; split_sizes sum to 192), the sweep's eager-fails. LFM2
    MoE's layer kinds are None by default (TypeError: 'NoneType' object is
    not subscriptable); Zamba's shared transformer needs two hybrid layers.
    BLT's local encoder and decoder kept the global width (2048) and its
    projection of the encoder's patches is derived (the size of tensor a (64)
    must match the size of tensor b (128)); its hash embeddings had 500002
    rows each (192M parameters)."""
    from lazy_mlir.tools.sweep_run import MAX_PARAMETERS
    model = _trains_eagerly(f"hf/causal-lm/{name}")
    assert sum(p.numel() for p in model.parameters()) < MAX_PARAMETERS


def test_a_cut_per_layer_list_keeps_one_layer_of_each_kind():
    """Cutting a hybrid's per-layer kinds to its first 2 layers left
    Qwen3.5, OLMo-Hybrid, Kimi Linear, Jamba, Zamba (two linear-attention
    layers) and Gemma3, Cohere2 (two sliding ones) without their full
    attention: the sweep never compiled the layer kind that differs."""
    from lazy_mlir.models.hf_tiny import every_kind_cut, tiny_config
    assert every_kind_cut(["a", "a", "a", "b", "a", "c"], 2) == ["a", "b"]
    assert every_kind_cut(["a", "a", "a", "b", "a", "c"], 3) == ["a", "b", "c"]
    assert every_kind_cut(["a", "b", "a", "b"], 2) == ["a", "b"]
    assert every_kind_cut(["a", "a", "a"], 2) == ["a", "a"]
    for model_type in ("qwen3_5_text", "olmo_hybrid", "kimi_linear", "gemma3_text"):
        kinds = tiny_config(model_type).layer_types
        assert len(kinds) == 2 and len(set(kinds)) == 2, (model_type, kinds)
    zamba2 = tiny_config("zamba2")
    assert zamba2.hybrid_layer_ids == [i for i, t in enumerate(zamba2.layers_block_type)
                                       if t == "hybrid"] != []


def test_nemotron_h_mixers_are_tiny_in_their_model_and_as_a_tower():
    """Nemotron-H's Mamba mixer is mamba_num_heads x mamba_head_dim wide (128
    x 64 by default), fields the shrink table does not know: 2.9M parameters,
    and as NeMo SpeechLM's text tower (overrides were for the top config only)
    35M, over the sweep's limit (too-big)."""
    from lazy_mlir.models.hf_tiny import HIDDEN, tiny_config
    from lazy_mlir.models.sweep import by_name
    for cfg in (tiny_config("nemotron_h"), tiny_config("nemo_speechlm").text_config):
        assert cfg.mamba_num_heads * cfg.mamba_head_dim == cfg.expand * HIDDEN
    with torch.device("meta"):
        model = by_name("hf/seq2seq-lm/nemo_speechlm").make()
    assert sum(p.numel() for p in model.parameters()) < 5_000_000


def test_vibevoice_asrs_tokenizer_stages_match_its_downsampling_ratios():
    """VibeVoice ASR's audio tokenizers have a stage per downsampling ratio
    (6 by default) and one more; the stage table's two depths left them
    short (IndexError: list index out of range, the sweep's eager-fails)."""
    _trains_eagerly("hf/seq2seq-lm/vibevoice_asr")


@pytest.mark.parametrize("name", ["hf/masked-lm/esmc", "hf/masked-lm/perceiver",
                                  "hf/masked-lm/reformer", "hf/image-classification/imagegpt"])
def test_esmc_perceiver_reformer_and_imagegpt_train_eagerly(name):
    """Each failed eagerly (the sweep's eager-fails): ESMC's k_norm is
    hidden-wide, so the table's one key-value head did not fit it
    (normalized_shape=[64] ... [2, 16, 32]);
    Perceiver's masked LM decodes max_position_embeddings tokens (batch_size
    (256) ... (32)); Reformer's causal-LM override (is_decoder) was refused
    by its masked LM; ImageGPT classifies token ids, not pixels ('You have
    to specify either input_ids or inputs_embeds')."""
    _trains_eagerly(name)


@pytest.mark.parametrize("name", ["hiera", "pvt", "textnet", "hgnet_v2"])
def test_vision_stages_fit_a_tiny_image(name):
    """Each failed eagerly (the sweep's eager-fails): Hiera's image_size is a
    (224, 224) pair the table (int sizes only) kept, against the batch's
    32x32 images (size of tensor a (64) ... b (3136)); PVT's last stage,
    the one with [CLS], must not reduce its sequence (shape '[2, 32, 4, 4]'
    is invalid); TextNet's stages are its four kernel lists and its widths
    one more (list index out of range); HGNetV2's own four-stage lists fed
    a 2048-wide classifier of hidden_sizes[-1] (2x2048 and 32x3)."""
    _trains_eagerly(f"hf/image-classification/{name}")


@pytest.mark.parametrize("name", ["perceiver", "luke"])
def test_perceivers_latents_and_lukes_entities_are_tiny(name):
    """Sizes of their own the shrink table did not know: Perceiver's latent
    array (256 latents x 1280, 26 self-attends per block), 260M parameters
    at the tiny size; LUKE's 500000 x 256 entity embeddings, 129M (the
    sweep's too-big)."""
    from lazy_mlir.models.sweep import by_name
    from lazy_mlir.tools.sweep_run import MAX_PARAMETERS
    with torch.device("meta"):
        model = by_name(f"hf/masked-lm/{name}").make()
    assert sum(p.numel() for p in model.parameters()) < MAX_PARAMETERS // 10


@pytest.mark.parametrize("name", ["llama4", "qwen3_5"])
def test_a_multimodal_type_s_causal_lm_is_built_from_its_text_config(name):
    """Llama 4's and Qwen 3.5's causal-LM classes are their text models: given
    the composite (vision + text) config they failed eagerly (no
    ``pad_token_id`` / ``vocab_size`` on it), so the sweep recorded eager-fails."""
    model = _trains_eagerly(f"hf/causal-lm/{name}")
    assert type(model.config).__name__.endswith("TextConfig")


@pytest.mark.parametrize("name", ["deepseek_v32", "glm_moe_dsa"])
def test_indexed_latent_attention_trains_eagerly(name):
    """DeepSeek V3.2's and GLM-MoE-DSA's latent attention expands keys and
    values to every head, and the attention repeats them num_heads /
    num_key_value_heads times more: the table's one key-value head made 4
    key heads beside 2 query heads (The size of tensor a (2) must match the
    size of tensor b (4), the sweep's eager-fails)."""
    _trains_eagerly(f"hf/causal-lm/{name}")


def test_gemma4s_per_layer_config_is_made_tiny():
    """Gemma 4's text config is per-layer (its global layers' head_dim is
    512): the shrink table's read of head_dim raised
    (AmbiguousGlobalPerLayerAttributeError, the sweep's eager-fails) and
    the layers' own head_dim was left large; its per-layer embeddings are
    262144 x 512 (134M parameters)."""
    from lazy_mlir.tools.sweep_run import MAX_PARAMETERS
    model = _trains_eagerly("hf/causal-lm/gemma4")
    assert sum(p.numel() for p in model.parameters()) < MAX_PARAMETERS // 10


@pytest.mark.parametrize("family", ["causal-lm", "masked-lm"])
def test_xmod_trains_eagerly_with_a_default_language(family):
    """X-MOD routes through one adapter per language and raised 'Input
    language unknown' until one is set: the entry sets its config's first."""
    _trains_eagerly(f"hf/{family}/xmod")


@pytest.mark.parametrize("name", ["hf/ctc/wav2vec2", "hf/ctc/wav2vec2-conformer",
                                  "hf/semantic-segmentation/segformer",
                                  "hf/semantic-segmentation/upernet"])
def test_ctc_and_segmentation_entries_train_eagerly_on_their_labels(name):
    """The CTC family's transcripts (2-4 labels a sample, -100 padded) fit
    the tiny audio's frames (a finite loss: no impossible alignment;
    Wav2Vec2-Conformer's vocabulary is unset by default); the
    segmentation family's per-pixel labels ignore 255 as ADE20k's do
    (UperNet's backbone names the stages of its tiny config, two)."""
    from lazy_mlir.models.sweep import by_name
    batch = by_name(name).batch(0)
    labels = batch["labels"]
    if "ctc" in name:
        assert ((labels >= 0).sum(-1) >= 2).all() and (labels != 0).all()
    else:
        assert (labels == 255).any() and labels.shape[-2:] == batch["pixel_values"].shape[-2:]
    _trains_eagerly(name)


def test_beits_segmentation_head_gets_its_four_layers():
    """BEiT's segmentation head reads four layers' features (it refused the
    two-layer tiny config: 'requires config.out_indices to be a list of 4')."""
    _trains_eagerly("hf/semantic-segmentation/beit")
