"""model_flags: a typed flag model to argv, one rule for every launched engine."""

from __future__ import annotations

from pydantic import BaseModel

from infermatrix.core.engine.argv import expand_path, model_flags
from infermatrix.core.engine.prometheus import metric_samples


class Flags(BaseModel):
    tp_size: int | None = None
    eager: bool | None = None
    chunked: bool | None = None
    spec: dict | None = None
    api_keys: list[str] | None = None
    extra_args: list[str] = []


def test_flags_in_declaration_order():
    f = Flags(tp_size=4, eager=True, chunked=False, spec={"method": "mtp", "n": 1}, api_keys=["a", "b"], extra_args=["--x"])
    assert model_flags(f) == ["--tp-size", "4", "--eager", "--spec", '{"method":"mtp","n":1}', "--api-keys", "a", "b"]
    assert model_flags(f, sep="_")[:2] == ["--tp_size", "4"]
    assert model_flags(f, names={"tp_size": "-tp"}, skip=("extra_args", "spec", "api_keys")) == ["-tp", "4", "--eager"]
    assert model_flags(Flags()) == []  # nothing set: the server's defaults stay


def test_expand_path(monkeypatch):
    monkeypatch.setenv("HOME", "/home/u")
    monkeypatch.setenv("ENVDIR", "envs")
    assert expand_path("~/x") == "/home/u/x" and expand_path("$HOME/$ENVDIR/bin/s") == "/home/u/envs/bin/s"


def test_metric_samples_keep_labels():
    page = 'a{rank="0"} 1\na{rank="1"} 2\nab{rank="0"} 9\n# TYPE c counter\nc_total{x="1"} 5\n'
    assert metric_samples(page, "a") == [({"rank": "0"}, 1.0), ({"rank": "1"}, 2.0)]
    assert metric_samples(page, "c") == [({"x": "1"}, 5.0)]
    assert metric_samples(page, "missing") == [] and metric_samples("not { prometheus", "not") == []
