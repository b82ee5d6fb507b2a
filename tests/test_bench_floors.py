"""The import floors bench/bench_import.py times beside the real importer: each walks every node of a real
model (a floor that skipped nodes would make the ceiling it reports look higher than it is)."""

import sys
from pathlib import Path

import onnx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from import_floors import FLOORS

LIGHT = Path(onnx.__file__).parent / "backend/test/data/light"


@pytest.mark.parametrize("floor", sorted(FLOORS))
@pytest.mark.parametrize("model", ["light_resnet50.onnx", "light_inception_v2.onnx"])
def test_floor_visits_every_node(floor, model):
    path = LIGHT / model
    assert FLOORS[floor](str(path)) == len(onnx.load(path, load_external_data=False).graph.node)
