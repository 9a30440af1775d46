"""Transformer model configs: the shape a planner needs (layers, widths, heads, experts), from YAML.

Shipped configs live in `gpucomm/data/models/*.yaml`, each with its source; any other decoder-only
transformer loads from a YAML file of the same shape:

    name: llama3-70b
    layers: 80            # transformer blocks
    hidden: 8192          # model width h
    ffn: 28672            # MLP inner width (per expert for MoE)
    heads: 64             # query heads a
    kv_heads: 8           # key/value heads (GQA); = heads for multi-head attention
    vocab: 128256
    mlp: swiglu           # swiglu (3 matrices: gate, up, down) or gelu (2 matrices)
    experts: 1            # MoE: experts per layer (1 = dense)
    top_k: 1              # MoE: experts each token is routed to
    shared_experts: 0     # MoE: experts every token also passes through (DeepSeek)
    dense_layers: 0       # MoE: leading layers with a dense MLP of width dense_ffn
    route_nodes: 0        # MoE: node-limited routing, a token reaches at most this many nodes
    kv_lora_rank: 0       # MLA (DeepSeek-V2/V3): compressed KV width; 0 = ordinary attention
    mtp_layers: 0         # multi-token prediction modules after the last layer (DeepSeek-V3: 1)
    source: "..."

    >>> m = get_model("llama3-70b")
    >>> round(m.params / 1e9, 1)
    70.6
"""
from __future__ import annotations

import functools
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

import yaml

from ..errors import ConfigError
from ..inputs import check_number, load_yaml_file

MLP_KINDS = {"swiglu": 3, "gelu": 2}  # weight matrices of h x ffn in one MLP
_REQUIRED = ("name", "layers", "hidden", "ffn", "heads", "vocab")


@dataclass(frozen=True)
class ModelConfig:
    """One decoder-only transformer. Parameter counts ignore norms' and biases' few vectors."""
    name: str
    layers: int
    hidden: int
    ffn: int
    heads: int
    vocab: int
    kv_heads: int = 0  # 0: same as heads (multi-head attention)
    head_dim: int = 0  # 0: hidden // heads
    mlp: str = "swiglu"
    experts: int = 1
    top_k: int = 1
    shared_experts: int = 0
    dense_layers: int = 0
    dense_ffn: int = 0  # 0: same as ffn
    route_nodes: int = 0  # 0: routing is not node-limited
    # multi-head latent attention (DeepSeek-V2/V3); kv_lora_rank 0 = ordinary (GQA) attention
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    rope_head_dim: int = 0  # decoupled rotary part of each query/key head
    v_head_dim: int = 0  # 0: head_dim
    tied_embeddings: bool = False
    mtp_layers: int = 0  # multi-token prediction modules (DeepSeek-V3: 1), on the last stage
    source: str = ""

    def __post_init__(self):
        for field in ("layers", "hidden", "ffn", "heads", "vocab", "experts", "top_k"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"model {self.name!r}: {field} must be an integer >= 1, "
                                  f"got {value!r}")
        if self.kv_heads == 0:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.head_dim == 0:
            if self.hidden % self.heads:
                raise ConfigError(f"model {self.name!r}: hidden {self.hidden} is not a multiple "
                                  f"of heads {self.heads}; give head_dim explicitly")
            object.__setattr__(self, "head_dim", self.hidden // self.heads)
        if self.kv_heads < 1 or self.heads % self.kv_heads:
            raise ConfigError(f"model {self.name!r}: kv_heads {self.kv_heads} must divide "
                              f"heads {self.heads}")
        if self.mlp not in MLP_KINDS:
            raise ConfigError(f"model {self.name!r}: mlp {self.mlp!r} is unknown: allowed are "
                              f"{', '.join(MLP_KINDS)}")
        for field in ("shared_experts", "dense_layers", "dense_ffn", "route_nodes",
                      "q_lora_rank", "kv_lora_rank", "rope_head_dim", "v_head_dim", "mtp_layers"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"model {self.name!r}: {field} must be an integer >= 0, "
                                  f"got {value!r}")
        if self.dense_layers >= self.layers:
            raise ConfigError(f"model {self.name!r}: dense_layers {self.dense_layers} must be "
                              f"below layers {self.layers}")
        if self.dense_ffn == 0:
            object.__setattr__(self, "dense_ffn", self.ffn)
        if self.v_head_dim == 0:
            object.__setattr__(self, "v_head_dim", self.head_dim)
        if self.top_k > self.experts:
            raise ConfigError(f"model {self.name!r}: top_k {self.top_k} exceeds experts "
                              f"{self.experts}")

    # -- parameter counts (elements) -------------------------------------------------------
    @property
    def moe(self) -> bool:
        return self.experts > 1

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def qk_head_dim(self) -> int:
        """Width of one query/key head (MLA adds the decoupled rotary part)."""
        return self.head_dim + self.rope_head_dim

    @property
    def attn_params(self) -> int:
        """Wq, Wk, Wv and Wo of one layer (MLA: the down- and up-projections of Q and KV)."""
        h = self.hidden
        if not self.mla:
            return h * (2 * self.q_dim + 2 * self.kv_dim)
        q_out = self.heads * self.qk_head_dim
        q = h * q_out if not self.q_lora_rank else \
            h * self.q_lora_rank + self.q_lora_rank * q_out
        kv = h * (self.kv_lora_rank + self.rope_head_dim) \
            + self.kv_lora_rank * self.heads * (self.head_dim + self.v_head_dim)
        return q + kv + self.heads * self.v_head_dim * h

    @property
    def expert_params(self) -> int:
        """One MLP (one expert of an MoE layer)."""
        return MLP_KINDS[self.mlp] * self.hidden * self.ffn

    @property
    def dense_mlp_params(self) -> int:
        """The MLP of a dense layer (the leading dense_layers of an MoE model)."""
        return MLP_KINDS[self.mlp] * self.hidden * self.dense_ffn

    @property
    def router_params(self) -> int:
        return self.hidden * self.experts if self.moe else 0

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.moe else 0

    @property
    def layer_params(self) -> int:
        """One MoE layer (or one layer of a dense model)."""
        return self.attn_params + (self.experts + self.shared_experts) * self.expert_params \
            + self.router_params

    @property
    def embedding_params(self) -> int:
        """Input embedding plus output projection (one matrix if tied)."""
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    @property
    def params(self) -> int:
        dense = self.dense_layers * (self.attn_params + self.dense_mlp_params)
        return dense + (self.layers - self.dense_layers) * self.layer_params \
            + self.embedding_params

    @property
    def active_params(self) -> int:
        """Parameters one token touches (top_k routed + shared experts of each MoE layer)."""
        per_layer = self.attn_params + (self.top_k + self.shared_experts) * self.expert_params \
            + self.router_params
        dense = self.dense_layers * (self.attn_params + self.dense_mlp_params)
        return dense + (self.layers - self.dense_layers) * per_layer + self.embedding_params

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict, where: str = "model config") -> "ModelConfig":
        if not isinstance(d, dict):
            raise ConfigError(f"{where}: expected a mapping of fields, got {type(d).__name__}")
        missing = [k for k in _REQUIRED if k not in d]
        if missing:
            raise ConfigError(f"{where}: missing field(s) {', '.join(missing)}; required are "
                              f"{', '.join(_REQUIRED)}")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(map(str, d)) - known)
        if unknown:
            raise ConfigError(f"{where}: unknown field(s) {', '.join(unknown)}; allowed are "
                              f"{', '.join(sorted(known))}")
        for key, value in d.items():
            _check_field(key, value, cls.__dataclass_fields__[key].type, where)
        return cls(**d)


# A model's widths and counts: 2^31 is far beyond any model (vocab 256K, width 32K), small
# enough that every product the planner forms stays exact in a float64.
MAX_MODEL_DIM = 1 << 31


def _check_field(key: str, value: object, kind: object, where: str) -> None:
    """A YAML value of the type its ModelConfig field holds: an integer in 0..MAX_MODEL_DIM,
    true/false, or a string."""
    kind = getattr(kind, "__name__", kind)
    if kind == "int":
        check_number(value, f"{where}: {key}", 0, MAX_MODEL_DIM, integer=True)
    elif kind == "bool" and not isinstance(value, bool):
        raise ConfigError(f"{where}: {key} must be true or false, got {value!r}")
    elif kind == "str" and not isinstance(value, str):
        raise ConfigError(f"{where}: {key} must be a string, got {type(value).__name__}")


def _data_dir():
    return resources.files("gpucomm") / "data" / "models"


@functools.lru_cache(maxsize=None)
def _shipped() -> dict[str, ModelConfig]:
    out = {}
    for entry in sorted(_data_dir().iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml"):
            cfg = ModelConfig.from_dict(yaml.safe_load(entry.read_text()), entry.name)
            out[cfg.name] = cfg
    return out


def list_models() -> list[str]:
    """Names of the shipped model configs."""
    return list(_shipped())


def load_model(path) -> ModelConfig:
    """A model config from a YAML file of the shipped configs' shape."""
    p = Path(path)
    data = load_yaml_file(p, "model config")
    return ModelConfig.from_dict(data, str(p))


def get_model(name) -> ModelConfig:
    """A shipped config by name, or a YAML file by path (anything ending in .yaml/.yml)."""
    if isinstance(name, ModelConfig):
        return name
    text = str(name)
    if text.endswith((".yaml", ".yml")):
        return load_model(text)
    models = _shipped()
    if text.lower() not in models:
        raise ConfigError(f"unknown model {text!r}: allowed are {', '.join(models)} "
                          "(or a path to a .yaml config)")
    return models[text.lower()]
