"""Hugging Face workloads: ``arch:<model_type>`` (tiny, random weights, offline) and ``hf:<dir>``.

Architectures are built from their config class with small sizes, so any model type that
transformers knows can be tried without downloading anything. Inputs are token ids and an
attention mask drawn from a seeded generator; ``use_cache=False`` keeps the forward pass a
pure function of its inputs (a KV cache object is not an output to compare).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from bakeoff.errors import SpecError, WorkloadError
from bakeoff.specsyntax import parse_bool
from bakeoff.workload.base import BuiltWorkload, WorkloadSpec
from bakeoff.workload.tiny import extra_inputs, known_failure, tree_config, uses_tree

__all__ = ["ARCH_DEFAULTS", "build_arch", "build_hf_dir", "check_arch_options", "list_architectures"]

#: Short option names -> (config attribute, default). Defaults make a model of ~100k
#: parameters that runs a forward pass in about a millisecond on one CPU core.
ARCH_DEFAULTS: dict[str, tuple[str, int]] = {
    "layers": ("num_hidden_layers", 2),
    "hidden": ("hidden_size", 64),
    "heads": ("num_attention_heads", 4),
    "kv_heads": ("num_key_value_heads", 2),
    "intermediate": ("intermediate_size", 128),
    "vocab": ("vocab_size", 1024),
    "positions": ("max_position_embeddings", 512),
}
#: arch: workloads larger than this are refused unless ``max_params=N`` allows them: a config
#: the tiny defaults do not fully reach (a nested config, say) must not exhaust memory.
MAX_PARAMS = 100_000_000
#: Input options, not config options.
INPUT_DEFAULTS = {"batch": 1, "seq": 16, "seed": 0}
#: The most layers an ``arch:`` workload may ask for, and the most tokens (batch x seq) of its input.
MAX_LAYERS = 1000
MAX_TOKENS = 2**26
_CATEGORIES = ("causal_lm", "base")


def _mappings() -> tuple[dict[str, str], dict[str, str]]:
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_MAPPING_NAMES,
    )

    return dict(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES), dict(MODEL_MAPPING_NAMES)


def list_architectures() -> dict[str, str]:
    """Model types usable as ``arch:<name>``, mapped to the head bakeoff builds for them (see
    :func:`_architectures`; a copy, computed once per process)."""
    return dict(_architectures())


@functools.lru_cache(maxsize=1)
def _architectures() -> dict[str, str]:
    """Model types usable as ``arch:<name>``, mapped to the head bakeoff builds for them.

    Decoders get their causal-LM head (logits are what a service returns). Encoders such as
    BERT also have a causal-LM class in transformers, but it is not how they are used: types
    with a masked-LM head are built as the base model (hidden states) instead.
    """
    from transformers.models.auto import modeling_auto as auto

    causal, base = _mappings()
    names = {name: "causal_lm" for name in causal if name not in auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES}
    # Base models only for architectures with a text task head: vision and audio models take
    # pixel values or waveforms, not the token ids bakeoff generates.
    text = set(auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES) | set(auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES)
    text |= set(auto.MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES) | set(
        auto.MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES
    )
    names.update({name: "base" for name in base if name not in names and name in text})
    return dict(sorted(names.items()))


def _int_option(spec: WorkloadSpec, key: str, value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise SpecError(f"option {key}={value!r} in {spec} is not an integer", hint=f"e.g. {key}=2") from None
    if key == "seed":
        if number < 0:
            raise SpecError(f"seed={value!r} in {spec} is negative", hint="use a seed >= 0")
    elif number < 1:
        raise SpecError(f"option {key}={value!r} in {spec} must be at least 1", hint="use a positive size")
    if key == "layers" and number > MAX_LAYERS:  # counting parameters builds every layer, even on meta
        raise SpecError(
            f"layers={value} in {spec} is more than {MAX_LAYERS:,}", hint="the deepest models have about 100 layers"
        )
    return number


def _input_options(spec: WorkloadSpec, used: set[str]) -> dict[str, int]:
    values = dict(INPUT_DEFAULTS)
    for key in INPUT_DEFAULTS:
        if key in spec.options:
            values[key] = _int_option(spec, key, spec.options[key])
            used.add(key)
    if values["batch"] < 1 or values["seq"] < 1:
        raise SpecError(f"batch and seq must be at least 1 in {spec}", hint="e.g. seq=16")
    if values["batch"] * values["seq"] > MAX_TOKENS:
        raise SpecError(
            f"batch={values['batch']:,} x seq={values['seq']:,} in {spec} is more than {MAX_TOKENS:,} tokens",
            hint="use a smaller batch or seq",
        )
    return values


def _sub_configs(config: Any) -> list[Any]:
    """Nested configs (``text_config``, ``vision_config``...) of multimodal architectures."""
    from transformers import PretrainedConfig

    return [value for value in vars(config).values() if isinstance(value, PretrainedConfig)]


def _shrink_config(config: Any, sizes: dict[str, int], explicit: set[str]) -> None:
    """Apply the small sizes to a config and, recursively, to its nested configs."""
    for key, (attr, _) in ARCH_DEFAULTS.items():
        if hasattr(config, attr):
            _shrink(config, (attr,), sizes[key])
        elif key in explicit and config is not None:
            setattr(config, attr, sizes[key])
    head_dim = sizes["hidden"] // sizes["heads"]
    _shrink(config, ("head_dim", "d_kv"), head_dim)
    _shrink(
        config,
        (
            "n_inner",
            "ffn_dim",
            "encoder_ffn_dim",
            "decoder_ffn_dim",
            "d_ff",
            "moe_intermediate_size",
            "shared_expert_intermediate_size",
            "intermediate_size_mlp",
        ),
        sizes["intermediate"],
    )
    _shrink(config, ("word_embed_proj_dim", "projection_dim"), sizes["hidden"])
    _shrink(config, ("num_experts", "num_local_experts", "n_routed_experts"), 4, only_down=True)
    _shrink(config, ("num_experts_per_tok",), 2, only_down=True)
    _shrink(config, ("encoder_layers", "decoder_layers", "num_decoder_layers"), sizes["layers"], only_down=True)
    _shrink(config, ("encoder_attention_heads", "decoder_attention_heads"), sizes["heads"], only_down=True)
    for attr in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
        value = getattr(config, attr, None)
        if isinstance(value, int) and value >= sizes["vocab"]:
            _shrink(config, (attr,), 0)
        elif isinstance(value, list) and any(v >= sizes["vocab"] for v in value):
            _shrink(config, (attr,), [v for v in value if v < sizes["vocab"]] or 0)
    for attr in ("n_positions", "n_ctx", "max_seq_len"):
        if getattr(config, attr, None):
            setattr(config, attr, sizes["positions"])
    for attr in ("layer_types", "layers_block_type"):
        if isinstance(getattr(config, attr, None), list):
            _shrink(config, (attr,), getattr(config, attr)[: sizes["layers"]] or None)
    for sub in _sub_configs(config):
        _shrink_config(sub, sizes, set())


def _sizes(spec: WorkloadSpec) -> dict[str, int]:
    """The size options of ``arch:<name>``, each checked, with the defaults for the rest (the
    default kv_heads becomes heads where it does not divide them)."""
    sizes = {key: default for key, (_, default) in ARCH_DEFAULTS.items()}
    for key in ARCH_DEFAULTS:
        if key in spec.options:
            sizes[key] = _int_option(spec, key, spec.options[key])
    if sizes["hidden"] % sizes["heads"]:
        raise SpecError(
            f"hidden={sizes['hidden']} is not divisible by heads={sizes['heads']} in {spec}",
            hint="pick hidden as a multiple of heads",
        )
    if sizes["heads"] % sizes["kv_heads"]:
        if "kv_heads" in spec.options:
            raise SpecError(
                f"heads={sizes['heads']} is not divisible by kv_heads={sizes['kv_heads']} in {spec}",
                hint="pick kv_heads as a divisor of heads",
            )
        sizes["kv_heads"] = sizes["heads"]  # the default does not fit the heads chosen: use full attention
    return sizes


def check_arch_options(spec: WorkloadSpec) -> None:
    """Check what can be checked of an ``arch:`` spec's options without building it: the sizes,
    the input shape, the seed and ``max_params`` (an option naming a config attribute needs
    the config, and is checked when the workload is built).

    Raises:
        SpecError: a value that is not a positive integer (a seed: not negative), or sizes that
            do not fit together.
    """
    _sizes(spec)
    _input_options(spec, set())
    if "max_params" in spec.options:
        _int_option(spec, "max_params", spec.options["max_params"])


def _tiny_config(spec: WorkloadSpec, used: set[str]) -> Any:
    """The config of ``arch:<name>`` with small sizes, from the standard names or the whole tree.

    Types listed in the exception table (:mod:`bakeoff.workload.tiny`) are shrunk through their
    whole config tree; every other type keeps the standard-name shrink it has always had.
    """
    from transformers import AutoConfig

    sizes = _sizes(spec)
    explicit = {key for key in ARCH_DEFAULTS if key in spec.options}
    used.update(explicit)
    if uses_tree(spec.name):
        try:
            config = tree_config(spec.name, sizes, explicit)
        except Exception as exc:  # the config class refuses the sizes, or its defaults are broken
            raise _build_error(spec, exc) from exc
    else:
        config = AutoConfig.for_model(spec.name)
        _shrink_config(config, sizes, explicit)
    # Any remaining option names a config attribute directly (e.g. sliding_window=8).
    for key, value in spec.options.items():
        if key in used or key in INPUT_DEFAULTS or key == "max_params":
            continue
        if not hasattr(config, key):
            valid = ", ".join([*ARCH_DEFAULTS, *INPUT_DEFAULTS, "max_params"])
            raise SpecError(
                f"unknown option {key!r} for {spec}", hint=f"use {valid}, or an attribute of the {spec.name} config"
            )
        current = getattr(config, key)
        setattr(config, key, _coerce(value, current, spec, key))
        used.add(key)
    config.use_cache = False
    return config


def _shrink(config: Any, attrs: tuple[str, ...], value: Any, only_down: bool = False) -> None:
    """Set each attribute the config already has (and can set) to a small ``value``."""
    for attr in attrs:
        current = getattr(config, attr, None)
        if current is None or (only_down and isinstance(current, int) and current <= value):
            continue
        try:
            setattr(config, attr, value)
        except AttributeError:  # a read-only property derived from other fields
            pass


def _coerce(value: str, current: Any, spec: WorkloadSpec, key: str) -> Any:
    if isinstance(current, bool):
        return parse_bool(value, key, spec.spec)
    if isinstance(current, int):
        return _int_option(spec, key, value)
    if isinstance(current, float):
        try:
            return float(value)
        except ValueError:
            raise SpecError(f"option {key}={value!r} in {spec} is not a number", hint="e.g. 0.1") from None
    return value


def _token_inputs(config: Any, batch: int, seq: int, seed: int) -> dict[str, Any]:
    import torch

    generator = torch.Generator().manual_seed(seed)
    vocab = int(getattr(config, "vocab_size", 1000) or 1000)
    input_ids = torch.randint(0, vocab, (batch, seq), generator=generator)
    inputs: dict[str, Any] = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
    if getattr(config, "is_encoder_decoder", False):
        inputs["decoder_input_ids"] = input_ids.clone()
    for key, value in extra_inputs(getattr(config, "model_type", "")).items():
        inputs[key] = torch.full((batch,), value, dtype=torch.long)
    return inputs


def _model_class(model_type: str) -> tuple[str, Any]:
    from transformers import AutoModel, AutoModelForCausalLM

    category = list_architectures().get(model_type)
    if category is None:
        raise SpecError(f"unknown architecture {model_type!r}", hint="run `bakeoff workloads` to list the valid names")
    return category, AutoModelForCausalLM if category == "causal_lm" else AutoModel


def _config_summary(config: Any) -> dict[str, Any]:
    keys = [attr for attr, _ in ARCH_DEFAULTS.values()] + ["model_type", "head_dim"]
    return {k: getattr(config, k) for k in keys if isinstance(getattr(config, k, None), int | str)}


def _finish(
    spec: WorkloadSpec, model: Any, config: Any, category: str, inputs: dict, seed: int, identity: dict
) -> BuiltWorkload:
    import transformers

    model.eval()
    details = {
        "transformers": transformers.__version__,
        "head": category,
        "model_class": type(model).__name__,
        "parameters": sum(p.numel() for p in model.parameters()),
        "config": _config_summary(config),
        "inputs": {k: list(v.shape) for k, v in inputs.items()},
    }
    extra = {"use_cache": False} if category == "causal_lm" else {}

    def make_inputs(batch: int, seq: int) -> tuple[tuple, dict]:
        # a seed per shape, so each shape's tokens are reproducible whatever the profile's order
        tokens = _token_inputs(config, batch, seq, seed * 1_000_003 + batch * 10_007 + seq)
        if any(t.device != inputs["input_ids"].device for t in tokens.values()):
            tokens = {k: v.to(inputs["input_ids"].device) for k, v in tokens.items()}
        return (), {**tokens, **extra}

    training = None
    if category == "causal_lm":
        from bakeoff.workload.training import TrainingRecipe, causal_lm_loss

        shape = tuple(inputs["input_ids"].shape)

        def batch(step: int) -> tuple[tuple, dict]:
            # a seed per step, apart from the profile's: every run sees the same data in the same order
            tokens = _token_inputs(config, shape[0], shape[1], seed * 1_000_003 + 7_919 * (step + 1) + 1)
            return (), {**tokens, "labels": tokens["input_ids"], **extra}

        training = TrainingRecipe("causal_lm", batch, causal_lm_loss)
    return BuiltWorkload(
        spec=spec,
        model=model,
        kwargs={**inputs, **extra},
        seed=seed,
        details=details,
        identity=identity,
        make_inputs=make_inputs,
        training=training,
    )


def _build_error(spec: WorkloadSpec, exc: Exception) -> WorkloadError:
    """One line for a config or model that does not build, with the known reason if listed."""
    first = (str(exc).splitlines() or [""])[0][:300]
    known = known_failure(spec.name)
    return WorkloadError(
        f"could not build {spec}: {type(exc).__name__}: {first}" + (f" (known: {known})" if known else ""),
        hint="check the options against this architecture's config (bakeoff workloads lists the options)",
    )


def _largest_modules(model: Any, count: int = 3) -> str:
    """The leaf modules with the most parameters: they name the size the shrink did not reach."""
    sizes = [
        (sum(p.numel() for p in module.parameters(recurse=False)), name)
        for name, module in model.named_modules()
        if any(True for _ in module.parameters(recurse=False))
    ]
    return ", ".join(f"{name} {size:,}" for size, name in sorted(sizes, reverse=True)[:count])


def build_arch(spec: WorkloadSpec) -> BuiltWorkload:
    """Build ``arch:<model_type>`` with random weights from a seeded generator."""
    import torch

    category, auto_class = _model_class(spec.name)
    used: set[str] = set()
    input_opts = _input_options(spec, used)
    config = _tiny_config(spec, used)
    limit = _int_option(spec, "max_params", spec.options["max_params"]) if "max_params" in spec.options else MAX_PARAMS
    try:
        with torch.device("meta"):  # count first: an unshrunk config must not exhaust memory
            counted = auto_class.from_config(config)
        parameters = sum(p.numel() for p in counted.parameters())
        if parameters > limit:
            raise WorkloadError(
                f"{spec} would have {parameters:,} parameters, more than max_params={limit:,}"
                f" (largest: {_largest_modules(counted)})",
                hint="pass smaller sizes (layers, hidden, ...) or raise the limit with max_params=N",
            )
        torch.manual_seed(input_opts["seed"])
        model = auto_class.from_config(config)
    except WorkloadError:
        raise
    except Exception as exc:  # transformers raises many kinds for inconsistent configs
        raise _build_error(spec, exc) from exc
    inputs = _token_inputs(config, input_opts["batch"], input_opts["seq"], input_opts["seed"])
    identity = {"kind": "arch", "config": config.to_diff_dict(), "class": type(model).__name__}
    identity["config"].pop("transformers_version", None)
    built = _finish(spec, model, config, category, inputs, input_opts["seed"], identity)
    built.details["shrink"] = "tree" if uses_tree(spec.name) else "names"
    return built


def build_hf_dir(spec: WorkloadSpec, device: str | None = None) -> BuiltWorkload:
    """Load ``hf:<path>`` from a local directory (or a hub id when the hub is reachable).

    With ``?device_map=auto`` (or any device name) the model is loaded the way an application
    using ``from_pretrained(..., device_map=...)`` would load it for the target, and bakeoff
    leaves its placement alone: a device map that does not recognise the device and keeps
    layers on the CPU is then what the placement audit finds.
    """
    import torch
    from transformers import AutoConfig
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one "Loading weights" bar per worker is noise
    used: set[str] = set()
    input_opts = _input_options(spec, used)
    device_map = spec.options.get("device_map")
    if device_map is not None:
        used.add("device_map")
    unknown = set(spec.options) - used
    if unknown:
        raise SpecError(
            f"unknown option {sorted(unknown)[0]!r} for {spec}",
            hint="hf: workloads take batch, seq, seed and device_map",
        )
    path = Path(spec.name).expanduser()
    if not path.exists() and (spec.name.startswith(("/", ".", "~")) or spec.name.count("/") > 1):
        raise WorkloadError(
            f"no such directory {spec.name!r}", hint="point hf: at a directory saved with save_pretrained"
        )
    source = str(path) if path.exists() else spec.name
    if path.exists() and not (path / "config.json").is_file():
        raise WorkloadError(f"{path} has no config.json", hint="point hf: at a directory saved with save_pretrained")
    try:
        config = AutoConfig.from_pretrained(source)
        category, auto_class = _model_class(config.model_type)
        placement = {"device_map": device_map} if device_map is not None and device is not None else {}
        model = auto_class.from_pretrained(source, dtype=torch.float32, **placement)
    except SpecError:
        raise
    except ImportError as exc:
        raise WorkloadError(f"could not load {spec}: {exc}", hint="device_map needs `pip install accelerate`") from exc
    except Exception as exc:  # OSError, ValueError, SafetensorError, ... from a broken directory
        raise WorkloadError(
            f"could not load {spec}: {type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}",
            hint="give a local directory with config.json and weights; hub ids need network access",
        ) from exc
    config.use_cache = False
    inputs = _token_inputs(config, input_opts["batch"], input_opts["seq"], input_opts["seed"])
    if placement:  # as an application does: inputs go where from_pretrained put the model
        inputs = {k: v.to(model.device) for k, v in inputs.items()}  # make_inputs follows them
    identity = {"kind": "hf", "source": source, "config": config.to_diff_dict()}
    identity["config"].pop("transformers_version", None)
    built = _finish(spec, model, config, category, inputs, input_opts["seed"], identity)
    built.self_placed = bool(placement)
    return built
