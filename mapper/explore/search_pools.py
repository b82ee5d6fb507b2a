"""A deployment search's disaggregated and speculative configurations (mapper/explore/search.py runs them).

Disaggregated: a prefill pool and a decode pool, each replicas of its own TP plan (PP 1, EP 1) at the same
precision, or for a mixture of experts a decode pool of attention DP (TP 1, EP over the pool's ranks, each rank its
own sequences and KV cache: AIConfigurator's and SGLang's wide-EP decode), over one node's devices (P prefill :
N - P decode, P = 1 .. N - 1: the ratios 1:7 .. 7:1 on eight),
served as `mapper serve --prefill-tp` serves them (`serve.disaggregated.serve_pools`: the prompt prefills on
the prefill pool, its KV cache crosses the device link, the sequence decodes on the decode pool). Each pool's
steps are the aggregated plan's of the same options (`PlanSteps`, shared): a pool maps only the steps an
aggregated plan did not. Its load without a rate: the spec's share of the lesser of the two pools' rates (the
prefill pool's prompts a second at its batch, the decode pool's `llm_capacity_per_s` without prefill).

Speculative (a draft given): each aggregated plan that fits, the draft on the same devices under the same plan,
served as `mapper serve --speculative-draft` serves it (prefill-first: speculation beside chunked prefill is not
modelled): a prompt prefills both models; the decode step is a round's time per token (`serve.speculative`);
the KV budget holds the draft's weights and cache beside the target's.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from mapper.core.options import PlanOptions
from mapper.core.vocab import Deployment
from mapper.explore.search_eval import PlanServer, requests_at
from mapper.explore.search_space import Plan, Pruned, SearchSpec
from mapper.explore.search_steps import LazyGrid, PlanSteps
from mapper.hardware.profile import HardwareProfile
from mapper.plan.experts import replica_devices
from mapper.serve.continuous import LLMServingConfig, LLMServingResult, llm_capacity_per_s, simulate_llm_serving
from mapper.serve.disaggregated import Disaggregation, Pool, serve_pools
from mapper.serve.llm import KvBudget
from mapper.serve.scheduler import Requests, Scheduler, StepTime
from mapper.serve.speculative import per_token_time
from mapper.serve.steps import step_grids

MIN_POOLS_DEVICES = 2  # a prefill pool and a decode pool: a device each at least


def _precision(o: PlanOptions) -> tuple:
    return (o.dtype, o.weight_dtype, o.kv_dtype, o.launch)


def pool_plans(spec: SearchSpec, hw: HardwareProfile, fitting: list[Plan]) -> tuple[list[Plan], list[Pruned]]:
    """The disaggregated setups over one node's devices (or the fleet, when smaller), replicated over the fleet:
    P devices prefill and the rest decode, each pool replicas of one of the `fitting` aggregated plans (PP 1,
    EP 1; a decode pool also an attention-DP plan) of one precision. Setups over the node's link need a network
    model between pools: not searched."""
    unit = min(spec.devices, hw.interconnect.max_devices)
    if not spec.disaggregated or unit < MIN_POOLS_DEVICES:
        return [], []
    prefills: dict[tuple, dict[int, PlanOptions]] = {}  # by precision, each TP plan's options
    decodes: dict[tuple, list[PlanOptions]] = {}  # by precision: those and the attention-DP plans (TP 1, EP > 1)
    for plan in fitting:
        o = plan.options
        if o.pp != 1 or plan.deployment != Deployment.AGGREGATED:
            continue
        if o.ep == 1:
            prefills.setdefault(_precision(o), {})[o.tp] = o
        if o.ep == 1 or o.attention_dp:
            decodes.setdefault(_precision(o), []).append(o)
    plans = []
    for precision, tps in prefills.items():
        for p_devices in range(1, unit):
            d_devices = unit - p_devices
            for p_tp, prefill in sorted(tps.items()):
                for decode in decodes[precision]:
                    d_each = replica_devices(decode.tp, decode.pp, decode.ep)
                    if p_devices % p_tp == 0 and d_devices % d_each == 0:
                        pools = (p_devices // p_tp, d_devices // d_each)
                        plans.append(Plan(decode, spec.devices // unit, prefill, pools))
    return plans, []


def speculative_plans(spec: SearchSpec, fitting: list[Plan]) -> list[Plan]:
    """Each fitting aggregated plan without pipeline stages, with the spec's draft."""
    if spec.speculative is None:
        return []
    return [replace(p, speculative=spec.speculative) for p in fitting if p.options.pp == 1]


class PoolServer(PlanServer):
    """One disaggregated setup's batch caps served on the two pools' shared steps (`steps` the decode pool's)."""

    def __init__(self, prefill: PlanSteps, decode: PlanSteps, plan: Plan, spec: SearchSpec):
        super().__init__(decode, plan, spec)
        assert plan.prefill is not None  # a disaggregated plan: pool_plans builds it
        self.prefill = prefill
        self.setup = Disaggregation(Pool(plan.prefill, plan.pools[0]), Pool(plan.options, plan.pools[1]))

    @property
    def ranks(self) -> int:
        """1: a pools' run serves the whole setup's requests (an attention-DP decode pool deals them to its ranks
        itself: `Pool.servers`)."""
        return 1

    @property
    def chunks(self) -> tuple[int, ...]:
        return (0,)

    def budget(self, chunk: int) -> KvBudget:
        """The decode pool's room (the profile run of a prompt: the roofline's weights, the caps' pruning)."""
        if chunk not in self._budgets:
            self._budgets[chunk] = self.steps.kv_budget(self.spec.prompt_tokens)
        return self._budgets[chunk]

    def sequences(self, chunk: int) -> int:
        """Whole requests the decode pool holds, none where the prefill pool cannot hold one prompt."""
        if self.prefill.kv_budget(self.spec.prompt_tokens).tokens < self.spec.prompt_tokens:
            return 0
        return super().sequences(chunk)

    def pool_budgets(self, cap: int) -> tuple[KvBudget, KvBudget]:
        """`serve.disaggregated.pool_budgets`: the prefill pool's at the prompt, the decode pool's at the cap."""
        return self.prefill.kv_budget(self.spec.prompt_tokens), self.steps.kv_budget(cap)

    def grids_at(self, cap: int, chunk: int) -> tuple[LazyGrid, LazyGrid]:
        batches, prompts, contexts = step_grids(cap, self.spec.prompt_tokens, self.context)
        prefill = LazyGrid(lambda b, t: self.prefill.latency(b, t, 0), batches, prompts)
        decode = LazyGrid(lambda b, t: self.steps.latency(b, 1, t), batches, contexts)
        return prefill, decode

    def capacity_ceiling_per_s(self) -> float:
        """No bound from one step: the prefill pool's rate is its batch's prefill, at a batch each cap sets."""
        return math.inf

    def capacity_per_s(self, cap: int, chunk: int) -> float:
        (prefill, decode), (p_budget, d_budget) = self.step_times(cap, chunk), self.pool_budgets(cap)
        prompt = self.spec.prompt_tokens
        batch = max(1, min(cap, p_budget.tokens // prompt))
        prompts_per_s = self.setup.prefill.servers * batch / prefill(batch, prompt)
        one = np.ones(1, dtype=np.int64)
        reqs = Requests(np.zeros(1), one * prompt, one * self.spec.output_tokens)
        arrived = lambda b, t: 0.0  # a sequence arrives prefilled
        decodes_per_s = self.setup.decode.servers * llm_capacity_per_s(arrived, decode, reqs, cap, d_budget.tokens)
        return min(prompts_per_s, decodes_per_s)

    def simulate(self, cap: int, chunk: int, rate: float) -> LLMServingResult:
        s, hw = self.spec, self.hw
        config = LLMServingConfig(
            cap, rate, requests_at(s, cap), s.seed, s.prompt_tokens, s.output_tokens, None, hw.jitter_cv, hw.jitter_dist
        )
        return serve_pools(hw, self.setup, config, self.step_times(cap, chunk), self.pool_budgets(cap))[0]

    def energy_per_token_j(self, cap: int, chunk: int, running: float) -> float:
        """The decode pool's step at the mean running batch per sequence, the prefill pool's prompt over the output."""
        decode = self.step_times(cap, chunk)[1]
        assert isinstance(decode, LazyGrid)  # grids_at's
        s = self.spec
        context = min(decode.tokens, key=lambda t: abs(t - (s.prompt_tokens + s.output_tokens / 2)))
        running = min(max(running, 1.0), float(decode.batches[-1]))
        step = self.steps.step_energy_j(decode.batches, running, 1, context) / running
        return step + self.prefill.prefill_energy_j(s.prompt_tokens) / s.output_tokens


class SpeculativeServer(PlanServer):
    """One aggregated plan with a draft on its devices, its batch caps served prefill-first."""

    def __init__(self, steps: PlanSteps, draft: PlanSteps, plan: Plan, spec: SearchSpec):
        super().__init__(steps, plan, spec)
        assert plan.speculative is not None  # a speculative plan: speculative_plans builds it
        self.draft, self.speculative = draft, plan.speculative
        self._rounds: dict[int, tuple[StepTime, LazyGrid, LazyGrid, LazyGrid]] = {}

    @property
    def chunks(self) -> tuple[int, ...]:
        return (0,)

    @property
    def tokens_per_step(self) -> float:
        return self.speculative.tokens_per_round

    def budget(self, chunk: int) -> KvBudget:
        if chunk not in self._budgets:
            self._budgets[chunk] = self.steps.kv_budget(self.spec.prompt_tokens, self.draft)
        return self._budgets[chunk]

    def prefill_one_s(self) -> float:
        """Both models' prefill of one prompt (the round's prefill grid at batch 1)."""
        prompt = self.spec.prompt_tokens
        return self.steps.latency(1, prompt, 0) + self.draft.latency(1, prompt, 0)

    def grids(self, cap: int) -> tuple[StepTime, LazyGrid, LazyGrid, LazyGrid]:
        """Prefill (target + draft), and the draft's decode and the target's verification a round is made of, on
        `serve.steps.speculative_step_times`' grids (kept by cap)."""
        if cap not in self._rounds:
            self._rounds[cap] = self._round_grids(cap)
        return self._rounds[cap]

    def _round_grids(self, cap: int) -> tuple[StepTime, LazyGrid, LazyGrid, LazyGrid]:
        k, prompt = self.speculative.draft_tokens, self.spec.prompt_tokens
        batches, prompts, contexts = step_grids(cap, prompt, self.context)
        target = LazyGrid(lambda b, t: self.steps.latency(b, t, 0), batches, prompts)
        drafted = LazyGrid(lambda b, t: self.draft.latency(b, t, 0), batches, prompts)
        longer = step_grids(cap, prompt, self.context + k - 1)[2]  # the draft's k steps run past the context
        draft = LazyGrid(lambda b, t: self.draft.latency(b, 1, t), batches, longer)
        verify = LazyGrid(lambda b, t: self.steps.latency(b, k + 1, t), batches, contexts)
        return (lambda b, t: target(b, t) + drafted(b, t)), draft, verify, target

    def grids_at(self, cap: int, chunk: int) -> tuple[StepTime, StepTime]:
        prefill, draft, verify, _ = self.grids(cap)
        return prefill, per_token_time(draft, verify, self.speculative)

    def simulate(self, cap: int, chunk: int, rate: float) -> LLMServingResult:
        s, budget = self.spec, self.budget(chunk)
        config = LLMServingConfig(
            cap,
            rate,
            requests_at(s, cap),
            s.seed,
            s.prompt_tokens,
            s.output_tokens,
            budget.tokens,
            self.hw.jitter_cv,
            self.hw.jitter_dist,
            None,
            Scheduler.PREFILL_FIRST.value,
            kv_capacity_source=budget.text(),
            kv_page_tokens=budget.page_tokens,
            speculative=self.speculative,
        )
        return simulate_llm_serving(*self.step_times(cap, chunk), config)

    def energy_per_token_j(self, cap: int, chunk: int, running: float) -> float:
        """A round at the mean running batch (the draft's k decode steps and the target's verification) over its
        sequences and expected tokens, and both models' prefill of the prompt over the output."""
        _, draft, verify, _ = self.grids(cap)
        s, k = self.spec, self.speculative.draft_tokens
        context = min(verify.tokens, key=lambda t: abs(t - (s.prompt_tokens + s.output_tokens / 2)))
        running = min(max(running, 1.0), float(verify.batches[-1]))
        round_j = self.steps.step_energy_j(verify.batches, running, k + 1, context)
        round_j += k * self.draft.step_energy_j(draft.batches, running, 1, context)  # the k steps at the mean context
        prefill_j = self.steps.prefill_energy_j(s.prompt_tokens) + self.draft.prefill_energy_j(s.prompt_tokens)
        return round_j / running / self.speculative.tokens_per_round + prefill_j / s.output_tokens
