"""The reproduce command and the one table of plan options (mapper/report/reproduce.py).

Every PlanOptions field has a row; every row's flag is the CLI's own; the command a document carries,
parsed by the CLI's parser and run, maps the same slice (the same document less created_utc)."""

import dataclasses
import json
import shlex
from pathlib import Path

import pytest

import mapper
from mapper.cli.args import options_from
from mapper.cli.main import build_parser, main

BERT_TINY = Path(__file__).parent / "models" / "hf_bert_tiny.onnx"


def test_every_plan_option_has_one_row():
    names = [f.name for f in mapper.PLAN_FIELDS]
    assert names == [f.name for f in dataclasses.fields(mapper.PlanOptions)]
    assert len({f.url_key for f in mapper.PLAN_FIELDS}) == len(names)


@pytest.mark.parametrize("field", mapper.PLAN_FIELDS, ids=lambda f: f.name)
def test_each_rows_flag_sets_its_field(field):
    """Each row's flag, with a value away from the default, sets exactly that field through the CLI's parser."""
    value = {"int": "2", "float": "1.5", "optional-float": "450", "tristate": "on", "switch": "on"}.get(field.kind)
    value = value or field.choices[-1]
    flags = [field.flag] if field.kind == "switch" else [field.flag, value]
    options = options_from(build_parser().parse_args(["map", "resnet50", *flags]))
    changed = [
        f.name for f in dataclasses.fields(options) if getattr(options, f.name) != getattr(mapper.PlanOptions(), f.name)
    ]
    assert changed == [field.name]
    assert getattr(options, field.name) == mapper.parse_option(field, value)
    assert mapper.parse_option(field, mapper.format_option(field, getattr(options, field.name))) == getattr(
        options, field.name
    )


def cli_document(argv: list[str], capsys) -> dict:
    assert main(argv) == 0, capsys.readouterr().err
    doc = json.loads(capsys.readouterr().out)
    doc.pop("created_utc")
    return doc


@pytest.mark.parametrize(
    "argv",
    [
        ["bert-base", "--batch", "2", "--tp", "2", "--weight-dtype", "int4", "--attention-fusion", "off"],
        ["resnet50", "--hw", "a100-sxm-80gb", "--fusion", "none", "--layout", "nhwc", "--power-cap-w", "300"],
        ["gpt2-small", "--seq", "64", "--pp", "2", "--dp", "2", "--overlap-collectives", "--dtype", "fp8"],
        [str(BERT_TINY), "--dim", "batch=4", "--dim", "seq=32"],
    ],
    ids=["bert-tp2-int4", "resnet-a100", "gpt2-pp2", "file"],
)
@pytest.mark.slow  # seconds in the fast tier on a 2-core machine: the full tier runs it
def test_the_reproduce_command_maps_the_same_slice(argv, capsys):
    first = cli_document(["map", *argv, "--json"], capsys)
    words = shlex.split(first["reproduce"])
    assert words[:3] == ["mapper", "map", "--hw=" + first["hardware"]["name"]] and "--dim=batch=" in " ".join(words)
    assert words[-2] == "--"  # the model last: a file named like an option is still the model
    again = cli_document([*words[1:-2], "--json", *words[-2:]], capsys)
    assert again == first


def test_an_edited_profile_reproduces_from_its_exported_file(tmp_path, capsys):
    """A profile that is not a built-in is named by its file (what the dashboard exports beside the sheet)."""
    edited = mapper.edit_profile(mapper.load_hardware("h100-sxm"), {"memory.dram_bandwidth_bytes_per_s": 2e12})
    doc = mapper.mapping_document(mapper.map_workload(mapper.load_workload("resnet50"), edited))
    words = shlex.split(doc["reproduce"])
    hw_file = words[2].removeprefix("--hw=")
    assert hw_file == f"{edited.name}.json" and edited.name != "h100-sxm"
    (tmp_path / hw_file).write_text(json.dumps(edited.to_dict()))
    words[2] = f"--hw={tmp_path / hw_file}"
    again = cli_document([*words[1:-2], "--json", *words[-2:]], capsys)
    assert again["hardware"] == doc["hardware"] and again["totals"] == doc["totals"]


def test_a_link_carries_every_option_and_refuses_hostile_values():
    options = mapper.PlanOptions(tp=8, weight_dtype="int4", attention_fusion=False, power_cap_w=500.0, dtype="bf16")
    query = mapper.options_query(options)
    assert query == {"dtype": "bf16", "weight_dtype": "int4", "attention": "off", "power_cap_w": "500", "tp": "8"}
    values, refused = mapper.options_from_query(query)
    assert mapper.PlanOptions(**values) == options and refused == []
    values, refused = mapper.options_from_query({"tp": "²", "dtype": "<script>", "power_cap_w": "nan", "ep": "99999"})
    assert values == {} and len(refused) == 4
    assert all(line.startswith("The link's option ") for line in refused)


def test_an_upload_named_like_a_built_in_reproduces_from_its_file():
    """A graph uploaded under a built-in's name is not that built-in: its bytes' sha256 differ, so the
    command names the file, not `mapper map resnet50`; the built-in itself keeps its name."""
    handle = mapper.open_model(BERT_TINY.read_bytes(), name="resnet50")
    doc = mapper.mapping_document(
        mapper.map_workload(handle.bind({"batch": 1, "seq": 8}), mapper.load_hardware("h100-sxm"))
    )
    assert doc["model"]["name"] == "resnet50"
    assert shlex.split(doc["reproduce"])[-1] == "MODEL.onnx"
    builtin = mapper.mapping_document(
        mapper.map_workload(mapper.load_workload("resnet50"), mapper.load_hardware("h100-sxm"))
    )
    assert shlex.split(builtin["reproduce"])[-1] == "resnet50"
