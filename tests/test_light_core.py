"""The light core: the engine runs with only its core dependencies (onnx, numpy, pydantic) importable.

Each case runs a child Python whose `sys.meta_path` refuses every package an extra installs
(mapper/core/extras.py), as if `pip install mapper` had installed no extra: `import mapper`, the public API's
mapping of a built-in and `python -m mapper map resnet50 --json` work and load none of them; a feature that
needs an extra says so in one line (the CLI: `error: ...`, exit 2), never a traceback.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import mapper
from mapper.core.extras import EXTRAS

ROOT = Path(__file__).resolve().parents[1]
# Every package an extra installs, and the heavy ones they pull in.
BLOCKED = sorted({*EXTRAS, "scipy", "matplotlib"})

BLOCKER = f"""
import sys

BLOCKED = {BLOCKED!r}


class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked by the test)", name=name)
        return None


sys.meta_path.insert(0, Blocker())


def loaded():
    return sorted({{m.split(".")[0] for m in sys.modules}} & set(BLOCKED))
"""

# `python -m mapper ...` with the blocker in place; the blocked modules found loaded go to stderr's last line.
CLI = """
import runpy
sys.argv = ["mapper", *ARGV]
try:
    runpy.run_module("mapper", run_name="__main__", alter_sys=True)
finally:
    print("loaded:", json.dumps(loaded()), file=sys.stderr)
"""


def child(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", BLOCKER + "import json\n" + code],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        timeout=120,
    )


def cli(*argv: str) -> tuple[int, str, list[str], list[str]]:
    """(exit code, stdout, stderr's lines but the last, the blocked modules that were loaded)."""
    done = child(f"ARGV = {list(argv)!r}\n" + CLI)
    *lines, last = done.stderr.splitlines()
    assert last.startswith("loaded: "), done.stderr
    return done.returncode, done.stdout, lines, json.loads(last.removeprefix("loaded: "))


def test_blocker_blocks():
    done = child("import pandas")
    assert done.returncode == 1 and "blocked by the test" in done.stderr


def test_public_api_maps_a_builtin_without_extras():
    code = (
        "import mapper\n"
        "assert loaded() == [], loaded()\n"
        "model = mapper.open_model('resnet50')\n"
        "result = mapper.map_workload(model.bind({'batch': 2}), mapper.load_hardware('h100-sxm'),"
        " mapper.PlanOptions(dtype='bf16'))\n"
        "print(json.dumps(mapper.mapping_document(result)))\n"
        "print(json.dumps(loaded()))\n"
    )
    done = child(code)
    assert done.returncode == 0, done.stderr
    document, modules = done.stdout.splitlines()
    assert json.loads(modules) == []
    here = mapper.map_workload(
        mapper.open_model("resnet50").bind({"batch": 2}),
        mapper.load_hardware("h100-sxm"),
        mapper.PlanOptions(dtype="bf16"),
    )
    child_doc, here_doc = json.loads(document), json.loads(json.dumps(mapper.mapping_document(here)))
    child_doc.pop("created_utc"), here_doc.pop("created_utc")  # the second each was mapped in
    assert child_doc == here_doc  # the same numbers


@pytest.mark.slow
@pytest.mark.parametrize("argv", [("map", "resnet50", "--json"), ("map", "resnet50"), ("zoo",), ("hw",)])
def test_cli_core_commands_without_extras(argv):
    rc, out, err, modules = cli(*argv)
    assert rc == 0 and not err, err
    assert modules == []
    if "--json" in argv:
        assert json.loads(out)["model"]["name"] == "resnet50"
    else:
        assert out.strip()


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv, extra",
    [
        (("map", "resnet50", "--out", "{tmp}/sheet.xlsx"), "report"),
        (("trend", "--store", "{tmp}/runs.sqlite"), "store"),
        (("measure", "resnet50", "--runs", "1"), "measure"),
    ],
)
def test_a_feature_without_its_extra_says_so_in_one_line(tmp_path, argv, extra):
    rc, out, err, _ = cli(*(a.format(tmp=tmp_path) for a in argv))
    assert rc == 2 and out == ""
    assert len(err) == 1 and err[0].startswith("error: ") and "Traceback" not in err[0], err
    assert f"pip install 'mapper[{extra}]'" in err[0]
    assert not list(tmp_path.iterdir())  # nothing half-written


def test_api_feature_without_its_extra_raises_mapper_error():
    code = "import mapper\ntry:\n    mapper.write_sheet\nexcept mapper.MapperError as exc:\n    print(exc)\n"
    done = child(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("mapper.write_sheet needs pandas") and "mapper[report]" in done.stdout
