"""The helpers scripts import beyond the Trainer behave as real Lightning's, on one process and
on two (gloo) (tests/oracle/scripts/utilities_points.py): `grad_norm` logged in
`on_before_optimizer_step` (metrics equal, weights `torch.equal`), `model_summary`'s table and
numbers, `measure_flops`, `ThroughputMonitor`'s rows (steps, keys and counts; the rates are
timings), `BasePredictionWriter`'s calls with each rank's own batch indices."""

from __future__ import annotations

import json

import pytest
from oracle_runs import assert_same_weights, run_both

MODES = ("single", "ddp")


@pytest.fixture(scope="module", params=MODES)
def runs(request, tmp_path_factory):
    args = ("--ddp",) if request.param == "ddp" else ()
    lightning, surge = run_both("utilities_points.py", tmp_path_factory.mktemp(request.param), *args)
    ranks = (0, 1) if args else (0,)
    records = [
        [json.loads((run.cwd / f"record-rank{r}.json").read_text()) if args else run.record for r in ranks]
        for run in (lightning, surge)
    ]
    return lightning, surge, records


def test_grad_norm_logs_and_trains_as_lightning(runs):
    lightning, surge, (theirs, ours) = runs
    for key in theirs[0]:
        if key.startswith("grad_norm/"):
            assert ours[0][key] == theirs[0][key], key
    assert_same_weights(lightning.weights("grad_norm"), surge.weights("grad_norm"))
    logged = theirs[0]["grad_norm/logged"]
    assert "grad_2.0_norm_total" in logged and "grad_2.0_norm/head.weight" in logged
    assert theirs[0]["grad_norm/none"] == {} and theirs[0]["grad_norm/direct/inf"]
    assert {theirs[0][f"grad_norm/error/{v}"] for v in ("0", "-1")} == {"ValueError saying so"}


def test_model_summary_and_measure_flops_as_lightning(runs):
    _, _, (theirs, ours) = runs
    if len(theirs) == 2:
        pytest.skip("one process only")
    for key in theirs[0]:
        if key.startswith(("summary/", "flops/")):
            assert ours[0][key] == theirs[0][key], key
    assert "other params" in theirs[0]["summary/top"] and "Total Flops" in theirs[0]["summary/deep"]
    assert theirs[0]["flops/backward"] > theirs[0]["flops/forward"] > 0


def test_throughput_monitor_logs_lightnings_rows(runs):
    """Rank zero's logged rows: the step, the keys and the counts (batches, samples, lengths, epoch)."""
    _, _, (theirs, ours) = runs
    rows, expected = ours[0]["throughput/rows"], theirs[0]["throughput/rows"]
    assert sorted(map(json.dumps, rows)) == sorted(map(json.dumps, expected))  # the rows, each once
    # In order: the monitor's rows (surge writes a step's `self.log` row before the callbacks' at that step).
    assert [r for r in rows if any("/batches" in k for k in r[1])] == [
        r for r in expected if any("/batches" in k for k in r[1])
    ]
    keys = {k for row in expected for k in row[1]}
    assert {
        "train/device/samples_per_sec",
        "train/device/flops_per_sec",
        "validate/time",
        "test/lengths",
    } <= keys
    assert "predict/samples" in keys
    assert ("train/samples_per_sec" in keys) == (len(theirs) == 2)  # all devices' rates under DDP only


def test_prediction_writer_calls_as_lightning(runs):
    """Each rank's calls: the prediction, its batch's sampler indices, the batch, at the batch's end;
    the predictions and indices per loader at the epoch's end; what `predict` returns."""
    _, _, (theirs, ours) = runs
    for mine, their in zip(ours, theirs):
        for key in their:
            if key.startswith("writer/") and key != "writer/bad_interval":
                assert mine[key] == their[key], key
        if "writer/bad_interval" in their:  # Lightning's exception is surge's MisconfigurationError
            assert mine["writer/bad_interval"][1] == their["writer/bad_interval"][1]
    epoch = [c for c in theirs[-1]["writer/batch_and_epoch/calls"] if c[0] == "epoch"][0]
    if len(theirs) == 2:  # rank 1 writes its own share: the odd samples
        assert epoch[3] == [[[1, 3, 5, 7], [9]], [[1, 3, 5]]]
    else:
        assert epoch[3] == [[[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]], [[0, 1, 2], [3, 4, 5]]]


def test_every_public_fabric_utility_name_resolves_or_is_refused_at_use(runs):
    """Each public name of `lightning.fabric.utilities` and its submodules that scripts import
    (listed under Lightning) imports under surge too: provided, or refused when called; and
    `lightning.fabric.Fabric` imports and is refused when constructed."""
    lightning, surge, (theirs, ours) = runs
    if len(theirs) == 2:
        pytest.skip("one process only")
    names = {m: v for m, v in theirs[0].items() if m.startswith("lightning.fabric.")}
    assert len(names) == 12 and "_load" in names["lightning.fabric.utilities.cloud_io"]
    assert all(set(v.values()) == {"ok"} for v in names.values())
    assert {m for m in ours[0] if m.startswith("lightning.fabric.")} == names.keys()
    refused = {(m, n) for m in names for n, how in ours[0][m].items() if how != "ok"}
    assert {ours[0][m][n] for m, n in refused} == {"refused at use: LightningNameError"}
    assert refused == {
        ("lightning.fabric.utilities", "ThroughputMonitor"),
        ("lightning.fabric.utilities.throughput", "ThroughputMonitor"),
        ("lightning.fabric.utilities", "is_shared_filesystem"),
        ("lightning.fabric.utilities.distributed", "is_shared_filesystem"),
        ("lightning.fabric.utilities.distributed", "DistributedSamplerWrapper"),
    }
    assert (theirs[0]["Fabric()"], ours[0]["Fabric()"]) == ("ok", "LightningNameError")
