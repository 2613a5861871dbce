"""Who owns what (issue 23): read from the source with `ast`, so a rename or a new spelling of the same
thing is still caught. No part writes another part's attributes; the fit's data has one owner
(`FitData`); the loop is small; the Trainer's `fit` reads top to bottom."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).parents[1] / "src" / "surge"

# Every `x.attr = ...` (or `+=`, `del`) in src/surge where x is not `self`/`cls`, each with its reason.
# "file: target" as `ast.unparse` writes the target.
ALLOWED: dict[str, set[str]] = {
    "a wrapper function made here, given the classmethod's function as Lightning's bound methods carry it "
    "(`__func__`, read by inspection)": {
        "lightning/utilities/model_helpers.py: bound.__func__",
    },
    "a wrapper function made here around a hook, given the hook's owner as a bound method carries it "
    "(`__self__`, read where hooks are told apart by their callback)": {
        "module/log_hooks.py: call.__self__",
    },
    "an option's help text, set on the parser the command itself builds (argparse's way to give it)": {
        "stage_cli/help.py: action.help",
    },
    "the Trainer's arguments completed where they are checked (arguments/lightning.py is TrainerConfig's "
    "Lightning half): plugins= becomes its decided value, which may set precision and sync_batchnorm": {
        "arguments/lightning.py: cfg.plugins",
        "arguments/lightning.py: cfg.precision",
        "arguments/lightning.py: cfg.sync_batchnorm",
    },
    "Lightning's CombinedLoader API, used as Lightning's loops use it: limits set by the stage, a copy's "
    "loaders, and reset() dropping the inner loaders' persistent iterators so their workers stop": {
        "data/combined.py: loader._iterator",
        "data/combined.py: new.flattened",
        "data/combined_stage.py: combined.limits",
    },
    "a rank started from inside a stage (spawn, fork) takes the main process's identity and flags, as a "
    "rank started by surge's launcher reads them at import; rank zero's best checkpoint comes back as Lightning's": {
        "launch/multiprocessing_launcher.py: rank_zero.rank_zero_only.rank",
        "launch/rank_state.py: torch.backends.cudnn.benchmark",
        "trainer/launching.py: callback.best_model_path",
    },
    "surge's own refused environment classes: buildable, so their __init__ refuses them by name": {
        "lightning/plugins/environments.py: _cls.__abstractmethods__",
    },
    "torch's fused optimizers read these attributes: set for one step and deleted after it, as torch's GradScaler does": {
        "optim/nonfinite.py: opt.grad_scale",
        "optim/nonfinite.py: opt.found_inf",
    },
    "torch's slot for a module's compiled call (what nn.Module.compile fills): surge's compiled call, "
    "put there when a stage starts and taken out when it ends or fails (tests/test_user_objects_untouched.py)": {
        "speed/compiled_calls.py: target._compiled_call_impl",
    },
    "the Trainer's signature, generated from TrainerConfig's fields, on the function surge defines": {
        "arguments/declared.py: checked.__signature__",
        "arguments/declared.py: checked.__annotations__",
    },
    "Lightning's logging, set up in the mode as `import lightning.pytorch` sets it up: the logger of the "
    "rank-zero helpers (lightning_utilities) and the propagation of the 'lightning.pytorch' logger": {
        "lightning/utilities/rank_zero.py: _messages.log",
        "rank_zero.py: logger.propagate",  # lightning_log(): the same set-up, also for a fit's stop line
    },
    "Lightning's public API: a callback sets these on the Trainer (properties that call the owner's method)": {
        "callbacks/accumulation.py: trainer.accumulate_grad_batches",
        "callbacks/early_stopping.py: trainer.should_stop",
        "callbacks/timer.py: trainer.should_stop",
        "profiler/doctor_run.py: trainer.should_stop",  # surge doctor's fit ends as an early stop does
        "lightning/tuner.py: trainer.callbacks",
        "loops/stage_hooks.py: datamodule.trainer",  # LightningDataModule.trainer, set as Lightning does
    },
    "the Lightning mode gives a surge module it imports Lightning's other names, refused when used (lightning/standins.py)": {
        "lightning/standins.py: module.__getattr__",
    },
    "a rollback drives its SpikeGuard (the guard's snapshot flag) and, before a preemption's checkpoint, settles the step the loop hands it": {
        "loops/rollback.py: guard.snapshot_due",
        "loops/rollback.py: self.guard.snapshot_due",
        "loops/preempt.py: loop.global_step",
    },
    "what the feature is: switching parameters, norms and modes of the user's model, as Lightning does": {
        "callbacks/finetuning.py: p.requires_grad",
        "callbacks/finetuning.py: m.track_running_stats",
        "callbacks/finetuning.py: module.track_running_stats",
        "callbacks/finetuning.py: optimizers[i].param_groups",
        "callbacks/swa.py: m.momentum",
        "loops/module_mode.py: m.training",
        "module/__init__.py: param.requires_grad",
        "module/optimizers.py: param.requires_grad",
        "strategies/base.py: param.grad",
        "strategies/ddp.py: ddp.require_backward_grad_sync",
        "strategies/ddp.py: ddp.require_forward_param_sync",
        "tune/trial.py: m.training",
        "tune/trial.py: p.grad",
        "tune/trial.py: t.data",
        "lightning/cli_optimizers.py: model.configure_optimizers",  # LightningCLI's auto_configure_optimizers
    },
    "process-wide switches of torch, Python and Lightning's API (no object of surge's own)": {
        "assembly.py: torch.backends.cudnn.benchmark",
        "assembly.py: torch.backends.cudnn.deterministic",
        "speed/__init__.py: torch.backends.cudnn.benchmark",
        "lightning/mode.py: sys.argv",
        "lightning/utilities/rank_zero.py: rank_zero_only.rank",
        "rank_zero.py: log.propagate",
    },
    "a loader or sampler surge re-created itself (the user's is never changed), or torch's iterator": {
        "data/__init__.py: loader.generator",
        "data/__init__.py: loader._iterator",
        "data/__init__.py: skipper.rng",
        "data/loader_state.py: sampler.seed",
        "launch/signals.py: loader.worker_init_fn",
        "data/worker_count.py: copy.check_worker_number_rationality",  # torch's check, said once (the user's)
    },
    "a value built in the same function, filled in before it is returned or used": {
        "lightning/standins.py: refused.__name__",
        "lightning/standins.py: refused.__qualname__",
        "lightning/standins.py: refused.__module__",
        "lightning/standins.py: refused.__doc__",
        "lightning/standins.py: refused.refusal",
        "lightning/standins.py: made.__path__",
        "lightning/standins.py: made.submodule",
        "lightning/standins.py: __getattr__.lightning_fallback",
        "checkpoint/sharded.py: metadata.storage_meta",
        "checkpoint/sharded.py: metadata.storage_meta.load_id",
        "cli/main.py: args.script_args",
        "lightning/cli.py: cfg.seed_everything",
        "lightning/cli.py: cfg.trainer.callbacks",
        "lightning/cli.py: parser.default_config_files",
        "lightning/cli.py: parser.description",
        "lightning/cli_trainer.py: lightning_trainer.__signature__",
        "loggers/default.py: csv._run",
        "loggers/mlflow_kept.py: kept.run_id",
        "loggers/wandb.py: found.upto",
        "loggers/wandb_history.py: out.next_row",
        "loggers/wandb_history.py: out.segments",
        "metrics/results.py: slot.add_dataloader_idx",
        "metrics/results.py: slot.last",
        "metrics/results.py: slot.metric",
        "metrics/results.py: slot.total",
        "metrics/results.py: slot.weight",
        "profiler/pytorch.py: parts.batches",
        "strategies/fsdp.py: strategy._side_group",
        "tune/workers.py: result.expected_s",
        "tune/workers.py: result.kept",
        "tune/workers.py: result.num_workers",
        "tune/workers.py: result.spent_s",
        "optim/manual.py: opt._steps",  # LightningOptimizer's own slot, set by object.__setattr__'s twin
    },
    "the training loop's own record of an epoch (`EpochSteps`, built by `_bind` and read by no other part): "
    "the parts it swaps after the fit's first step, the flags its owners set, when each is next due": {
        "loops/train_batches.py: s.inspect",
        "loops/train_batches.py: s.step",
        "loops/train_batches.py: s.backward",
        "loops/train_batches.py: s.after_batch",
        "loops/train_batches.py: s.cut",
        "loops/train_batches.py: s.ran_out",
        "loops/train_batches.py: s.step_due",
        "loops/train_batches.py: s.between_at",
        "loops/train_batches.py: s.rolled_back",
        "loops/train_batches.py: s.snapshot_due",
        "loops/train_batches.py: s.row_held",
        "loops/train_batches.py: s.pace_at",
    },
    "an object the owner holds privately and fills (mlflow's resume target)": {
        "loggers/mlflow.py: self._target.resume",
        "loggers/mlflow.py: self._target.resume_step",
        "loggers/mlflow.py: self._target.run_id",
    },
    "the step's batch handed to its Results in the hot loop: a store, no per-step call": {
        "loops/fit.py: results.batch",
        "loops/train_batches.py: results.batch",
        "loops/evaluate.py: results.batch",
        "loops/evaluate.py: epoch_end_results.batch",
        # a pipeline's last stage logs its micro-batches at the window's end: each one's target, in turn
        "strategies/pipeline_run.py: results.batch",
    },
}


def _sources() -> list[tuple[str, ast.Module]]:
    return [(str(p.relative_to(SRC)), ast.parse(p.read_text())) for p in sorted(SRC.rglob("*.py"))]


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign | ast.Delete):
        found = list(node.targets)
    elif isinstance(node, ast.AugAssign | ast.AnnAssign):
        found = [node.target]
    else:
        return []
    flat: list[ast.expr] = []
    while found:
        t = found.pop()
        if isinstance(t, ast.Tuple | ast.List):
            found.extend(t.elts)
        else:
            flat.append(t)
    return flat


def foreign_assignments(tree: ast.Module, path: str) -> set[str]:
    """`path: target` for each assignment to an attribute of an object other than `self`/`cls`."""
    out = set()
    for node in ast.walk(tree):
        for t in _targets(node):
            if isinstance(t, ast.Attribute) and not (
                isinstance(t.value, ast.Name) and t.value.id in ("self", "cls")
            ):
                out.add(f"{path}: {ast.unparse(t)}")
    return out


def test_no_part_writes_another_parts_attributes():
    allowed = set().union(*ALLOWED.values())
    found = set().union(*(foreign_assignments(tree, path) for path, tree in _sources()))
    assert sorted(found - allowed) == [], "write through the owner's method, or add a reason to ALLOWED"


def test_the_check_sees_what_it_is_for():
    tree = ast.parse(
        "loop.train_loader = x\nself.ctx.validation.plan = p\na, b.c = 1, 2\nself.ok = 1\ncls.ok = 2\n"
    )
    assert foreign_assignments(tree, "f.py") == {
        "f.py: loop.train_loader", "f.py: self.ctx.validation.plan", "f.py: b.c"
    }  # fmt: skip


def _class(path: str, name: str) -> ast.ClassDef:
    tree = ast.parse((SRC / path).read_text())
    return next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == name)


def _self_attributes(cls: ast.ClassDef) -> set[str]:
    return {
        t.attr
        for node in ast.walk(cls)
        for t in _targets(node)
        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
    }


def test_the_fit_loop_holds_counters_and_its_position_only():
    attributes = _self_attributes(_class("loops/fit.py", "FitLoop"))
    attributes |= _self_attributes(_class("loops/train_batches.py", "TrainBatches"))  # its batches
    assert len(attributes) <= 10, sorted(attributes)
    assert not attributes & {"train_loader", "reload", "auto_workers", "accumulate", "trainer", "plan"}


def test_trainer_fit_reads_top_to_bottom():
    """fit()'s body after its argument checks (trainer/stages.py): in this process or in each rank."""
    fit = next(
        n
        for n in ast.walk(_class("trainer/__init__.py", "Trainer"))
        if isinstance(n, ast.FunctionDef) and n.name == "_fit"
    )
    assert fit.end_lineno is not None and fit.end_lineno - fit.lineno + 1 <= 30


def test_at_most_two_assigned_lambdas():
    count = sum(p.read_text().count("noqa: E731") for p in SRC.rglob("*.py"))
    assert count <= 2


def test_the_fit_context_is_never_rebuilt():
    """`FitContext` is frozen and built once a fit: no `replace(ctx, ...)` (nor of `loop.ctx`)."""
    rebuilt = [
        f"{path}:{node.lineno}"
        for path, tree in _sources()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", getattr(node.func, "attr", None)) == "replace"
        and node.args
        and "ctx" in ast.unparse(node.args[0])
    ]
    assert rebuilt == []
    fit_context = _class("loops/context.py", "FitContext")
    assert any("frozen=True" in ast.unparse(d) for d in fit_context.decorator_list)


def test_the_batch_plan_and_the_accumulation_have_one_owner():
    """Batches per epoch live in `FitData.plan` only; the accumulation in `FitData` (besides the
    configuration and the tuners' own input and decision)."""
    held = {}
    for path, tree in _sources():
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            fields = {
                t.target.id
                for t in cls.body
                if isinstance(t, ast.AnnAssign) and isinstance(t.target, ast.Name)
            }
            for name in fields | _self_attributes(cls):
                if "batches_per_epoch" in name or "accumulat" in name or name in ("plan", "_plan"):
                    held.setdefault(name, set()).add(f"{path}:{cls.name}")
    assert "batches_per_epoch" not in held
    # EpochData: the frozen value `for_epoch` hands the loop (received, never written back)
    assert held.get("plan") == {"loops/fit_data/__init__.py:FitData", "loops/fit_data/__init__.py:EpochData"}
    assert "_plan" not in held
    accumulation = set().union(*(v for k, v in held.items() if "accumulat" in k))
    assert accumulation == {
        "loops/fit_data/__init__.py:FitData",
        "arguments/__init__.py:TrainerConfig",
        "loops/fit_data/tuning.py:Tuning",  # the configured value a tuner starts from
        "loops/fit_data/tuning.py:Tuned",  # its decision, which FitData takes over
    }, accumulation
