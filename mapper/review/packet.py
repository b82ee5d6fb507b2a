"""The root-cause packet: one zip a person reads in two minutes and a script that rebuilds it.

Baseline and fix mapping sheets (XLSX and HTML, through mapper.report), the validation matrix (CSV),
the profile used (as JSON, edited ones included), review.json, README.md and reproduce.sh, whose
`mapper review` command rebuilds every file byte for byte: every file carries the review's pinned
created_utc, zip entries have a fixed date, and workbooks are rewritten with the same date inside. A model that
came as a file or an upload is named by its file name and sha256: the rebuild reads it beside reproduce.sh,
which checks the sha256 first. Nothing names a folder of the machine that wrote the packet.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import zipfile
from pathlib import Path

from mapper.core.units import format_duration, format_number
from mapper.report.markdown import markdown_code, markdown_text
from mapper.report.sheet import sheet_bytes
from mapper.report.tables import csv_bytes
from mapper.review.candidates import Candidate
from mapper.review.measured import verdict_sentence
from mapper.review.ranking import ranking_table
from mapper.review.review import Review, review_flags

ZIP_DATE = (1980, 1, 1, 0, 0, 0)  # the earliest date a zip entry holds: no build time leaks in
CORE_DATES = re.compile(rb"(<dcterms:(?:created|modified)[^>]*>)[^<]*(</dcterms:)")
EXECUTABLE = 0o100755 << 16
REGULAR = 0o100644 << 16


def _zip(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, ZIP_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = EXECUTABLE if name.endswith(".sh") else REGULAR
            archive.writestr(info, files[name])
    return buffer.getvalue()


def pinned_xlsx(data: bytes, created_utc: str) -> bytes:
    """The workbook with fixed entry dates and its document properties dated `created_utc`."""
    stamp = created_utc.replace("+00:00", "Z").encode()
    with zipfile.ZipFile(io.BytesIO(data)) as source:
        files = {n: source.read(n) for n in source.namelist()}
    files["docProps/core.xml"] = CORE_DATES.sub(rb"\g<1>" + stamp + rb"\g<2>", files.get("docProps/core.xml", b""))
    return _zip(files)


def model_file(review: Review) -> dict | None:
    """The model file a rebuild reads beside reproduce.sh: its name and the sha256 of the bytes the review read (the
    file's, or the upload's); None for a built-in, which the engine builds."""
    if review.baseline.model_builtin:
        return None
    source = review.request.model
    if isinstance(source, bytes | bytearray | memoryview):
        digest = hashlib.sha256(source).hexdigest()
    else:
        with Path(source).open("rb") as f:  # the file the review read, hashed as `sha256sum` hashes it
            digest = hashlib.file_digest(f, "sha256").hexdigest()
    return {"name": review.frozen["model_source"], "sha256": digest}


def model_arg(review: Review) -> str:
    """The model argument of reproduce.sh: the built-in's name, or the file beside it as ./NAME (a file named like
    a built-in is still the file)."""
    source = review.frozen["model_source"]
    return source if review.baseline.model_builtin else f"./{source}"


def profile_path(review: Review) -> str:
    return f"profiles/{review.request.hardware.name}.json"


def review_args(review: Review) -> list[str]:
    """`mapper review`'s arguments that rebuild the packet. The model last, after `--`: a file named like an option
    (`--out=x.onnx`) is read as the model."""
    return ["review", *review_flags(review, profile_path(review)), "--out=packet.zip", "--", model_arg(review)]


def review_command(review: Review) -> str:
    return " ".join(_quote(a) for a in ["mapper", *review_args(review)])


def _quote(arg: str) -> str:
    return arg if re.fullmatch(r"[A-Za-z0-9_./:=,+-]+", arg) else "'" + arg.replace("'", "'\\''") + "'"


def candidate_record(c: Candidate) -> dict:
    return {
        "label": c.label,
        "kind": c.kind,
        "plan_options": dict(c.changes),
        "slice_changes": dict(c.slice_changes),
        "serving_changes": dict(c.serving_changes),
        "owner": c.owner,
        "expected_gain": c.gain,
        "gain_on": c.kpi,
        "gain_text": c.gain_text(),
        "cost": c.cost,
        "latency_s": c.latency_s,
        "fits": c.fits,
        "fixes": c.fixes,
        "rejected": c.rejected,
        "p99_s": c.p99_s,
        "blast_radius": {"rule": c.blast_rule, "kernels": c.blast_kernels, "layer_types": list(c.blast_layer_types)},
        "quality_evidence_and_fallback": c.evidence,
        "caveats": list(c.caveats),
    }


def review_document(review: Review) -> dict:
    """review.json: slice, KPIs, first failure, the chosen fix, owner, notes, expected gain, rollback boundary."""
    v, chosen = review.validation, review.chosen
    return {
        "created_utc": review.created_utc,
        "slice": review.frozen,
        "model_file": model_file(review),
        "trace_file": review.trace_file,
        "reproduce": review_command(review),
        "kpis": review.kpis,
        "first_failure": {
            "check": review.failure.check,
            "sentence": review.failure.sentence,
            "mechanism": review.mechanism,
            "owner": str(review.failure.owner),
            "dominant_class": review.dominant,
            "behind": review.behind,
        },
        "proving_artifact": review.artifact,
        "candidates": [candidate_record(c) for c in review.candidates],
        "chosen_fix": None
        if chosen is None
        else candidate_record(chosen) | {"owner": review.owner, "chosen_because": review.chosen_reason},
        "best_fix_rule": ranking_table(),
        "owner": review.owner,
        "note": review.request.note,
        "expected_gain": chosen.gain if chosen else None,
        "validation": None
        if v is None
        else {"overall": v.overall, "summary": v.summary, "regressed": v.regressed_slices()},
        "rollback_boundary": v.rollback_slices() if v else [],
        "first_failing_slice": review.first_slice,
        "follow_ups": review.follow_ups,
    }


def readme(review: Review, doc: dict) -> str:
    chosen, k = review.chosen, review.kpis
    t, c = markdown_text, markdown_code  # data as inert text: inside prose, and a name on its own
    fix = (
        f"**{t(chosen.label)}** ({c(chosen.option_text())}), owner: {c(review.owner)}; expected:"
        f" {t(chosen.gain_text())}; {t(review.chosen_reason)};"
        f" touches {chosen.blast_kernels} kernels ({t(', '.join(chosen.blast_layer_types))})."
        + (f"\n  Quality evidence and fallback: {t(chosen.evidence)}." if chosen.evidence else "")
        if chosen
        else "none proposed (no plan option addresses this class): see the follow-ups."
    )
    boundary = ", ".join(c(json.dumps(s)) for s in doc["rollback_boundary"]) or "none: the fix holds on every slice"
    summary = doc["validation"]["summary"] if doc["validation"] else "not run"
    lines = [
        f"# Review: {c(review.baseline.model_name)} on {c(review.baseline.hardware_name)}",
        "",
        (
            f"1. **Workload and KPI.** Slice {c(json.dumps(review.frozen['dims']))}, {review.baseline.totals.dtype};"
            f" latency {format_duration(k['latency_s'])}, throughput {format_number(k['throughput_per_s'], '/s')},"
            f" MFU {k['mfu']:.1%},"
            f" memory stall {k['memory_stall_fraction']:.0%}, perf/W {k['perf_per_watt']:.3g}."
        ),
        f"2. **First mechanism failure ({review.failure.check}).** {t(review.mechanism)}",
        (
            f"3. **Proving artifact.** `baseline.xlsx` / `baseline.html`: {review.artifact['kernels_of_class']}"
            f" {review.dominant} kernels (Kernels sheet: tile, fusion rule, class, evidence)."
            + (
                f" Measured: the trace {c(review.trace_file['name'])} (Measured sheet). "
                f"{t(verdict_sentence(review.artifact['measured_verdict']))}"
                if review.trace_file
                else ""
            )
        ),
        f"4. **Bounded fix.** {fix}",
        (
            f"5. **Validation and rollback.** {t(summary)}."
            f" Rollback boundary (slices that keep the baseline): {boundary}."
        ),
        "",
        f"First failing slice: {t(review.first_slice['sentence'])}.",
        "",
        (
            "Files: baseline.xlsx/.html and fix.xlsx/.html (mapping sheets), validation_matrix.csv,"
            " validation_verdicts.csv, rollback_boundary.csv, profiles/ (the profile used), review.json."
        ),
        "",
        *rebuild_lines(review, doc["model_file"]),
    ]
    return "\n".join(lines)


def rebuild_lines(review: Review, model: dict | None) -> list[str]:
    """README's rebuild section: where the model file goes and how to check it, then the one command."""
    c, version = markdown_code, review.frozen["engine_version"]
    if model is None:
        where = f"The model is the built-in {c(review.frozen['model_source'])}: the engine builds it, no file needed."
    else:
        name, quoted = c(model["name"]), _quote(model["name"])
        where = (
            f"Put the model file beside reproduce.sh, in this folder, named {name}; its sha256 must be"
            f" {c(model['sha256'])}. Check it with `sha256sum {quoted}` (macOS: `shasum -a 256 {quoted}`);"
            " reproduce.sh checks it too and stops on any other file. The sha256 is of the bytes the review read; a"
            " dashboard upload keeps only the graph, so where your file holds its weights,"
            f" `mapper strip YOUR_MODEL.onnx -o {quoted}` writes the graph it read."
        )
    run = (
        f"Then run `sh reproduce.sh` in this folder with mapper {c(version)}: it rewrites every file of this packet"
        " byte for byte. It runs `mapper` from PATH, or the command in MAPPER (`MAPPER='python3 -m mapper' sh"
        " reproduce.sh`), and unpacks with `python3`, or the interpreter in PYTHON."
    )
    trace = review.trace_file
    if trace is not None:
        name = c(trace["name"])
        where += (
            f" The run that proves step 3 is the trace {name} (sha256 {c(trace['sha256'])}): put it beside"
            " reproduce.sh under that name too; reproduce.sh checks it."
        )
    return ["## Rebuild every file", "", where, "", run, ""]


# reproduce.sh. Its body is one function, read whole before it runs: unpacking the rebuilt packet rewrites this
# file while the shell reads it. MAPPER is left unquoted: it may be several words (python3 -m mapper).
SCRIPT = """#!/bin/sh
# Rebuilds every file of this packet, byte for byte, from the engine, the profile in profiles/ and the model.
# MAPPER: the command that runs mapper (default: mapper); PYTHON: a Python 3 (default: python3). See README.md.
set -eu
rebuild() {
    cd "$(dirname "$0")"
    MAPPER="${MAPPER:-mapper}"
    PYTHON="${PYTHON:-python3}"
    if ! command -v ${MAPPER%% *} >/dev/null 2>&1; then
        echo "reproduce.sh: no command $MAPPER: put mapper on PATH or set MAPPER='python3 -m mapper'" >&2
        exit 2
    fi
@CHECK@    $MAPPER @ARGS@
    "$PYTHON" -m zipfile -e packet.zip .
    rm packet.zip
}
rebuild
exit
"""
FILE_CHECK = """    file=@NAME@
    sha256=@SHA256@
    if [ ! -f "$file" ]; then
        echo "reproduce.sh: @WHAT@ file $file not found: put it beside reproduce.sh, named $file" >&2
        exit 2
    fi
    got=$("$PYTHON" -c '@DIGEST@' "$file")
    if [ "$got" != "$sha256" ]; then
        echo "reproduce.sh: $file has sha256 $got, not $sha256: not the @WHAT@ of this packet" >&2
        exit 2
    fi
"""
DIGEST = (  # a file's sha256 in any Python 3, a MiB at a time (a model file may be gigabytes)
    'import hashlib, sys; h = hashlib.sha256(); f = open(sys.argv[1], "rb");'
    ' [h.update(b) for b in iter(lambda: f.read(1 << 20), b"")]; print(h.hexdigest())'
)


def _file_check(what: str, record: dict | None) -> str:
    if record is None:
        return ""
    return (
        FILE_CHECK.replace("@NAME@", _quote(record["name"]))
        .replace("@SHA256@", record["sha256"])
        .replace("@WHAT@", what)
    )


def reproduce_script(review: Review, model: dict | None) -> str:
    """reproduce.sh: check the model file (`model_file`) and the trace (`Review.trace_file`), rebuild the packet,
    unpack it over this folder."""
    check = _file_check("model", model) + _file_check("trace", review.trace_file)
    args = " ".join(_quote(a) for a in review_args(review))
    return SCRIPT.replace("@CHECK@", check.replace("@DIGEST@", DIGEST)).replace("@ARGS@", args)


def packet_files(review: Review) -> dict[str, bytes]:
    doc = review_document(review)
    files = {
        "review.json": (json.dumps(doc, indent=1, allow_nan=False) + "\n").encode(),
        "README.md": readme(review, doc).encode(),
        "reproduce.sh": reproduce_script(review, doc["model_file"]).encode(),
        profile_path(review): (json.dumps(review.request.hardware.to_dict(), indent=1) + "\n").encode(),
    }
    for label, result in (("baseline", review.baseline), ("fix", review.fixed)):
        if result is not None:
            files[f"{label}.xlsx"] = pinned_xlsx(sheet_bytes(result, "xlsx"), review.created_utc)
            files[f"{label}.html"] = sheet_bytes(result, "html")
    if review.validation is not None:
        v = review.validation
        files |= {
            "validation_matrix.csv": csv_bytes(v.matrix),
            "validation_verdicts.csv": csv_bytes(v.verdicts),
            "rollback_boundary.csv": csv_bytes(v.boundary),
        }
    return files


def packet_bytes(review: Review) -> bytes:
    """The packet as one zip (what the Review page's download and `mapper review --out` give)."""
    return _zip(packet_files(review))
