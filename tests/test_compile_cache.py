"""Restarts without recompiling (docs/long_runs.md): with compile=..., torch's compiled artifacts are
saved beside the checkpoints and a resumed run loads them: it compiles for less time than the cold
run did and ends with the same weights."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

import script_server

sys.path.insert(0, str(Path(__file__).resolve().parent / "distributed"))
from jobs import PRELOAD, clean_env  # noqa: E402

JOB = """
import json, sys
from pathlib import Path
import torch
from torch.utils.data import DataLoader, TensorDataset
import surge

root, mode = Path(sys.argv[1]), sys.argv[2]

class MLP(surge.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    def forward(self, x):
        return self.net(x)
    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self(x), y)
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

class SaveAt4(surge.callbacks.Callback):
    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if mode == "cold" and trainer.global_step == 4:
            trainer.save_checkpoint(root / "ckpts" / "step4.ckpt")

torch.manual_seed(0)
g = torch.Generator().manual_seed(0)
data = TensorDataset(torch.randn(64, 16, generator=g), torch.randn(64, 4, generator=g))
trainer = surge.Trainer(max_steps=8, compile=True, default_root_dir=root / mode, callbacks=[SaveAt4()], logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
model = MLP()
trainer.fit(model, DataLoader(data, batch_size=8), ckpt_path=None if mode == "cold" else root / "ckpts" / "step4.ckpt")
torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, root / f"{mode}.pt")
g = trainer.goodput
from torch._dynamo.utils import counters
caches = {k: v for group in ("inductor", "aot_autograd") for k, v in counters[group].items() if "cache" in k}
(root / f"{mode}.json").write_text(json.dumps({"compile": g.run_seconds["compile"], "notes": list(g.notes), "caches": caches}))
"""


def _run(script: Path, root: Path, mode: str) -> dict:
    cache = root / f"inductor-{mode}"  # each process starts with an empty local cache of its own
    env = clean_env({"TORCHINDUCTOR_CACHE_DIR": str(cache)})
    # a process forked from a server that imported torch (and compiled nothing): a new interpreter's caches
    done = script_server.run(
        sys.executable, [str(script), str(root), mode], cwd=root, env=env, preload=PRELOAD
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((root / f"{mode}.json").read_text())


@pytest.mark.skipif(
    not hasattr(torch.compiler, "save_cache_artifacts"), reason="torch < 2.7: no artifacts API"
)
def test_a_resumed_compiled_run_loads_the_artifacts_compiles_less_and_ends_equal(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    cold = _run(script, tmp_path, "cold")
    assert (tmp_path / "ckpts" / "compile-cache.bin").stat().st_size > 0
    warm = _run(script, tmp_path, "warm")
    assert any("compiled artifacts saved beside" in note for note in warm["notes"]), warm
    # What the artifacts save: the compiled graphs come from them, none is compiled anew (the time
    # saved is benchmarks/compile_restart.py's to measure; a timing here swings with the load).
    assert (
        cold["caches"].get("fxgraph_cache_miss", 0) > 0 and cold["caches"].get("fxgraph_cache_hit", 0) == 0
    ), cold
    assert (
        warm["caches"].get("fxgraph_cache_hit", 0) > 0 and warm["caches"].get("fxgraph_cache_miss", 0) == 0
    ), warm
    assert warm["caches"].get("autograd_cache_hit", 0) > 0, warm
    cold_weights, warm_weights = torch.load(tmp_path / "cold.pt"), torch.load(tmp_path / "warm.pt")
    assert all(torch.equal(cold_weights[k], warm_weights[k]) for k in cold_weights)


@pytest.mark.skipif(
    not hasattr(torch.compiler, "save_cache_artifacts"), reason="torch < 2.7: no artifacts API"
)
def test_artifacts_not_signed_by_this_user_are_never_loaded(tmp_path, monkeypatch):
    # Compiled artifacts run code: a checkpoint folder from elsewhere must not bring any.
    import surge.speed.compile_cache as cc
    from surge.speed.compiling import CompileSpec

    monkeypatch.setenv("SURGE_CACHE_DIR", str(tmp_path / "mine"))
    ckpt = tmp_path / "run" / "last.ckpt"
    ckpt.parent.mkdir()
    artifacts = ckpt.parent / cc.ARTIFACTS
    cache = cc.CompileCache(CompileSpec("forward"))
    assert cc.verified(cc.signed(b"payload")) == b"payload"
    assert (tmp_path / "mine" / "compile-cache.key").stat().st_mode & 0o077 == 0  # the owner's only
    for foreign in (b"", b"junk", b"\0" * 64, cc.signed(b"payload")[:-1], b"x" + cc.signed(b"payload")[1:]):
        artifacts.write_bytes(foreign)
        assert cache.load_beside(ckpt) is False and cache.loaded_from is None
    artifacts.write_bytes(cc.signed(b"payload"))
    monkeypatch.setenv("SURGE_CACHE_DIR", str(tmp_path / "someone else"))  # another user's key
    assert cache.load_beside(ckpt) is False and cache.loaded_from is None
    monkeypatch.setenv("SURGE_CACHE_DIR", str(tmp_path / "mine"))
    assert cache.load_beside(ckpt) is True  # this user's own file is trusted (torch reads what it can)
