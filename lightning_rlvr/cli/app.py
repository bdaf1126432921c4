"""``lightning-rlvr fit|validate|test|export``: LightningCLI over ``RLVRModule`` and ``RLVRDataModule``.

Configs compose: ``--config configs/quickstart.yaml --config configs/method/shear.yaml``
merges left to right, and any key can be overridden with a dotted flag
(``--model.lr 1e-4``). ``--print_config`` shows the merged result. The method
is ``model.credit``, chosen by ``class_path``. ``test --ckpt_path ckpt`` needs no
config: the module (task, policy, method) is rebuilt from the checkpoint, and its metrics land in a
new version folder beside the checkpoint's run unless a logger or root dir is given (``cli/options.py``).
``export`` writes a trained checkpoint as a Hugging Face directory (``lightning_rlvr.export``).

Where outputs go: everything lands under ``trainer.default_root_dir`` (default ``runs``)
unless a path is given explicitly. The logger's ``save_dir`` defaults to the placeholder
``${trainer.default_root_dir}``, and ``checkpoint.dirpath`` may use it too (the quickstart
keeps its checkpoints in ``${trainer.default_root_dir}/quickstart/checkpoints``); with no
``checkpoint.dirpath`` checkpoints go to the logger's version folder
(``<save_dir>/<name>/version_N/checkpoints``), as in Lightning.

``--ckpt_path last`` resumes from the newest ``last*.ckpt`` of this run: in
``checkpoint.dirpath`` when set, else in any version folder of the logger's
``<save_dir>/<name>``. When there is none the CLI stops with one error line instead
of silently training from step 0.
"""

from __future__ import annotations

import json
import os
import re
import sys
import warnings
from argparse import ArgumentError
from pathlib import Path
from typing import Any

import yaml
from lightning.fabric.utilities.seed import seed_everything
from lightning.pytorch.callbacks import ModelCheckpoint, ProgressBar
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from ..checkpoint_files import (
    AtomicCheckpointIO,
    checkpoint_dirs,
    claim_checkpoint_dir,
    claim_log_version,
    find_last_checkpoint,
    loggers,
    read_checkpoint,
    release_claims,
    resolve_ckpt_path,
)
from ..core.console import StepProgressBar, quiet_lightning_tips
from ..core.errors import RLVRError, exit_with_one_line, user_error, yaml_problem
from ..core.files import write_text
from ..core.process import FIT_REPORT_ENV, adopt_parent_from_env, die_with_parent
from ..core.progress import say
from ..data import RLVRDataModule
from ..module import RLVRModule
from .ckpt_settings import checkpoint_classes_as_defaults, merge_with_checkpoint
from .compose import check_loss_settings_agree
from .options import (
    SUBCOMMAND_HELP,
    USAGE,
    checkpoint_callback_settings,
    import_plugins,
    log_beside_run,
    set_threads,
    threads_line,
)
from .signals import PhaseNames, attach, stop_on_signals

ROOT = "${trainer.default_root_dir}"  # replaced by the run's trainer.default_root_dir
DEFAULT_ROOT_DIR = "runs"


class RLVRCLI(LightningCLI):
    """LightningCLI with RLVR defaults: CSV logs under ``runs``, a ``last`` checkpoint, seeded runs."""

    def add_core_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """This project's groups (model, data, checkpoint) before Lightning's ~90 trainer flags, so
        ``--help`` shows them first."""
        parser.add_lightning_class_args(self._model_class, "model", subclass_mode=self.subclass_mode_model)
        parser.add_lightning_class_args(self._datamodule_class, "data", subclass_mode=self.subclass_mode_data)
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.add_lightning_class_args(self.trainer_class, "trainer")
        parser.set_defaults({"trainer." + k: v for k, v in self.trainer_defaults.items() if k != "callbacks"})

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        # no versioned names (last-v1.ckpt): a folder holds one run (claim_checkpoint_dir); last.ckpt is
        # its newest state
        parser.set_defaults(
            {
                "checkpoint.save_last": True,
                "checkpoint.every_n_train_steps": 25,
                "checkpoint.enable_version_counter": False,
            }
        )
        parser.set_defaults(
            {
                "trainer.default_root_dir": DEFAULT_ROOT_DIR,
                "trainer.logger": {
                    "class_path": "lightning.pytorch.loggers.CSVLogger",
                    "init_args": {"save_dir": ROOT, "name": "rlvr"},
                },
                "trainer.log_every_n_steps": 1,
                "trainer.num_sanity_val_steps": 0,
            }
        )

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        self._argv = list(sys.argv[1:] if args is None else args) if not isinstance(args, dict) else []
        checkpoint_classes_as_defaults(parser, self._argv)  # --model.policy.init_args.X with no config
        super().parse_arguments(parser, args)
        subcommand = self.config.get("subcommand")
        resolve_output_paths(self.config[subcommand] if subcommand else self.config)

    def _set_seed(self) -> None:
        """Seed as LightningCLI does, without its "Seed set to" line (an error must be the only line)."""
        seed = self._get(self.config, "seed_everything")
        if seed is False:
            return
        seed = seed_everything(None if seed is True else seed, workers=True, verbose=False)
        (self.config[self.subcommand] if self.subcommand else self.config)["seed_everything"] = seed

    def _parse_ckpt_path(self) -> None:
        """Resolve output paths and ``--ckpt_path`` (``last``, or a file checked to be a checkpoint).

        Replaces LightningCLI's version, which reads the module's hyperparameters from the
        checkpoint (so ``test --ckpt_path`` needs no config) but lets a damaged file raise a
        traceback and leaves ``last`` to a trainer that only looks in the new run's folder.
        """
        subcommand = self.config.get("subcommand")
        if not subcommand:
            return
        config = self.config[subcommand]
        ckpt_path = config.get("ckpt_path")
        if not ckpt_path:
            return
        if ckpt_path == "last":
            ckpt_path = find_last_checkpoint(config)
        elif ckpt_path in ("best", "hpc", "registry") or ckpt_path.startswith("registry:"):
            return  # Lightning's own names, resolved by the trainer
        else:
            ckpt_path = resolve_ckpt_path(ckpt_path)  # a folder of one run's checkpoints: its newest
        config["ckpt_path"] = ckpt_path
        checkpoint = read_checkpoint(ckpt_path)
        argv = getattr(self, "_argv", [])
        if subcommand != "fit":  # evaluating a run: its metrics go beside it, its callbacks match
            log_beside_run(config, ckpt_path, argv)
            for key, value in checkpoint_callback_settings(checkpoint).items():
                if not any(a.startswith(f"--checkpoint.{key}") for a in argv):
                    config[f"checkpoint.{key}"] = value
        hparams = dict(checkpoint.get("hyper_parameters") or {})
        hparams.pop("_instantiator", None)
        if not hparams:
            return
        if "_class_path" in hparams:
            hparams = {"class_path": hparams.pop("_class_path"), "dict_kwargs": hparams}
        # flags win, class swaps replace, a shape change is one error line (cli/ckpt_settings.py)
        hparams = merge_with_checkpoint(hparams, argv, checkpoint.get("state_dict"))
        self.config = self.parser.parse_object({subcommand: {"model": hparams}}, self.config)

    def before_instantiate_classes(self) -> None:
        """Give this run folders of its own: a logger version taken atomically and, for ``fit``, the
        checkpoint folder's lock (held until the process ends), refusing a folder another run writes."""
        if not self.subcommand or int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0")) or 0):
            return  # a config-only CLI, or a rank other than 0 (rank 0 claims for all)
        config = self.config[self.subcommand]
        if self.subcommand == "fit":
            claim_log_version(config)
            claim_checkpoint_dir(checkpoint_dirs(config)[0], config.get("ckpt_path"))
        else:
            claim_log_version(config)

    def instantiate_classes(self) -> None:
        """LightningCLI's, then the run's thread count as one of its first lines (once nothing failed)."""
        super().instantiate_classes()
        if self.subcommand and not int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0")) or 0):
            say(threads_line())

    def _instantiate_trainer(self, config: dict[str, Any], callbacks: list[Any]) -> Any:
        """The trainer, with atomic checkpoint writes unless a ``CheckpointIO`` plugin was given."""
        from lightning.fabric.plugins.io.checkpoint_io import CheckpointIO

        plugins = config.get("plugins")
        if not isinstance(plugins, (list, tuple)):
            plugins = [] if plugins is None else [plugins]
        if not any(isinstance(p, CheckpointIO) for p in plugins):
            config = {**config, "plugins": [*plugins, AtomicCheckpointIO()]}
        given = config.get("callbacks") or []
        given = [*(given if isinstance(given, list) else [given]), *callbacks]
        if config.get("enable_progress_bar") is not False and not any(
            isinstance(c, ProgressBar) for c in given
        ):
            callbacks = [*callbacks, StepProgressBar()]  # "step 12/100", not "Epoch 0/-2"
        trainer = super()._instantiate_trainer(config, [*callbacks, PhaseNames()])  # what a stop names
        attach(self.subcommand, self.config[self.subcommand] if self.subcommand else self.config, trainer)
        return trainer

    def after_fit(self) -> None:
        """Tell a caller (the sweep) which checkpoint this fit ended with: it tests that one, by path."""
        report = os.environ.get(FIT_REPORT_ENV)
        callback = self.trainer.checkpoint_callback
        if report and self.trainer.is_global_zero and callback is not None and not self.trainer.interrupted:
            last = callback.last_model_path or callback.best_model_path
            write_text(report, json.dumps({"ckpt_path": last, "global_step": self.trainer.global_step}))
        if self.trainer.is_global_zero and callback is not None and callback.last_model_path:
            if self.trainer.interrupted:
                return  # a stopped run says how far its checkpoint is behind (cli/signals.py)
            last = callback.last_model_path
            step = getattr(callback, "_last_global_step_saved", self.trainer.global_step)
            say(
                f"checkpoint: {last} (step {step}); test it with "
                f"lightning-rlvr test --ckpt_path {last}, resume with the same command and --ckpt_path last"
            )


def resolve_output_paths(config: Any) -> None:
    """Replace ``${trainer.default_root_dir}`` in logger ``save_dir`` and ``checkpoint.dirpath``."""
    root = str(config.get("trainer.default_root_dir") or ".")
    for logger in loggers(config["trainer"]):
        save_dir = logger["init_args"].get("save_dir")
        if isinstance(save_dir, str):
            logger["init_args"]["save_dir"] = save_dir.replace(ROOT, root)
    dirpath = config.get("checkpoint.dirpath")
    if isinstance(dirpath, str):
        config["checkpoint.dirpath"] = dirpath.replace(ROOT, root)


def check_config_files(args: list[str]) -> None:
    """Fail on a ``--config`` file that is not valid YAML or not a mapping, naming the file and line."""
    for i, arg in enumerate(args):
        if arg in ("--config", "-c") and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith("--config="):
            value = arg.split("=", 1)[1]
        else:
            continue
        path = Path(value)
        if not path.is_file():
            continue  # an inline config string, or a missing file jsonargparse reports
        try:
            data = yaml.safe_load(path.read_text())
        except yaml.YAMLError as err:
            raise RLVRError(f"{value}: not valid YAML{yaml_problem(err)}") from None
        if data is not None and not isinstance(data, dict):
            raise RLVRError(
                f"{value}: a config must be a mapping of sections (trainer:, model:, data:, ...), "
                f"got a {type(data).__name__}"
            )
    check_loss_settings_agree(args)  # a method file and a loss file compose in either order


def main(args: list[str] | None = None) -> None:
    """Console entry point (``lightning-rlvr``); ``export ...`` runs ``lightning_rlvr.export``."""
    adopt_parent_from_env()  # started by a sweep (or any parent that asked): die with it
    if "LOCAL_RANK" in os.environ:  # a rank started by a launcher (Lightning's, torchrun): die with it
        die_with_parent(os.getppid())
    argv = sys.argv[1:] if args is None else list(args)
    if argv[:1] == ["export"]:
        from ..export import main as export_main

        export_main(argv[1:])
        return
    with stop_on_signals():  # SIGINT, SIGTERM, SIGUSR1/2: stop within seconds, one line, 128 + signal
        run(args)


def run(args: list[str] | None = None) -> RLVRCLI:
    """Run the CLI and return it (for tests and notebooks); user errors print one line and exit 2."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # Lightning warns that manual-optimisation checkpoints hold post-step weights: that is what resume needs.
    warnings.filterwarnings("ignore", message=".*ModelCheckpoint with manual optimization.*")
    warnings.filterwarnings("ignore", message=".*isinstance\\(treespec, LeafSpec\\).*")
    # claim_checkpoint_dir has checked the folder: a resumed run's own files are expected there
    warnings.filterwarnings("ignore", message=".*Checkpoint directory .* exists and is not empty.*")
    # the claimed version folder holds this run's checkpoint lock; no earlier log is in it
    warnings.filterwarnings("ignore", message=".*Experiment logs directory .* exists and is not empty.*")
    quiet_lightning_tips()  # "💡 Tip: ... litlogger": an advertisement on every command, not a warning
    try:
        import_plugins()
        set_threads()
        check_config_files(sys.argv[1:] if args is None else list(args))
        return RLVRCLI(
            RLVRModule,
            RLVRDataModule,
            seed_everything_default=0,
            save_config_kwargs={"overwrite": True},
            parser_kwargs={  # parse errors come back here, printed as one line
                "exit_on_error": False,
                **{cmd: {"description": text, "usage": USAGE} for cmd, text in SUBCOMMAND_HELP.items()},
            },
            args=args,
            auto_configure_optimizers=False,
        )
    except Exception as err:
        exit_with_one_line("lightning-rlvr", user_error_message(err))
        raise
    finally:
        release_claims()  # run in-process (tests, notebooks): the next run may claim the folder


def user_error_message(err: BaseException) -> str | None:
    """One line for a user error (an ``RLVRError`` or a parse error), None for a bug."""
    user = _user_error(err)
    if user is not None:
        return " ".join(str(user).split())
    if isinstance(err, ArgumentError) or type(err).__name__ == "ArgumentError":
        return one_line_parse_error(str(err))
    return None


def one_line_parse_error(message: str) -> str:
    """jsonargparse's multi-line parse errors as one line: the key and the most specific reason."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    if not lines:
        return "could not parse the arguments; run with --help"
    key = re.match(r'Parser key "([^"]+)":\s*(.*)', lines[0])
    if lines[0].startswith("unrecognized arguments:"):
        return f"{lines[0]} (see --help for the accepted options)"
    if lines[0].startswith("Problems parsing config:"):
        unknown = next((ln for ln in lines if "is not expected" in ln or "not accepted" in ln), None)
        detail = unknown or " ".join(lines[0].split(":", 1)[1:]).strip() or " ".join(lines[1:3])
        return f"in a --config file: {detail}"
    if not key:
        return " ".join(lines)
    name, rest = key.group(1), [key.group(2)] if key.group(2) else []
    rest += lines[1:]
    for i, line in enumerate(rest):  # a class_path problem names the class and what is wrong with it
        m = re.match(r"- Problem with given class_path '([^']+)':\s*(.*)", line)
        if m and moved_to(m.group(1)):
            return f"{name}: class_path {m.group(1)!r} has moved: use {moved_to(m.group(1))!r}"
        if m:
            reason = m.group(2) or (rest[i + 1] if i + 1 < len(rest) else "")
            return f"{name}: class_path {m.group(1)!r}: {reason.lstrip('- ')}"
    reason = next((ln for ln in rest if ln.startswith("Expected")), rest[0] if rest else "invalid value")
    reason = re.sub(r"<class '([\w.]+)'>", r"\1", reason)
    return f"{name}: {reason}"


MOVED_MODULES = {  # renamed modules (issue 49): an old class_path in a config or checkpoint names the new one
    "lightning_rlvr.guard": "lightning_rlvr.collapse_guard",
    "lightning_rlvr.checkpoints": "lightning_rlvr.checkpoint_files",
    "lightning_rlvr.metrics": "lightning_rlvr.pass_at_k",
    "lightning_rlvr.scoring.continuations": "lightning_rlvr.scoring.continuation_sampler",
}


def moved_to(class_path: str) -> str | None:
    """The new dotted path of a class in a renamed module (``MOVED_MODULES``), None when it did not move."""
    module, _, name = class_path.rpartition(".")
    return f"{MOVED_MODULES[module]}.{name}" if module in MOVED_MODULES else None


def _user_error(err: BaseException) -> RLVRError | None:
    """The ``RLVRError`` behind ``err`` (or a full disk's), None for a bug (``errors.user_error``)."""
    return user_error(err)
