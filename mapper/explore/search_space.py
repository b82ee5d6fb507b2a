"""A deployment search's space and its pruning before anything is served (mapper/explore/search.py runs it).

The space: device plans (TP 1/2/4/8 x PP 1/2/4, x EP where the model has routed experts: EP over devices of its
own at TP 1 with attention data-parallel (each rank its own requests and KV cache; the experts whole, E/EP a
rank, or each sliced over the ranks: expert TP), riding the TP ranks at TP > 1), compute, weight and KV-cache
precisions, the launch mode, batch caps 1-512 in powers of two and the chunked scheduler's chunk. Not in it: EP
devices of their own beside replicated attention (`--tp 1 --ep N` alone, which `mapper map` still maps): no
runtime deploys it (vLLM's expert-parallel group is its TP x DP ranks, SGLang's and TensorRT-LLM's the TP ranks
or the attention-DP ranks), and it would run every request's attention on each of the N devices. Pruned before
serving, each with its reason: a plan over the devices or over one node's link; a precision the profile has no
peak for; an EP that does not split whole experts; a plan whose weights leave no room for one request's KV cache
on a device (the KV budget `mapper serve` uses); a plan whose decode step cannot meet the TPOT target even at
batch 1 (every step reads the per-device weights of each pipeline stage at the profile's DRAM bandwidth at least:
a roofline bound); and a batch cap above the sequences the KV cache holds (it serves as the cap below it does).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

from mapper.core.errors import MapperError
from mapper.core.options import PlanOptions
from mapper.core.targets import Targets
from mapper.core.vocab import Deployment, KvDtype, Launch, PlanDtype, WeightDtype
from mapper.hardware.profile import HardwareProfile
from mapper.plan.experts import replica_devices
from mapper.serve.speculative import SpeculativeConfig

TP_CHOICES = (1, 2, 4, 8)
PP_CHOICES = (1, 2, 4)
BATCH_CAPS = tuple(2**i for i in range(10))  # 1 .. 512
CHUNK_CHOICES = (512, 2048)  # the chunked scheduler's prompt tokens a step (vLLM's default, and a long one)
MAX_SEARCH_DEVICES = 4096


@dataclass(frozen=True, slots=True)
class SearchSpec:
    """What a search is asked: the fleet, the workload, the SLA and the choices it may make."""

    devices: int
    prompt_tokens: int = 1024
    output_tokens: int = 256
    rate_per_s: float | None = None  # offered requests/s for the fleet; None: each configuration at `load`
    targets: Targets = field(default_factory=Targets)
    load: float = 0.8  # without a rate: each configuration served at this share of its own saturation rate
    requests: int = 200  # requests simulated for each configuration
    seed: int = 0
    dtypes: tuple[str, ...] = (PlanDtype.AUTO.value,)
    weight_dtypes: tuple[str, ...] = (WeightDtype.SAME.value,)
    kv_dtypes: tuple[str, ...] = (KvDtype.SAME.value, KvDtype.FP8.value)
    launches: tuple[str, ...] = (Launch.AUTO.value,)
    chunks: tuple[int, ...] = CHUNK_CHOICES
    caps: tuple[int, ...] = BATCH_CAPS
    tps: tuple[int, ...] = TP_CHOICES
    pps: tuple[int, ...] = PP_CHOICES
    base: PlanOptions = field(default_factory=PlanOptions)  # every other plan option (fusion, runtime, ...)
    multi_node: bool = False  # let one replica span nodes (the profile's link between them)
    disaggregated: bool = True  # also prefill and decode pools (prefill:decode devices 1:N-1 .. N-1:1)
    speculative: SpeculativeConfig | None = None  # also each aggregated plan with this draft (serve/speculative.py)


def validate_spec(spec: SearchSpec) -> SearchSpec:
    """One MapperError naming the first bad input."""
    ints = (("devices", spec.devices, MAX_SEARCH_DEVICES), ("requests", spec.requests, 100_000))
    for name, value, top in (
        *ints,
        ("prompt tokens", spec.prompt_tokens, 10**6),
        ("output tokens", spec.output_tokens, 10**6),
    ):
        if not (isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= top):
            raise MapperError(f"{name} {value!r} must be an integer from 1 to {top:,}")
    if spec.rate_per_s is not None and not spec.rate_per_s > 0:
        raise MapperError(f"rate {spec.rate_per_s!r} must be a positive number of requests per second")
    if not 0 < spec.load <= 1:
        raise MapperError(f"load {spec.load!r} must be a share of saturation in (0, 1]")
    if not spec.targets.given() and spec.rate_per_s is None:
        raise MapperError("a search needs an SLA to meet or a rate to serve: give a --*-p99-ms target or --rate")
    for name in ("chunks", "caps", "tps", "pps"):
        if not getattr(spec, name) or any(not (isinstance(v, int) and v >= 1) for v in getattr(spec, name)):
            raise MapperError(f"search {name} {getattr(spec, name)!r} must be positive integers")
    for name in ("dtypes", "weight_dtypes", "kv_dtypes", "launches"):
        if not getattr(spec, name):
            raise MapperError(f"search {name} must name at least one choice")
    return spec


@dataclass(frozen=True, slots=True)
class Plan:
    """One device plan and precision: what the engine maps (a replica's options) and how many replicas.
    Disaggregated (`prefill` set): `options` is the decode pool's plan, `prefill` the prefill pool's, each with
    its replicas, and the two pools together are one replica. Speculative: a draft proposes tokens on the same
    devices under the same plan."""

    options: PlanOptions
    replicas: int
    prefill: PlanOptions | None = None
    pools: tuple[int, int] = (0, 0)  # disaggregated: (prefill replicas, decode replicas)
    speculative: SpeculativeConfig | None = None

    @property
    def deployment(self) -> Deployment:
        if self.prefill is not None:
            return Deployment.DISAGGREGATED
        return Deployment.AGGREGATED if self.speculative is None else Deployment.SPECULATIVE

    @property
    def devices_per_replica(self) -> int:
        own = replica_devices(self.options.tp, self.options.pp, self.options.ep)
        if self.prefill is None:
            return own
        p = self.prefill
        return replica_devices(p.tp, p.pp, p.ep) * self.pools[0] + own * self.pools[1]

    def text(self) -> str:
        o = self.options
        precision = [str(o.dtype)] + ([f"w {o.weight_dtype}"] if o.weight_dtype != WeightDtype.SAME else [])
        precision += [f"kv {o.kv_dtype}"] if o.kv_dtype != KvDtype.SAME else []
        launch = [] if o.launch == Launch.AUTO else [f"{o.launch}"]
        if self.prefill is not None:
            pools = f"prefill {_devices(self.prefill)} x{self.pools[0]} + decode {_devices(o)} x{self.pools[1]}"
            return f"{pools} ({', '.join(precision + launch)})"
        s = self.speculative
        draft = "" if s is None else f" + draft {s.draft_name} k {s.draft_tokens}"
        return _devices(o) + draft + f" ({', '.join(precision + launch)}) x{self.replicas}"


def _devices(o: PlanOptions) -> str:
    parts = [f"TP {o.tp}"] + ([f"PP {o.pp}"] if o.pp > 1 else []) + ([f"EP {o.ep}"] if o.ep > 1 else [])
    return " x ".join(parts) + (" attention DP" if o.attention_dp else "") + (" expert TP" if o.expert_tp else "")


@dataclass(frozen=True, slots=True)
class Pruned:
    """A plan (or a plan at a cap) left unserved, and why."""

    what: str
    reason: str  # one of PRUNE_REASONS
    detail: str


PRUNE_REASONS = (
    "devices",
    "precision",
    "experts",
    "capacity",
    "roofline",
    "pp-dominated",
    "batch-cap",
    "tpot-rises",
    "saturated",
    "batch-latency",
    "bound",
)


def _supported(hw: HardwareProfile, dtype: str) -> bool:
    return dtype == PlanDtype.AUTO or dtype in hw.matrix_peak_flops_per_s


def plan_options(spec: SearchSpec, experts: tuple[int, ...]) -> list[PlanOptions]:
    """Every plan of the space, before pruning (EP choices only where the model has routed experts: over the TP
    ranks, or over devices of their own with attention data parallelism, the experts whole or sliced)."""
    out = []
    for tp in spec.tps:
        eps = (1,) if not experts else ((1, 2, 4, 8) if tp == 1 else (1, tp))
        # EP over the TP ranks; at TP 1 over attention-DP ranks, the experts whole or sliced (expert TP)
        layouts = [(e, tp == 1 < e, sliced) for e in eps for sliced in ((False, True) if tp == 1 < e else (False,))]
        for pp in spec.pps:
            for ep, attention_dp, expert_tp in layouts:
                for dtype in spec.dtypes:
                    for wd in spec.weight_dtypes:
                        for kv in spec.kv_dtypes:
                            if kv != KvDtype.SAME and kv == dtype:
                                continue  # the activations' precision already: the same plan as `same`
                            for launch in spec.launches:
                                plan = replace(
                                    spec.base, tp=tp, pp=pp, ep=ep, dp=1, attention_dp=attention_dp, expert_tp=expert_tp
                                )
                                out.append(replace(plan, dtype=dtype, weight_dtype=wd, kv_dtype=kv, launch=launch))
    return out


def structural_prune(
    spec: SearchSpec, hw: HardwareProfile, experts: tuple[int, ...]
) -> tuple[list[Plan], list[Pruned]]:
    """The plans that fit the fleet, the profile and the experts; the rest with their reasons."""
    node = hw.interconnect.max_devices
    kept, pruned = [], []
    for options in plan_options(spec, experts):
        plan = Plan(options, 1)
        devices = plan.devices_per_replica
        why = None
        if devices > spec.devices:
            why = ("devices", f"takes {devices} devices of {spec.devices}")
        elif devices > node and not spec.multi_node:
            why = ("devices", f"takes {devices} devices, over the {node} one {hw.name} node links")
        elif not all(_supported(hw, str(d)) for d in (options.dtype,)):
            why = ("precision", f"{hw.name} has no {options.dtype} peak")
        elif options.ep > 1 and not options.expert_tp and any(e % options.ep for e in experts):
            why = ("experts", f"EP {options.ep} does not split {experts[0]} experts")
        if why:
            pruned.append(Pruned(plan.text(), *why))
        else:
            kept.append(Plan(options, spec.devices // devices))
    return kept, pruned


def describe_space(spec: SearchSpec) -> str:
    """The space in one line."""
    names = [f.name for f in fields(SearchSpec) if f.name in ("tps", "pps", "dtypes", "kv_dtypes", "chunks", "caps")]
    return "; ".join(f"{n} {', '.join(str(v) for v in getattr(spec, n))}" for n in names)
