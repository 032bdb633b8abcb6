"""Every model setting acts or is refused, so none is silently ignored. A walk over (model,
run-config key, value):
each non-default value of every key that concerns the model either acts (asserted where cheap:
the layers, dtype, flags or LoRA modules change) or is refused with one line naming key, value and
model, by the run config, `tasks.build_model` or `check_model_settings` (what the server's
`plan_run` runs before round 1). The table of outcomes is printed (pytest -s)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from transformers import ViltModel

import tasks
from server_app.app import plan_run
from settings import ConfigError, RunConfig, default_config
from tasks.models import check_model_settings
from tasks.models.checks import LORA_RANK, NUM_BLOCKS
from tasks.models.hf import tiny_vilt_config
from tests.helpers.tiny_vlms import save_blip2, save_gemma3, save_llava

GENERATORS = ("tiny-llava", "hf-generator", "blip2")
CHECK_ONLY = ("minilm-effnet",)
"""Built once (with defaults; ~2 s a build on a shared CPU): its rows are the checks' verdicts, and
`assert_acts` runs on the models built per setting (the adapter code is the same for every model)."""
TARGET = {"minilm-effnet": "query", "tiny-vilt": "query", "hf-encoder": "query", "tiny-llava": "q_proj",
          "hf-generator": "q_proj", "blip2": "q_proj"}  # a Linear each model's selectable layers have
SETTINGS = [("adapter", "layer"), ("adapter", "pq-lora"), ("model-sizes", "large"), ("vlm-layers", "vision"),
            ("vlm-layers", "both"), ("max-new-tokens", 5), ("dtype", "bfloat16"), ("quantization", "4bit"),
            ("gradient-checkpointing", True), ("lora-targets", "<valid>"), ("lora-targets", "<valid>,nope"),
            ("head", "shared"), ("head", "frozen"), ("score-mode", "logit"), ("num-blocks", 2),
            ("lora-rank", 4)]


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("settings")
    torch.manual_seed(0)
    ViltModel(tiny_vilt_config()).save_pretrained(root / "encoder")
    save_llava(root / "llava")
    save_blip2(root / "blip2")
    return {"minilm-effnet": "minilm-effnet", "tiny-vilt": "tiny-vilt", "tiny-llava": "tiny-llava",
            "hf-encoder": f"hf:{root / 'encoder'}", "hf-generator": f"hf:{root / 'llava'}",
            "blip2": f"hf:{root / 'blip2'}"}


def expected_to_act(kind: str, key: str, value: object) -> bool:
    """The oracle: which pairs must act (everything else must be refused)."""
    generator = kind in GENERATORS
    if key == "adapter" or key == "lora-rank" or (key == "lora-targets" and not str(value).endswith(",nope")):
        return True
    if key == "model-sizes":
        return kind in ("minilm-effnet", "tiny-vilt")
    if key in ("vlm-layers", "max-new-tokens", "dtype", "gradient-checkpointing"):
        return generator
    if key == "quantization":  # acts on a CUDA device (settings.local refuses 4bit off CUDA on its own)
        return kind in ("hf-generator", "blip2")
    if key == "head" and value == "frozen":  # a generator's projector stays as loaded; a drawn head trains
        return generator
    if key in ("head", "score-mode"):
        return not generator
    return False  # num-blocks with adapter = "lora"; a lora-targets name that matches nothing


def apply_setting(kind: str, name: str, key: str, value: object, cache: dict):
    """What a run with ``key = value`` (all else default) does up to round 1: the run config, the
    client's model (with the client's dtype; the server's unquantised one for ``quantization``) and
    the server's `check_model_settings`. Returns the model, or raises the one-line refusal."""
    value = value.replace("<valid>", TARGET[kind]) if isinstance(value, str) else value
    config = RunConfig.from_mapping({**default_config(), "model": name, "dataset": "synthetic", key: value})
    spec = config.model_spec("cpu", client=key != "quantization", size=config.model_sizes)
    if kind not in GENERATORS:  # an encoder's build takes none of these: share one build
        spec = replace(spec, vlm_layers="language", max_new_tokens=0, dtype="float32",
                       gradient_checkpointing=False)
    if kind in CHECK_ONLY and cache:  # the build code it skips is walked on tiny-vilt
        spec = next(iter(cache))
    if spec not in cache:
        cache[spec] = tasks.build_model(spec, 3)
    model = cache[spec]
    check_model_settings(config.model_spec("cpu", size=config.model_sizes), model, config.scoring.mode)
    return model, value


def assert_acts(kind: str, model, key: str, value: object, default) -> None:
    """Where cheap, that an accepted setting changed the model."""
    frozen = {p.dtype for n, p in model.named_parameters() if "lora_" not in n and p.is_floating_point()}
    if key == "adapter":
        assert model.adapter == value
    elif key == "vlm-layers":
        assert model.layer_names != default.layer_names and model.layer_names[-1].startswith(
            default.layer_names[-1] if value == "both" else "backbone")
        if kind == "blip2":  # the Q-Former's blocks are selectable between vision and projector
            assert any(".qformer.encoder.layer." in n for n in model.layer_names)
    elif key == "max-new-tokens":
        assert model.new_tokens() == value
    elif key == "dtype":
        assert frozen == {torch.bfloat16}
    elif key == "gradient-checkpointing":
        assert model.backbone.is_gradient_checkpointing
    elif key == "lora-targets":
        adapted = {n.rpartition(".lora_A")[0].rpartition(".")[2] for n, _ in model.named_parameters()
                   if ".lora_A" in n}
        assert adapted == {value}
    elif key == "lora-rank":
        assert {p.shape[0] for n, p in model.named_parameters() if "lora_A" in n} == {value}
    elif key == "head" and value == "frozen":
        assert model.personal_prefixes == () and not tasks.get_personal_state(model)
    elif key == "head":
        assert model.shared_head
    elif key == "model-sizes":
        assert sum(p.numel() for p in model.parameters()) > sum(p.numel() for p in default.parameters())


def test_every_setting_model_pair_acts_or_is_refused_with_one_line(models):
    rows = []
    for kind, name in models.items():
        cache: dict = {}
        default, _ = apply_setting(kind, name, "adapter", "lora", cache)
        for key, raw in SETTINGS:
            try:
                model, value = apply_setting(kind, name, key, raw, cache)
            except (ValueError, ConfigError) as err:
                line = str(err)
                value = raw.replace("<valid>", TARGET[kind]) if isinstance(raw, str) else raw
                assert "\n" not in line and line.startswith(f"{key} = {value!r}"), line
                assert "not supported by model" not in line or repr(name) in line, line
                rows.append((kind, key, value, f"refused: {line}"))
                assert not expected_to_act(kind, key, raw), rows[-1]
                continue
            assert expected_to_act(kind, key, raw), (kind, key, value, "acts")
            if kind not in CHECK_ONLY:
                assert_acts(kind, model, key, value, default)
            rows.append((kind, key, value, "acts" if kind not in CHECK_ONLY else "acts (checked, not built)"))
    for row in rows:
        print(*row, sep=" | ")
    assert len(rows) == len(models) * len(SETTINGS)
    assert {r[0] for r in rows if r[3].startswith("acts")} == set(models)
    assert sum(r[3].startswith("refused") for r in rows) >= len(models) * 2  # two are refused everywhere


def test_defaults_of_the_checks_are_the_run_config_defaults():
    assert (default_config()["num-blocks"], default_config()["lora-rank"]) == (NUM_BLOCKS, LORA_RANK)


@pytest.mark.parametrize(("adapter", "key", "value"), [("layer", "lora-rank", 4),
                                                       ("layer", "quantization", "4bit"),
                                                       ("pq-lora", "lora-targets", ("query",))])
def test_adapter_settings_an_adapter_ignores_are_refused(adapter, key, value):
    model = tasks.build_model(tasks.ModelSpec("tiny-vilt", adapter=adapter, seed=0), 3)
    options = {"lora-rank": {"lora_rank": value}, "lora-targets": {"lora_targets": value},
               "quantization": {"quantization": value}}[key]
    with pytest.raises(ValueError, match=rf"^{key} = .* is not supported by model 'tiny-vilt' with adapter"):
        check_model_settings(tasks.ModelSpec("tiny-vilt", adapter=adapter, seed=0, **options), model)


def test_build_model_refuses_a_shared_head_on_a_generator_instead_of_dropping_it():
    with pytest.raises(ValueError, match="head = 'shared' is not supported by model 'tiny-llava'"):
        tasks.build_model(tasks.ModelSpec("tiny-llava", seed=0, shared_head=True), 3)
    assert tasks.build_model(tasks.ModelSpec("tiny-vilt", seed=0, shared_head=True), 3).shared_head


@pytest.mark.parametrize(("model", "key", "value"), [("tiny-vilt", "quantization", "4bit"),
                                                     ("tiny-llava", "head", "shared"),
                                                     ("tiny-llava", "score-mode", "logit"),
                                                     ("tiny-vilt", "vlm-layers", "both"),
                                                     ("tiny-vilt", "max-new-tokens", 5),
                                                     ("tiny-vilt", "dtype", "bfloat16"),
                                                     ("tiny-vilt", "gradient-checkpointing", True),
                                                     ("tiny-vilt", "lora-targets", "query,nope"),
                                                     ("tiny-vilt", "num-blocks", 2),
                                                     ("tiny-vilt", "eval-answers", "closed-set")])
def test_plan_run_refuses_before_round_1(model, key, value, tmp_path):
    config = RunConfig.from_mapping({**default_config(), "model": model, "dataset": "synthetic",
                                     key: value, "results-dir": str(tmp_path)})
    with pytest.raises(ConfigError) as err:
        plan_run(config)
    assert f"{key} = {value!r} is not supported by model {model!r}" in str(err.value)
    assert "\n" not in str(err.value)


def test_the_run_config_refuses_a_large_size_of_a_one_size_model():
    with pytest.raises(ConfigError, match="model-sizes = 'large' must list sizes among base"):
        RunConfig.from_mapping({**default_config(), "model": "tiny-llava", "model-sizes": "large"})


def test_a_projector_without_linear_modules_is_not_a_selectable_layer(tmp_path):
    """Gemma 3's projector is a bare weight (no Linear for LoRA): selecting it would spend a budget
    slot on a layer that trains nothing, so vlm-layers = 'vision' offers only its vision blocks."""
    spec = tasks.ModelSpec(f"hf:{save_gemma3(tmp_path / 'gemma3')}", seed=0, vlm_layers="vision")
    model = tasks.build_model(spec, 1)
    assert model.layer_names and not any("projector" in name for name in model.layer_names)
    trained = {name for name in model.layer_names
               if any(p.requires_grad for n, p in model.named_parameters() if n.startswith(name + "."))}
    assert trained == set(model.layer_names)
