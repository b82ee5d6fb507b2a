"""Published Megatron-LM training iterations of GPT models (22B to 1T, A100) against `mapper train`'s step time.

    .venv/bin/python bench/published_training.py [--rows korthikanti|narayanan|all]

Each row is one published run with its conditions; the prediction maps the same GPT (the built-in GPT-2 graph,
`zoo.transformers.build_gpt2`, at the row's widths: pre-LN, GeLU MLP of 4h, learned positions, LM head tied to the
embedding, vocabulary 51,200, sequence 2,048) on the A100 profile with the row's TP, PP, DP, micro-batch,
interleaving, global batch, fp16, dropout kept, attention as Megatron ran it in 2021-22 (fused softmax, not
FlashAttention), the row's recompute policy and sequence parallelism where the run had it (Korthikanti's;
Narayanan's 2021 runs predate it).
The papers' FLOP conventions differ, so every row is compared on iteration time: a published utilization or FLOP
rate is turned into seconds with the paper's own FLOP count, stated in its row.
Nothing is fitted to these rows: they check mechanisms chosen from first principles.

Error = predicted / published - 1 (below zero: the engine predicts a faster iteration than was measured).
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass

A100_PEAK = 312e12  # A100 dense fp16/bf16 tensor-core peak, FLOP/s (NVIDIA A100 datasheet), both papers' "peak"
SEQ, VOCAB = 2048, 51200  # both papers' GPT runs (Narayanan sec. 5.1; Korthikanti sec. 6)
KORTHIKANTI = "Korthikanti et al. 2022, arXiv:2205.05198"
NARAYANAN = "Narayanan et al. 2021, arXiv:2104.04473"
MLCARBON = "SotaroKaneda/MLCarbon data/megatron_table.csv"


def korthikanti_flops(batch: int, layers: int, hidden: int) -> float:
    """Korthikanti et al. 2022's model FLOPs an iteration (sec. 6.3, no recompute counted):
    72 B s l h^2 (1 + s / 6h + V / 12hl)."""
    return 72 * batch * SEQ * layers * hidden**2 * (1 + SEQ / (6 * hidden) + VOCAB / (12 * hidden * layers))


def narayanan_flops(batch: int, layers: int, hidden: int) -> float:
    """Narayanan et al. 2021's FLOPs an iteration (sec. 5.1, eq. 3, full recompute: four passes):
    96 B s l h^2 (1 + s / 6h + V / 16lh)."""
    return 96 * batch * SEQ * layers * hidden**2 * (1 + SEQ / (6 * hidden) + VOCAB / (16 * layers * hidden))


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    layers: int
    hidden: int
    heads: int
    tp: int
    pp: int
    gpus: int
    batch: int  # global batch, sequences
    recompute: str  # the run's policy: selective (with sequence parallelism) or full
    published_s: float  # the iteration time compared with
    source: str  # paper, table, and how the time was read or derived
    verified: str  # what of the row could be checked against a stored copy of its source, and what could not
    sequence_parallel: bool = True  # Korthikanti's runs; Narayanan's 2021 runs predate it (TP alone)
    micro_batch: int = 1  # sequences a micro-batch
    virtual_stages: int = 1  # interleaved 1F1B's model chunks a device (1: plain 1F1B)

    @property
    def dp(self) -> int:
        return self.gpus // (self.tp * self.pp)


# Korthikanti et al. 2022, Table 5: the iteration times of full recompute and of sequence parallelism + selective
# recompute ("present work"), with Table 3's configurations. Read from Calculon's validation harness, which reproduces
# that table (calculon-ai/calculon, Apache-2.0: calculon/llm/validation.py `seqsel_tab5`, citing arXiv:2205.05198
# Table 5, and its inputs validation/seqsel/tab5/*.json and models/*.json): layers, hidden, heads, TP, PP, GPUs,
# global batch, micro-batch, interleaved virtual stages, then the two times (s).
K_TABLE_5 = {
    "22B": (48, 6144, 64, 8, 1, 8, 4, 4, 1, 1.42, 1.10),
    "175B": (96, 12288, 96, 8, 8, 64, 64, 1, 3, 18.13, 13.75),
    "530B": (105, 20480, 128, 8, 35, 280, 280, 1, 3, 49.05, 37.83),
    "1T": (128, 25600, 160, 8, 64, 512, 512, 1, 1, 94.42, 71.49),
}
CALCULON = (
    "calculon-ai/calculon: calculon/llm/validation.py (seqsel_tab5) and validation/seqsel/tab5/{model}_{mode}.json"
)
# The Megatron-LM README's MFU table of the same runs ("measured using a data parallel size of one")
K_MFU = {"22B": 0.415, "175B": 0.514, "530B": 0.560, "1T": 0.563}
K_CHECK = (
    "the times, the configuration and the schedule as {calculon} reproduce Table 5; the present-work time agrees with"
    " the Megatron-LM README's MFU ({mfu:.1%}: {derived:.2f} s by the paper's FLOP count) within 1%"
)


def korthikanti_rows() -> list[Row]:
    rows = []
    for name, (layers, hidden, heads, tp, pp, gpus, batch, micro, vp, full_s, present_s) in K_TABLE_5.items():
        derived = korthikanti_flops(batch, layers, hidden) / (K_MFU[name] * gpus * A100_PEAK)
        for policy, mode, label, seconds in (
            ("selective", "seqsel", "SP+selective", present_s),
            ("full", "full", "full recompute", full_s),
        ):
            schedule = f"micro-batch {micro}" + (f", {vp} interleaved virtual stages" if vp > 1 else "")
            rows.append(
                Row(
                    f"GPT-{name} {label}", layers, hidden, heads, tp, pp, gpus, batch, policy, seconds,
                    f"{KORTHIKANTI}, Table 5, '{'present work' if mode == 'seqsel' else 'full recompute'}' iteration"
                    f" time (s); {schedule}",
                    K_CHECK.format(calculon=CALCULON.format(model=name, mode=mode), mfu=K_MFU[name], derived=derived),
                    micro_batch=micro,
                    virtual_stages=vp,
                )
            )  # fmt: skip
    return rows


# Narayanan Table 1 (weak scaling, full recompute; the rows with pipeline parallelism):
# (params, heads, hidden, layers, t, p, GPUs, batch, achieved TFLOP/s per GPU)
N_TABLE_1 = (
    ("39.1B", 64, 8192, 48, 8, 2, 512, 1536, 138),
    ("76.1B", 80, 10240, 60, 8, 4, 1024, 1792, 140),
    ("145.6B", 96, 12288, 80, 8, 8, 1536, 2304, 148),
    ("310.1B", 128, 16384, 96, 8, 16, 1920, 2160, 155),
    ("529.6B", 128, 20480, 105, 8, 35, 2520, 2520, 163),
    ("1008.0B", 160, 25600, 128, 8, 64, 3072, 3072, 163),
)


def narayanan_rows() -> list[Row]:
    rows = []
    for name, heads, hidden, layers, tp, pp, gpus, batch, tflops in N_TABLE_1:
        check = f"every column of the row as {MLCARBON} transcribes Table 1" + (
            "; the abstract's 502 petaFLOP/s on 3072 GPUs (52% of peak) is 163 TFLOP/s a GPU" if gpus == 3072 else ""
        )
        rows.append(
            Row(
                f"GPT-{name} (Narayanan)", layers, hidden, heads, tp, pp, gpus, batch, "full",
                narayanan_flops(batch, layers, hidden) / (tflops * 1e12 * gpus),
                f"{NARAYANAN}, Table 1, {tflops} TFLOP/s a GPU (full recompute; micro-batch 1 and the 1F1B schedule"
                " assumed: Table 1 does not list them); time = 96Bslh^2(1 + s/6h + V/16lh) / (TFLOP/s x GPUs)",
                check,
                sequence_parallel=False,
            )
        )  # fmt: skip
    return rows


def predict(row: Row) -> float:
    """The engine's iteration time of the row's run (see the module)."""
    import mapper
    from mapper.zoo.transformers import EncoderConfig, build_gpt2

    config = EncoderConfig(row.layers, row.hidden, row.heads, 4 * row.hidden, VOCAB, SEQ, 1e-5)
    model = mapper.open_model(build_gpt2(config, name=f"gpt-{row.name.split()[0]}").SerializeToString())
    options = mapper.TrainOptions(
        tp=row.tp, pp=row.pp, dp=row.dp, vp=row.virtual_stages, micro_batch=row.micro_batch, global_batch=row.batch,
        seq=SEQ, recompute=row.recompute,
        dtype="fp16", dropout=True, fused_attention=False, zero=1 if row.dp > 1 else 0,
        sequence_parallel=row.sequence_parallel,
    )  # fmt: skip
    return mapper.train_step(model, mapper.load_hardware("a100-sxm-80gb"), options).totals.step_time_s


def rows_named(which: str) -> list[Row]:
    return {
        "korthikanti": korthikanti_rows,
        "narayanan": narayanan_rows,
        "all": lambda: korthikanti_rows() + narayanan_rows(),
    }[which]()


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="all", choices=("korthikanti", "narayanan", "all"))
    args = parser.parse_args(argv)
    errors = []
    print(
        f"{'run':34s} {'GPUs':>5s} {'TPxPP':>6s} {'batch':>5s} {'published s':>11s} {'predicted s':>11s}"
        f" {'error':>7s} {'mapped in':>9s}"
    )
    for row in rows_named(args.rows):
        start = time.perf_counter()
        predicted = predict(row)
        wall = time.perf_counter() - start  # the graph built, the step mapped (this machine, one core)
        error = predicted / row.published_s - 1
        errors.append(error)
        print(
            f"{row.name:34s} {row.gpus:5d} {row.tp:>3d}x{row.pp:<2d} {row.batch:5d} {row.published_s:11.2f}"
            f" {predicted:11.2f} {error:+7.1%} {wall:8.2f}s"
        )
    median = statistics.median(abs(e) for e in errors)
    print(f"median |error| over {len(errors)} rows: {median:.1%}")
    for row in rows_named(args.rows):
        print(f"- {row.name}: {row.source}. Checked: {row.verified}")
    return median


if __name__ == "__main__":
    main()
