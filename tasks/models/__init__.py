"""Models with selectable layers: the registry (`registry`: name -> builder, `ModelSpec`), the
interface every model implements (`base.FederatedVLM`), the families (`minilm_effnet`, `hf`,
`generative`, `tiny_llava`), their shared transformers helpers (`hf_common`) and the checks of
the model settings (`checks`). A model with adapters is built by `tasks.build.build_model`.

The names load on first use (`lazy_loader`), so the run settings read the registry without torch.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(__name__, submod_attrs={
    "base": ["TASKS", "FederatedVLM"],
    "checks": ["check_model_settings"],
    "registry": ["MODELS", "REGISTRY", "ModelEntry", "ModelSpec", "parse_model"],
})
