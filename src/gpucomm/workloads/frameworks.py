"""Training frameworks as data: each a kernel-efficiency set and an overlap set (`plan
--framework`), and the fp8 recipes (`--precision`), from `gpucomm/data/frameworks/*.yaml`,
every number with its source beside it.

    >>> get_framework("megatron").overlaps["dp_overlap"]
    True
    >>> get_recipe("tensorwise").cast_bytes
    6.0
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from importlib import resources

import yaml

from ..errors import ConfigError

OVERLAP_KEYS = ("dp_overlap", "tp_overlap", "cp_overlap", "pp_overlap", "ep_overlap")
FP8_RECIPES = ("tensorwise", "delayed", "rowwise", "blockwise", "mxfp8")
PRECISIONS = ("bf16", "fp8") + FP8_RECIPES  # "fp8": the framework's default recipe
RECIPES_FILE = "fp8_recipes.yaml"


@dataclass(frozen=True)
class Kernels:
    """Achievable rates of one GPU class under one framework, as fractions of the data-sheet
    peaks: bf16 GEMMs, fp8 GEMMs (0: no fp8 path), FlashAttention forward+backward."""
    gemm: float
    attention: float
    source: str
    gemm_fp8: float = 0.0


@dataclass(frozen=True)
class Recipe:
    """One fp8 scaling recipe: GEMM rate relative to a per-tensor-scaled fp8 GEMM, and HBM
    bytes moved per element of each fp8 GEMM operand by its quantization kernels."""
    name: str
    gemm: float
    cast_bytes: float
    gpus: tuple
    source: str


@dataclass(frozen=True)
class Framework:
    name: str
    description: str
    default_fp8: str
    fp8_weight_gather: bool  # ZeRO-3/FSDP all-gathers fp8 weights (torchao float8 + FSDP2)
    elementwise_passes: float  # HBM passes of the elementwise kernels over the fused count
    tp_overlap_hidden: float  # share of the TP traffic tp_overlap can hide
    overlaps: dict  # switch -> default on/off
    overlap_sources: dict
    kernels: dict = field(repr=False)  # GPU class (sm) -> Kernels
    grad_bytes: int = 4  # gradient element width kept and reduced
    selective: str = "attention"  # what --recompute selective keeps: "attention" (Korthikanti
    # et al.: the attention core re-run) or "op" (torchtitan per-op SAC)
    pp_fsdp_unsharded: bool = False  # with PP, FSDP keeps the stage's weights gathered and
    # accumulates unsharded gradients for the whole step (one gather, one reduce-scatter)
    cp_kv_expanded: bool = False  # GQA's K,V repeated to every query head before attention,
    # so context parallelism moves heads/kv_heads times the bytes
    fp8_saves_inputs: bool = False  # fp8 linear layers keep their quantized (fp8) inputs for
    # the weight-gradient GEMM instead of the bf16 ones (Transformer Engine)
    expert_gemm_host_s: float = 0.0  # host seconds per local expert per grouped expert GEMM
    # of a dropless MoE layer issued as one GEMM call per expert (0: one grouped kernel)

    def kernels_for(self, gpu) -> Kernels:
        sm = getattr(gpu, "sm", "")
        if sm in self.kernels:
            return self.kernels[sm]
        return self.kernels.get("sm90") or next(iter(self.kernels.values()))


def _data():
    return resources.files("gpucomm") / "data" / "frameworks"


def _num(d: dict, key: str, where: str, lo: float = 0.0, hi: float = 100.0) -> float:
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
        raise ConfigError(f"{where}: {key} must be a number from {lo} to {hi}, got {v!r}")
    return float(v)


def _framework(d: dict, where: str) -> Framework:
    kern = {}
    for sm, k in (d.get("kernels") or {}).items():
        if not k.get("source"):
            raise ConfigError(f"{where}: kernels.{sm} needs a source")
        kern[sm] = Kernels(_num(k, "gemm", where, 0.05, 1), _num(k, "attention", where, 0.05, 1),
                           k["source"], _num(k, "gemm_fp8", where, 0, 1) if "gemm_fp8" in k
                           else 0.0)
    ov = d.get("overlaps") or {}
    missing = [k for k in OVERLAP_KEYS if not isinstance(ov.get(k), dict)
               or "default" not in ov[k] or not ov[k].get("source")]
    if missing or not kern:
        raise ConfigError(f"{where}: needs kernels and every overlap with a source "
                          f"(missing {', '.join(missing) or 'kernels'})")
    if d.get("default_fp8") not in FP8_RECIPES:
        raise ConfigError(f"{where}: default_fp8 must be one of {', '.join(FP8_RECIPES)}")
    return Framework(d["name"], d.get("description", ""), d["default_fp8"],
                     bool(d.get("fp8_weight_gather")),
                     _num(d, "elementwise_passes", where, 1, 20),
                     _num(d, "tp_overlap_hidden", where, 0, 1),
                     {k: bool(ov[k]["default"]) for k in OVERLAP_KEYS},
                     {k: ov[k]["source"] for k in OVERLAP_KEYS}, kern,
                     int(_choice(d, "grad_bytes", (4, 2), where)),
                     _choice(d, "selective", ("attention", "op"), where),
                     bool(_choice(d, "pp_fsdp_unsharded", (False, True), where)),
                     bool(_choice(d, "cp_kv_expanded", (False, True), where)),
                     bool(_choice(d, "fp8_saves_inputs", (False, True), where)),
                     _host_s(d, where))


def _host_s(d: dict, where: str) -> float:
    """expert_gemm_host_s, in seconds; a non-zero value needs its source beside it."""
    if "expert_gemm_host_s" not in d:
        return 0.0
    v = _num(d, "expert_gemm_host_s", where, 0.0, 1e-3)
    if v and not d.get("expert_gemm_host_source"):
        raise ConfigError(f"{where}: expert_gemm_host_s needs an expert_gemm_host_source")
    return v


def _choice(d: dict, key: str, allowed: tuple, where: str) -> str:
    v = d.get(key, allowed[0])
    if v not in allowed:
        raise ConfigError(f"{where}: {key} must be one of {', '.join(allowed)}, got {v!r}")
    return v


@functools.lru_cache(maxsize=None)
def _frameworks() -> dict[str, Framework]:
    out = {}
    for entry in sorted(_data().iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml") and entry.name != RECIPES_FILE:
            fw = _framework(yaml.safe_load(entry.read_text()), f"frameworks/{entry.name}")
            if fw.name != entry.name[:-5]:
                raise ConfigError(f"frameworks/{entry.name}: name {fw.name!r} must match the "
                                  "file name")
            out[fw.name] = fw
    return out


@functools.lru_cache(maxsize=None)
def _recipes() -> dict[str, Recipe]:
    d = yaml.safe_load((_data() / RECIPES_FILE).read_text())
    return {name: Recipe(name, _num(r, "gemm", name, 0.1, 1), _num(r, "cast_bytes", name, 0, 32),
                         tuple(r["gpus"]), r["source"]) for name, r in d.items()}


def list_frameworks() -> list[str]:
    """Names of the shipped profiles (file names: no YAML is parsed to list them)."""
    return sorted(e.name[:-5] for e in _data().iterdir()
                  if e.name.endswith(".yaml") and e.name != RECIPES_FILE)


def get_framework(name: str) -> Framework:
    fws = _frameworks()
    if name not in fws:
        raise ConfigError(f"unknown framework {name!r}: allowed are {', '.join(fws)}")
    return fws[name]


def get_recipe(name: str) -> Recipe:
    recipes = _recipes()
    if name not in recipes:
        raise ConfigError(f"unknown fp8 recipe {name!r}: allowed are {', '.join(recipes)}")
    return recipes[name]


def fp8_recipe(precision: str, framework: str, gpu=None) -> Recipe | None:
    """The recipe a precision names (None for bf16), checked against the GPU's class."""
    if precision == "bf16":
        return None
    name = get_framework(framework).default_fp8 if precision == "fp8" else precision
    recipe = get_recipe(name)
    sm = getattr(gpu, "sm", None)
    if gpu is not None and (sm not in recipe.gpus or not getattr(gpu, "fp8_flops", 0.0)):
        ok = [r for r in FP8_RECIPES if sm in get_recipe(r).gpus]
        raise ConfigError(f"precision {precision}: {gpu.name} ({sm}) has no fp8 path for the "
                          f"{name} recipe in the catalog; "
                          + (f"recipes for it: {', '.join(ok)}" if ok and gpu.fp8_flops
                             else "use --precision bf16"))
    return recipe
