"""The records of ``gpu --layers``, declared once (remote/gpulayers/records.py): what the
probe ``gpulayers.py`` writes is what the classes declare, they read back what they write,
a layer of a probe that said little loads as before, and the local side's names are these
very classes. The probe runs as it runs there (a subprocess) on planted roots with the
fake nvidia-smi (tests/gpuroot.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

import pytest

import remotekit.diagnostics.gpulayers as gpulayers
from remotekit.remote import protocol
from remotekit.remote.gpulayers import records as R
from remotekit.remote.records import Record
from remotekit.remote.sysinfo.records import TorchInfo
from remotekit.render import to_json
from tests import gpuroot
from tests.harness import ROOT

PROBE = ROOT / "remotekit" / "remote" / "gpulayers.py"
CONFIG = "/etc/pve/lxc/200.conf"


def probe(root: Path, *args: str) -> list[dict[str, Any]]:
    env = {**os.environ, **gpuroot.env(root)}
    proc = subprocess.run(
        [sys.executable, str(PROBE), *args], capture_output=True, text=True, env=env, timeout=60
    )
    out = [protocol.parse(line) for line in proc.stdout.splitlines()]
    assert out and all(r is not None for r in out), proc.stdout + proc.stderr
    return out  # type: ignore[return-value]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """The layer records of a healthy host (cgroup v1 rules, an LXC config, torch), of one
    without the driver or its nodes, and of one whose NVML is another version."""
    tmp = tmp_path_factory.mktemp("gpulayers-records")
    healthy = gpuroot.plant(tmp / "ok", gpus=2, cgroup=["c 195:* rwm"])
    conf = healthy / CONFIG.lstrip("/")
    conf.parent.mkdir(parents=True)
    conf.write_text("lxc.cgroup2.devices.allow: c 195:* rwm\ndev0: /dev/nvidia0\n")
    out = probe(healthy, "--config", CONFIG, "--torch")
    out += probe(gpuroot.plant(tmp / "none", kernel=None, nodes=False), "--config", "/no.conf")
    out += probe(gpuroot.plant(tmp / "mismatch", nvml="535.161.07"))
    return out


def nested(rec: dict[str, Any]) -> list[tuple[type[Record], dict[str, Any]]]:
    """A layer record and every record inside it, with their classes."""
    out: list[tuple[type[Record], dict[str, Any]]] = [(R.LayerView, rec)]
    out += [(R.SmiView, rec["smi"])] + [(R.SmiGpu, g) for g in rec["smi"]["gpus"]]
    out += [(R.DeviceNode, d) for d in rec["devices"]]
    out += [(R.CgroupView, rec["cgroup"]), (R.DriverView, rec["driver"])]
    return out + ([(R.LxcConfig, rec["lxc_config"])] if rec["lxc_config"] else [])


def layers(written: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in written if r["type"] == "layer"]


def test_every_record_was_written(written: list[dict[str, Any]]) -> None:
    found = {cls for rec in layers(written) for cls, _ in nested(rec)}
    assert found == {R.LayerView, R.SmiView, R.SmiGpu, R.DeviceNode, R.CgroupView}.union(
        {R.DriverView, R.LxcConfig}
    )
    assert [r["smi"]["problem"] for r in layers(written)] == [None, "no_driver", "nvml_mismatch"]
    assert any(r["type"] == "torch" for r in written)


def test_the_probe_writes_exactly_the_declared_fields(written: list[dict[str, Any]]) -> None:
    """Each key written is a field of its class, each field without a default is written,
    and the fields the local side fills in (``sent=False``) never are."""
    records = [pair for rec in layers(written) for pair in nested(rec)]
    records += [(TorchInfo, r) for r in written if r["type"] == "torch"]
    for cls, rec in records:
        keys = set(rec) - {"type"}
        sent = {f.name for f in fields(cls) if f.metadata.get("sent", True)}  # type: ignore[arg-type]
        required = {
            f.name
            for f in fields(cls)  # type: ignore[arg-type]
            if f.name in sent and f.default is MISSING and f.default_factory is MISSING
        }
        assert keys <= sent, (cls.__name__, keys - sent)
        assert required <= keys, (cls.__name__, required - keys)


def test_what_is_read_is_written_back_the_same(written: list[dict[str, Any]]) -> None:
    for rec in layers(written):
        for cls, part in nested(rec):
            value = cls.from_dict(part)
            assert cls.from_dict(value.to_dict()) == value, cls.__name__
        line = protocol.dumps({"type": "layer", **R.LayerView.from_dict(rec).to_dict()})
        assert R.LayerView.from_dict(protocol.parse(line)) == R.LayerView.from_dict(rec)


def test_a_layer_read_locally_is_the_record_with_what_the_laptop_knows(
    written: list[dict[str, Any]],
) -> None:
    rec, torch = layers(written)[0], next(r for r in written if r["type"] == "torch")
    layer = gpulayers.layer_of("pct exec 200", "container", 1, rec, torch)
    assert (layer.name, layer.kind, layer.hops, layer.gpu_count) == (
        "pct exec 200",
        "container",
        1,
        2,
    )
    assert layer.root is not None and layer.root.endswith("ok")  # a planted root is named
    assert layer.cgroup is not None and layer.cgroup.allows_gpus is True
    assert layer.driver is not None and not layer.driver.mismatch
    assert layer.torch is not None and layer.torch.importable
    data = json.loads(to_json(layer))
    assert list(data) == [f.name for f in fields(R.LayerView)]  # --json: as it always was
    assert list(data)[:4] == ["name", "kind", "hops", "error"]


def test_a_layer_that_said_little_loads_as_before() -> None:
    """Missing fields: their defaults; a layer without its driver part still has one."""
    layer = gpulayers.layer_of("node", "node", 0, {"root": "/"}, None)
    assert (layer.root, layer.smi, layer.devices, layer.env, layer.torch) == (
        None,
        None,
        (),
        {},
        None,
    )
    assert layer.driver == R.DriverView(None, (), ())
    assert layer.gpu_count is None and layer.var("CUDA_VISIBLE_DEVICES") is None
    assert R.SmiView.from_dict({}).gpus == () and R.CgroupView.from_dict({}).rules == ()


def test_hostile_values_are_bounded() -> None:
    """A value of the wrong sort becomes what its kind says (from_record raised on a driver
    or a device that is no mapping, and split a text given for a list)."""
    rec = {"driver": "x", "devices": [3], "groups": "ab", "env": [1], "cgroup": {"rules": "c"}}
    layer = gpulayers.layer_of("node", "node", 0, rec, None)
    assert layer.driver == R.DriverView(None, (), ()) and layer.devices == (
        R.DeviceNode.from_dict({}),
    )
    assert (layer.groups, layer.env) == ("ab", {})  # a tuple field keeps what came, as before
    assert layer.cgroup is not None and layer.cgroup.rules == ()


def test_the_local_names_are_the_shared_classes() -> None:
    for name in R.__all__:
        if name == "LayerView":
            assert issubclass(gpulayers.Layer, R.LayerView)
        else:
            assert getattr(gpulayers, name) is getattr(R, name), name
    assert gpulayers.TorchInfo is TorchInfo
